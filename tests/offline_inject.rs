//! `envoy-injector inject`: offline injection of manifests, through the real binary.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

#[path = "common/kit.rs"]
mod common;
use common::harness::Outcome;
use common::kubectl;

const BIN: &str = env!("CARGO_BIN_EXE_envoy-injector");

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    if let Some(input) = stdin {
        // A run that fails before reading its input (a bad --config) closes it first.
        match child.stdin.take().unwrap().write_all(input.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.unwrap(),
        }
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

/// The objects of a manifest as kubectl reads them (YAML 1.1, then JSON).
fn read_documents(text: &str) -> Result<Vec<Value>, envoy_injector::yaml::read::ReadError> {
    Ok(envoy_injector::yaml::read::read_documents(text, 1)?
        .into_iter()
        .filter_map(|mut d| {
            d.unpack();
            d.root.map(|r| r.to_json())
        })
        .collect())
}

fn captured_pods() -> Vec<(String, Value)> {
    let dir = fixtures().join("admission");
    let mut pods: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('_'))
        .map(|p| {
            let review: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                review["request"]["object"].clone(),
            )
        })
        .collect();
    pods.sort_by(|a, b| a.0.cmp(&b.0));
    pods
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|a| a.iter().map(|c| c["name"].as_str().unwrap()).collect())
        .unwrap_or_default()
}

fn workloads_get_their_pod_template_injected_and_others_pass_through() {
    let out = run(
        &[
            "inject",
            "-f",
            fixtures().join("manifests/workloads.yaml").to_str().unwrap(),
            "-o",
            "json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    assert_eq!(
        names(&items[0]["spec"]["template"]["spec"]["containers"]),
        ["web", "metrics"]
    );
    assert_eq!(
        names(&items[0]["spec"]["template"]["spec"]["initContainers"])[0],
        "envoy"
    );
    let original: Vec<Value> =
        read_documents(&std::fs::read_to_string(fixtures().join("manifests/workloads.yaml")).unwrap()).unwrap();
    assert_eq!(items[1], original[1], "Service must pass through unchanged");
    // The CronJob's Pods run to completion (`restartPolicy: OnFailure`): a native sidecar,
    // ahead of the Pod's own init container, so that each Job completes.
    let cron_pod = &items[2]["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(names(&cron_pod["containers"]), ["job"]);
    assert_eq!(names(&cron_pod["initContainers"]), ["envoy", "wait"]);
    assert_eq!(cron_pod["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(
        items[3], original[3],
        "opted-out StatefulSet must pass through unchanged"
    );
    serde_json::from_value::<k8s_openapi::api::apps::v1::Deployment>(items[0].clone()).unwrap();
    serde_json::from_value::<k8s_openapi::api::batch::v1::CronJob>(items[2].clone()).unwrap();
}

/// The Pod template at `path` of `object`.
fn pod_spec<'v>(object: &'v Value, path: &str) -> &'v Value {
    object
        .pointer(&format!("{path}/spec"))
        .unwrap_or_else(|| panic!("no Pod spec at {path}: {object:#}"))
}

/// The status annotation of the Pod template at `path`: what was injected, and how.
fn injection_status(object: &Value, path: &str) -> envoy_injector::inject::InjectionStatus {
    let annotation = object
        .pointer(&format!("{path}/metadata/annotations"))
        .and_then(|a| a.get(envoy_injector::inject::STATUS_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no status annotation at {path}: {object:#}"));
    serde_json::from_str(annotation).unwrap()
}

/// Offline `inject` gives the answer admission gives, with no flag: every sidecar goes in
/// native (a Job's, a CronJob's, a bare Pod's, a Deployment's), unless the Pod template
/// says `native-sidecar: "false"`.
fn jobs_and_cronjobs_get_native_sidecars_by_default() {
    let file = fixtures().join("manifests/jobs.yaml");
    let out = run(&["inject", "-f", file.to_str().unwrap(), "-o", "json"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    let [job, cronjob, regular_job, pod, deployment] = &items[..] else {
        panic!("expected 5 objects: {list:#}")
    };
    const JOB: &str = "/spec/template";
    const CRONJOB: &str = "/spec/jobTemplate/spec/template";

    let spec = pod_spec(job, JOB);
    assert_eq!(names(&spec["initContainers"]), ["envoy", "wait-db"]);
    assert_eq!(spec["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(names(&spec["containers"]), ["migrate"]);
    let spec = pod_spec(cronjob, CRONJOB);
    assert_eq!(names(&spec["initContainers"]), ["envoy"]);
    assert_eq!(spec["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(names(&spec["containers"]), ["report"]);
    assert_eq!(names(&pod["spec"]["initContainers"]), ["envoy"]);
    assert_eq!(names(&pod["spec"]["containers"]), ["task"]);
    let spec = pod_spec(deployment, JOB);
    assert_eq!(names(&spec["initContainers"])[0], "envoy", "{deployment:#}");
    for (object, path) in [(job, JOB), (cronjob, CRONJOB), (pod, ""), (deployment, JOB)] {
        let status = injection_status(object, path);
        assert!(status.native_sidecar, "{status:?}");
        assert_eq!(
            (status.init_containers, status.containers),
            (vec!["envoy".to_string()], vec![])
        );
    }

    let spec = pod_spec(regular_job, JOB);
    assert_eq!(names(&spec["containers"]).last(), Some(&"envoy"), "{regular_job:#}");
    assert!(spec.get("initContainers").is_none(), "{regular_job:#}");
    assert!(!injection_status(regular_job, JOB).native_sidecar);
    serde_json::from_value::<k8s_openapi::api::batch::v1::Job>(job.clone()).unwrap();
    serde_json::from_value::<k8s_openapi::api::batch::v1::CronJob>(cronjob.clone()).unwrap();
    serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(pod.clone()).unwrap();

    // The CronJob's patch addresses its Pod template where the API server keeps it.
    let patches = run(&["inject", "-f", file.to_str().unwrap(), "-o", "jsonpatch"], None);
    let patches = String::from_utf8(patches.stdout).unwrap();
    let cronjob_patch: Value = serde_json::from_str(patches.lines().nth(1).unwrap()).unwrap();
    assert!(
        cronjob_patch
            .as_array()
            .unwrap()
            .iter()
            .any(|op| op["path"] == "/spec/jobTemplate/spec/template/spec/initContainers"),
        "{cronjob_patch}"
    );

    // Injecting the output again adds nothing.
    let again = run(&["inject", "-f", "-", "-o", "jsonpatch"], Some(&list.to_string()));
    let again = String::from_utf8(again.stdout).unwrap();
    assert_eq!(again.lines().collect::<Vec<_>>(), ["[]"; 5]);
}

/// The template's `nativeSidecar: false` is the platform team's choice: a Job's sidecar
/// then stays a regular container (`check` warns of it); `true` makes every one native.
fn the_template_s_native_sidecar_overrides_the_default_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixtures().join("manifests/jobs.yaml");
    for native in [false, true] {
        let template = dir.path().join(format!("native-{native}.yaml"));
        std::fs::write(
            &template,
            format!("nativeSidecar: {native}\ncontainers:\n- {{name: proxy, image: envoy}}\n"),
        )
        .unwrap();
        let out = run(
            &[
                "inject",
                "-f",
                file.to_str().unwrap(),
                "--config",
                template.to_str().unwrap(),
                "-o",
                "json",
            ],
            None,
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        let items = list["items"].as_array().unwrap();
        let (job, regular_job, deployment) = (&items[0], &items[2], &items[4]);
        assert_eq!(injection_status(job, "/spec/template").native_sidecar, native);
        assert_eq!(injection_status(deployment, "/spec/template").native_sidecar, native);
        // The Pod's annotation wins over the template.
        assert!(!injection_status(regular_job, "/spec/template").native_sidecar);
    }
}

/// A Pod that names a Network is injected offline without the join, and told that the
/// join is the cluster's, as `check -f` tells it.
fn a_pod_naming_a_network_is_warned_that_the_join_is_the_cluster_s() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: shop\n  annotations:\n    sidecar.samplecrd.k8s.io/network: blue\nspec:\n  containers: [{name: a, image: b}]\n";
    let out = run(&["inject", "-f", "-"], Some(pod));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: document 1 (Pod p) at line 1: joins Network `blue`: the join (the Multus annotation, NETWORK_CIDR and NETWORK_GATEWAY in the sidecar) happens only in the cluster")
            && stderr.contains("exists in namespace shop"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("name: envoy") && !stdout.contains("k8s.v1.cni.cncf.io/networks"),
        "{stdout}"
    );
}

fn stdin_and_yaml_output_round_trip() {
    let pod =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: app\n    image: busybox\n";
    let out = run(&["inject", "-f", "-"], Some(pod));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let docs = read_documents(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(names(&docs[0]["spec"]["containers"]), ["app"]);
    assert_eq!(names(&docs[0]["spec"]["initContainers"]), ["envoy"]);
    // Feeding the output back in changes nothing: the status annotation is there.
    let again = run(
        &["inject", "-f", "-", "-o", "jsonpatch"],
        Some(&serde_yaml_ng::to_string(&docs[0]).unwrap()),
    );
    assert_eq!(String::from_utf8(again.stdout).unwrap().trim(), "[]");
}

fn jsonpatch_output_applies_to_each_document() {
    let text = std::fs::read_to_string(fixtures().join("manifests/workloads.yaml")).unwrap();
    let out = run(&["inject", "-f", "-", "-o", "jsonpatch"], Some(&text));
    assert!(out.status.success());
    let docs = read_documents(&text).unwrap();
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), docs.len());
    let mut deployment = docs[0].clone();
    let patch: json_patch::Patch = serde_json::from_str(lines[0]).unwrap();
    json_patch::patch(&mut deployment, &patch).unwrap();
    assert_eq!(
        names(&deployment["spec"]["template"]["spec"]["containers"]),
        ["web", "metrics"]
    );
    assert_eq!(
        names(&deployment["spec"]["template"]["spec"]["initContainers"])[0],
        "envoy"
    );
    assert_eq!(lines[1], "[]");
}

fn errors_name_the_document_and_the_rest_is_still_written() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: fine}\nspec: {containers: [{name: a}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: clash, annotations: {sidecar.samplecrd.k8s.io/template: classic}}\nspec:\n  containers: [{name: a}]\n  volumes: [{name: envoy-conf, emptyDir: {}}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: after}\nspec: {containers: [{name: b}]}\n";
    let out = run(&["inject", "-f", "-"], Some(text));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("document 2 (Pod clash) at line 6"), "{stderr}");
    // `classic`, embedded as in the shipped ConfigMap, mounts a volume `envoy-conf`.
    assert!(
        stderr.contains("envoy-conf") && stderr.contains("template `classic`"),
        "{stderr}"
    );
    let docs = read_documents(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let written: Vec<&str> = docs.iter().map(|d| d["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(
        written,
        ["fine", "after"],
        "the failing document is left out, the others are written"
    );

    let bad = run(
        &["inject", "-f", "-"],
        Some("kind: Pod\nspec: {containers: [{name: a}]}\n---\n: : [\n"),
    );
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("error: document 2 at line"), "{stderr}");
    assert_eq!(
        read_documents(&String::from_utf8(bad.stdout).unwrap()).unwrap().len(),
        1
    );

    // A document JSON cannot hold is named by its place in the input, counting the
    // document before it that did not parse.
    let nan = run(
        &["inject", "-f", "-", "-o", "json"],
        Some(
            "kind: ConfigMap\nmetadata: {name: x}\n---\n: : [\n---\nkind: ConfigMap\nmetadata: {name: c}\ndata: {}\nx: .nan\n",
        ),
    );
    assert_eq!(nan.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&nan.stderr);
    assert!(stderr.contains("document 3 (ConfigMap c)"), "{stderr}");

    let missing = run(&["inject", "-f", "/nonexistent/pod.yaml"], None);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/pod.yaml"));

    let empty = run(&["inject", "-f", "-"], Some("# only a comment\n---\n"));
    assert_eq!(empty.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&empty.stderr).contains("no documents found"));
}

/// A value JSON cannot hold is named alike wherever it is: the document (or List item)
/// that holds it, then the field by its place in that same object.
fn a_value_json_cannot_hold_is_named_by_its_object_and_its_field_there() {
    let refused = |text: &str| {
        let out = run(&["inject", "-f", "-", "-o", "json"], Some(text));
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8(out.stderr).unwrap();
        stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_default()
            .to_string()
    };
    let pod = "{kind: Pod, metadata: {name: a}, spec: {containers: [{name: a}]}}";
    let cannot = "which JSON cannot represent (kubectl would refuse it too)";
    // The List's own fields, before and after its items.
    assert_eq!(
        refused(&format!(
            "apiVersion: v1\nkind: List\nmetadata: {{name: l, x: .nan}}\nitems:\n- {pod}\n"
        )),
        format!("error: document 1 (List l) at line 1: cannot write it as JSON: field `/metadata/x` is NaN, {cannot}")
    );
    assert_eq!(
        refused(&format!("apiVersion: v1\nkind: List\nitems:\n- {pod}\nx/y: -.inf\n")),
        format!("error: document 1 (List) at line 1: cannot write it as JSON: field `/x~1y` is -inf, {cannot}")
    );
    // An item of a List, and a document.
    assert_eq!(
        refused(&format!(
            "apiVersion: v1\nkind: List\nitems:\n- {pod}\n- {{kind: ConfigMap, metadata: {{name: b, x: [1, .inf]}}}}\n"
        )),
        format!(
            "error: document 1 (List) at line 1, item 2 (ConfigMap b) at line 5: cannot write it as JSON: field `/metadata/x/1` is inf, {cannot}"
        )
    );
    assert_eq!(
        refused("kind: ConfigMap\nmetadata: {name: c, x: .nan}\n"),
        format!(
            "error: document 1 (ConfigMap c) at line 1: cannot write it as JSON: field `/metadata/x` is NaN, {cannot}"
        )
    );
}

fn config_flag_takes_a_configmap_manifest_and_the_seed_one_is_refused() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: app}]}\n";
    let seed = fixtures().join("seed-configmap.yaml");
    let out = run(&["inject", "-f", "-", "--config", seed.to_str().unwrap()], Some(pod));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The file's line: `resources` is line 12 of the `config: |` block on line 9.
    assert!(stderr.contains("unknown field `resources` at line 21"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let cm = dir.path().join("cm.yaml");
    std::fs::write(&cm, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: envoy-injector}\ndata:\n  config: |\n    containers:\n    - name: tiny\n      image: busybox\n").unwrap();
    let out = run(
        &["inject", "-f", "-", "--config", cm.to_str().unwrap(), "-o", "json"],
        Some(pod),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(names(&result["spec"]["containers"]), ["app"]);
    assert_eq!(names(&result["spec"]["initContainers"]), ["tiny"]);
}

/// The strategic merge patch of `inject -o strategic`, applied by the real `kubectl
/// patch --local`, must produce exactly what `inject -o json` writes (the input with the
/// JSON Patch applied).
fn strategic_patch_applied_by_kubectl_equals_json_patch_result() -> Outcome {
    kubectl::required("strategic_patch_applied_by_kubectl_equals_json_patch_result")?;
    // A second template: a native sidecar, an init container, a volume, a mount, a pull secret.
    let mounts_template = "nativeSidecar: true\ninitContainers:\n- {name: setup, image: busybox}\ncontainers:\n- {name: proxy, image: envoy}\nvolumes:\n- {name: certs, emptyDir: {}}\nvolumeMounts:\n- {name: certs, mountPath: /etc/certs}\nimagePullSecrets:\n- name: registry\n";
    let dir = tempfile::tempdir().unwrap();
    let mounts = dir.path().join("mounts.yaml");
    std::fs::write(&mounts, mounts_template).unwrap();
    let configs: [&[&str]; 2] = [&[], &["--config", mounts.to_str().unwrap()]];
    let mut documents: Vec<(String, Value)> = captured_pods();
    let workloads =
        read_documents(&std::fs::read_to_string(fixtures().join("manifests/workloads.yaml")).unwrap()).unwrap();
    documents.extend(
        workloads
            .into_iter()
            .map(|w| (w["metadata"]["name"].as_str().unwrap().to_string(), w)),
    );
    // One JSON stream of them all: each gives one line of patch and one item of the List.
    let input: String = documents
        .iter()
        .map(|(_, document)| serde_json::to_string(document).unwrap() + "\n")
        .collect();
    let mut compared = 0;
    for config in configs {
        let inject = |format: &str| {
            let out = run(&[&["inject", "-f", "-", "-o", format], config].concat(), Some(&input));
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            out.stdout
        };
        let patches = String::from_utf8(inject("strategic")).unwrap();
        let patches: Vec<&str> = patches.lines().collect();
        let injected: Value = serde_json::from_slice(&inject("json")).unwrap();
        let results = injected["items"].as_array().unwrap();
        assert_eq!((patches.len(), results.len()), (documents.len(), documents.len()));
        for (((name, document), patch), result) in documents.iter().zip(patches).zip(results) {
            if patch == "{}" {
                // Left unchanged.
                continue;
            }
            let file = dir.path().join("doc.json");
            std::fs::write(&file, serde_json::to_vec(document).unwrap()).unwrap();
            let out = Command::new("kubectl")
                .args([
                    "patch",
                    "--local",
                    "--show-managed-fields",
                    "--type",
                    "strategic",
                    "-o",
                    "json",
                    "-f",
                ])
                .arg(&file)
                .arg("-p")
                .arg(patch)
                .output()
                .unwrap();
            assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
            let by_kubectl: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(by_kubectl, *result, "{name} with inject {config:?}");
            compared += 1;
        }
    }
    assert!(compared >= 8, "compared only {compared} documents");
    Ok(())
}

fn patch_formats_give_one_line_per_object_and_json_a_list() {
    let text = "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: a}]}\n---\nkind: List\napiVersion: v1\nitems:\n- {kind: Pod, metadata: {name: b}, spec: {containers: [{name: b}]}}\n- {apiVersion: v1, kind: Service, metadata: {name: s}}\n";
    let lines = |format: &str| {
        let out = run(&["inject", "-f", "-", "-o", format], Some(text));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let patches = lines("jsonpatch");
    assert_eq!(patches.len(), 3, "{patches:?}");
    assert_eq!(patches[2], "[]");
    let strategic = lines("strategic");
    assert_eq!(strategic.len(), 3);
    assert_eq!(strategic[2], "{}");
    let out = run(&["inject", "-f", "-", "-o", "json"], Some(text));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["Pod", "Pod", "Service"],
        "a List document contributes its items"
    );
    let yaml = String::from_utf8(run(&["inject", "-f", "-"], Some(text)).stdout).unwrap();
    assert_eq!(yaml.matches("\n---\n").count(), 1, "{yaml}");
    assert!(yaml.contains("kind: List"), "a List stays a List in YAML: {yaml}");
}

fn a_single_list_comes_out_as_itself_in_json() {
    let text = "apiVersion: v1\nkind: List\nmetadata: {resourceVersion: \"42\"}\nitems:\n- {kind: Pod, apiVersion: v1, metadata: {name: a}, spec: {containers: [{name: a}]}}\n";
    let out = run(&["inject", "-f", "-", "-o", "json"], Some(text));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        list["metadata"]["resourceVersion"], "42",
        "the List's own fields are kept"
    );
    assert_eq!(names(&list["items"][0]["spec"]["containers"]), ["a"]);
    assert_eq!(names(&list["items"][0]["spec"]["initContainers"]), ["envoy"]);
}

/// An output closed early (`inject -f big.yaml | head`) ends the run with an error. It
/// used to hang: the thread that frees finished documents waited for more.
fn a_closed_output_ends_the_run() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("many.yaml");
    let pod =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: app\n    image: nginx\n";
    std::fs::write(&file, (0..20_000).map(|_| format!("---\n{pod}")).collect::<String>()).unwrap();
    let mut child = Command::new(BIN)
        .args(["inject", "-f"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut start = [0; 64];
    child.stdout.as_mut().unwrap().read_exact(&mut start).unwrap();
    drop(child.stdout.take());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("inject still running 60 s after its output was closed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(1));
}

/// A Deployment whose Pod template asks for a memory limit of `VALUE` (Burstable: its
/// sidecar keeps the resources the override sets).
const OVERRIDE_DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations:
        sidecar.samplecrd.k8s.io/override.memory-limit: VALUE
    spec:
      containers:
      - name: web
        image: nginx
        resources: {requests: {cpu: 50m}}
";

fn inject_applies_a_workload_s_overrides_offline_and_refuses_the_same_values() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("template.yaml");
    std::fs::write(&config, include_str!("fixtures/overrides/template.yaml")).unwrap();
    let config = config.to_str().unwrap();
    let out = run(
        &["inject", "-f", "-", "--config", config],
        Some(&OVERRIDE_DEPLOYMENT.replace("VALUE", "256Mi")),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let injected: Value = serde_yaml_ng::from_str(&text).unwrap();
    let envoy = &injected["spec"]["template"]["spec"]["initContainers"][0];
    assert_eq!(envoy["resources"]["limits"]["memory"], "256Mi", "{text}");
    assert!(text.contains(r#""overrides":{"memory-limit":"256Mi"}"#), "{text}");

    let out = run(
        &["inject", "-f", "-", "--config", config],
        Some(&OVERRIDE_DEPLOYMENT.replace("VALUE", "2Gi")),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"document 1 (Deployment web) at line 1: override.memory-limit: "2Gi" exceeds max "1Gi" of template "config""#),
        "{stderr}"
    );
}

/// The stdout of a run that succeeded.
fn ok(out: Output) -> Vec<u8> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn a_manifest_never_injected_is_written_unchanged_with_a_note() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web # mine\nspec:\n  containers:\n  - name: app\n    image: nginx\n";
    let out = run(&["uninject", "-f", "-"], Some(pod));
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), pod);
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "note: document 1 (Pod web) at line 1: left unchanged: no `sidecar.samplecrd.k8s.io/status` annotation: it was not injected, or not by this injector\n"
    );
}

fn jsonpatch_output_removes_only_and_a_bad_status_is_named() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: app}]}\n";
    let injected = ok(run(&["inject", "-f", "-"], Some(pod)));
    let patch = String::from_utf8(ok(run(
        &["uninject", "-f", "-", "-o", "jsonpatch"],
        Some(&String::from_utf8(injected).unwrap()),
    )))
    .unwrap();
    let ops: Vec<serde_json::Value> = serde_json::from_str(patch.trim()).unwrap();
    assert!(!ops.is_empty());
    assert!(ops.iter().all(|op| op["op"] == "remove"), "{patch}");

    let bad = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  annotations:\n    sidecar.samplecrd.k8s.io/status: 'not json'\nspec: {containers: [{name: app}]}\n";
    let out = run(&["uninject", "-f", "-"], Some(bad));
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("document 1 (Pod web) at line 1: annotation `sidecar.samplecrd.k8s.io/status`: expected the JSON the injector writes, found \"not json\""),
        "{stderr}"
    );
    let out = run(&["uninject", "-f", "-", "-o", "strategic"], Some(pod));
    assert!(
        !out.status.success(),
        "a strategic merge patch cannot say what uninject does"
    );
}

/// The Pods of issue 43, refused by the API server after an injection that left their
/// Pod-level resources as they were: `inject` raises them (writing the requests the API
/// server defaults), and `uninject` gives each file back byte for byte, as YAML and as JSON.
fn pod_level_resources_are_raised_and_uninject_gives_the_file_back() {
    let pod = |name: &str, spec: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations:\n    sidecar.samplecrd.k8s.io/inject: \"true\"\nspec:\n{spec}  containers:\n  - name: app\n    image: nginx\n"
        )
    };
    let limits = pod("limits", "  resources:\n    limits:\n      cpu: 500m\n");
    let requests = pod("requests", "  resources:\n    requests:\n      cpu: \"200m\"\n").replace(
        "    image: nginx\n",
        "    image: nginx\n    resources: {requests: {cpu: 150m}}\n",
    );
    for (text, raised) in [
        (
            &limits,
            json!({"limits": {"cpu": "1500m"}, "requests": {"cpu": "600m"}}),
        ),
        (&requests, json!({"requests": {"cpu": "300m"}})),
    ] {
        let injected = String::from_utf8(ok(run(&["inject", "-f", "-"], Some(text)))).unwrap();
        let docs = read_documents(&injected).unwrap();
        assert_eq!(docs[0]["spec"]["resources"], raised, "{injected}");
        let back = String::from_utf8(ok(run(&["uninject", "-f", "-"], Some(&injected)))).unwrap();
        assert_eq!(&back, text);

        let json = ok(run(&["inject", "-f", "-", "-o", "json"], Some(text)));
        let back = ok(run(
            &["uninject", "-f", "-", "-o", "json"],
            Some(std::str::from_utf8(&json).unwrap()),
        ));
        let untouched = ok(run(&["uninject", "-f", "-", "-o", "json"], Some(text)));
        assert_eq!(String::from_utf8(back).unwrap(), String::from_utf8(untouched).unwrap());
    }
}

fn main() -> std::process::ExitCode {
    common::harness::main(
        "offline_inject",
        common::harness::tests![
            workloads_get_their_pod_template_injected_and_others_pass_through,
            jobs_and_cronjobs_get_native_sidecars_by_default,
            the_template_s_native_sidecar_overrides_the_default_both_ways,
            a_pod_naming_a_network_is_warned_that_the_join_is_the_cluster_s,
            stdin_and_yaml_output_round_trip,
            jsonpatch_output_applies_to_each_document,
            errors_name_the_document_and_the_rest_is_still_written,
            a_value_json_cannot_hold_is_named_by_its_object_and_its_field_there,
            config_flag_takes_a_configmap_manifest_and_the_seed_one_is_refused,
            strategic_patch_applied_by_kubectl_equals_json_patch_result,
            patch_formats_give_one_line_per_object_and_json_a_list,
            a_single_list_comes_out_as_itself_in_json,
            a_closed_output_ends_the_run,
            inject_applies_a_workload_s_overrides_offline_and_refuses_the_same_values,
            a_manifest_never_injected_is_written_unchanged_with_a_note,
            jsonpatch_output_removes_only_and_a_bad_status_is_named,
            pod_level_resources_are_raised_and_uninject_gives_the_file_back,
        ],
    )
}
