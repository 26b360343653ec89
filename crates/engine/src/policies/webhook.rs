//! The `matchConditions` of the shipped MutatingWebhookConfiguration's entries: which Pods
//! the API server sends the webhook. They are written of the same pieces as the compiled
//! policies' own match conditions ([`super::variables`]), so the two cannot say different
//! things. The committed copies (`manifests/webhook.yaml`, the chart's
//! `templates/_match-conditions.tpl`) are generated from [`entries`] by `make generate`;
//! `tests/match_conditions.rs` fails when one is stale.
//!
//! A Pod is sent only when the webhook has work to do: it opted in and is not injected
//! yet, or a compiled policy injected it and it names a Network it has not joined, which
//! only the webhook can add (`inject::decide`'s join); and a Pod on the node's network only
//! when it names a template by annotation, the one way it can be injected
//! (`inject::decide::host_network`). Which templates allow it is the ConfigMap's, edited
//! after these entries are installed: any named template is sent, and `decide` decides.

use k8s_openapi::api::admissionregistration::v1::MatchCondition;

use super::cel;
use super::variables::{
    host_network_allowed, not_injected, not_opted_out_by_annotation, not_opted_out_by_label, opted_in_by_annotation,
};
use crate::inject::NETWORK_ANNOTATION;
use crate::inject::join::NETWORK_LABEL;

/// Pods in namespaces labelled to opt in.
pub const NAMESPACE_ENTRY: &str = "namespace.sidecar.samplecrd.k8s.io";
/// Pods elsewhere labelled to opt in (selected by the objectSelector).
pub const LABEL_ENTRY: &str = "label.sidecar.samplecrd.k8s.io";
/// Pods elsewhere that opt in by annotation: only with `serve --annotation-opt-in`.
pub const POD_ENTRY: &str = "pod.sidecar.samplecrd.k8s.io";

/// One webhook entry's conditions, by the entry's name.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub name: &'static str,
    /// One condition: the API server evaluates every condition of an entry, so one
    /// expression that stops at its first false part costs least.
    pub conditions: Vec<MatchCondition>,
}

/// Every entry of the shipped configuration, in its order.
pub fn entries() -> [Entry; 3] {
    // The selectors of the first two entries select only Pods that opted in.
    let selected = || {
        vec![MatchCondition {
            name: String::from("not-opted-out-and-work-to-do"),
            expression: selected(),
        }]
    };
    [
        Entry {
            name: NAMESPACE_ENTRY,
            conditions: selected(),
        },
        Entry {
            name: LABEL_ENTRY,
            conditions: selected(),
        },
        Entry {
            name: POD_ENTRY,
            conditions: vec![MatchCondition {
                name: String::from("opted-in-by-annotation-and-work-to-do"),
                expression: annotated(),
            }],
        },
    ]
}

/// Not opted out, with work to do: for a Pod its selectors picked.
fn selected() -> String {
    format!(
        "(!has(object.metadata.annotations) || (\n  {} &&\n  {})) &&\n{} &&\n{}",
        work_to_do(),
        not_opted_out_by_annotation(),
        not_opted_out_by_label(),
        host_network_allowed(None)
    )
}

/// Opted in by annotation, not opted out, with work to do: what every Pod of the
/// namespaces the entry selects pays, so it reads the opt-in first.
fn annotated() -> String {
    format!(
        "has(object.metadata.annotations) &&\n{} &&\n{} &&\n{} &&\n{} &&\n{}",
        opted_in_by_annotation(),
        work_to_do(),
        not_opted_out_by_annotation(),
        not_opted_out_by_label(),
        host_network_allowed(None)
    )
}

/// Not injected yet, or injected and naming a Network it has not joined: on a Pod with
/// annotations.
fn work_to_do() -> String {
    format!("({} ||\n  {})", not_injected(), joins_network())
}

/// Names a Network (its annotation, trimmed, not blank) whose member label it does not
/// carry yet, as `inject::join::{network_name, joined}` read them.
fn joins_network() -> String {
    let network = cel::string(NETWORK_ANNOTATION);
    let label = cel::string(NETWORK_LABEL);
    let name = format!("object.metadata.annotations[{network}].trim()");
    format!(
        "({network} in object.metadata.annotations && {name} != \"\" && !(has(object.metadata.labels) && {label} in object.metadata.labels && object.metadata.labels[{label}] == {name}))"
    )
}
