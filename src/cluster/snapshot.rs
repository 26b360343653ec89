//! What `check`'s decision reads of the cluster, as listed: the Pods to explain
//! ([`Subject`]) and the Namespace labels and Networks they name ([`Snapshot`], read
//! through the same `inject::ClusterView` admission reads the cache through). Pure: the
//! fetchers fill them, a manifest's documents give them too.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::inject::join::{self, Lookup};
use crate::inject::policy::{self, MetaMap};
use crate::inject::{ClusterView, NamespaceOptIn};
use crate::network::crd::Network;

/// The label every Namespace carries (set by the API server): what selectors see of its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// What the decision reads of the cluster: Namespace labels and Networks.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Labels of each Namespace that exists.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Networks by (namespace, name).
    pub networks: BTreeMap<(String, String), Network>,
}

impl Snapshot {
    /// The labels selectors see: the Namespace's own, or, for one that does not exist yet,
    /// the name label the API server will give it.
    pub fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(namespace)
            .cloned()
            .unwrap_or_else(|| BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), namespace.to_string())]))
    }
}

/// The injector reads the same facts through the same trait at admission.
impl ClusterView for Snapshot {
    fn namespace_opt_in(&self, namespace: &str) -> NamespaceOptIn {
        policy::namespace_opt_in(self.namespaces.get(namespace))
    }

    fn namespace_template(&self, namespace: &str) -> Option<String> {
        policy::namespace_template(self.namespaces.get(namespace)).map(str::to_string)
    }

    fn network(&self, namespace: &str, name: &str) -> Lookup {
        match self.networks.get(&(namespace.to_string(), name.to_string())) {
            Some(network) => Lookup::Found(network.join_view()),
            None => Lookup::Missing,
        }
    }
}

/// One Pod (or Pod template) to explain.
#[derive(Debug, Clone)]
pub struct Subject {
    /// How reports name it: `Pod apps/web-1`, `Deployment apps/web (Pod template)`.
    pub what: String,
    pub namespace: String,
    /// The Pod as the API server would send it on CREATE (`metadata`, `spec`).
    pub pod: Value,
}

impl Subject {
    /// The Network it asks to join, read as admission reads it.
    pub fn network(&self) -> Option<&str> {
        join::network_name(pod_annotations(&self.pod))
    }

    /// The Pod's labels, as object selectors see them.
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.pod
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default()
    }
}

fn pod_annotations(pod: &Value) -> Option<&dyn MetaMap> {
    pod.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|a| a as &dyn MetaMap)
}
