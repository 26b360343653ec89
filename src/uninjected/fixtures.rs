//! Test data shared by the unit tests of `uninjected`: Pod metadata, Namespace labels and
//! the gauge's series.

use std::collections::BTreeMap as Map;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMeta;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::inject::{INJECT_ANNOTATION, NAMESPACE_LABEL, NAMESPACE_OPT_IN, STATUS_ANNOTATION};
use crate::metrics::NamespaceLabels;

pub(super) fn meta(namespace: &str, annotations: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(namespace.into()),
        annotations: Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ObjectMeta::default()
    }
}

pub(super) fn pod(n: u32, namespace: &str, annotations: &[(&str, &str)]) -> PartialObjectMeta<Pod> {
    let mut metadata = meta(namespace, annotations);
    metadata.uid = Some(format!("00000000-0000-0000-0000-{n:012x}"));
    metadata.name = Some(format!("pod-{n}"));
    PartialObjectMeta {
        types: None,
        metadata,
        _phantom: Default::default(),
    }
}

/// Namespace labels: `labelled` carry the opt-in label, `plain` none.
pub(super) fn namespaces(labelled: &[&str], plain: &[&str]) -> Map<String, Map<String, String>> {
    let opt_in = Map::from([(NAMESPACE_LABEL.to_string(), NAMESPACE_OPT_IN.to_string())]);
    labelled
        .iter()
        .map(|n| (n.to_string(), opt_in.clone()))
        .chain(plain.iter().map(|n| (n.to_string(), Map::new())))
        .collect()
}

pub(super) const IN: (&str, &str) = (INJECT_ANNOTATION, "true");
pub(super) const OUT: (&str, &str) = (INJECT_ANNOTATION, "false");
pub(super) const INJECTED: (&str, &str) = (STATUS_ANNOTATION, "{}");

/// The series of a `pods_uninjected` family, as /metrics shows them.
pub(super) fn series(family: &Family<NamespaceLabels, Gauge>) -> Map<String, i64> {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("pods_uninjected", "uninjected", family.clone());
    crate::metrics::encode(&registry)
        .lines()
        .filter_map(|line| line.strip_prefix("pods_uninjected{namespace=\""))
        .map(|rest| {
            let (name, value) = rest.split_once("\"} ").expect("a sample line");
            (name.to_string(), value.parse().expect("an integer"))
        })
        .collect()
}
