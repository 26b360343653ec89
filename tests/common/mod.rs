//! Shared helpers for the integration tests: here, for the server tests, certificates, an
//! in-process server, TLS clients that dial the Service name, the captured reviews and their
//! checks; `standalone.rs`, the real binary as `serve --standalone`; `builders.rs`, objects
//! for the controller and admission tests. The pieces every binary shares (processes,
//! polling, metrics, CRDs, kubectl) are small files gathered by `kit.rs`, which
//! `tests/e2e`, `tests/pods`, `tests/manifests` and `examples/bench_scale.rs` include with
//! `#[path]` (so they stand alone: no `env!("CARGO_BIN_EXE_...")`, which an example lacks).
#![allow(dead_code)]

pub mod builders;
mod kit;
pub mod standalone;

#[allow(unused_imports)]
pub use kit::metrics::{Samples, metric_value};
pub use kit::*;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use envoy_injector::admission::{Admission, Standalone};
use envoy_injector::metrics::{self, Metrics};
use envoy_injector::server::{self, AppState, ConnectionTimeouts, Readiness, RunningServer, ServerConfig};
use envoy_injector::template::{LiveTemplates, TemplateSet};
use envoy_injector::tls::{self, ServiceCerts, TlsSource};
use k8s_openapi::api::core::v1::Pod;
use prometheus_client::registry::Registry;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

pub const SERVICE: &str = "envoy-injector";
pub const NAMESPACE: &str = "envoy-injector";
/// The name the API server dials for a Service-backed webhook.
pub const HOST: &str = "envoy-injector.envoy-injector.svc";
/// Safety limit for anything a test waits on; never a performance expectation.
pub const PATIENCE: Duration = Duration::from_secs(30);
pub const STATUS_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/status";

pub fn service_certs() -> ServiceCerts {
    tls::generate(SERVICE, NAMESPACE, &[], 1).expect("generate test certificates")
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission")
}

/// Every captured AdmissionReview (file name, bytes), `_`-prefixed helpers excluded.
pub fn fixtures() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(fixtures_dir())
        .expect("read fixtures dir")
        .map(|entry| entry.expect("fixture entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .filter(|path| !path.file_name().unwrap().to_string_lossy().starts_with('_'))
        .map(|path| {
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&path).unwrap(),
            )
        })
        .collect();
    out.sort();
    assert!(
        out.len() >= 8,
        "expected the captured reviews in {}, found {}",
        fixtures_dir().display(),
        out.len()
    );
    out
}

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(name)).unwrap_or_else(|e| panic!("read fixture {name}: {e}"))
}

/// The headers kube-apiserver sent with the captured reviews, minus the ones the HTTP
/// client derives itself (Host, Content-Length).
pub fn apiserver_headers() -> HeaderMap {
    let raw: Value = serde_json::from_slice(&fixture("_request-headers.json")).unwrap();
    let mut headers = HeaderMap::new();
    for (name, value) in raw["headers"].as_object().expect("headers object") {
        if name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        headers.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value.as_str().unwrap()).unwrap(),
        );
    }
    headers
}

/// The path and query the API server posts to.
pub fn apiserver_path() -> String {
    let raw: Value = serde_json::from_slice(&fixture("_request-headers.json")).unwrap();
    raw["path"].as_str().unwrap().to_string()
}

pub fn mutate_url(addr: SocketAddr) -> String {
    format!("https://{HOST}:{}{}", addr.port(), apiserver_path())
}

pub fn test_config() -> ServerConfig {
    ServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        reuse_port: false,
        max_body_bytes: 1024 * 1024,
        max_inflight_body_bytes: 64 * 1024 * 1024,
        timeouts: ConnectionTimeouts {
            tls_handshake: Duration::from_secs(10),
            first_request: Duration::from_secs(10),
            header_read: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            http2_keepalive_interval: Duration::from_secs(20),
            http2_keepalive_timeout: Duration::from_secs(10),
        },
        request_timeout: Duration::from_secs(20),
        shutdown_timeout: Duration::from_secs(20),
        max_connections: 1024,
        admin_max_connections: 64,
    }
}

pub struct TestServer {
    pub server: RunningServer,
    pub registry: Arc<Registry>,
}

impl TestServer {
    pub fn metrics_text(&self) -> String {
        metrics::encode(&self.registry)
    }
}

/// The embedded templates, standalone namespace view, and the given readiness.
pub fn app_state(readiness: Option<Readiness>) -> AppState {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let templates = Arc::new(LiveTemplates::new(Some(TemplateSet::embedded())));
    let readiness = readiness.unwrap_or_else(|| Arc::new(|| Ok(())));
    AppState {
        admission: Arc::new(Admission::new(templates, Arc::new(Standalone), metrics.clone())),
        registry: Arc::new(registry),
        metrics,
        readiness,
    }
}

pub async fn start(config: ServerConfig, tls: TlsSource) -> TestServer {
    start_with(config, tls, app_state(None)).await
}

/// The in-process server with `--max-body-bytes` at `limit`, on certificates of its own.
pub async fn start_with_body_limit(limit: usize) -> (ServiceCerts, TestServer) {
    let certs = service_certs();
    let mut config = test_config();
    config.max_body_bytes = limit;
    let server = start(config, pem_source(&certs)).await;
    (certs, server)
}

pub async fn start_with(config: ServerConfig, tls: TlsSource, state: AppState) -> TestServer {
    let registry = state.registry.clone();
    let server = server::start(config, tls, state).await.expect("server starts");
    TestServer { server, registry }
}

pub fn pem_source(certs: &ServiceCerts) -> TlsSource {
    TlsSource::Pem(certs.serving.clone())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// ALPN offers only `http/1.1`.
    Http1,
    /// ALPN offers `h2` and `http/1.1`; the server should pick `h2`.
    Alpn,
}

impl Protocol {
    pub fn expected_version(self) -> reqwest::Version {
        match self {
            Protocol::Http1 => reqwest::Version::HTTP_11,
            Protocol::Alpn => reqwest::Version::HTTP_2,
        }
    }
}

/// A client that trusts only `ca_pems` and resolves [`HOST`] to `addr`, as the API server
/// dials the Service.
pub fn client(addr: SocketAddr, ca_pems: &[&str], protocol: Protocol) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .tls_info(true)
        .resolve(HOST, addr)
        .timeout(PATIENCE);
    for pem in ca_pems {
        builder = builder.add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap());
    }
    if protocol == Protocol::Http1 {
        builder = builder.http1_only();
    }
    builder.build().expect("build client")
}

pub async fn post_review(client: &reqwest::Client, addr: SocketAddr, body: Vec<u8>) -> reqwest::Response {
    client
        .post(mutate_url(addr))
        .headers(apiserver_headers())
        .body(body)
        .send()
        .await
        .expect("request completes")
}

/// Fixtures the standalone webhook must inject (annotation opt-in); the others must be
/// allowed unchanged.
pub fn expects_injection(fixture: &str) -> bool {
    matches!(
        fixture,
        "seed-initializer-annotation.json"
            | "dry-run.json"
            | "replicaset-generatename-init-volumes.json"
            | "network-annotation.json"
    )
}

/// Checks one answered review against the request it answers: uid echoed, allowed, and
/// — when injection is expected — a JSON Patch that applies to the Pod and yields a Pod
/// with the sidecar, its volume and the status annotation, everything else kept.
pub fn check_review(fixture: &str, request: &[u8], response: &[u8]) {
    let request: Value = serde_json::from_slice(request).unwrap();
    let review: Value = serde_json::from_slice(response).unwrap_or_else(|e| {
        panic!(
            "{fixture}: response is not JSON ({e}): {}",
            String::from_utf8_lossy(response)
        )
    });
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1", "{fixture}: {review}");
    assert_eq!(review["kind"], "AdmissionReview", "{fixture}: {review}");
    let answer = &review["response"];
    assert_eq!(
        answer["uid"], request["request"]["uid"],
        "{fixture}: uid must be echoed"
    );
    assert_eq!(answer["allowed"], true, "{fixture}: expected allowed, found {answer}");

    let original = request["request"]["object"].clone();
    let original_pod: Pod = serde_json::from_value(original.clone()).unwrap();
    if !expects_injection(fixture) {
        assert!(
            answer.get("patch").is_none(),
            "{fixture}: expected no patch, found {answer}"
        );
        return;
    }
    assert_eq!(answer["patchType"], "JSONPatch", "{fixture}: {answer}");
    let encoded = answer["patch"]
        .as_str()
        .unwrap_or_else(|| panic!("{fixture}: expected a patch, found {answer}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("patch is base64");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("patch is a JSON Patch");
    let mut object = original;
    json_patch::patch(&mut object, &patch.0).unwrap_or_else(|e| panic!("{fixture}: patch does not apply: {e}"));
    let pod: Pod = serde_json::from_value(object).unwrap_or_else(|e| panic!("{fixture}: patched Pod invalid: {e}"));

    let spec = pod.spec.as_ref().expect("spec");
    let before = original_pod.spec.as_ref().expect("spec");
    let names = |containers: &[k8s_openapi::api::core::v1::Container]| {
        containers.iter().map(|c| c.name.clone()).collect::<Vec<_>>()
    };
    let containers = names(&spec.containers);
    assert!(
        containers.contains(&"envoy".to_string()),
        "{fixture}: containers {containers:?}"
    );
    for name in names(&before.containers) {
        assert!(
            containers.contains(&name),
            "{fixture}: app container {name} lost: {containers:?}"
        );
    }
    assert_eq!(
        names(spec.init_containers.as_deref().unwrap_or_default()),
        names(before.init_containers.as_deref().unwrap_or_default()),
        "{fixture}: init containers must be kept"
    );
    let volumes = |pod: &Pod| {
        pod.spec
            .as_ref()
            .unwrap()
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.clone())
            .collect::<Vec<_>>()
    };
    let after_volumes = volumes(&pod);
    assert!(
        after_volumes.contains(&"envoy-conf".to_string()),
        "{fixture}: volumes {after_volumes:?}"
    );
    for name in volumes(&original_pod) {
        assert!(
            after_volumes.contains(&name),
            "{fixture}: volume {name} lost: {after_volumes:?}"
        );
    }
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    assert!(
        annotations.contains_key(STATUS_ANNOTATION),
        "{fixture}: annotations {annotations:?}"
    );
    for (key, value) in original_pod.metadata.annotations.iter().flatten() {
        assert_eq!(
            annotations.get(key),
            Some(value),
            "{fixture}: annotation {key} must be kept"
        );
    }
    assert_eq!(
        pod.metadata.name, original_pod.metadata.name,
        "{fixture}: name must not change"
    );
    assert_eq!(
        pod.metadata.generate_name, original_pod.metadata.generate_name,
        "{fixture}: generateName kept"
    );
}

/// Polls `check` every 50 ms until it returns `Some`, or panics with `what` after
/// [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    poll::until(what, PATIENCE, Duration::from_millis(50), async || {
        check().await.ok_or_else(|| "not yet".to_string())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A TLS connection to the webhook at `addr` (SNI [`HOST`]), trusting `ca_pem`, offering
/// `alpn` (e.g. `b"h2"`, `b"http/1.1"`): for tests that write bytes by hand.
pub async fn tls_connect(
    addr: SocketAddr,
    ca_pem: &str,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA PEM"))
        .expect("add CA");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    connector
        .connect(ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .expect("TLS handshake")
}

/// Reads until the peer closes (EOF or an error such as a reset), within [`PATIENCE`]:
/// true when it closed.
pub async fn closed_by_peer<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 4096];
    let until_closed = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(PATIENCE, until_closed).await.is_ok()
}

/// An HTTP/1.1 POST of `body` to the API server's path, as bytes.
pub fn http1_post(body: &[u8], keep_alive: bool) -> Vec<u8> {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let mut request = format!(
        "POST {} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
        apiserver_path(),
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// One HTTP/1.1 response read by hand.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// The header block, lowercased.
    pub headers: String,
    pub body: Vec<u8>,
}

/// Reads one HTTP/1.1 response framed by `Content-Length`; `None` when the connection
/// ends (or fails) before the whole response arrived.
pub async fn read_http1_response<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    pending: &mut Vec<u8>,
) -> Option<RawResponse> {
    use tokio::io::AsyncReadExt;
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&pending[..head_end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while pending.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
    }
    let body = pending[head_end..head_end + length].to_vec();
    pending.drain(..head_end + length);
    Some(RawResponse {
        status,
        headers: head,
        body,
    })
}

/// DER of the first certificate in a PEM string.
pub fn leaf_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("PEM certificate")
        .to_vec()
}

/// The status annotation of an injected Pod, parsed.
pub fn injection_status(pod: &Value) -> Value {
    let text = pod["metadata"]["annotations"][STATUS_ANNOTATION]
        .as_str()
        .unwrap_or_else(|| panic!("expected annotation {STATUS_ANNOTATION}: {pod}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{STATUS_ANNOTATION} is not JSON ({e}): {text}"))
}
