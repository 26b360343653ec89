//! The webhook server started in the test's own process, on ephemeral ports.

use std::sync::Arc;
use std::time::Duration;

use envoy_injector::admission::Admission;
use envoy_injector::inject::Standalone;
use envoy_injector::live::LiveTemplates;
use envoy_injector::metrics::{self, Metrics};
use envoy_injector::server::{self, AppState, ConnectionTimeouts, Readiness, RunningServer, ServerConfig};
use envoy_injector::template::TemplateSet;
use envoy_injector::tls::{ServiceCerts, TlsSource};
use prometheus_client::registry::Registry;

use super::service_certs;

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
        validation: envoy_injector::admission::TemplateValidation::new(envoy_injector::template::KubeVersion::NEWEST),
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
