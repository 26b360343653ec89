//! The workload that owns a Pod and what replaces its Pods: one home for `check --stale`
//! and `check --missing`, and `rollout`. Pure; the ReplicaSets' owners are read by `fetch`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;

/// The controller of each ReplicaSet that owns a Pod, by (namespace, ReplicaSet name):
/// a Deployment's Pods are grouped under the Deployment.
pub type ReplicaSetOwners = BTreeMap<(String, String), Option<OwnerReference>>;

/// The controller among `owners`, if any.
pub fn controller(owners: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    owners?.iter().find(|o| o.controller == Some(true))
}

/// (kind, name) of the workload that owns a Pod: its controller, the Deployment above a
/// ReplicaSet, or `Pod` and its own name when nothing owns it.
pub fn owner(pod: &ObjectMeta, replica_set_owners: &ReplicaSetOwners) -> (String, String) {
    let namespace = pod.namespace.clone().unwrap_or_default();
    match controller(pod.owner_references.as_ref()) {
        None => (String::from("Pod"), pod.name.clone().unwrap_or_default()),
        Some(owner) if owner.kind == "ReplicaSet" => match replica_set_owners.get(&(namespace, owner.name.clone())) {
            Some(Some(deployment)) => (deployment.kind.clone(), deployment.name.clone()),
            _ => (owner.kind.clone(), owner.name.clone()),
        },
        Some(owner) => (owner.kind.clone(), owner.name.clone()),
    }
}

/// The command that restarts (or the step that replaces) a workload's Pods, so that the
/// injector sees them created anew.
pub fn fix(kind: &str, namespace: &str, name: &str, pods: &[String]) -> String {
    match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" => {
            format!(
                "kubectl rollout restart {}/{name} -n {namespace}",
                kind.to_ascii_lowercase()
            )
        }
        "Pod" => format!(
            "delete and recreate the Pod: kubectl get pod {name} -n {namespace} -o yaml > pod.yaml && kubectl replace --force -f pod.yaml"
        ),
        "Job" | "CronJob" => {
            format!("its Pods run as they are until they finish; the next run of {kind} {name} is injected afresh")
        }
        _ => format!(
            "kubectl delete pod -n {namespace} {} ({kind} {name} recreates them)",
            pods.join(" ")
        ),
    }
}

/// A controller reference of `kind` `name`, for tests.
#[cfg(test)]
pub(crate) fn controlled_by(kind: &str, name: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}
