use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Mutex;

use kube::Client;
use kube::core::Status;
use kube::runtime::reflector;
use prometheus_client::registry::Registry;

use super::*;
use crate::controller::Indexes;
use crate::events::Publisher;
use crate::metrics::{Metrics, encode};
use crate::network::backend::{Backend, MultusBackend, NoBackend};
use crate::network::crd::NetworkSpec;

fn api_error(code: u16) -> kube::Error {
    kube::Error::Api(Box::new(Status {
        code,
        ..Status::failure("etcdserver: request timed out", "InternalError")
    }))
}

#[test]
fn every_error_has_its_own_fixed_reason() {
    let reference = || "default/net".to_string();
    let failed = || BackendError::Failed {
        action: "reading",
        reference: reference(),
        message: "500".into(),
    };
    let cases = [
        (Error::NoNamespace { name: "net".into() }, "no_namespace"),
        (
            Error::PatchStatus {
                reference: reference(),
                source: api_error(500),
            },
            "status",
        ),
        (
            Error::BackendUnavailable {
                backend: "multus",
                reference: reference(),
                message: "no CRD".into(),
            },
            "backend_unavailable",
        ),
        (
            Error::BackendConflict {
                backend: "multus",
                reference: reference(),
                message: "not ours".into(),
            },
            "backend_conflict",
        ),
        (
            Error::Backend {
                backend: "multus",
                reference: reference(),
                source: failed(),
            },
            "backend",
        ),
        (
            Error::Finalizer {
                action: "adding",
                reference: reference(),
                source: api_error(500),
            },
            "finalizer",
        ),
        (
            Error::ListPods {
                reference: reference(),
                source: api_error(500),
            },
            "pods",
        ),
    ];
    for (error, reason) in &cases {
        assert_eq!(error.reason().as_str(), *reason, "{error}");
    }
    let reasons: BTreeSet<&str> = cases.iter().map(|(error, _)| error.reason().as_str()).collect();
    let all: BTreeSet<&str> = ReconcileErrorReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        (reasons.len(), &reasons),
        (cases.len(), &all),
        "one reason per variant, each in the fixed set"
    );
    for reason in all {
        assert!(
            !reason.is_empty() && reason.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{reason:?} is a snake_case word"
        );
    }
}

/// An API server that answers every request 500 `InternalError`, and the requests it got
/// ("METHOD path").
fn failing_api() -> (Client, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        log.lock()
            .unwrap()
            .push(format!("{} {}", request.method(), request.uri().path()));
        let status = Status {
            code: 500,
            ..Status::failure("etcdserver: request timed out", "InternalError")
        };
        let body = serde_json::to_vec(&status).expect("a Status serialises");
        let response = http::Response::builder()
            .status(500)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(body))
            .expect("a response");
        async move { Ok::<_, Infallible>(response) }
    });
    (Client::new(service, "default"), seen)
}

/// A Network to reconcile, its backend, the reason its failure counts under, and the
/// request that failed (none: it fails before any).
type Case = (Network, Arc<dyn Backend>, &'static str, Option<String>);

fn network(namespace: Option<&str>, finalized: bool) -> Network {
    let mut network = Network::new(
        "net",
        NetworkSpec {
            cidr: "10.1.0.0/16".into(),
            gateway: "10.1.0.1".into(),
        },
    );
    network.metadata.namespace = namespace.map(str::to_string);
    network.metadata.generation = Some(1);
    network.metadata.uid = Some("00000000-0000-0000-0000-000000000001".into());
    if finalized {
        network.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    }
    network
}

/// A failing API call in each step of a reconcile counts under its step's reason, next
/// to `reconciles_total{result="error"}`, as `/metrics` shows it.
#[tokio::test]
async fn an_api_failure_during_reconcile_is_counted_by_reason() {
    let (client, seen) = failing_api();
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let context = |backend: Arc<dyn Backend>| {
        let (networks, _writer) = reflector::store::<Network>();
        Arc::new(Context::new(
            client.clone(),
            backend,
            Arc::new(Publisher::new(client.clone(), "reconcile-test")),
            networks,
            Indexes::default(),
            metrics.clone(),
        ))
    };
    let series = |reason: &str| format!("envoy_injector_reconcile_errors_total{{reason=\"{reason}\"}} ");
    let text = encode(&registry);
    for reason in ReconcileErrorReason::ALL {
        assert!(text.contains(&format!("{}0", series(reason.as_str()))), "{text}");
    }

    let networks = "/apis/samplecrd.k8s.io/v1/namespaces/default/networks/net";
    let mut deleting = network(Some("default"), true);
    deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    let cases: [Case; 5] = [
        (
            network(Some("default"), false),
            Arc::new(NoBackend),
            "finalizer",
            Some(format!("PATCH {networks}")),
        ),
        (
            network(Some("default"), true),
            Arc::new(NoBackend),
            "status",
            Some(format!("PATCH {networks}/status")),
        ),
        (
            network(Some("default"), true),
            Arc::new(MultusBackend::new(client.clone())),
            "backend",
            Some("GET /apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/net".into()),
        ),
        (network(None, true), Arc::new(NoBackend), "no_namespace", None),
        (
            deleting,
            Arc::new(NoBackend),
            "pods",
            Some("GET /api/v1/namespaces/default/pods".into()),
        ),
    ];
    for (failures, (network, backend, reason, request)) in cases.into_iter().enumerate() {
        seen.lock().unwrap().clear();
        let error = reconcile(Arc::new(network), context(backend))
            .await
            .expect_err("every API call fails");
        assert_eq!(error.reason().as_str(), reason, "{error}");
        assert_eq!(
            seen.lock().unwrap().last().cloned(),
            request,
            "{reason}: the failing request"
        );
        let text = encode(&registry);
        assert!(text.contains(&format!("{}1", series(reason))), "{reason}: {text}");
        assert!(
            text.contains(&format!(
                "envoy_injector_reconciles_total{{result=\"error\"}} {}",
                failures + 1
            )),
            "{text}"
        );
    }
}
