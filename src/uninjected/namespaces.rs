//! What the rule reads of Namespaces: their opt-in label, from the shared cache's store
//! (`serve`) or a snapshot of labels by name (`check`, tests).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::inject::NamespaceOptIn;
use crate::inject::policy;

/// What the gauge reads of Namespaces: their opt-in label.
pub trait Namespaces {
    fn opt_in(&self, namespace: &str) -> NamespaceOptIn;
    /// The namespaces opted in by label: each has a series, 0 when nothing escaped.
    fn labelled(&self) -> Vec<String>;
}

/// The shared cache's Namespace store.
impl Namespaces for Store<PartialObjectMeta<Namespace>> {
    fn opt_in(&self, namespace: &str) -> NamespaceOptIn {
        let found = self.get(&ObjectRef::new(namespace));
        policy::namespace_opt_in(found.as_deref().and_then(|ns| ns.metadata.labels.as_ref()))
    }

    fn labelled(&self) -> Vec<String> {
        self.state()
            .iter()
            .filter(|ns| policy::namespace_opt_in(ns.metadata.labels.as_ref()) == NamespaceOptIn::Labeled)
            .filter_map(|ns| ns.metadata.name.clone())
            .collect()
    }
}

/// Namespace labels by name (tests, and `check`'s snapshot of them).
impl Namespaces for BTreeMap<String, BTreeMap<String, String>> {
    fn opt_in(&self, namespace: &str) -> NamespaceOptIn {
        policy::namespace_opt_in(self.get(namespace))
    }

    fn labelled(&self) -> Vec<String> {
        self.iter()
            .filter(|(_, labels)| policy::namespace_opt_in(Some(labels)) == NamespaceOptIn::Labeled)
            .map(|(name, _)| name.clone())
            .collect()
    }
}
