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

/// (kind, name) of the workload that owns a Pod: its controller, or the Deployment above a
/// ReplicaSet; `None` when nothing owns it.
pub fn owned_by(pod: &ObjectMeta, replica_set_owners: &ReplicaSetOwners) -> Option<(String, String)> {
    let namespace = pod.namespace.clone().unwrap_or_default();
    let owner = controller(pod.owner_references.as_ref())?;
    let above = match owner.kind.as_str() {
        "ReplicaSet" => replica_set_owners
            .get(&(namespace, owner.name.clone()))
            .and_then(Option::as_ref),
        _ => None,
    };
    let owner = above.unwrap_or(owner);
    Some((owner.kind.clone(), owner.name.clone()))
}

/// [`owned_by`], or `Pod` and its own name when nothing owns it: a bare Pod is the
/// workload that replaces itself.
pub fn owner(pod: &ObjectMeta, replica_set_owners: &ReplicaSetOwners) -> (String, String) {
    owned_by(pod, replica_set_owners).unwrap_or_else(|| (String::from("Pod"), pod.name.clone().unwrap_or_default()))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(owner: Option<OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            name: Some("web-1".into()),
            namespace: Some("apps".into()),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_pod_is_owned_by_its_controller_or_the_deployment_above_its_replica_set() {
        let owners = ReplicaSetOwners::from([(
            ("apps".to_string(), "web-5d9f".to_string()),
            Some(controlled_by("Deployment", "web")),
        )]);
        let named = |kind: &str, name: &str| Some((kind.to_string(), name.to_string()));
        let by_rs = pod(Some(controlled_by("ReplicaSet", "web-5d9f")));
        assert_eq!(owned_by(&by_rs, &owners), named("Deployment", "web"));
        let by_lone_rs = pod(Some(controlled_by("ReplicaSet", "lone")));
        assert_eq!(owned_by(&by_lone_rs, &owners), named("ReplicaSet", "lone"));
        let by_job = pod(Some(controlled_by("Job", "batch")));
        assert_eq!(owned_by(&by_job, &owners), named("Job", "batch"));
        // Nothing owns a bare Pod; grouped, it stands for itself.
        assert_eq!(owned_by(&pod(None), &owners), None);
        assert_eq!(owner(&pod(None), &owners), ("Pod".to_string(), "web-1".to_string()));
    }
}
