//! Shared helpers for the integration tests: here, the Service's names and certificates and
//! the test's patience; `in_process.rs`, the server started in the test's process;
//! `clients.rs`, clients that dial the Service name (reqwest, raw TLS, HTTP/1.1 by hand);
//! `reviews.rs`, the captured reviews and the check of an answer; `standalone.rs`, the real
//! binary as `serve --standalone`; `builders.rs`, objects for the controller and admission
//! tests. The pieces every binary shares (processes, polling, metrics, CRDs, kubectl,
//! compiled policies, local webhooks) are small files gathered by `kit.rs`, which
//! `tests/e2e`, `tests/pods`, `tests/manifests`, `examples/bench_scale.rs` and
//! `examples/bench_admission.rs` include with `#[path]` (so they stand alone: no
//! `env!("CARGO_BIN_EXE_...")`, which an example lacks).
#![allow(dead_code)]

pub mod builders;
mod clients;
mod in_process;
mod kit;
mod reviews;
pub mod standalone;

// Each test binary uses some of them.
#[allow(unused_imports)]
pub use clients::*;
#[allow(unused_imports)]
pub use in_process::*;
#[allow(unused_imports)]
pub use reviews::*;

#[allow(unused_imports)]
pub use kit::metrics::{Samples, metric_value};
pub use kit::*;

use std::time::Duration;

use envoy_injector::tls::{self, ServiceCerts};

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
