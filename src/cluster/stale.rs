//! Stale sidecars (`check --stale` lists them, `rollout` restarts them): injected Pods
//! running an older template revision than the live one, grouped by the workload that
//! owns them, each with the command that replaces them. Pure
//! over the Pods' metadata and their ReplicaSets' owners (read through the API on demand).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use serde::Serialize;

use super::workload::{ReplicaSetOwners, fix, owner};
use crate::stale::{injected, is_stale};
use crate::template::TemplateSet;

/// Injected Pods of one workload (and one template) that run an older revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StaleGroup {
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `ReplicaSet`, `Job`, ... or `Pod` for a
    /// Pod nothing owns.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub template: String,
    /// The revisions its Pods carry.
    pub revisions: Vec<String>,
    /// The live template's revision; `None` when the template no longer exists.
    pub live_revision: Option<String>,
    pub pods: Vec<String>,
    /// What replaces the Pods with freshly injected ones.
    pub fix: String,
}

impl StaleGroup {
    pub fn workload(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Groups the stale Pods among `pods` (injected Pods, as listed by the revision label) by
/// workload. `replica_set_owners` maps (namespace, ReplicaSet name) to that ReplicaSet's
/// controller, so that a Deployment's Pods are grouped under the Deployment.
pub fn group(
    pods: &[PartialObjectMeta<Pod>],
    replica_set_owners: &ReplicaSetOwners,
    live: &TemplateSet,
) -> Vec<StaleGroup> {
    // (kind, namespace, name, template) → (revisions, pods)
    type Key = (String, String, String, String);
    let mut groups: BTreeMap<Key, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for pod in pods {
        let Some((template, revision)) = injected(&pod.metadata) else {
            continue;
        };
        if !is_stale(&template, &revision, live) {
            continue;
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let (kind, name) = owner(&pod.metadata, replica_set_owners);
        let entry = groups.entry((kind, namespace, name, template)).or_default();
        if !entry.0.contains(&revision) {
            entry.0.push(revision);
        }
        entry.1.push(pod_name);
    }
    groups
        .into_iter()
        .map(|((kind, namespace, name, template), (mut revisions, mut pods))| {
            revisions.sort();
            pods.sort();
            StaleGroup {
                fix: fix(&kind, &namespace, &name, &pods),
                live_revision: live.get(&template).map(|t| t.revision.clone()),
                kind,
                namespace,
                name,
                template,
                revisions,
                pods,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::cluster::workload::controlled_by;
    use crate::inject::{REVISION_LABEL, STATUS_ANNOTATION};

    fn pod(name: &str, template: &str, revision: &str, owned_by: Option<OwnerReference>) -> PartialObjectMeta<Pod> {
        let status = format!(
            r#"{{"template":"{template}","revision":"{revision}","containers":["envoy"],"initContainers":[],"volumes":[],"imagePullSecrets":[],"nativeSidecar":false}}"#
        );
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("apps".into()),
                labels: Some(BTreeMap::from([(REVISION_LABEL.to_string(), revision.to_string())])),
                annotations: Some(BTreeMap::from([(STATUS_ANNOTATION.to_string(), status)])),
                owner_references: owned_by.map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            _phantom: Default::default(),
        }
    }

    #[test]
    fn stale_pods_are_grouped_by_workload_with_the_fix() {
        let live = TemplateSet::from_data(
            "t",
            &BTreeMap::from([(
                "config".to_string(),
                "containers:\n- name: envoy\n  image: e:2\n".to_string(),
            )]),
            crate::template::KubeVersion::NEWEST,
        )
        .unwrap();
        let current = live.get("config").unwrap().revision.clone();
        let pods = vec![
            pod(
                "web-1",
                "config",
                "aaaaaaaaaaaa",
                Some(controlled_by("ReplicaSet", "web-5d9")),
            ),
            pod(
                "web-2",
                "config",
                "bbbbbbbbbbbb",
                Some(controlled_by("ReplicaSet", "web-5d9")),
            ),
            pod(
                "web-3",
                "config",
                &current,
                Some(controlled_by("ReplicaSet", "web-7f1")),
            ),
            pod(
                "db-0",
                "config",
                "aaaaaaaaaaaa",
                Some(controlled_by("StatefulSet", "db")),
            ),
            pod("loose", "gone", "cccccccccccc", None),
            pod(
                "orphan-rs-1",
                "config",
                "aaaaaaaaaaaa",
                Some(controlled_by("ReplicaSet", "bare")),
            ),
        ];
        let owners = BTreeMap::from([
            (
                ("apps".to_string(), "web-5d9".to_string()),
                Some(controlled_by("Deployment", "web")),
            ),
            (("apps".to_string(), "bare".to_string()), None),
        ]);
        let groups = group(&pods, &owners, &live);
        let summary: Vec<(String, Vec<String>, Vec<String>, String)> = groups
            .iter()
            .map(|g| (g.workload(), g.revisions.clone(), g.pods.clone(), g.fix.clone()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "Deployment apps/web".to_string(),
                    vec!["aaaaaaaaaaaa".to_string(), "bbbbbbbbbbbb".to_string()],
                    vec!["web-1".to_string(), "web-2".to_string()],
                    "kubectl rollout restart deployment/web -n apps".to_string()
                ),
                (
                    "Pod apps/loose".to_string(),
                    vec!["cccccccccccc".to_string()],
                    vec!["loose".to_string()],
                    "delete and recreate the Pod: kubectl get pod loose -n apps -o yaml > pod.yaml && kubectl replace --force -f pod.yaml"
                        .to_string()
                ),
                (
                    "ReplicaSet apps/bare".to_string(),
                    vec!["aaaaaaaaaaaa".to_string()],
                    vec!["orphan-rs-1".to_string()],
                    "kubectl delete pod -n apps orphan-rs-1 (ReplicaSet bare recreates them)".to_string()
                ),
                (
                    "StatefulSet apps/db".to_string(),
                    vec!["aaaaaaaaaaaa".to_string()],
                    vec!["db-0".to_string()],
                    "kubectl rollout restart statefulset/db -n apps".to_string()
                ),
            ]
        );
        assert_eq!(groups[0].live_revision.as_deref(), Some(current.as_str()));
        assert_eq!(groups[1].live_revision, None, "template `gone` no longer exists");
    }
}
