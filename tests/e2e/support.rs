//! Plumbing for the cluster suite (`tests/e2e.rs`): the skip decision, the `serve` child
//! process, cleanup that also runs when a step panics, bounded polling and small object
//! helpers. Nothing here knows the scenario; the steps live in `tests/e2e.rs`.

use std::collections::BTreeMap;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// How often a bounded wait looks again.
pub const POLL: Duration = Duration::from_millis(250);
/// Default bound for anything the suite waits on: a safety limit, never a timing expectation.
pub const PATIENCE: Duration = Duration::from_secs(30);
/// `fieldManager` of everything the suite writes.
pub const FIELD_MANAGER: &str = "envoy-injector-e2e";
/// Label on every object the suite creates, to find leftovers by hand:
/// `kubectl get ns,mutatingwebhookconfigurations -l app.kubernetes.io/part-of=envoy-injector-e2e`.
pub const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "envoy-injector-e2e");

pub const SKIP_NO_KUBECONFIG: &str = "SKIPPED e2e: KUBECONFIG is not set; set it to a cluster (e.g. `make kind-up`, \
     then `make e2e`) to run the cluster tests";

/// Writes one line to the process's real stderr. libtest captures `eprintln!` of passing
/// tests; skips and the final summary must be seen in a plain `cargo test` run.
pub fn shout(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

/// Progress line: shown with `--nocapture`, and with the output of a failing test.
macro_rules! step {
    ($($arg:tt)*) => { eprintln!("e2e: {}", format_args!($($arg)*)) };
}
pub(crate) use step;

/// Which copy of envoy-injector the suite checks (`E2E_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `local` (default): the suite starts `serve` on this machine and registers a `url:`
    /// webhook for its test namespace only.
    Local,
    /// `in-cluster`: the Deployment that `make deploy` installed, behind its Service and its
    /// own MutatingWebhookConfiguration; the suite starts and registers nothing.
    InCluster,
}

impl Mode {
    pub fn parse(value: Option<&str>) -> Result<Mode, String> {
        match value.map(str::trim) {
            None | Some("") | Some("local") => Ok(Mode::Local),
            Some("in-cluster") => Ok(Mode::InCluster),
            Some(other) => Err(format!(
                "E2E_MODE={other:?} is not a mode: expected `local` (the default) or `in-cluster`"
            )),
        }
    }
}

/// The namespace `make deploy` installs into (`E2E_INJECTOR_NAMESPACE` overrides it).
pub const INJECTOR_NAMESPACE: &str = "envoy-injector";
/// Name of the Deployment, Service, ConfigMap and MutatingWebhookConfiguration installed by
/// `make deploy`.
pub const INJECTOR_NAME: &str = "envoy-injector";

/// What the environment asks for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `E2E_MODE`: `local` (default) or `in-cluster`.
    pub mode: Mode,
    /// `E2E_INJECTOR_NAMESPACE`: namespace of the deployed copy (in-cluster mode).
    pub injector_namespace: String,
    /// `E2E_WEBHOOK_HOST`: where the API server reaches this machine.
    pub webhook_host: Option<String>,
    /// `E2E_RUN_PODS=1`: also check Pods that actually run (needs nodes).
    pub run_pods: bool,
    /// `E2E_SIDECAR_IMAGE`: image of the test template's sidecar.
    pub sidecar_image: String,
    /// `E2E_APP_IMAGE`: image of the test Pods' own container.
    pub app_image: String,
}

/// `pause` is tiny, has no shell, runs forever and is already on every kind node (it is the
/// sandbox image), so the running tier does not depend on pulling Envoy.
pub const DEFAULT_IMAGE: &str = "registry.k8s.io/pause:3.10";

impl Settings {
    /// `None` (after saying so, loudly) when the suite must skip.
    pub fn from_env() -> Option<Settings> {
        let mode = Mode::parse(non_empty_env("E2E_MODE").as_deref()).unwrap_or_else(|e| panic!("{e}"));
        if non_empty_env("KUBECONFIG").is_none() {
            shout(SKIP_NO_KUBECONFIG);
            if mode == Mode::InCluster {
                shout("SKIPPED e2e (E2E_MODE=in-cluster): `make e2e` sets KUBECONFIG to the kind cluster itself");
            }
            return None;
        }
        Some(Settings {
            mode,
            injector_namespace: non_empty_env("E2E_INJECTOR_NAMESPACE")
                .unwrap_or_else(|| INJECTOR_NAMESPACE.to_string()),
            webhook_host: non_empty_env("E2E_WEBHOOK_HOST"),
            run_pods: non_empty_env("E2E_RUN_PODS").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true")),
            sidecar_image: non_empty_env("E2E_SIDECAR_IMAGE").unwrap_or_else(|| DEFAULT_IMAGE.to_string()),
            app_image: non_empty_env("E2E_APP_IMAGE").unwrap_or_else(|| DEFAULT_IMAGE.to_string()),
        })
    }
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Eight lowercase hex digits, different on every run (names must be DNS labels).
pub fn unique_suffix() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.write_u32(std::process::id());
    format!("{:08x}", hasher.finish() as u32)
}

/// A port that was free a moment ago on `ip` (the child binds it right after).
pub fn free_port(ip: &str) -> u16 {
    let listener = TcpListener::bind((ip, 0)).unwrap_or_else(|e| panic!("cannot bind a free port on {ip}: {e}"));
    listener.local_addr().expect("local address of a bound listener").port()
}

/// `host:port` for a URL, bracketing IPv6 literals.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Plain-HTTP client for the admin listener (`/readyz`).
pub fn admin_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("HTTP client for the admin listener")
}

pub fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// A YAML manifest of the repository as JSON, exactly as written (nothing dropped).
pub fn read_manifest(relative: &str) -> Value {
    let path = manifest_path(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{} is not a YAML object: {e}", path.display()))
}

/// One line for an API error: code, reason and the server's message.
pub fn api_error(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!("HTTP {} {}: {}", status.code, status.reason, status.message),
        other => other.to_string(),
    }
}

pub fn network_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("samplecrd.k8s.io", "v1", "Network"), "networks")
}

/// The test namespace, labelled so leftovers can be found.
pub fn namespace_object(name: &str) -> Namespace {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": name, "labels": { PART_OF.0: PART_OF.1 } },
    }))
    .expect("a Namespace")
}

pub fn service_account_object(name: &str) -> ServiceAccount {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": name },
    }))
    .expect("a ServiceAccount")
}

/// The `envoy-injector` ConfigMap with `config` as its default template.
pub fn configmap_object(name: &str, config: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name, "labels": { PART_OF.0: PART_OF.1 } },
        "data": { "config": config },
    }))
    .expect("a ConfigMap")
}

/// Pod CREATE in namespace `namespace` only (by its automatic name label) goes to `url`.
pub fn webhook_configuration(name: &str, namespace: &str, url: &str, ca_pem: &[u8]) -> MutatingWebhookConfiguration {
    use base64::Engine;
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": { "name": name, "labels": { PART_OF.0: PART_OF.1 } },
        "webhooks": [{
            "name": format!("{namespace}.e2e.sidecar.samplecrd.k8s.io"),
            "clientConfig": {
                "url": url,
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            },
            "rules": [{
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }],
            "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": namespace } },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "reinvocationPolicy": "IfNeeded",
            "timeoutSeconds": 5,
        }],
    }))
    .expect("a MutatingWebhookConfiguration")
}

/// A Network object (for create; the namespace comes from the `Api`).
pub fn network(name: &str, cidr: &str, gateway: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "samplecrd.k8s.io/v1",
        "kind": "Network",
        "metadata": { "name": name },
        "spec": { "cidr": cidr, "gateway": gateway },
    }))
    .expect("a Network is a DynamicObject")
}

/// The Network's `Ready` condition, if it has one.
pub fn ready_condition(obj: &DynamicObject) -> Option<&Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// What a Network looks like now, for failure messages.
pub fn network_summary(obj: &DynamicObject) -> String {
    format!(
        "Network {} generation={:?} deletionTimestamp={:?} finalizers={:?} spec={} status={}",
        obj.metadata.name.as_deref().unwrap_or("?"),
        obj.metadata.generation,
        obj.metadata.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
        obj.metadata.finalizers.as_deref().unwrap_or_default(),
        obj.data["spec"],
        obj.data.get("status").unwrap_or(&Value::Null),
    )
}

/// A Pod with one app container. With `annotations` empty the Pod has no annotation map at
/// all (the JSON Patch must then create it).
pub fn pod(name: &str, annotations: &[(&str, &str)], image: &str) -> Pod {
    let mut metadata = json!({ "name": name, "labels": { "app.kubernetes.io/name": "e2e" } });
    if !annotations.is_empty() {
        let map: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        metadata["annotations"] = json!(map);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            // No projected token volume: the stored Pod shows exactly what admission added.
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "app", "image": image, "imagePullPolicy": "IfNotPresent" }],
        },
    }))
    .expect("a Pod")
}

/// A Deployment of `replicas` Pods like [`pod`], its template annotated with `annotations`.
pub fn deployment(name: &str, replicas: i32, annotations: &[(&str, &str)], image: &str) -> Deployment {
    let map: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name }, "annotations": map },
                "spec": {
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{ "name": "app", "image": image, "imagePullPolicy": "IfNotPresent" }],
                },
            },
        },
    }))
    .expect("a Deployment")
}

/// Whether `ip` lies in `cidr` (IPv4 or IPv6; `None` when either does not parse).
pub fn ip_in_cidr(ip: &str, cidr: &str) -> Option<bool> {
    use std::net::IpAddr;
    let (network, prefix) = cidr.split_once('/')?;
    let prefix: u32 = prefix.parse().ok()?;
    // Multus may report an address with its prefix length.
    let ip: IpAddr = ip.split('/').next()?.parse().ok()?;
    match (ip, network.parse::<IpAddr>().ok()?) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            Some(u32::from(ip) & mask == u32::from(net) & mask)
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            Some(u128::from(ip) & mask == u128::from(net) & mask)
        }
        (IpAddr::V4(_), IpAddr::V6(_)) | (IpAddr::V6(_), IpAddr::V4(_)) => Some(false),
        _ => None,
    }
}

/// The Multus `k8s.v1.cni.cncf.io/network-status` annotation: the attachment named
/// `network` (`namespace/name`, or `name`) and its IPs.
pub fn attachment_ips(network_status: &str, namespace: &str, network: &str) -> Result<Vec<String>, String> {
    let entries: Vec<Value> = serde_json::from_str(network_status)
        .map_err(|e| format!("the network-status annotation is not a JSON list ({e}): {network_status}"))?;
    let qualified = format!("{namespace}/{network}");
    let entry = entries
        .iter()
        .find(|e| e["name"] == qualified.as_str() || e["name"] == network)
        .ok_or_else(|| format!("no attachment named {qualified} in the network-status annotation: {network_status}"))?;
    Ok(entry["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.as_str().map(str::to_string))
        .collect())
}

/// A container of the Pod by name, regular or init (a native sidecar is an init container).
pub fn container<'p>(pod: &'p Pod, name: &str) -> Option<&'p Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

pub fn env_value<'c>(container: &'c Container, name: &str) -> Option<&'c str> {
    container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)?
        .value
        .as_deref()
}

pub fn annotation<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

pub fn label<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// What admission left on a Pod, for failure messages.
pub fn describe_pod(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    let names = |list: Option<&Vec<Container>>| list.into_iter().flatten().map(|c| c.name.clone()).collect::<Vec<_>>();
    format!(
        "Pod {} containers={:?} initContainers={:?} volumes={:?} annotations={:?} labels={:?}",
        pod.metadata.name.as_deref().unwrap_or("?"),
        names(spec.map(|s| &s.containers)),
        names(spec.and_then(|s| s.init_containers.as_ref())),
        spec.and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .map(|v| v.name.clone())
            .collect::<Vec<_>>(),
        pod.metadata.annotations.clone().unwrap_or_default(),
        pod.metadata.labels.clone().unwrap_or_default(),
    )
}

/// The `envoy-injector serve` child process and its files.
pub struct Server {
    child: Child,
    log: PathBuf,
    pub admin: SocketAddr,
    pub webhook_port: u16,
    /// PEM CA that signed the serving certificate (the webhook's `caBundle`).
    pub ca_pem: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl Server {
    /// `envoy-injector certs` for `san`, then `serve` in cluster mode on free ports, its
    /// output in a log file. Does not wait for readiness.
    pub fn start(namespace: &str, san: &str) -> Server {
        let bin = env!("CARGO_BIN_EXE_envoy-injector");
        let dir = tempfile::Builder::new()
            .prefix("envoy-injector-e2e")
            .tempdir()
            .expect("temporary directory");
        let certs = dir.path().join("certs");
        let output = Command::new(bin)
            .args([
                "certs",
                "--service",
                "envoy-injector",
                "--namespace",
                namespace,
                "--out-dir",
            ])
            .arg(&certs)
            .args(["--san", san])
            .output()
            .expect("run envoy-injector certs");
        assert!(
            output.status.success(),
            "expected `envoy-injector certs --san {san}` to succeed, found {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let ca_pem = std::fs::read(certs.join("ca.crt")).expect("certs wrote ca.crt");

        let webhook_port = free_port("0.0.0.0");
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port("127.0.0.1")));
        let log = dir.path().join("serve.log");
        let log_file = File::create(&log).expect("create the serve log");
        let child = Command::new(bin)
            .arg("serve")
            .args([
                "--namespace",
                namespace,
                "--network-backend",
                "none",
                "--leader-elect",
                "false",
            ])
            .arg("--addr")
            .arg(format!("0.0.0.0:{webhook_port}"))
            .arg("--admin-addr")
            .arg(admin.to_string())
            .arg("--tls-cert")
            .arg(certs.join("tls.crt"))
            .arg("--tls-key")
            .arg(certs.join("tls.key"))
            .args(["--log-format", "json"])
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone the log file handle"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} serve: {e}"));
        step!(
            "started envoy-injector serve (pid {}), log {}",
            child.id(),
            log.display()
        );
        Server {
            child,
            log,
            admin,
            webhook_port,
            ca_pem,
            _dir: dir,
        }
    }

    /// `Err` with the exit status and the log's end when the process is gone.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "envoy-injector serve exited ({status}); the end of its log:\n{}",
                self.log_tail(60)
            )),
            Err(e) => Err(format!("cannot query the envoy-injector serve process: {e}")),
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM (the graceful path), then SIGKILL after 10 s.
    fn stop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet (try_wait
        // above saw it running), so the pid cannot have been reused.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The deployed copy's template as it was before the suite replaced it.
struct TemplateRestore {
    namespace: String,
    configmap: String,
    original: Option<String>,
}

#[derive(Default)]
struct Registered {
    namespace: Option<String>,
    webhook_config: Option<String>,
    template: Option<TemplateRestore>,
    server: Option<Server>,
}

/// Everything the run created outside this process; torn down when dropped, which happens
/// on success and on a failed step alike (the test owns it outside the async runtime).
/// The CRD stays installed: it is cluster-wide and may be shared with other users.
#[derive(Default)]
pub struct Cleanup {
    inner: Mutex<Registered>,
}

impl Cleanup {
    fn with<T>(&self, f: impl FnOnce(&mut Registered) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn namespace(&self, name: &str) {
        self.with(|r| r.namespace = Some(name.to_string()));
    }

    pub fn webhook_config(&self, name: &str) {
        self.with(|r| r.webhook_config = Some(name.to_string()));
    }

    pub fn server(&self, server: Server) {
        self.with(|r| r.server = Some(server));
    }

    /// Puts key `config` of ConfigMap `namespace/configmap` back to `original` (removes it
    /// when `None`) at the end.
    pub fn restore_template(&self, namespace: &str, configmap: &str, original: Option<String>) {
        self.with(|r| {
            r.template = Some(TemplateRestore {
                namespace: namespace.to_string(),
                configmap: configmap.to_string(),
                original,
            })
        });
    }

    /// `Err` (with the server's log) if `serve` is no longer running.
    pub fn check_server(&self) -> Result<(), String> {
        self.with(|r| r.server.as_mut().map_or(Ok(()), Server::check_alive))
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let registered = std::mem::take(self.inner.get_mut().unwrap_or_else(|e| e.into_inner()));
        if std::thread::panicking()
            && let Some(server) = &registered.server
        {
            shout(&format!(
                "e2e failed; the end of the envoy-injector serve log:\n{}",
                server.log_tail(80)
            ));
        }
        // A thread of its own with a runtime of its own: this works whether or not the drop
        // happens inside a runtime, and a dead cluster cannot hang it (every call is bounded).
        let tidy =
            std::thread::spawn(
                move || match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime.block_on(tidy(registered)),
                    Err(e) => shout(&format!(
                        "e2e cleanup: cannot build a runtime ({e}); delete leftovers by hand"
                    )),
                },
            );
        let _ = tidy.join();
    }
}

const CALL_LIMIT: Duration = Duration::from_secs(15);

async fn bounded<T>(what: &str, call: impl Future<Output = Result<T, kube::Error>>) -> Option<T> {
    match tokio::time::timeout(CALL_LIMIT, call).await {
        Ok(Ok(value)) => Some(value),
        Ok(Err(kube::Error::Api(status))) if status.is_not_found() => None,
        Ok(Err(e)) => {
            shout(&format!("e2e cleanup: {what} failed: {}", api_error(&e)));
            None
        }
        Err(_) => {
            shout(&format!("e2e cleanup: {what} took longer than {CALL_LIMIT:?}"));
            None
        }
    }
}

/// Webhook registration first (nothing may call a dead webhook), then the deployed copy's
/// template, then the process, then the namespace. Finalizers the stopped local controller
/// can no longer remove are stripped so the namespace can go (a deployed controller removes
/// them itself).
async fn tidy(mut registered: Registered) {
    let client = match tokio::time::timeout(CALL_LIMIT, Client::try_default()).await {
        Ok(Ok(client)) => Some(client),
        _ => {
            shout(
                "e2e cleanup: no API client; leftovers (if any) are labelled app.kubernetes.io/part-of=envoy-injector-e2e",
            );
            None
        }
    };
    if let (Some(client), Some(name)) = (&client, &registered.webhook_config) {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let what = format!("deleting MutatingWebhookConfiguration {name}");
        if bounded(&what, api.delete(name, &DeleteParams::default()))
            .await
            .is_some()
        {
            step!("cleanup: deleted MutatingWebhookConfiguration {name}");
        }
    }
    if let (Some(client), Some(restore)) = (&client, &registered.template) {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &restore.namespace);
        let patch = json!({ "data": { "config": restore.original } });
        let what = format!(
            "restoring the template of ConfigMap {}/{}",
            restore.namespace, restore.configmap
        );
        if bounded(
            &what,
            configmaps.patch(&restore.configmap, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await
        .is_some()
        {
            step!(
                "cleanup: restored the template of ConfigMap {}/{}",
                restore.namespace,
                restore.configmap
            );
        }
    }
    let local_controller = registered.server.is_some();
    if let Some(server) = registered.server.as_mut() {
        server.stop();
    }
    if let (Some(client), Some(ns)) = (&client, &registered.namespace) {
        let networks: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &network_resource());
        let leftovers = if local_controller {
            bounded("listing leftover Networks", networks.list(&ListParams::default())).await
        } else {
            None
        };
        if let Some(list) = leftovers {
            for obj in list.items {
                let Some(name) = obj.metadata.name.clone() else {
                    continue;
                };
                if obj.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
                    let patch = json!({ "metadata": { "finalizers": null } });
                    let what = format!("removing the finalizers of Network {name}");
                    bounded(
                        &what,
                        networks.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
                    )
                    .await;
                }
            }
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let what = format!("deleting namespace {ns}");
        if bounded(&what, namespaces.delete(ns, &DeleteParams::background()))
            .await
            .is_some()
        {
            step!("cleanup: deleting namespace {ns} (in the background)");
        }
    }
}
