//! `inject` over a corpus of real-world-shaped manifests (tests/fixtures/offline/): for
//! every object, every field that `inject` did not add reads back — the kubectl way —
//! with the same value; key order and comments are kept; documents that cannot be
//! processed are named and left out while the rest is written; and, when a cluster is
//! available (`KUBECONFIG`), `kubectl create --dry-run=server` accepts the output.
//!
//! "The kubectl way" is kubectl itself when installed (`kubectl patch --local` prints
//! each object exactly as kubectl read it, no server needed); without kubectl the
//! checks use the injector's own reader, which the unit tests pin to go-yaml v2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use envoy_injector::yaml::node::{Node, Value as NodeValue};
use envoy_injector::yaml::read::read_documents;
use envoy_injector::yaml::yaml11::TRICKY_STRINGS;
use serde_json::Value;

#[path = "common/kit.rs"]
mod common;
use common::harness::{Outcome, Skip};
use common::kubectl::{self, client_found as have_kubectl};

const BIN: &str = env!("CARGO_BIN_EXE_envoy-injector");

/// The corpus files that are valid manifests throughout.
const VALID: &[&str] = &[
    "scalars.yaml",
    "anchors-and-blocks.yaml",
    "list-and-json.yaml",
    "comments.yaml",
    "custom-resources.yaml",
];

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/offline")
        .join(name)
}

fn inject(file: &Path, format: &str) -> Output {
    Command::new(BIN)
        .args(["inject", "-f"])
        .arg(file)
        .args(["-o", format])
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

/// Each object of a manifest file as kubectl reads it (a `List` gives its items).
fn kubectl_objects(file: &Path) -> Vec<Value> {
    let out = Command::new("kubectl")
        .args(["patch", "--local", "--type", "merge", "-p", "{}", "-o", "json", "-f"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl cannot read {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect()
}

/// The same, read by the injector's own reader.
fn own_objects(text: &str) -> Vec<Value> {
    let mut objects = Vec::new();
    let roots: Vec<Node> = if text.trim_start().starts_with('{') {
        serde_json::Deserializer::from_str(text)
            .into_iter::<Node>()
            .map(Result::unwrap)
            .collect()
    } else {
        roots(text)
    };
    for root in roots {
        let json = root.to_json();
        let is_list = json["kind"].as_str().is_some_and(|k| k.ends_with("List")) && json["items"].is_array();
        if is_list {
            objects.extend(json["items"].as_array().unwrap().iter().cloned());
        } else {
            objects.push(json);
        }
    }
    objects
}

/// kubectl prints a float that holds an integer (`1e3`) as `1000`; serde_json keeps
/// 1000.0 apart from 1000. Compare numbers by value.
fn normalize(value: &Value) -> Value {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
            _ => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), normalize(v))).collect()),
        other => other.clone(),
    }
}

/// Reads a file the kubectl way: kubectl when installed, else our reader.
fn objects(file: &Path) -> Vec<Value> {
    if have_kubectl() {
        kubectl_objects(file)
    } else {
        own_objects(&std::fs::read_to_string(file).unwrap())
    }
    .iter()
    .map(normalize)
    .collect()
}

/// Input objects plus exactly the patches `inject` reports must equal the output
/// objects: nothing `inject` did not add has changed, as kubectl reads it.
fn assert_output_is_input_plus_patch(input: &Path, name: &str) -> String {
    let out = inject(input, "yaml");
    assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().join("out.yaml");
    std::fs::write(&written, &out.stdout).unwrap();
    let patches = inject(input, "jsonpatch");
    assert!(patches.status.success());
    let patches: Vec<json_patch::Patch> = String::from_utf8(patches.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let before = objects(input);
    let after = objects(&written);
    assert_eq!(before.len(), after.len(), "{name}: object count");
    assert_eq!(before.len(), patches.len(), "{name}: one patch per object");
    for ((mut expected, patch), got) in before.into_iter().zip(patches).zip(after) {
        json_patch::patch(&mut expected, &patch).unwrap();
        assert_eq!(normalize(&expected), got, "{name}: object changed beyond the patch");
    }
    String::from_utf8(out.stdout).unwrap()
}

fn every_field_inject_did_not_add_reads_back_the_same() -> Outcome {
    // Without kubectl (outside CI) the check still runs, with the injector's own reader,
    // and the test is reported not run as kubectl reads it.
    let kubectl =
        kubectl::required("reading the corpus as kubectl reads it (checked with the injector's own reader only)");
    for name in VALID {
        assert_output_is_input_plus_patch(&corpus(name), name);
    }
    kubectl
}

fn the_injector_reads_the_corpus_exactly_as_kubectl_does() -> Outcome {
    kubectl::required("the_injector_reads_the_corpus_exactly_as_kubectl_does")?;
    for name in VALID {
        let file = corpus(name);
        let ours: Vec<Value> = own_objects(&std::fs::read_to_string(&file).unwrap())
            .iter()
            .map(normalize)
            .collect();
        assert_eq!(ours, objects(&file), "{name}");
    }
    Ok(())
}

fn crlf_and_byte_order_mark_read_like_plain_lf() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["scalars.yaml", "anchors-and-blocks.yaml", "comments.yaml"] {
        let text = std::fs::read_to_string(corpus(name)).unwrap();
        let crlf = dir.path().join(format!("crlf-{name}"));
        std::fs::write(&crlf, format!("\u{feff}{}", text.replace('\n', "\r\n"))).unwrap();
        assert_output_is_input_plus_patch(&crlf, &format!("CRLF+BOM {name}"));
        assert_eq!(
            own_objects(&std::fs::read_to_string(&crlf).unwrap()),
            own_objects(&text),
            "{name}: CRLF and a BOM change no value"
        );
    }
}

fn key_order_and_comments_are_kept() {
    for name in ["scalars.yaml", "comments.yaml", "anchors-and-blocks.yaml"] {
        let input = std::fs::read_to_string(corpus(name)).unwrap();
        let output = assert_output_is_input_plus_patch(&corpus(name), name);
        // Every comment survives (block scalars of the corpus hold no `#` line but one,
        // which is content and survives as such).
        for line in input.lines() {
            if let Some((_, comment)) = line
                .split_once(" # ")
                .or_else(|| line.trim_start().strip_prefix("# ").map(|c| ("", c)))
            {
                assert!(
                    output.contains(comment.trim()),
                    "{name}: comment `{comment}` lost:\n{output}"
                );
            }
        }
        let ins = roots(&input);
        let outs = roots(&output);
        assert_eq!(ins.len(), outs.len());
        for (a, b) in ins.iter().zip(&outs) {
            assert_keys_in_order(a, b, name);
        }
    }
}

fn roots(text: &str) -> Vec<Node> {
    let mut roots = Vec::new();
    for chunk in envoy_injector::yaml::split::YamlChunks::new(text.as_bytes()) {
        let chunk = chunk.unwrap();
        for mut document in read_documents(&chunk.text, chunk.first_line).unwrap() {
            document.unpack();
            roots.extend(document.root);
        }
    }
    roots
}

/// The input's keys appear in the output in the same order (added keys may follow).
fn assert_keys_in_order(input: &Node, output: &Node, name: &str) {
    match (&input.value, &output.value) {
        (NodeValue::Map(a), NodeValue::Map(b)) => {
            let out_keys: Vec<&str> = b.iter().map(|(k, _)| k.as_str()).collect();
            let in_keys: Vec<&str> = a.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(&out_keys[..in_keys.len()], &in_keys[..], "{name}: key order");
            for ((_, av), (_, bv)) in a.iter().zip(b) {
                assert_keys_in_order(av, bv, name);
            }
        }
        (NodeValue::Seq(a), NodeValue::Seq(b)) if a.len() == b.len() => {
            for (av, bv) in a.iter().zip(b) {
                assert_keys_in_order(av, bv, name);
            }
        }
        _ => {}
    }
}

fn failures_are_named_and_everything_else_is_written() {
    let out = inject(&corpus("mixed-failures.yaml"), "yaml");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "error: document 2 at line 14: expected an object (a Kubernetes manifest), found a string",
        "error: document 3 at line 16: expected an object (a Kubernetes manifest), found a list",
        "error: document 4 (Pod no-containers) at line 19: Pod field `spec.containers`: expected at least one container, found no `containers` field in `spec`",
        "error: document 5 (Pod null-containers) at line 25: Pod field `spec.containers`: expected at least one container, found null",
        "error: document 6 (Pod port-clash) at line 32: port 80/TCP of template `classic` container `envoy` is already used by Pod container `web`",
        "error: document 7 (no kind, name no-kind) at line 45: expected a `kind`",
        "warning: document 8 (Pod odd-annotation) at line 48: annotation `sidecar.samplecrd.k8s.io/inject` is \"yes\", expected \"true\" or \"false\"",
        "note: document 9 (Pod opted-out) at line 59: left unchanged: opted out",
        "6 of the objects in",
    ] {
        assert!(stderr.contains(expected), "missing `{expected}` in:\n{stderr}");
    }
    let written: Vec<String> = own_objects(&String::from_utf8(out.stdout).unwrap())
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(written, ["good-before", "odd-annotation", "opted-out", "good-after"]);

    // Only skipped (with a note), nothing failed: exit 0.
    let out = inject(&corpus("custom-resources.yaml"), "yaml");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("note: document 1 (DeploymentConfig frontend) at line 2: left unchanged: kind DeploymentConfig (apps.openshift.io/v1) is not one inject knows"),
        "{stderr}"
    );
    assert!(stderr.contains("note: document 2 (VirtualService reviews)"), "{stderr}");
    // Built-in kinds that hold no Pod pass without a word.
    let out = inject(&corpus("comments.yaml"), "yaml");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn a_json_stream_is_read_like_kubectl_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let stream = dir.path().join("stream.json");
    // As `kubectl get pods -o json | jq '.items[]'` prints: objects one after another.
    std::fs::write(
        &stream,
        "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}, \"spec\": {\"containers\": [{\"name\": \"a\", \"image\": \"x\", \"args\": [\"yes\", \"0644\"]}]}}\n{\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {\"name\": \"s\"}, \"spec\": {\"ports\": [{\"port\": 8080}]}}",
    )
    .unwrap();
    assert_output_is_input_plus_patch(&stream, "JSON stream");
    let out = inject(&stream, "json");
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["metadata"]["name"], "a");
    let keys: Vec<&str> = list["items"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert!(keys.contains(&"spec"));
}

/// The kubectl rule's reading of `CI`, as CI systems set it.
fn ci_is_any_value_but_empty_false_or_zero() {
    for value in ["true", "1", "yes", "TRUE", "github"] {
        assert!(kubectl::ci_value_means_ci(value), "{value}");
    }
    for value in ["", "false", "False", "FALSE", "0", " "] {
        assert!(!kubectl::ci_value_means_ci(value), "{value:?}");
    }
}

/// With a cluster (`KUBECONFIG`), the API server itself accepts every output.
fn kubectl_create_dry_run_server_accepts_the_output() -> Outcome {
    if std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty()) {
        return Err(Skip(
            "expected KUBECONFIG to name a cluster for `kubectl create --dry-run=server`, found it unset: run \
             `KUBECONFIG=/path/to/kubeconfig make test`"
                .into(),
        ));
    }
    assert!(have_kubectl(), "KUBECONFIG is set but kubectl is not installed");
    let dir = tempfile::tempdir().unwrap();
    // Custom resources are not served by a bare cluster; the rest must all be accepted.
    for name in [
        "scalars.yaml",
        "anchors-and-blocks.yaml",
        "list-and-json.yaml",
        "comments.yaml",
        "mixed-failures.yaml",
    ] {
        let out = inject(&corpus(name), "yaml");
        let file = dir.path().join(name);
        std::fs::write(&file, &out.stdout).unwrap();
        let created = Command::new("kubectl")
            .args(["create", "--dry-run=server", "--validate=false", "-o", "name", "-f"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            created.status.success(),
            "{name}: the API server refused the output:\n{}\n{}",
            String::from_utf8_lossy(&created.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(())
}

/// Random values, written by the injector's YAML writer and read back by kubectl
/// itself: every value must come back the same. A fixed seed keeps failures repeatable.
fn kubectl_reads_back_what_the_writer_writes() -> Outcome {
    kubectl::required("kubectl_reads_back_what_the_writer_writes")?;
    let mut random = Random(0x5eed_1234_abcd_ef01);
    let mut text = String::new();
    let mut expected = Vec::new();
    for i in 0..300 {
        let data = random.tree(3);
        let object = Node::from(NodeValue::Map(vec![
            ("apiVersion".into(), Node::from(NodeValue::Str("example.com/v1".into()))),
            ("kind".into(), Node::from(NodeValue::Str("Sample".into()))),
            (
                "metadata".into(),
                Node::from(NodeValue::Map(vec![(
                    "name".into(),
                    Node::from(NodeValue::Str(format!("s{i}"))),
                )])),
            ),
            ("data".into(), data),
        ]));
        if i > 0 {
            text.push_str("---\n");
        }
        let mut out = envoy_injector::yaml::write::Out::default();
        envoy_injector::yaml::write::yaml_document(&mut out, &object, &[]);
        text.push_str(&out.into_string());
        expected.push(normalize(&object.to_json()));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("random.yaml");
    std::fs::write(&file, &text).unwrap();
    let read = kubectl_objects(&file);
    assert_eq!(read.len(), expected.len());
    for (got, want) in read.iter().zip(&expected) {
        assert!(
            same(&normalize(got), want),
            "kubectl read\n{got}\nfor\n{want}\nin:\n{text}"
        );
    }
    Ok(())
}

/// Equal, floats within a few units in the last place: serde_json's default float
/// parsing (used on kubectl's output here) may be one off.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            x == y || (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs())
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        // xorshift64: enough spread for test data.
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn text(&mut self) -> String {
        match self.below(3) {
            0 => TRICKY_STRINGS[self.below(TRICKY_STRINGS.len() as u64) as usize].to_string(),
            1 => (0..self.below(6))
                .map(|_| TRICKY_STRINGS[self.below(TRICKY_STRINGS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(if self.below(2) == 0 { " " } else { "\n" }),
            _ => (0..self.below(8))
                .map(|_| (b' ' + self.below(95) as u8) as char)
                .collect(),
        }
    }

    fn leaf(&mut self) -> Node {
        Node::from(match self.below(7) {
            0 => NodeValue::Null,
            1 => NodeValue::Bool(self.below(2) == 0),
            2 => NodeValue::Int(self.next() as i64 >> self.below(60)),
            3 => NodeValue::Float((self.next() as i64 >> 20) as f64 / 1024.0),
            _ => NodeValue::Str(self.text()),
        })
    }

    fn tree(&mut self, depth: u32) -> Node {
        if depth == 0 || self.below(3) == 0 {
            return self.leaf();
        }
        let len = self.below(5);
        if self.below(2) == 0 {
            Node::from(NodeValue::Seq((0..len).map(|_| self.tree(depth - 1)).collect()))
        } else {
            let mut entries: Vec<(String, Node)> = Vec::new();
            for _ in 0..len {
                let key = self.text();
                if !entries.iter().any(|(k, _)| *k == key) {
                    let value = self.tree(depth - 1);
                    entries.push((key, value));
                }
            }
            Node::from(NodeValue::Map(entries))
        }
    }
}

/// Apps on the ports apps use (80, 443, 8080, 9090) get the default sidecar, which keeps
/// to ports of its own; `classic`, whose Envoy declares port 80, still refuses an app on
/// it, naming both.
fn apps_on_common_ports_are_injected_and_a_real_port_clash_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let apps = dir.path().join("apps.yaml");
    let app = |port: i64| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: app-{port}}}\nspec:\n  selector: {{matchLabels: {{app: a{port}}}}}\n  template:\n    metadata:\n      labels: {{app: a{port}}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n        ports: [{{containerPort: {port}}}]\n"
        )
    };
    std::fs::write(&apps, [80, 443, 8080, 9090].map(app).join("---\n")).unwrap();
    let out = inject(&apps, "yaml");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let objects = own_objects(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(objects.len(), 4);
    for (object, port) in objects.iter().zip([80, 443, 8080, 9090]) {
        let spec = &object["spec"]["template"]["spec"];
        let ports: Vec<(&str, Vec<i64>)> = spec["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .chain(spec["containers"].as_array().unwrap())
            .map(|c| {
                let ports = c["ports"].as_array().unwrap();
                let ports = ports.iter().map(|p| p["containerPort"].as_i64().unwrap()).collect();
                (c["name"].as_str().unwrap(), ports)
            })
            .collect();
        assert_eq!(
            ports,
            [("envoy", vec![15006, 15021, 15090]), ("web", vec![port])],
            "app on {port}"
        );
    }

    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, annotations: {sidecar.samplecrd.k8s.io/template: classic}}\nspec:\n  containers:\n  - name: web\n    image: nginx:1.27\n    ports: [{containerPort: 80}]\n",
    )
    .unwrap();
    let clash = inject(&pod, "yaml");
    assert_eq!(clash.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&clash.stderr)
            .contains("port 80/TCP of template `classic` container `envoy` is already used by Pod container `web`"),
        "{}",
        String::from_utf8_lossy(&clash.stderr)
    );
}

/// `inject | uninject` gives back every valid corpus file: in YAML the file itself, byte
/// for byte; in JSON what `uninject` makes of the file never injected; with the default
/// template and one that adds every kind of thing.
fn inject_then_uninject_gives_back_the_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("everything.yaml");
    std::fs::write(
        &config,
        "initContainers:\n- {name: setup, image: busybox}\ncontainers:\n- {name: proxy, image: envoy}\nvolumes:\n- {name: certs, emptyDir: {}}\nvolumeMounts:\n- {name: certs, mountPath: /etc/certs}\nimagePullSecrets:\n- name: registry\n",
    )
    .unwrap();
    let binary = |args: &[&str], file: &Path| {
        let out = Command::new(BIN)
            .args(args)
            .arg("-f")
            .arg(file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let injected = dir.path().join("injected");
    for name in VALID {
        for format in ["yaml", "json"] {
            let untouched = binary(&["uninject", "-o", format], &corpus(name));
            for template in [&[][..], &["--config", config.to_str().unwrap()][..]] {
                let output = binary(&[&["inject", "-o", format], template].concat(), &corpus(name));
                if *name != "custom-resources.yaml" {
                    let text = String::from_utf8_lossy(&output);
                    assert!(
                        text.contains("sidecar.samplecrd.k8s.io/status"),
                        "{name}: nothing was injected"
                    );
                }
                std::fs::write(&injected, output).unwrap();
                let back = binary(&["uninject", "-o", format], &injected);
                let expected = match format {
                    "yaml" => std::fs::read(corpus(name)).unwrap(),
                    _ => untouched.clone(),
                };
                assert_eq!(
                    String::from_utf8(back).unwrap(),
                    String::from_utf8(expected).unwrap(),
                    "{name} -o {format} {template:?}"
                );
            }
        }
    }
}

fn main() -> std::process::ExitCode {
    common::harness::main(
        "offline_corpus",
        common::harness::tests![
            every_field_inject_did_not_add_reads_back_the_same,
            the_injector_reads_the_corpus_exactly_as_kubectl_does,
            crlf_and_byte_order_mark_read_like_plain_lf,
            key_order_and_comments_are_kept,
            failures_are_named_and_everything_else_is_written,
            a_json_stream_is_read_like_kubectl_reads_it,
            ci_is_any_value_but_empty_false_or_zero,
            kubectl_create_dry_run_server_accepts_the_output,
            kubectl_reads_back_what_the_writer_writes,
            apps_on_common_ports_are_injected_and_a_real_port_clash_is_refused,
            inject_then_uninject_gives_back_the_corpus,
        ],
    )
}
