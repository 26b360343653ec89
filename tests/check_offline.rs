//! `envoy-injector check` as a newcomer meets it, through the real binary and with no
//! cluster: `-f FILE` explained from the file and the template alone (exit code from the
//! Pod decisions), the one line when a cluster form has no kubeconfig, a missing file
//! named as that, and a template error pointing at the line of the user's file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_envoy-injector");

/// Runs the binary with no cluster to find: no `KUBECONFIG`, a `HOME` without
/// `.kube/config`, no in-cluster environment.
fn without_cluster(home: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(home)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("HOME", home)
        .output()
        .expect("the binary runs")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const MANIFEST: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels:
    sidecar.samplecrd.k8s.io/inject: enabled
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: apps
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations:
        sidecar.samplecrd.k8s.io/inject: \"true\"
        sidecar.samplecrd.k8s.io/network: blue
    spec:
      containers:
      - name: web
        image: web
---
apiVersion: batch/v1
kind: Job
metadata:
  name: once
  namespace: shop
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: job
        image: job
---
apiVersion: v1
kind: Pod
metadata:
  name: plain
  namespace: apps
spec:
  containers:
  - name: app
    image: app
";

#[test]
fn check_f_explains_a_file_without_a_cluster() {
    let home = tempfile::tempdir().unwrap();
    let file = write(home.path(), "app.yaml", MANIFEST);
    let out = without_cluster(home.path(), &["check", "-f", file.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", text(&out.stderr));
    // Said once, not per Pod.
    assert_eq!(stdout.matches("not known").count(), 2, "{stdout}");
    assert!(
        stdout.starts_with("Offline: explained from the file and the embedded default template"),
        "{stdout}"
    );
    for expected in [
        "Deployment apps/web (document 2, Pod template): would be injected [rule: annotation]",
        "adds: init container envoy",
        "warning: joins Network `blue`: the join (the Multus annotation, NETWORK_CIDR and NETWORK_GATEWAY in the sidecar) happens only in the cluster, when the injector admits the Pod; whether the Network exists in namespace apps and is Ready is not known offline",
        // The Namespace declared in the file opts its Job in; a Job gets a native sidecar.
        "Job shop/once (document 3, Pod template): would be injected [rule: namespace-label]",
        "adds: init container envoy",
        "Pod apps/plain (document 4): would not be injected [rule: not-opted-in]",
        "Result: healthy (0 Pod(s) would be denied)",
    ] {
        assert!(stdout.contains(expected), "expected {expected:?} in:\n{stdout}");
    }
    assert!(
        !stdout.contains("Installation"),
        "no health is claimed offline:\n{stdout}"
    );

    let out = without_cluster(home.path(), &["check", "-f", "app.yaml", "-o", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("-o json prints JSON");
    assert_eq!(report["healthy"], true);
    assert!(
        report["offline"].as_str().unwrap().contains("installation's health"),
        "{report}"
    );
    assert_eq!(report["pods"].as_array().unwrap().len(), 3, "{report}");
}

/// A Namespace the file declares gives its Pod Security labels: the default template meets
/// restricted, `classic` does not, and the Pod the level would refuse once injected fails
/// the check, each field named.
#[test]
fn check_f_names_the_pod_security_a_declared_namespace_enforces() {
    let home = tempfile::tempdir().unwrap();
    let manifest = "\
apiVersion: v1
kind: Namespace
metadata:
  name: apps
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/warn: baseline
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: apps
  annotations: {sidecar.samplecrd.k8s.io/inject: \"true\"}
spec:
  containers: [{name: web, image: web, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata:
  name: legacy
  namespace: apps
  annotations: {sidecar.samplecrd.k8s.io/inject: \"true\", sidecar.samplecrd.k8s.io/template: classic}
spec:
  securityContext: {runAsNonRoot: true}
  containers: [{name: legacy, image: legacy}]
";
    write(home.path(), "apps.yaml", manifest);
    let out = without_cluster(home.path(), &["check", "-f", "apps.yaml"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for expected in [
        "      pod security: namespace `apps`: enforce restricted:latest, warn baseline:latest, audit not set; what template `config` adds meets restricted\n",
        "      pod security: namespace `apps`: enforce restricted:latest, warn baseline:latest, audit not set; what template `classic` adds meets baseline, not restricted\n",
        "      pod security: it breaks enforce restricted:latest: the API server refuses the injected Pod:\n",
        "        container `envoy` of template `classic`: `securityContext.capabilities.drop`: restricted expects a list holding ALL, found none\n",
        "        container `envoy` of template `classic`: `securityContext.seccompProfile.type`: restricted expects RuntimeDefault or Localhost, on the container or the Pod, found none, and the Pod's securityContext sets no seccompProfile\n",
        "        container `envoy` of template `classic`: `securityContext.allowPrivilegeEscalation`: restricted expects false, found none\n",
        "Result: UNHEALTHY (1 Pod(s) would be denied, 1 of them by Pod Security once injected)",
    ] {
        assert!(stdout.contains(expected), "expected {expected:?} in:\n{stdout}");
    }
    // The Pod's own runAsNonRoot: true meets that rule for the sidecar.
    assert!(!stdout.contains("runAsNonRoot"), "{stdout}");

    let out = without_cluster(home.path(), &["check", "-f", "apps.yaml", "-o", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("-o json prints JSON");
    assert_eq!(report["healthy"], false);
    let legacy = &report["pods"][1]["podSecurity"];
    assert_eq!(legacy["meets"], "baseline", "{legacy}");
    assert_eq!(legacy["modes"][0]["mode"], "enforce");
    assert_eq!(legacy["modes"][0]["met"], false);
    assert_eq!(
        legacy["modes"][0]["findings"][2],
        serde_json::json!({
            "template": "classic", "level": "restricted", "control": "allowPrivilegeEscalation",
            "place": {"container": "envoy"}, "field": "securityContext.allowPrivilegeEscalation",
            "expected": "false", "found": "none",
        })
    );
    assert_eq!(report["pods"][0]["podSecurity"]["meets"], "restricted");
}

/// Exit code 1 when a Pod would be denied, from the template given with `--config`.
#[test]
fn check_f_exit_code_follows_the_pod_decisions() {
    let home = tempfile::tempdir().unwrap();
    let clash = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  annotations:\n    sidecar.samplecrd.k8s.io/inject: \"true\"\nspec:\n  containers:\n  - name: web\n    image: web\n    ports:\n    - containerPort: 15001\n";
    write(home.path(), "pod.yaml", clash);
    let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/offline/template-port-15001.yaml");
    let out = without_cluster(
        home.path(),
        &["check", "-f", "pod.yaml", "--config", template.to_str().unwrap()],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("Pod default/web (document 1): would be DENIED [rule: collision]"),
        "{stdout}"
    );
    assert!(stdout.contains("port 15001/TCP"), "{stdout}");
    assert!(stdout.contains("explained from the file and template file"), "{stdout}");
    // The embedded default's sidecar uses port 80: no clash.
    let out = without_cluster(home.path(), &["check", "-f", "pod.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

/// Every form that needs the cluster says so in one line when there is no kubeconfig.
#[test]
fn cluster_forms_without_a_kubeconfig_fail_with_one_line() {
    let home = tempfile::tempdir().unwrap();
    write(home.path(), "app.yaml", MANIFEST);
    for args in [
        &["check"][..],
        &["check", "-n", "apps"],
        &["check", "my-pod", "-n", "apps"],
        &["check", "--stale"],
        &["check", "--missing", "-n", "apps"],
        &["check", "-f", "app.yaml", "--missing"],
    ] {
        let out = without_cluster(home.path(), args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(
            text(&out.stderr),
            "envoy-injector: no kubeconfig found (KUBECONFIG unset, ~/.kube/config missing)\n",
            "{args:?}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    }
}

#[test]
fn a_missing_file_is_reported_as_that() {
    let home = tempfile::tempdir().unwrap();
    for args in [&["check", "-f", "missing.yaml"][..], &["inject", "-f", "missing.yaml"]] {
        let out = without_cluster(home.path(), args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with("envoy-injector: cannot read manifests from missing.yaml: No such file"),
            "{args:?}: {stderr}"
        );
    }
}

/// A typo on line 11 of a ConfigMap file is reported at line 11, by `inject` and `check`.
#[test]
fn a_template_error_names_the_line_of_the_users_file() {
    let home = tempfile::tempdir().unwrap();
    let configmap = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: envoy-injector
  namespace: envoy-injector
data:
  config: |
    containers:
    - name: envoy
      image: envoyproxy/envoy:v1.31.2
      imagePullPolicyy: IfNotPresent
";
    write(home.path(), "cm.yaml", configmap);
    write(home.path(), "app.yaml", MANIFEST);
    for args in [
        &["inject", "-f", "app.yaml", "--config", "cm.yaml"][..],
        &["check", "-f", "app.yaml", "--config", "cm.yaml"],
    ] {
        let out = without_cluster(home.path(), args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(
            text(&out.stderr),
            "envoy-injector: config cm.yaml: template `config`: unknown field `containers[0].imagePullPolicyy` \
             at line 11 (did you mean `imagePullPolicy`?)\n",
            "{args:?}"
        );
    }
}

/// What `inject` refuses of a file, `check -f` reports in the same words, and fails.
#[test]
fn documents_inject_refuses_are_reported_with_a_failing_exit() {
    let home = tempfile::tempdir().unwrap();
    let file = write(
        home.path(),
        "odd.yaml",
        "just a string\n---\n- a\n- list\n---\nmetadata: {name: x}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {template: nope}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: b}]}\n",
    );
    let file = file.to_str().unwrap();
    let inject = without_cluster(home.path(), &["inject", "-f", file]);
    let check = without_cluster(home.path(), &["check", "-f", file]);
    assert_eq!(check.status.code(), Some(1), "{}", text(&check.stdout));
    let report = text(&check.stdout);
    let refused: Vec<String> = text(&inject.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("error: ").map(String::from))
        .collect();
    assert_eq!(refused.len(), 4, "{}", text(&inject.stderr));
    for why in &refused {
        assert!(report.contains(why.as_str()), "expected `{why}` in:\n{report}");
    }
    assert!(report.contains("4 document(s) not explained"), "{report}");
    assert!(
        report.contains("Pod default/p (document 5)"),
        "the rest is explained: {report}"
    );
    let json = without_cluster(home.path(), &["check", "-f", file, "-o", "json"]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["unreadable"].as_array().unwrap().len(), 4, "{value}");
    assert_eq!(value["healthy"], false);
}

/// `inject app.yaml` (no `-f`) says how to pass the file.
#[test]
fn a_bare_file_gets_the_hint_to_use_f() {
    let home = tempfile::tempdir().unwrap();
    let out = without_cluster(home.path(), &["inject", "app.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("unexpected argument 'app.yaml'"), "{stderr}");
    assert!(
        stderr.contains("tip: to read the file 'app.yaml', use '-f app.yaml'"),
        "{stderr}"
    );
}

/// The Pod label opts in offline as in the cluster (`check -f` says so), and `"false"` opts
/// out, which `inject` honours as it honours the annotation.
#[test]
fn the_pod_label_opts_in_and_out_offline() {
    let home = tempfile::tempdir().unwrap();
    let file = write(
        home.path(),
        "labelled.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: by-label\n  namespace: apps\n  labels:\n    sidecar.samplecrd.k8s.io/inject: \"true\"\nspec:\n  containers:\n  - {name: app, image: app}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: out-by-label\n  namespace: apps\n  labels:\n    sidecar.samplecrd.k8s.io/inject: \"false\"\n  annotations:\n    sidecar.samplecrd.k8s.io/inject: \"true\"\nspec:\n  containers:\n  - {name: app, image: app}\n",
    );
    let out = without_cluster(home.path(), &["check", "-f", file.to_str().unwrap(), "-o", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "check -o json prints JSON ({e}): {}{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    let pods: Vec<(String, String)> = report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["verdict"].as_str().unwrap().to_string(),
                p["rule"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        pods,
        [
            (String::from("inject"), String::from("label")),
            (String::from("skip"), String::from("opted-out"))
        ],
        "{}",
        text(&out.stdout)
    );
    let injected = without_cluster(home.path(), &["inject", "-f", file.to_str().unwrap(), "-o", "json"]);
    assert!(injected.status.success(), "{}", text(&injected.stderr));
    let stdout = text(&injected.stdout);
    // Several documents come out as one JSON List.
    let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let documents = list["items"].as_array().unwrap();
    let containers = |doc: &serde_json::Value| -> Vec<String> {
        let list = |key: &str| doc["spec"][key].as_array().cloned().unwrap_or_default();
        list("initContainers")
            .iter()
            .chain(&list("containers"))
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(containers(&documents[0]), ["envoy", "app"]);
    assert_eq!(containers(&documents[1]), ["app"], "the label's opt-out wins: {stdout}");
    assert!(
        text(&injected.stderr).contains("opted out by label `sidecar.samplecrd.k8s.io/inject: \"false\"`"),
        "{}",
        text(&injected.stderr)
    );
}
