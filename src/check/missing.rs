//! `check --missing`: Pods that are opted in now and carry no sidecar, grouped by the
//! workload that owns them, each group with the command that replaces its Pods and why they
//! were most likely missed. Pure: the Pods (picked by `uninjected::uninjected`, the rule the
//! gauge counts with), each one's decision (`decision::explain`, which also reads its spec:
//! a Pod that holds the template's containers without the `status` annotation was injected
//! by hand and is not listed) and the evidence come in as data.
//!
//! The evidence is what the cluster still shows of the past: the Pod's `creationTimestamp`
//! (seconds), the MutatingWebhookConfiguration's `creationTimestamp`, and the time the
//! Namespace's opt-in label was last written, from the Namespace's `managedFields` (the
//! time of the last change by the manager that owns the label: `kubectl label` owns that
//! label alone, so it is when the label was set). An outage under `failurePolicy: Ignore`
//! leaves no trace on the Pod: it is named as the likely cause when nothing else explains it.
//! When a compiled admission policy injects such a Pod now (`decision`'s path), the
//! webhook's evidence does not apply: the policy's and its binding's `creationTimestamp`
//! do (a policy with `failurePolicy: Fail` does not let an opted-in Pod through
//! uninjected while it is bound).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;
use serde_json::Value;

use super::report::{Call, Missed, MissingGroup, PodReport, Reason, Rule, Verdict};
use crate::cluster::workload::{ReplicaSetOwners, fix, owner};
use crate::inject::{NAMESPACE_LABEL, NAMESPACE_OPT_IN, OptIn};
use crate::policies::Path;

/// When a Namespace's opt-in label was last written, and by which field manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelWritten {
    pub at: Time,
    pub manager: String,
}

/// From a Namespace's `managedFields`: the latest entry that owns the opt-in label.
pub fn label_written(namespace: &ObjectMeta) -> Option<LabelWritten> {
    let key = format!("f:{NAMESPACE_LABEL}");
    namespace
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry.fields_v1.as_ref().is_some_and(|fields| {
                fields
                    .0
                    .pointer("/f:metadata/f:labels")
                    .and_then(Value::as_object)
                    .is_some_and(|labels| labels.contains_key(&key))
            })
        })
        .filter_map(|entry| {
            Some(LabelWritten {
                at: entry.time.clone()?,
                manager: entry.manager.clone().unwrap_or_default(),
            })
        })
        .max_by_key(|written| written.at.0)
}

/// What the cluster shows of the past.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// The MutatingWebhookConfiguration's name, for messages.
    pub webhook_config: &'a str,
    /// Its `creationTimestamp`; `None` when it does not exist (or has none).
    pub webhook_created: Option<&'a Time>,
    /// When each Namespace's opt-in label was last written.
    pub labels_written: &'a BTreeMap<String, LabelWritten>,
}

/// A Pod the rule picked, with its decision now.
#[derive(Debug, Clone)]
pub struct Escaped {
    pub meta: ObjectMeta,
    pub opt_in: OptIn,
    pub decision: PodReport,
}

/// Why one Pod was most likely missed: the first that holds of the reasons, in the order
/// of [`Reason`]. `None`: it holds the template's containers (injected by hand).
pub fn why(pod: &Escaped, evidence: &Evidence<'_>) -> Option<(Reason, String)> {
    let decision = &pod.decision;
    let config = evidence.webhook_config;
    if decision.rule == Rule::AlreadyInjected {
        return None;
    }
    if decision.rule == Rule::WebhookAbsent {
        return Some((
            Reason::NoWebhookConfiguration,
            format!(
                "MutatingWebhookConfiguration {config} does not exist: the API server sends no Pod to the injector (restarting helps only once it is registered again)"
            ),
        ));
    }
    if decision.verdict == Verdict::Deny {
        return Some((
            Reason::WouldBeDenied,
            format!(
                "the injector would refuse it now (fix that before restarting): {}",
                decision.reason
            ),
        ));
    }
    let created = pod.meta.creation_timestamp.as_ref().map(|t| t.0);
    let namespace = pod.meta.namespace.as_deref().unwrap_or_default();
    if pod.opt_in == OptIn::NamespaceLabel
        && let Some(written) = evidence.labels_written.get(namespace)
        && created.is_some_and(|created| created < written.at.0)
    {
        return Some((
            Reason::BeforeNamespaceLabel,
            format!(
                "created before label {NAMESPACE_LABEL}={NAMESPACE_OPT_IN} was set on namespace {namespace} ({} by {}, per its managedFields)",
                written.at.0, written.manager
            ),
        ));
    }
    if let Some(path) = decision.path.as_ref().filter(|p| p.via == Path::Policy) {
        let policy = format!(
            "{} {} (binding {})",
            path.kind.unwrap_or_default(),
            path.policy.as_deref().unwrap_or_default(),
            path.binding.as_deref().unwrap_or_default()
        );
        return Some(match &path.since {
            Some((which, since)) if created.is_some_and(|created| created < since.0) => (
                Reason::BeforePolicies,
                format!(
                    "created before {which} ({}): {policy} injects it now, but did not exist yet (in policy mode the Lease holder applies them)",
                    since.0
                ),
            ),
            _ => (
                Reason::PolicyUnknown,
                format!(
                    "cannot be told: {policy} predates the Pod and injects it now; it may have been opted in (or its namespace labelled) after it was created, or the policy changed since"
                ),
            ),
        });
    }
    if let Some(registered) = evidence.webhook_created
        && created.is_some_and(|created| created < registered.0)
    {
        return Some((
            Reason::BeforeWebhookConfiguration,
            format!(
                "created before MutatingWebhookConfiguration {config} ({}): the injector was not installed yet, or was being reinstalled",
                registered.0
            ),
        ));
    }
    if matches!(decision.rule, Rule::WebhookNotCalled | Rule::WebhookError) {
        return Some((Reason::NotSentToWebhook, decision.reason.clone()));
    }
    let called = decision.webhooks.iter().filter(|w| w.call == Call::Called);
    if let Some(ignoring) = called.clone().find(|w| !w.fail_closed) {
        return Some((
            Reason::FailurePolicyIgnore,
            format!(
                "webhook {} has failurePolicy Ignore: the injector was most likely unreachable or too slow when the Pod was created, and the API server admitted it unchanged",
                ignoring.name
            ),
        ));
    }
    Some((
        Reason::Unknown,
        String::from(
            "cannot be told: the configuration predates the Pod, sends it to the injector and fails closed; it may have been opted in after it was created, or the configuration changed since",
        ),
    ))
}

/// Groups the escaped Pods by workload with the reasons and the fix. Also returns the
/// Pods left out because they hold the template's containers (injected by hand). A Pod on
/// the node's network its template does not allow is left out too: left alone by rule,
/// it was not missed.
pub fn group(
    escaped: &[Escaped],
    replica_set_owners: &ReplicaSetOwners,
    evidence: &Evidence<'_>,
) -> (Vec<MissingGroup>, Vec<String>) {
    // (kind, namespace, name) → (Pods, Pods per (reason, detail))
    type Key = (String, String, String);
    type Reasons = BTreeMap<(Reason, String), usize>;
    let mut groups: BTreeMap<Key, (Vec<String>, Reasons)> = BTreeMap::new();
    let mut by_hand = Vec::new();
    for pod in escaped.iter().filter(|pod| pod.decision.rule != Rule::HostNetwork) {
        let namespace = pod.meta.namespace.clone().unwrap_or_default();
        let pod_name = pod.meta.name.clone().unwrap_or_default();
        let Some(why) = why(pod, evidence) else {
            by_hand.push(format!("{namespace}/{pod_name}"));
            continue;
        };
        let (kind, name) = owner(&pod.meta, replica_set_owners);
        let entry = groups.entry((kind, namespace, name)).or_default();
        entry.0.push(pod_name);
        *entry.1.entry(why).or_default() += 1;
    }
    let groups = groups
        .into_iter()
        .map(|((kind, namespace, name), (mut pods, reasons))| {
            pods.sort();
            let mut reasons: Vec<Missed> = reasons
                .into_iter()
                .map(|((reason, detail), pods)| Missed { reason, detail, pods })
                .collect();
            reasons.sort_by(|a, b| b.pods.cmp(&a.pods).then(a.reason.cmp(&b.reason)));
            MissingGroup {
                fix: fix(&kind, &namespace, &name, &pods),
                kind,
                namespace,
                name,
                pods,
                reasons,
            }
        })
        .collect();
    by_hand.sort();
    (groups, by_hand)
}

#[cfg(test)]
mod tests;
