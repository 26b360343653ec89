//! What admission reads of the cluster: Namespace labels and Networks from the shared
//! cache. Never an API call: lookups are in memory.

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::cache::Stores;
use crate::inject::ClusterView;
use crate::inject::join::Lookup;
use crate::inject::policy::{self, NamespaceOptIn};

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
