//! What admission reads of the cluster, and how a lookup becomes the words of a deny:
//! Namespace labels and Networks from the shared cache in cluster mode, nothing in
//! standalone mode. Never an API call: lookups are in memory.

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::cache::Stores;
use crate::inject::NamespaceOptIn;
use crate::inject::policy;
use crate::network::crd::{Network, READY};
use crate::network::join;

/// The cluster facts admission decides with.
pub trait ClusterView: Send + Sync {
    fn namespace_opt_in(&self, namespace: &str) -> NamespaceOptIn;
    fn network(&self, namespace: &str, name: &str) -> join::Lookup;
    /// The template the Namespace's label names for its Pods; none where Namespaces are
    /// not visible.
    fn namespace_template(&self, _namespace: &str) -> Option<String> {
        None
    }
}

/// Standalone mode: Namespaces and Networks are not visible, only Pod annotations count.
pub struct Standalone;

impl ClusterView for Standalone {
    fn namespace_opt_in(&self, _namespace: &str) -> NamespaceOptIn {
        NamespaceOptIn::Unknown
    }

    fn network(&self, _namespace: &str, _name: &str) -> join::Lookup {
        join::Lookup::Unsupported
    }
}

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

    fn network(&self, namespace: &str, name: &str) -> join::Lookup {
        match self.networks.get(&ObjectRef::new(name).within(namespace)) {
            Some(network) => join::Lookup::Found(network_view(&network)),
            None => join::Lookup::Missing,
        }
    }
}

/// What a Pod joining `network` needs to know of it: its addresses, whether it is Ready
/// for its current generation (else why not), and whether it is being deleted.
pub fn network_view(network: &Network) -> join::NetworkView {
    let ready = if network.is_ready() {
        Ok(())
    } else {
        Err(match network.ready_condition() {
            Some(c) if network.status.as_ref().and_then(|s| s.observed_generation) == network.metadata.generation => {
                format!("{}: {}", c.reason, c.message)
            }
            Some(_) => String::from("the controller has not processed its latest spec yet"),
            None => format!("it has no {READY} condition yet"),
        })
    };
    join::NetworkView {
        cidr: network.spec.cidr.clone(),
        gateway: network.spec.gateway.clone(),
        ready,
        deleting: network.metadata.deletion_timestamp.is_some(),
    }
}
