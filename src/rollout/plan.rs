//! Which workloads a rollout restarts, in which order, and which it leaves to the user
//! with what to do. Pure: the stale Pods grouped by workload (`cluster::stale`, one home for
//! what is stale) and the workload objects read from the cluster come in as data.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde::Serialize;

use crate::cluster::stale::StaleGroup;

/// A workload kind whose Pod template a restart changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Kind {
    Deployment,
    StatefulSet,
    DaemonSet,
}

impl Kind {
    /// The kinds a rollout restarts, in the order it takes them within a namespace:
    /// stateless first.
    pub const ALL: [Kind; 3] = [Kind::Deployment, Kind::StatefulSet, Kind::DaemonSet];

    pub fn of(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == kind)
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::DaemonSet => "DaemonSet",
        }
    }

    /// As kubectl names the resource: `deployment`, `statefulset`, `daemonset`.
    pub fn resource(self) -> String {
        self.name().to_ascii_lowercase()
    }
}

/// A workload as read from the cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Deployment(Box<Deployment>),
    StatefulSet(Box<StatefulSet>),
    DaemonSet(Box<DaemonSet>),
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Deployment(_) => Kind::Deployment,
            Object::StatefulSet(_) => Kind::StatefulSet,
            Object::DaemonSet(_) => Kind::DaemonSet,
        }
    }

    pub fn metadata(&self) -> &kube::api::ObjectMeta {
        match self {
            Object::Deployment(d) => &d.metadata,
            Object::StatefulSet(s) => &s.metadata,
            Object::DaemonSet(d) => &d.metadata,
        }
    }

    /// Its Pod template: what the Pods a restart creates are made from.
    pub fn pod_template(&self) -> Option<&PodTemplateSpec> {
        match self {
            Object::Deployment(d) => d.spec.as_ref().map(|s| &s.template),
            Object::StatefulSet(s) => s.spec.as_ref().map(|s| &s.template),
            Object::DaemonSet(d) => d.spec.as_ref().map(|s| &s.template),
        }
    }

    /// Why a restart would not roll its Pods, and what to do instead; `None` when it rolls.
    pub fn will_not_roll(&self) -> Option<(String, String)> {
        let meta = self.metadata();
        let (namespace, name) = (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        );
        let resource = format!("{}/{name} -n {namespace}", self.kind().resource());
        match self {
            Object::Deployment(d) if d.spec.as_ref().and_then(|s| s.paused) == Some(true) => Some((
                String::from("it is paused: a restart would wait until it is resumed"),
                format!("kubectl rollout resume {resource}, then run rollout again"),
            )),
            Object::StatefulSet(s) => {
                let strategy = s.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
                let on_delete = strategy.and_then(|s| s.type_.as_deref()) == Some("OnDelete");
                let partition = strategy
                    .and_then(|s| s.rolling_update.as_ref())
                    .and_then(|r| r.partition)
                    .unwrap_or(0);
                if on_delete {
                    Some(on_delete_reason(&namespace))
                } else if partition > 0 {
                    Some((
                        format!(
                            "its rollingUpdate.partition is {partition}: only Pods with an ordinal of {partition} or more would be replaced"
                        ),
                        format!(
                            "lower the partition to 0 when you mean to (kubectl patch {resource} -p '{{\"spec\":{{\"updateStrategy\":{{\"rollingUpdate\":{{\"partition\":0}}}}}}}}'), then run rollout again"
                        ),
                    ))
                } else {
                    None
                }
            }
            Object::DaemonSet(d) => {
                let strategy = d.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
                (strategy.and_then(|s| s.type_.as_deref()) == Some("OnDelete")).then(|| on_delete_reason(&namespace))
            }
            Object::Deployment(_) => None,
        }
    }
}

fn on_delete_reason(namespace: &str) -> (String, String) {
    (
        String::from("its updateStrategy is OnDelete: its controller replaces a Pod only when the Pod is deleted"),
        format!(
            "delete its stale Pods one at a time (kubectl delete pod -n {namespace} POD), each once the one before is Ready again"
        ),
    )
}

/// `Kind namespace/name`, for messages.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct WorkloadRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// The stale Pods of one workload, on one template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StalePods {
    pub template: String,
    pub revisions: Vec<String>,
    /// `None` when the template no longer exists.
    pub live_revision: Option<String>,
    pub pods: Vec<String>,
}

impl From<&StaleGroup> for StalePods {
    fn from(group: &StaleGroup) -> StalePods {
        StalePods {
            template: group.template.clone(),
            revisions: group.revisions.clone(),
            live_revision: group.live_revision.clone(),
            pods: group.pods.clone(),
        }
    }
}

/// A workload to restart.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub workload: WorkloadRef,
    pub kind: Kind,
    pub stale: Vec<StalePods>,
    pub object: Object,
}

/// A workload with stale Pods that rollout does not restart, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Left {
    #[serde(flatten)]
    pub workload: WorkloadRef,
    pub stale: Vec<StalePods>,
    pub reason: String,
    pub fix: String,
}

/// What a rollout does: the workloads to restart, in order, and those left.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub restart: Vec<Target>,
    pub left: Vec<Left>,
}

/// The workloads read for a plan, by (kind, namespace, name); `None`: not found (deleted
/// since its Pods were listed). A workload left out by `--selector` is not in it.
pub type Objects = BTreeMap<(Kind, String, String), Option<Object>>;

/// The plan for `groups` (stale Pods by workload): the Deployments, StatefulSets and
/// DaemonSets found in `objects` that roll, by namespace, then Deployments, StatefulSets,
/// DaemonSets, then name; every other owner left with its fix. A workload not in
/// `objects` is not among those `--selector` picks and is skipped; the other owners are
/// listed only when `selects_all` (no `--selector`: a label of the workload is not known
/// for them).
pub fn plan(groups: &[StaleGroup], objects: &Objects, selects_all: bool) -> Plan {
    let mut restart: BTreeMap<(String, Kind, String), Target> = BTreeMap::new();
    let mut left: BTreeMap<WorkloadRef, Left> = BTreeMap::new();
    for group in groups {
        let workload = WorkloadRef {
            kind: group.kind.clone(),
            namespace: group.namespace.clone(),
            name: group.name.clone(),
        };
        let stale = StalePods::from(group);
        let leave = |reason: String, fix: String, left: &mut BTreeMap<WorkloadRef, Left>| {
            left.entry(workload.clone())
                .or_insert_with(|| Left {
                    workload: workload.clone(),
                    stale: Vec::new(),
                    reason,
                    fix,
                })
                .stale
                .push(stale.clone());
        };
        let Some(kind) = Kind::of(&group.kind) else {
            if selects_all {
                let reason = other_owner(&group.kind);
                leave(reason, group.fix.clone(), &mut left);
            }
            continue;
        };
        let key = (kind, group.namespace.clone(), group.name.clone());
        let object = match objects.get(&key) {
            None => continue,
            Some(None) => {
                let reason = String::from("not found: deleted since its Pods were listed");
                leave(reason, String::from("nothing: its Pods go with it"), &mut left);
                continue;
            }
            Some(Some(object)) => object,
        };
        if let Some((reason, fix)) = object.will_not_roll() {
            leave(reason, fix, &mut left);
            continue;
        }
        restart
            .entry((group.namespace.clone(), kind, group.name.clone()))
            .or_insert_with(|| Target {
                workload: workload.clone(),
                kind,
                stale: Vec::new(),
                object: object.clone(),
            })
            .stale
            .push(stale);
    }
    Plan {
        restart: restart.into_values().collect(),
        left: left.into_values().collect(),
    }
}

/// Why the Pods of a workload of `kind` (not one rollout restarts) are left alone.
fn other_owner(kind: &str) -> String {
    match kind {
        "Pod" => String::from("a bare Pod: nothing would recreate it, so rollout does not delete it"),
        "Job" | "CronJob" => {
            String::from("a Job's Pods run to completion: a restart would cut a run short, so rollout leaves them")
        }
        "ReplicaSet" => String::from("a ReplicaSet without a Deployment: it has no rolling update to restart"),
        other => format!("owned by {other}, which rollout does not restart"),
    }
}

#[cfg(test)]
mod tests;
