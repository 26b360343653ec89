//! End to end over TLS, in process: one client connection posting a review to the real
//! server (rustls, hyper, the admission handler) and reading the whole answer. Reported,
//! never asserted. Run with `cargo bench --bench server` (`make bench-server`).
//!
//! Each iteration is one request on a kept connection, driven from the bench thread with
//! `block_on` (a few µs of its own); the server runs on its own 2-thread runtime.

#[path = "common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{REVIEW_5K, fixture_bytes, huge_review};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use envoy_injector::admission::Admission;
use envoy_injector::inject::Standalone;
use envoy_injector::live::LiveTemplates;
use envoy_injector::metrics::Metrics;
use envoy_injector::server::{self, AppState, ConnectionTimeouts, ServerConfig};
use envoy_injector::template::TemplateSet;
use envoy_injector::tls::{self, TlsSource};
use prometheus_client::registry::Registry;

const HOST: &str = "envoy-injector.envoy-injector.svc";

fn config() -> ServerConfig {
    ServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        reuse_port: false,
        max_body_bytes: 8 * 1024 * 1024,
        max_inflight_body_bytes: 64 * 1024 * 1024,
        timeouts: ConnectionTimeouts {
            tls_handshake: Duration::from_secs(5),
            first_request: Duration::from_secs(10),
            header_read: Duration::from_secs(5),
            idle: Duration::from_secs(600),
            http2_keepalive_interval: Duration::from_secs(20),
            http2_keepalive_timeout: Duration::from_secs(10),
        },
        request_timeout: Duration::from_secs(10),
        shutdown_timeout: Duration::from_secs(5),
        max_connections: 4096,
        admin_max_connections: 128,
    }
}

fn end_to_end(c: &mut Criterion) {
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let certs = tls::generate("envoy-injector", "envoy-injector", &[], 1).expect("certificates");
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let state = AppState {
        admission: Arc::new(Admission::new(
            Arc::new(LiveTemplates::new(Some(TemplateSet::embedded()))),
            Arc::new(Standalone),
            metrics.clone(),
        )),
        validation: envoy_injector::admission::TemplateValidation::new(envoy_injector::template::KubeVersion::NEWEST),
        registry: Arc::new(registry),
        metrics,
        readiness: Arc::new(|| Ok(())),
    };
    let running = server_runtime
        .block_on(server::start(config(), TlsSource::Pem(certs.serving.clone()), state))
        .expect("server starts");
    let addr: SocketAddr = running.webhook_addr();

    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = |http2: bool| {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(certs.ca.cert_pem.as_bytes()).unwrap())
            .resolve(HOST, addr);
        if !http2 {
            builder = builder.http1_only();
        }
        builder.build().unwrap()
    };
    let url = format!("https://{HOST}:{}/mutate?timeout=10s", addr.port());
    let mut group = c.benchmark_group("end_to_end_tls");
    for (name, body) in [("5k", fixture_bytes(REVIEW_5K)), ("huge-250k", huge_review())] {
        for http2 in [false, true] {
            let client = client(http2);
            let post = || async {
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .expect("answered");
                assert_eq!(response.status(), 200);
                response.bytes().await.expect("whole answer")
            };
            // Outside the timing: the connection is up and the answer is a patch.
            let answer = client_runtime.block_on(post());
            assert!(answer.windows(9).any(|w| w == b"\"patch\":\""), "expected a patch");
            group.throughput(Throughput::Bytes(body.len() as u64));
            let protocol = if http2 { "http2" } else { "http1" };
            group.bench_function(BenchmarkId::new(protocol, name), |b| {
                b.iter(|| client_runtime.block_on(post()))
            });
        }
    }
    group.finish();
    running.shutdown();
    let _ = server_runtime.block_on(running.wait());
}

criterion_group!(benches, end_to_end);
criterion_main!(benches);
