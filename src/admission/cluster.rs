//! What admission reads of the cluster: Namespace labels and Networks from the shared
//! cache, for Pods and for the template ConfigMap's Pod Security warnings. Never an API
//! call: lookups are in memory.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::cache::Stores;
use crate::inject::ClusterView;
use crate::inject::join::Lookup;
use crate::inject::policy::{self, NamespaceOptIn};
use crate::template::pod_security::Mode;

use super::validate::EnforcingNamespaces;

impl ClusterView for Stores {
    fn namespace_opt_in(&self, namespace: &str) -> NamespaceOptIn {
        // Not in the cache (yet): the label cannot be confirmed, so it does not count.
        let ns = self.namespaces.get(&ObjectRef::new(namespace));
        policy::namespace_opt_in(ns.as_deref().map(|ns| ns.labels()))
    }

    fn namespace_template(&self, namespace: &str) -> Option<String> {
        let ns = self.namespaces.get(&ObjectRef::new(namespace))?;
        policy::namespace_template(Some(ns.labels())).map(str::to_string)
    }

    fn network(&self, namespace: &str, name: &str) -> Lookup {
        match self.networks.get(&ObjectRef::new(name).within(namespace)) {
            Some(network) => Lookup::Found(network.join_view()),
            None => Lookup::Missing,
        }
    }
}

impl EnforcingNamespaces for Stores {
    fn enforcing(&self) -> Vec<(String, BTreeMap<String, String>)> {
        let label = Mode::Enforce.level_label();
        self.namespaces
            .state()
            .iter()
            .filter(|ns| ns.labels().contains_key(&label))
            .map(|ns| (ns.name_any(), ns.labels().clone()))
            .collect()
    }
}
