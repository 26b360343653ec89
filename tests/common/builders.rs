//! Scenario builders shared by the test files: Networks, member Pods, Namespaces and
//! AdmissionReviews built from the captured fixtures, so a scenario reads as what differs.
#![allow(dead_code)]

use std::collections::BTreeMap;

use envoy_injector::inject::join::NETWORK_LABEL;
use envoy_injector::network::crd::{FINALIZER, Network, NetworkCondition, NetworkSpec, NetworkStatus, READY};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMeta;
use serde_json::{Value, json};

/// Seconds since the epoch of [`NetworkBuilder::created`]'s zero: an arbitrary fixed day.
const EPOCH: i64 = 1_700_000_000;

/// A Network as the API server would store it: namespace `default`, the seed's
/// 192.168.0.0/16 via 192.168.0.1, generation 1, created at second 0, no status.
pub struct NetworkBuilder(Network);

impl NetworkBuilder {
    pub fn new(name: &str) -> NetworkBuilder {
        let mut network = Network::new(
            name,
            NetworkSpec {
                cidr: "192.168.0.0/16".into(),
                gateway: "192.168.0.1".into(),
            },
        );
        network.metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            generation: Some(1),
            resource_version: Some("1".into()),
            creation_timestamp: Some(at(0)),
            ..ObjectMeta::default()
        };
        NetworkBuilder(network)
    }

    pub fn namespace(mut self, namespace: &str) -> Self {
        self.0.metadata.namespace = Some(namespace.into());
        self
    }

    pub fn cidr(mut self, cidr: &str, gateway: &str) -> Self {
        self.0.spec = NetworkSpec {
            cidr: cidr.into(),
            gateway: gateway.into(),
        };
        self
    }

    /// Created `second` seconds after the builders' fixed day.
    pub fn created(mut self, second: i64) -> Self {
        self.0.metadata.creation_timestamp = Some(at(second));
        self
    }

    pub fn generation(mut self, generation: i64) -> Self {
        self.0.metadata.generation = Some(generation);
        self
    }

    pub fn resource_version(mut self, version: &str) -> Self {
        self.0.metadata.resource_version = Some(version.into());
        self
    }

    /// Carries the controller's finalizer.
    pub fn finalized(mut self) -> Self {
        self.0.metadata.finalizers = Some(vec![FINALIZER.into()]);
        self
    }

    /// A status whose Ready condition says `ready` for generation `observed`.
    pub fn ready(mut self, ready: bool, reason: &str, message: &str, observed: i64) -> Self {
        self.0.status = Some(NetworkStatus {
            conditions: vec![NetworkCondition {
                type_: READY.into(),
                status: if ready { "True" } else { "False" }.into(),
                reason: reason.into(),
                message: message.into(),
                last_transition_time: "2026-11-21T00:00:00Z".into(),
                observed_generation: Some(observed),
            }],
            observed_generation: Some(observed),
            attached_pods: 0,
            backend_ref: None,
        });
        self
    }

    pub fn build(self) -> Network {
        self.0
    }
}

/// A timestamp `second` seconds after the builders' fixed day.
pub fn at(second: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(EPOCH + second).expect("a valid timestamp"))
}

/// The metadata of a Pod that joined `network`, as the member-Pod watch stores it.
pub fn member_pod(namespace: &str, name: &str, network: &str) -> PartialObjectMeta<Pod> {
    PartialObjectMeta {
        types: None,
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some([(NETWORK_LABEL.to_string(), network.to_string())].into()),
            ..ObjectMeta::default()
        },
        _phantom: std::marker::PhantomData,
    }
}

/// Namespace metadata, with the namespace-wide opt-in label when `opted_in`.
pub fn namespace(name: &str, opted_in: bool) -> PartialObjectMeta<Namespace> {
    let labels =
        opted_in.then(|| BTreeMap::from([("sidecar.samplecrd.k8s.io/inject".to_string(), "enabled".to_string())]));
    PartialObjectMeta {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// An AdmissionReview captured from a real kube-apiserver v1.36, edited where a scenario
/// differs from it.
pub struct ReviewBuilder(Value);

impl ReviewBuilder {
    /// `name` is a file of `tests/fixtures/admission/`.
    pub fn fixture(name: &str) -> ReviewBuilder {
        let path = format!("{}/tests/fixtures/admission/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        ReviewBuilder(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}")))
    }

    /// Replaces the Pod's annotations.
    pub fn annotations(mut self, annotations: &[(&str, &str)]) -> Self {
        let map: serde_json::Map<String, Value> = annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        self.0["request"]["object"]["metadata"]["annotations"] = Value::Object(map);
        self
    }

    /// Sets `request.kind` (the resource kind the API server says it sends).
    pub fn kind(mut self, group: &str, version: &str, kind: &str) -> Self {
        self.0["request"]["kind"] = json!({"group": group, "version": version, "kind": kind});
        self
    }

    pub fn build(self) -> Value {
        self.0
    }
}
