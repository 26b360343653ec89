//! Which member Pods count for which Network: the `attachedPods` of every Network and the
//! Pods that keep a Network being deleted alive, kept current from the member-Pod watch's
//! events instead of a scan of all member Pods per reconcile (which was O(Networks × Pods)).
//!
//! A Pod is a member of the Network its `sidecar.samplecrd.k8s.io/network` label names in
//! its own namespace. The watch asks only for Pods that are not Succeeded or Failed (a
//! field selector), so a Pod that completes leaves as if deleted: it holds no interface any
//! more. Of the members:
//!
//! * **attached**: not terminating; `status.attachedPods`;
//! * **in use**: terminating ones too, as a terminating Pod still has its interface; a
//!   Network being deleted stays until none is left (as `kubernetes.io/pvc-protection`
//!   keeps a PersistentVolumeClaim).
//!
//! The watch sees deletes (a shared reflector's subscribers do not), so a force-deleted Pod
//! leaves at once. Per Pod the index keeps its name, whether it is terminating and a shared
//! handle on its Network's name; nothing else of the Pod is stored anywhere.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

use super::crd::Network;
use crate::inject::join::NETWORK_LABEL;
use crate::relist::{Relisting, Step};

/// The field selector of the member-Pod watch: Pods that may still hold an interface.
pub const NOT_TERMINAL: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// A member Pod as the index keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    network: Arc<str>,
    terminating: bool,
}

/// What a Pod is, from its metadata: a member of its labelled Network, or nothing.
fn member_of(pod: &PartialObjectMeta<Pod>) -> Option<(&str, bool)> {
    let network = pod.labels().get(NETWORK_LABEL)?;
    Some((network.as_str(), pod.metadata.deletion_timestamp.is_some()))
}

/// A Network's members: all of them (in use), and those not terminating (attached).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub attached: i64,
    pub in_use: i64,
}

impl Counts {
    fn add(&mut self, member: &Member, sign: i64) {
        self.in_use += sign;
        if !member.terminating {
            self.attached += sign;
        }
    }
}

/// One namespace: each member Pod, and the counts per Network.
#[derive(Default)]
struct Namespace {
    pods: HashMap<Box<str>, Member>,
    counts: HashMap<Arc<str>, Counts>,
}

impl Namespace {
    /// Sets `pod` to `state` (none: gone or terminal); returns the previous member.
    fn set(&mut self, pod: &str, state: Option<(&str, bool)>) -> Option<Member> {
        let previous = self.pods.get(pod).cloned();
        let unchanged = match (&previous, state) {
            (Some(old), Some((network, terminating))) => &*old.network == network && old.terminating == terminating,
            (None, None) => true,
            _ => false,
        };
        if unchanged {
            return previous;
        }
        if let Some(old) = &previous {
            self.pods.remove(pod);
            if let Some(counts) = self.counts.get_mut(&old.network) {
                counts.add(old, -1);
                if counts.in_use <= 0 {
                    self.counts.remove(&old.network);
                }
            }
        }
        if let Some((name, terminating)) = state {
            // One allocation per Network name, shared by all its Pods.
            let network = match self.counts.get_key_value(name) {
                Some((key, _)) => key.clone(),
                None => Arc::from(name),
            };
            let member = Member { network, terminating };
            self.counts.entry(member.network.clone()).or_default().add(&member, 1);
            self.pods.insert(Box::from(pod), member);
        }
        previous
    }
}

#[derive(Default)]
struct Table {
    namespaces: HashMap<String, Namespace>,
    /// Member Pods (not terminating) in all namespaces, kept in step so the store gauge,
    /// read after every event, is not a sum over the namespaces.
    attached: usize,
}

impl Table {
    /// Applies one Pod's state (`None`: deleted or terminal); returns the Networks whose
    /// counts moved.
    fn set(
        &mut self,
        pod: &PartialObjectMeta<Pod>,
        state: Option<(&str, bool)>,
        out: &mut HashSet<ObjectRef<Network>>,
    ) {
        let (Some(namespace), Some(name)) = (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref()) else {
            return;
        };
        if state.is_none() && !self.namespaces.contains_key(namespace) {
            return;
        }
        let space = self.namespaces.entry(namespace.to_string()).or_default();
        let previous = space.set(name, state);
        let was_attached = previous.as_ref().is_some_and(|m| !m.terminating);
        let is_attached = state.is_some_and(|(_, terminating)| !terminating);
        match (was_attached, is_attached) {
            (false, true) => self.attached += 1,
            (true, false) => self.attached -= 1,
            _ => {}
        }
        let moved = match (&previous, state) {
            (Some(old), Some((network, terminating))) => &*old.network != network || old.terminating != terminating,
            (None, None) => false,
            _ => true,
        };
        if moved {
            out.extend(previous.map(|old| ObjectRef::new(&old.network).within(namespace)));
            out.extend(state.map(|(new, _)| ObjectRef::new(new).within(namespace)));
        }
        if space.pods.is_empty() {
            self.namespaces.remove(namespace);
        }
    }

    fn counts(&self, namespace: &str, network: &str) -> Counts {
        self.namespaces
            .get(namespace)
            .and_then(|space| space.counts.get(network))
            .copied()
            .unwrap_or_default()
    }
}

/// Member-Pod counts of all Networks. Cheap to share (`Arc`).
#[derive(Default)]
pub struct MemberIndex {
    state: Mutex<Relisting<Table>>,
}

impl MemberIndex {
    pub fn new() -> MemberIndex {
        MemberIndex::default()
    }

    /// Applies one watcher event; returns the Networks whose counts changed.
    pub fn apply(&self, event: &Event<PartialObjectMeta<Pod>>) -> Vec<ObjectRef<Network>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut affected = HashSet::new();
        match state.step(event) {
            Step::Apply(pod, live) => live.set(pod, member_of(pod), &mut affected),
            Step::Delete(pod, live) => live.set(pod, None, &mut affected),
            // Changes are computed at the swap, against the live table.
            Step::Listed(pod, fresh) => fresh.set(pod, member_of(pod), &mut HashSet::new()),
            Step::Swapped { previous, live } => {
                let networks = |t: &Table| -> Vec<(String, Arc<str>)> {
                    t.namespaces
                        .iter()
                        .flat_map(|(ns, space)| space.counts.keys().map(move |n| (ns.clone(), n.clone())))
                        .collect()
                };
                for (namespace, network) in networks(&previous).into_iter().chain(networks(live)) {
                    if previous.counts(&namespace, &network) != live.counts(&namespace, &network) {
                        affected.insert(ObjectRef::new(&network).within(&namespace));
                    }
                }
            }
            Step::Nothing => {}
        }
        affected.into_iter().collect()
    }

    /// The members of Network `namespace/name`.
    pub fn counts(&self, namespace: &str, name: &str) -> Counts {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live()
            .counts(namespace, name)
    }

    /// Pods attached to Network `namespace/name` (members not terminating).
    pub fn count(&self, namespace: &str, name: &str) -> i64 {
        self.counts(namespace, name).attached
    }

    /// The first `limit` names (sorted) of the Pods that use Network `namespace/name`,
    /// terminating ones included. A scan of the namespace's member Pods: called once per
    /// deletion that has to wait, never per event.
    pub fn users(&self, namespace: &str, name: &str, limit: usize) -> Vec<String> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(space) = state.live().namespaces.get(namespace) else {
            return Vec::new();
        };
        let mut names: Vec<&str> = space
            .pods
            .iter()
            .filter(|(_, member)| &*member.network == name)
            .map(|(pod, _)| &**pod)
            .collect();
        names.sort_unstable();
        names.into_iter().take(limit).map(str::to_string).collect()
    }

    /// Member Pods known (terminating ones excluded), for the store metrics: O(1), it is
    /// read after every Pod event.
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live()
            .attached
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
    fn terminating_pods_still_use_their_network_until_they_are_gone() {
        let index = MemberIndex::new();
        for name in ["p03", "p01", "p02"] {
            index.apply(&Event::Apply(pod("default", name, Some("net"), false)));
        }
        index.apply(&Event::Apply(pod("default", "other", Some("else"), false)));
        assert_eq!(index.counts("default", "net"), Counts { attached: 3, in_use: 3 });
        // Deleting: no longer attached, still in use (its interface is there until it is gone).
        assert_eq!(
            index.apply(&Event::Apply(pod("default", "p02", Some("net"), true))),
            vec![net("default", "net")]
        );
        assert_eq!(index.counts("default", "net"), Counts { attached: 2, in_use: 3 });
        assert_eq!(
            index.users("default", "net", 10),
            ["p01", "p02", "p03"],
            "sorted, terminating included"
        );
        assert_eq!(index.users("default", "net", 2), ["p01", "p02"]);
        // Gone, or Succeeded/Failed (the watch's field selector drops it: a Delete).
        index.apply(&Event::Delete(pod("default", "p02", Some("net"), true)));
        index.apply(&Event::Delete(pod("default", "p01", Some("net"), false)));
        assert_eq!(index.counts("default", "net"), Counts { attached: 1, in_use: 1 });
        index.apply(&Event::Delete(pod("default", "p03", Some("net"), false)));
        assert_eq!(index.counts("default", "net"), Counts::default());
        assert!(index.users("default", "net", 10).is_empty());
        assert_eq!(index.users("nowhere", "net", 10), Vec::<String>::new());
    }

    #[test]
    fn the_kept_total_is_a_recount_after_every_event_and_across_a_relist() {
        let index = MemberIndex::new();
        let recount = |index: &MemberIndex| -> usize {
            let state = index.state.lock().unwrap();
            state
                .live()
                .namespaces
                .values()
                .map(|space| space.pods.values().filter(|m| !m.terminating).count())
                .sum()
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
