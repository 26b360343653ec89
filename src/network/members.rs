//! Which member Pods count for which Network: the `attachedPods` of every Network, kept
//! current from the member-Pod watch's events instead of a scan of all member Pods per
//! reconcile (which was O(Networks × Pods)).
//!
//! A Pod counts for the Network its `sidecar.samplecrd.k8s.io/network` label names in its
//! own namespace, until it is terminating or gone. The watch sees deletes (a shared
//! reflector's subscribers do not), so a force-deleted Pod leaves the count at once.
//!
//! Per Pod the index keeps its name and a shared handle on its Network's name; nothing
//! else of the Pod is stored anywhere.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

use super::crd::Network;
use super::join::NETWORK_LABEL;
use crate::relist::{Relisting, Step};

/// The Network a Pod counts for: none while it is terminating.
fn counted_for(pod: &PartialObjectMeta<Pod>) -> Option<&str> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    pod.labels().get(NETWORK_LABEL).map(String::as_str)
}

/// One namespace: each member Pod's Network, and the count per Network.
#[derive(Default)]
struct Namespace {
    pods: HashMap<Box<str>, Arc<str>>,
    counts: HashMap<Arc<str>, i64>,
}

impl Namespace {
    /// Moves `pod` to `network` (none: gone or terminating); returns the previous one.
    fn set(&mut self, pod: &str, network: Option<&str>) -> Option<Arc<str>> {
        let previous = self.pods.get(pod).cloned();
        if previous.as_deref() == network {
            return previous;
        }
        if let Some(old) = &previous {
            self.pods.remove(pod);
            if let Some(count) = self.counts.get_mut(old) {
                *count -= 1;
                if *count <= 0 {
                    self.counts.remove(old);
                }
            }
        }
        if let Some(name) = network {
            // One allocation per Network name, shared by all its Pods.
            let shared = match self.counts.get_key_value(name) {
                Some((key, _)) => key.clone(),
                None => Arc::from(name),
            };
            *self.counts.entry(shared.clone()).or_insert(0) += 1;
            self.pods.insert(Box::from(pod), shared);
        }
        previous
    }
}

#[derive(Default)]
struct Table {
    namespaces: HashMap<String, Namespace>,
    /// Member Pods in all namespaces, kept in step so the store gauge, read after every
    /// event, is not a sum over the namespaces.
    pods: usize,
}

impl Table {
    /// Applies one Pod's state (`None`: deleted); returns the Networks whose count moved.
    fn set(&mut self, pod: &PartialObjectMeta<Pod>, network: Option<&str>, out: &mut HashSet<ObjectRef<Network>>) {
        let (Some(namespace), Some(name)) = (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref()) else {
            return;
        };
        if network.is_none() && !self.namespaces.contains_key(namespace) {
            return;
        }
        let space = self.namespaces.entry(namespace.to_string()).or_default();
        let previous = space.set(name, network);
        match (previous.is_some(), network.is_some()) {
            (false, true) => self.pods += 1,
            (true, false) => self.pods -= 1,
            _ => {}
        }
        if previous.as_deref() != network {
            out.extend(previous.map(|old| ObjectRef::new(&old).within(namespace)));
            out.extend(network.map(|new| ObjectRef::new(new).within(namespace)));
        }
        if space.pods.is_empty() {
            self.namespaces.remove(namespace);
        }
    }

    fn count(&self, namespace: &str, network: &str) -> i64 {
        self.namespaces
            .get(namespace)
            .and_then(|space| space.counts.get(network))
            .copied()
            .unwrap_or(0)
    }
}

/// Attached-Pod counts of all Networks. Cheap to share (`Arc`).
#[derive(Default)]
pub struct MemberIndex {
    state: Mutex<Relisting<Table>>,
}

impl MemberIndex {
    pub fn new() -> MemberIndex {
        MemberIndex::default()
    }

    /// Applies one watcher event; returns the Networks whose count changed.
    pub fn apply(&self, event: &Event<PartialObjectMeta<Pod>>) -> Vec<ObjectRef<Network>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut affected = HashSet::new();
        match state.step(event) {
            Step::Apply(pod, live) => live.set(pod, counted_for(pod), &mut affected),
            Step::Delete(pod, live) => live.set(pod, None, &mut affected),
            // Changes are computed at the swap, against the live table.
            Step::Listed(pod, fresh) => fresh.set(pod, counted_for(pod), &mut HashSet::new()),
            Step::Swapped { previous, live } => {
                let networks = |t: &Table| -> Vec<(String, Arc<str>)> {
                    t.namespaces
                        .iter()
                        .flat_map(|(ns, space)| space.counts.keys().map(move |n| (ns.clone(), n.clone())))
                        .collect()
                };
                for (namespace, network) in networks(&previous).into_iter().chain(networks(live)) {
                    if previous.count(&namespace, &network) != live.count(&namespace, &network) {
                        affected.insert(ObjectRef::new(&network).within(&namespace));
                    }
                }
            }
            Step::Nothing => {}
        }
        affected.into_iter().collect()
    }

    /// Pods counted for Network `namespace/name`.
    pub fn count(&self, namespace: &str, name: &str) -> i64 {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live()
            .count(namespace, name)
    }

    /// Member Pods known (terminating ones excluded), for the store metrics: O(1), it is
    /// read after every Pod event.
    pub fn len(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).live().pods
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::core::ObjectMeta;

    fn pod(ns: &str, name: &str, net: Option<&str>, terminating: bool) -> PartialObjectMeta<Pod> {
        let mut meta = ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..ObjectMeta::default()
        };
        if let Some(net) = net {
            meta.labels = Some([(NETWORK_LABEL.to_string(), net.to_string())].into());
        }
        if terminating {
            meta.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        PartialObjectMeta {
            types: None,
            metadata: meta,
            _phantom: std::marker::PhantomData,
        }
    }

    fn net(ns: &str, name: &str) -> ObjectRef<Network> {
        ObjectRef::new(name).within(ns)
    }

    #[test]
    fn counts_follow_namespace_label_termination_and_deletion() {
        let index = MemberIndex::new();
        assert_eq!(
            index.apply(&Event::Apply(pod("default", "p1", Some("net"), false))),
            vec![net("default", "net")]
        );
        index.apply(&Event::Apply(pod("default", "p2", Some("net"), false)));
        index.apply(&Event::Apply(pod("default", "p3", Some("other"), false)));
        index.apply(&Event::Apply(pod("team", "p1", Some("net"), false)));
        index.apply(&Event::Apply(pod("default", "p4", None, false)));
        assert_eq!(index.count("default", "net"), 2);
        assert_eq!(index.count("team", "net"), 1);
        // An update that changes nothing requeues nothing.
        assert!(
            index
                .apply(&Event::Apply(pod("default", "p1", Some("net"), false)))
                .is_empty()
        );
        // Terminating: no longer counted.
        assert_eq!(
            index.apply(&Event::Apply(pod("default", "p2", Some("net"), true))),
            vec![net("default", "net")]
        );
        assert_eq!(index.count("default", "net"), 1);
        // Relabelled: both Networks move.
        let mut moved = index.apply(&Event::Apply(pod("default", "p1", Some("other"), false)));
        moved.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(moved, vec![net("default", "net"), net("default", "other")]);
        assert_eq!((index.count("default", "net"), index.count("default", "other")), (0, 2));
        // Force-deleted (a Delete with no terminating update before it).
        assert_eq!(
            index.apply(&Event::Delete(pod("default", "p3", Some("other"), false))),
            vec![net("default", "other")]
        );
        assert_eq!(index.count("default", "other"), 1);
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn the_kept_total_is_a_recount_after_every_event_and_across_a_relist() {
        let index = MemberIndex::new();
        let recount = |index: &MemberIndex| -> usize {
            let state = index.state.lock().unwrap();
            state.live().namespaces.values().map(|space| space.pods.len()).sum()
        };
        let apply = |event: Event<PartialObjectMeta<Pod>>| {
            index.apply(&event);
            assert_eq!(index.len(), recount(&index), "after {event:?}");
            index.len()
        };
        assert_eq!(apply(Event::Apply(pod("default", "p1", Some("a"), false))), 1);
        assert_eq!(apply(Event::Apply(pod("team", "p2", Some("b"), false))), 2);
        assert_eq!(
            apply(Event::Apply(pod("default", "p3", Some("a"), true))),
            2,
            "terminating"
        );
        assert_eq!(
            apply(Event::Apply(pod("default", "p1", Some("c"), false))),
            2,
            "relabelled"
        );
        // A relist that lists p1 and p4, a Delete and an Apply arriving during it: the live
        // total follows those at once, and the swap leaves what was listed.
        let relist = [
            Event::Init,
            Event::InitApply(pod("default", "p1", Some("c"), false)),
            Event::InitApply(pod("team", "p4", Some("b"), false)),
            Event::InitApply(pod("team", "p5", Some("b"), true)),
            Event::Delete(pod("team", "p2", Some("b"), false)),
            Event::Apply(pod("other", "p6", Some("d"), false)),
        ];
        let during: Vec<usize> = relist.into_iter().map(apply).collect();
        assert_eq!(during, [2, 2, 2, 2, 1, 2]);
        assert_eq!(apply(Event::InitDone), 2, "p1 and p4");
        assert_eq!(apply(Event::Delete(pod("nowhere", "p7", Some("d"), false))), 2);
    }

    #[test]
    fn a_relist_requeues_only_the_networks_whose_count_changed() {
        let index = MemberIndex::new();
        index.apply(&Event::Apply(pod("default", "p1", Some("a"), false)));
        index.apply(&Event::Apply(pod("default", "p2", Some("b"), false)));
        // While the watch was down, p2 went away and p3 joined c; a kept its Pod.
        assert!(index.apply(&Event::Init).is_empty());
        index.apply(&Event::InitApply(pod("default", "p1", Some("a"), false)));
        index.apply(&Event::InitApply(pod("default", "p3", Some("c"), false)));
        assert_eq!(index.count("default", "b"), 1, "the old counts serve until InitDone");
        let mut changed = index.apply(&Event::InitDone);
        changed.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(changed, vec![net("default", "b"), net("default", "c")]);
        assert_eq!((index.count("default", "a"), index.count("default", "b")), (1, 0));
    }
}
