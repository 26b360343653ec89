//! Against the cluster in `KUBECONFIG` (the real control plane of `../shared/k8s`, or
//! kind): the template validation webhook at `kubectl apply` time, and `envoy-injector
//! check` on scenarios built in the cluster, compared with golden outputs in
//! `tests/golden/check/` (`UPDATE_GOLDEN=1` rewrites them; review the diff).
//!
//! Without `KUBECONFIG` (or without kubectl) each test prints one `SKIPPED` line to the real
//! stderr and passes. Everything runs on loopback: the injector is a local `serve` process
//! registered with `clientConfig.url: https://127.0.0.1:PORT/...` and a `caBundle`, and the
//! webhook configurations select only this run's namespaces. Pods need no node: admission
//! is checked through the API alone.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use envoy_injector::template::TemplateSet;
use envoy_injector::tls;
use serde_json::{Value, json};

/// Safety bound for anything waited on; never a timing expectation.
const PATIENCE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(250);
const BIN: &str = env!("CARGO_BIN_EXE_envoy-injector");

fn shout(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

/// The kubeconfig, or `None` after saying (once per test binary) why the tests skip.
fn cluster() -> Option<PathBuf> {
    static SKIP: std::sync::Once = std::sync::Once::new();
    let skip = |why: &str| {
        let why = why.to_string();
        SKIP.call_once(|| shout(&format!("SKIPPED check_cluster: {why}")));
        None
    };
    let Some(kubeconfig) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) else {
        return skip(
            "KUBECONFIG is not set; point it at any cluster (a local control plane, or `make kind-up`) to run this test",
        );
    };
    let kubectl = Command::new("kubectl").args(["version", "--client"]).output();
    if !kubectl.is_ok_and(|o| o.status.success()) {
        return skip("kubectl is not installed");
    }
    Some(PathBuf::from(kubeconfig))
}

/// Eight hex digits, different on every run.
fn run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "{:08x}",
        (nanos as u64 ^ u64::from(std::process::id()).rotate_left(32)) as u32
    )
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new("kubectl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("kubectl finishes")
}

fn text(output: &Output) -> String {
    format!(
        "exit {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `kubectl apply --server-side` of JSON objects; panics on failure.
fn apply(objects: &[Value]) {
    let list = json!({ "apiVersion": "v1", "kind": "List", "items": objects });
    let out = kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--validate=false",
            "-f",
            "-",
        ],
        Some(&list.to_string()),
    );
    assert!(out.status.success(), "kubectl apply: {}", text(&out));
}

fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(POLL);
    }
}

/// Deletes what a test created, also when it panics.
struct Cleanup(Vec<Vec<String>>);

impl Cleanup {
    fn delete(&mut self, args: &[&str]) {
        self.0.push(args.iter().map(|a| a.to_string()).collect());
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for args in self.0.iter().rev() {
            let mut command = vec!["delete", "--ignore-not-found", "--wait=false"];
            command.extend(args.iter().map(String::as_str));
            let _ = kubectl(&command, None);
        }
    }
}

/// A local `envoy-injector serve`, killed on drop.
struct Serve {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Serve {
    fn start(dir: &Path, certs: &tls::ServiceCerts, extra: &[&str]) -> Serve {
        std::fs::write(dir.join("tls.crt"), &certs.serving.cert_pem).unwrap();
        std::fs::write(dir.join("tls.key"), &certs.serving.key_pem).unwrap();
        let (port, admin) = (free_port(), free_port());
        let log = dir.join(format!("serve-{port}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(BIN)
            .arg("serve")
            .args(extra)
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
            .arg("--tls-cert")
            .arg(dir.join("tls.crt"))
            .arg("--tls-key")
            .arg(dir.join("tls.key"))
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start envoy-injector serve");
        let mut serve = Serve { child, port, log };
        wait_for("serve to be ready (GET /readyz 200)", || {
            if let Ok(Some(status)) = serve.child.try_wait() {
                panic!(
                    "serve exited ({status}): {}",
                    std::fs::read_to_string(&serve.log).unwrap_or_default()
                );
            }
            (http_status(admin, "/readyz") == Some(200)).then_some(())
        });
        serve
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stop();
    }
}

fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

fn b64(pem: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(pem)
}

/// A shipped manifest as JSON.
fn manifest(relative: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The shipped webhook configuration `relative`, renamed, pointed at `serve` by url with
/// `ca`, and narrowed to `namespaces`: a `matchLabels` naming the injector's namespace is
/// replaced, every other selector and the CEL are kept as shipped (and ANDed with it).
fn registered(relative: &str, name: &str, serve: &Serve, path: &str, ca: &str, namespaces: &[&str]) -> Value {
    let mut config = manifest(relative);
    config["metadata"] =
        json!({ "name": name, "labels": { "app.kubernetes.io/part-of": "envoy-injector-check-test" } });
    for hook in config["webhooks"].as_array_mut().unwrap() {
        hook["clientConfig"] = json!({ "url": serve.url(path), "caBundle": b64(ca) });
        let selector = hook["namespaceSelector"].as_object_mut().unwrap();
        selector.remove("matchLabels");
        let expressions = selector.entry("matchExpressions").or_insert_with(|| json!([]));
        expressions
            .as_array_mut()
            .unwrap()
            .push(json!({ "key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces }));
    }
    config
}

fn namespace(name: &str, inject: Option<&str>) -> Value {
    let mut labels = json!({ "app.kubernetes.io/part-of": "envoy-injector-check-test" });
    if let Some(value) = inject {
        labels["sidecar.samplecrd.k8s.io/inject"] = json!(value);
    }
    json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name, "labels": labels } })
}

fn configmap(namespace: &str, name: &str, template: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": namespace },
        "data": { "config": template },
    })
}

const GOOD: &str = "containers:\n- name: envoy\n  image: envoy:v1\n  ports:\n  - containerPort: 15001\nvolumes:\n- name: envoy-conf\n  emptyDir: {}\n";
const EDITED: &str = "containers:\n- name: envoy\n  image: envoy:v2\n  ports:\n  - containerPort: 15001\nvolumes:\n- name: envoy-conf\n  emptyDir: {}\n";
const BROKEN: &str = "containers:\n- name: envoy\n  imag: envoy:v1\n";

/// The ValidatingWebhookConfiguration of `manifests/`: a ConfigMap whose template does not
/// parse is refused at `kubectl apply` with the reload path's message (field and line),
/// `--dry-run=server` too; a good one is admitted; another ConfigMap is not checked; with
/// the webhook down, applying works (failurePolicy Ignore).
#[test]
fn broken_templates_are_refused_at_apply_time() {
    let Some(_) = cluster() else { return };
    let id = run_id();
    let ns = format!("ei-validate-{id}");
    let dir = tempfile::tempdir().unwrap();
    let mut cleanup = Cleanup(Vec::new());
    cleanup.delete(&["namespace", &ns]);
    apply(&[namespace(&ns, None)]);
    let certs = tls::generate("envoy-injector", &ns, &["127.0.0.1".to_string()], 1).unwrap();
    // /validate needs no cluster: the standalone server answers it too.
    let mut serve = Serve::start(dir.path(), &certs, &["--standalone"]);
    let config_name = format!("envoy-injector-validate-{id}");
    cleanup.delete(&["validatingwebhookconfiguration", &config_name]);
    apply(&[registered(
        "manifests/validating-webhook.yaml",
        &config_name,
        &serve,
        "/validate",
        &certs.ca.cert_pem,
        &[&ns],
    )]);

    let broken = configmap(&ns, "envoy-injector", BROKEN).to_string();
    let expected = TemplateSet::from_data(
        &format!("{ns}/envoy-injector"),
        &[("config".to_string(), BROKEN.to_string())].into(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        expected.contains("unknown field `containers[0].imag` at line 3"),
        "{expected}"
    );
    // The API server picks the configuration up within moments.
    let refused = wait_for("the webhook to refuse a broken template (dry run)", || {
        let out = kubectl(
            &["apply", "--dry-run=server", "--validate=false", "-f", "-"],
            Some(&broken),
        );
        (!out.status.success()).then_some(out)
    });
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("denied the request") && stderr.contains(&expected),
        "expected the refusal to carry `{expected}`, found: {}",
        text(&refused)
    );

    let out = kubectl(&["apply", "--validate=false", "-f", "-"], Some(&broken));
    assert!(
        !out.status.success(),
        "a broken template must be refused: {}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&expected),
        "{}",
        text(&out)
    );
    let stored = kubectl(&["get", "configmap", "envoy-injector", "-n", &ns], None);
    assert!(!stored.status.success(), "nothing was stored: {}", text(&stored));

    let good = configmap(&ns, "envoy-injector", GOOD).to_string();
    for args in [
        &["apply", "--dry-run=server", "--validate=false", "-f", "-"][..],
        &["apply", "--validate=false", "-f", "-"][..],
    ] {
        let out = kubectl(args, Some(&good));
        assert!(
            out.status.success(),
            "a good template is admitted ({args:?}): {}",
            text(&out)
        );
    }
    // An UPDATE to a broken template is refused too, and the good one stays.
    let out = kubectl(&["apply", "--validate=false", "-f", "-"], Some(&broken));
    assert!(!out.status.success(), "{}", text(&out));
    let data = kubectl(
        &[
            "get",
            "configmap",
            "envoy-injector",
            "-n",
            &ns,
            "-o",
            "jsonpath={.data.config}",
        ],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&data.stdout), GOOD);

    // Another ConfigMap is none of the webhook's business.
    let other = configmap(&ns, "something-else", BROKEN).to_string();
    let out = kubectl(&["apply", "--validate=false", "-f", "-"], Some(&other));
    assert!(out.status.success(), "{}", text(&out));

    // Webhook down: failurePolicy Ignore lets the apply through; the reload path is the
    // safety net.
    serve.stop();
    let out = kubectl(&["apply", "--validate=false", "-f", "-"], Some(&broken));
    assert!(
        out.status.success(),
        "with the webhook down the apply goes through: {}",
        text(&out)
    );
}

// ------------------------------------------------------------------------------ check

/// Replaces what changes from run to run (names, ports, times) so outputs compare.
fn normalise(output: &str, id: &str) -> String {
    let replacements = [
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<time>"),
        (r"\(\d+ days left\)", "(<n> days left)"),
        (r"127\.0\.0\.1:\d+", "127.0.0.1:<port>"),
        (r"web-[0-9a-f]{6,10}-[0-9a-z]{5}", "web-<pod>"),
    ];
    let mut out = output.replace(id, "<id>");
    for (pattern, with) in replacements {
        out = regex::Regex::new(pattern).unwrap().replace_all(&out, with).into_owned();
    }
    out
}

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/check")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}); run with UPDATE_GOLDEN=1 to write it",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "`check` output differs from {}:\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

struct Run {
    code: i32,
    stdout: String,
}

fn check(kubeconfig: &Path, args: &[String]) -> Run {
    let out = Command::new(BIN)
        .arg("check")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run envoy-injector check");
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 1),
        "check must answer (0 or 1): {}",
        text(&out)
    );
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// A Pod (or Deployment) manifest with `annotations`, in `namespace`.
fn pod(namespace: &str, name: &str, annotations: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": namespace, "annotations": annotations },
        "spec": spec,
    })
}

fn app() -> Value {
    json!({ "containers": [{ "name": "app", "image": "app:1" }] })
}

/// `check` on scenarios built in the cluster: each decision rule (from a manifest and from
/// Pods the injector really injected), a healthy installation, a stale Deployment after a
/// template edit, then a mismatched caBundle, an expired certificate and a Service without
/// endpoints. Text outputs are golden; `-o json` and the exit codes are asserted.
#[test]
fn check_explains_decisions_health_and_stale_sidecars() {
    let Some(kubeconfig) = cluster() else { return };
    let id = run_id();
    let injector = format!("ei-check-{id}");
    let labelled = format!("ei-check-{id}-labelled");
    let plain = format!("ei-check-{id}-plain");
    let dir = tempfile::tempdir().unwrap();
    let mut cleanup = Cleanup(Vec::new());
    for ns in [&injector, &labelled, &plain] {
        cleanup.delete(&["namespace", ns]);
    }
    apply(&[
        namespace(&injector, Some("disabled")),
        namespace(&labelled, Some("enabled")),
        namespace(&plain, None),
    ]);
    // `serve` in cluster mode watches Networks: the CRD must exist (server-side apply is
    // idempotent; left installed).
    let out = Command::new("kubectl")
        .args(["apply", "--server-side", "--force-conflicts", "--validate=false", "-f"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/crd.yaml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));

    let certs = tls::generate("envoy-injector", &injector, &["127.0.0.1".to_string()], 365).unwrap();
    let secret = |certs: &tls::ServiceCerts| {
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": { "name": "envoy-injector-tls", "namespace": injector },
            "data": {
                "tls.crt": b64(&certs.serving.cert_pem),
                "tls.key": b64(&certs.serving.key_pem),
                "ca.crt": b64(&certs.ca.cert_pem),
            },
        })
    };
    apply(&[configmap(&injector, "envoy-injector", GOOD), secret(&certs)]);
    let serve = Serve::start(
        dir.path(),
        &certs,
        &[
            "--namespace",
            &injector,
            "--network-backend",
            "none",
            "--identity",
            "check-test-replica",
        ],
    );
    let webhook_config = format!("envoy-injector-check-{id}");
    cleanup.delete(&["mutatingwebhookconfiguration", &webhook_config]);
    cleanup.delete(&["validatingwebhookconfiguration", &webhook_config]);
    let app_namespaces = [labelled.as_str(), plain.as_str(), "kube-system"];
    apply(&[
        registered(
            "manifests/webhook.yaml",
            &webhook_config,
            &serve,
            "/mutate",
            &certs.ca.cert_pem,
            &app_namespaces,
        ),
        registered(
            "manifests/validating-webhook.yaml",
            &webhook_config,
            &serve,
            "/validate",
            &certs.ca.cert_pem,
            &[&injector],
        ),
    ]);
    // The API server calls the injector once it has the configuration.
    let probe = pod(&labelled, "probe", json!({}), app()).to_string();
    wait_for("the mutating webhook to inject (dry run)", || {
        let out = kubectl(
            &[
                "create",
                "--dry-run=server",
                "--validate=false",
                "-o",
                "json",
                "-f",
                "-",
            ],
            Some(&probe),
        );
        String::from_utf8_lossy(&out.stdout)
            .contains("sidecar.samplecrd.k8s.io/status")
            .then_some(())
    });
    let flags = [
        "--injector-namespace",
        &injector,
        "--webhook-config",
        &webhook_config,
        "--validating-webhook-config",
        &webhook_config,
    ];
    let with = |extra: &[&str]| -> Vec<String> { flags.iter().chain(extra).map(|s| s.to_string()).collect() };

    // Every decision rule, from a manifest (nothing is created).
    let scenarios = [
        pod(&labelled, "by-namespace-label", json!({}), app()),
        pod(
            &plain,
            "by-annotation",
            json!({ "sidecar.samplecrd.k8s.io/inject": "true" }),
            app(),
        ),
        pod(
            &plain,
            "by-legacy-annotation",
            json!({ "initializer.kubernetes.io/envoy": "true" }),
            app(),
        ),
        pod(
            &labelled,
            "opted-out",
            json!({ "sidecar.samplecrd.k8s.io/inject": "false" }),
            app(),
        ),
        pod(
            &plain,
            "not-opted-in",
            json!({ "sidecar.samplecrd.k8s.io/inject": "yes" }),
            app(),
        ),
        pod(
            &labelled,
            "host-network",
            json!({}),
            json!({ "hostNetwork": true, "containers": [{ "name": "app", "image": "app:1" }] }),
        ),
        pod(
            "kube-system",
            "in-kube-system",
            json!({ "sidecar.samplecrd.k8s.io/inject": "true" }),
            app(),
        ),
        pod(
            &labelled,
            "volume-clash",
            json!({}),
            json!({ "containers": [{ "name": "app", "image": "app:1" }], "volumes": [{ "name": "envoy-conf", "configMap": { "name": "mine" } }] }),
        ),
        pod(
            &labelled,
            "port-clash",
            json!({}),
            json!({ "containers": [{ "name": "app", "image": "app:1", "ports": [{ "containerPort": 15001 }] }] }),
        ),
        pod(
            &labelled,
            "unknown-template",
            json!({ "sidecar.samplecrd.k8s.io/template": "nope" }),
            app(),
        ),
        pod(
            &labelled,
            "missing-network",
            json!({ "sidecar.samplecrd.k8s.io/network": "net1" }),
            app(),
        ),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "namespace": labelled },
            "spec": {
                "replicas": 2,
                "selector": { "matchLabels": { "app": "web" } },
                "template": { "metadata": { "labels": { "app": "web" } }, "spec": app() },
            },
        }),
    ];
    let manifest_path = dir.path().join("scenarios.yaml");
    // JSON documents in a YAML stream: every string stays quoted, so `"yes"` is read as
    // the string kubectl reads, not YAML 1.1's boolean.
    let yaml: Vec<String> = scenarios
        .iter()
        .map(|d| serde_json::to_string_pretty(d).unwrap())
        .collect();
    std::fs::write(&manifest_path, yaml.join("\n---\n")).unwrap();
    let run = check(&kubeconfig, &with(&["-f", manifest_path.to_str().unwrap()]));
    golden("decisions.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 1, "Pods that would be denied fail the check:\n{}", run.stdout);
    let run = check(
        &kubeconfig,
        &with(&["-f", manifest_path.to_str().unwrap(), "-o", "json"]),
    );
    let report: Value = serde_json::from_str(&run.stdout).expect("-o json prints JSON");
    let rules: Vec<(&str, &str)> = report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["rule"].as_str().unwrap(), p["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rules,
        [
            ("namespace-label", "inject"),
            ("annotation", "inject"),
            ("legacy-annotation", "inject"),
            ("opted-out", "skip"),
            ("not-opted-in", "skip"),
            ("namespace-label", "inject"),
            ("webhook-not-called", "skip"),
            ("collision", "deny"),
            ("collision", "deny"),
            ("unknown-template", "deny"),
            ("network", "deny"),
            ("namespace-label", "inject"),
        ]
    );
    assert_eq!(report["healthy"], false);

    // Pods the injector really injected (a Deployment's, through its ReplicaSet), and one
    // that opted out; a healthy installation.
    apply(&[
        scenarios[11].clone(),
        pod(
            &labelled,
            "opted-out",
            json!({ "sidecar.samplecrd.k8s.io/inject": "false" }),
            app(),
        ),
    ]);
    wait_for("the Deployment's two Pods", || {
        let out = kubectl(&["get", "pods", "-n", &labelled, "-l", "app=web", "-o", "name"], None);
        (String::from_utf8_lossy(&out.stdout).lines().count() == 2).then_some(())
    });
    let run = check(&kubeconfig, &with(&["-n", &labelled, "--stale"]));
    golden("namespace-healthy.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 0, "a healthy installation passes:\n{}", run.stdout);

    // A template edit makes the Deployment's Pods stale.
    apply(&[configmap(&injector, "envoy-injector", EDITED)]);
    let run = check(&kubeconfig, &with(&["-n", &labelled, "--stale"]));
    golden("stale.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 0, "stale sidecars are a warning:\n{}", run.stdout);
    let run = check(&kubeconfig, &with(&["--stale", "-o", "json"]));
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    let stale = report["stale"].as_array().unwrap();
    let ours: Vec<&Value> = stale.iter().filter(|g| g["namespace"] == labelled.as_str()).collect();
    assert_eq!(ours.len(), 1, "{stale:?}");
    assert_eq!(ours[0]["kind"], "Deployment");
    assert_eq!(
        ours[0]["fix"],
        format!("kubectl rollout restart deployment/web -n {labelled}")
    );

    // A caBundle from another CA; then an expired serving certificate (same CA); then the
    // webhooks behind a Service without endpoints.
    let other = tls::generate("envoy-injector", &injector, &["127.0.0.1".to_string()], 365).unwrap();
    apply(&[registered(
        "manifests/webhook.yaml",
        &webhook_config,
        &serve,
        "/mutate",
        &other.ca.cert_pem,
        &app_namespaces,
    )]);
    let run = check(&kubeconfig, &with(&[]));
    golden("ca-bundle-mismatch.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 1);
    apply(&[registered(
        "manifests/webhook.yaml",
        &webhook_config,
        &serve,
        "/mutate",
        &certs.ca.cert_pem,
        &app_namespaces,
    )]);

    let issued = time::OffsetDateTime::now_utc() - time::Duration::days(30);
    let expired_leaf = tls::sign_serving_cert(
        &certs.ca,
        "envoy-injector",
        &injector,
        issued,
        issued + time::Duration::days(2),
    )
    .unwrap();
    let expired = tls::ServiceCerts {
        ca: certs.ca.clone(),
        serving: expired_leaf,
    };
    apply(&[secret(&expired)]);
    let run = check(&kubeconfig, &with(&[]));
    golden("certificate-expired.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 1);
    apply(&[secret(&certs)]);

    let mut behind_service = registered(
        "manifests/webhook.yaml",
        &webhook_config,
        &serve,
        "/mutate",
        &certs.ca.cert_pem,
        &["none-of-ours"],
    );
    for hook in behind_service["webhooks"].as_array_mut().unwrap() {
        hook["clientConfig"] = json!({
            "service": { "name": "envoy-injector", "namespace": injector, "port": 443, "path": "/mutate" },
            "caBundle": b64(&certs.ca.cert_pem),
        });
    }
    apply(&[
        behind_service,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "envoy-injector", "namespace": injector },
            "spec": { "selector": { "app": "envoy-injector-check-nothing" }, "ports": [{ "port": 443, "targetPort": 8443 }] },
        }),
    ]);
    let run = check(&kubeconfig, &with(&[]));
    golden("service-without-endpoints.txt", &normalise(&run.stdout, &id));
    assert_eq!(run.code, 1);
}
