//! What the Multus backend knows of its NetworkAttachmentDefinitions without asking the API
//! server: per NAD, its uid and drift fingerprint ([`nad::fingerprint`]), kept from the
//! controller's watch of the NADs it labels.
//!
//! So a converged reconcile makes no API call at all: a restart with 10,000 Networks does
//! not GET 10,000 NADs (100 s at 100 QPS). The backend compares in memory and writes only
//! when a NAD is missing or drifted; when the index cannot tell (not listed yet, the watch
//! failing), it asks the API server as before.
//!
//! Kept per NAD: its name, uid and a 64-bit fingerprint (about 120 bytes), not the NAD.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

use super::crd::Network;
use super::nad;
use crate::relist::{Relisting, Step};

/// What is kept of one NAD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// `None` while our own write of it is in flight ([`NadIndex::expect`]).
    pub uid: Option<String>,
    pub fingerprint: u64,
}

impl Facts {
    /// `None` for an object without a uid (the API server always sets one).
    pub fn of(object: &DynamicObject) -> Option<Facts> {
        let config = object.data.pointer("/spec/config").and_then(|v| v.as_str());
        let owner_uid = object.owner_references().first().map(|o| o.uid.as_str());
        Some(Facts {
            uid: Some(object.uid()?),
            fingerprint: nad::fingerprint_fields(config, owner_uid),
        })
    }
}

/// What the index can say about one NAD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// Not listed yet, or the watch fails: ask the API server.
    Unknown,
    /// Listed, and no NAD of ours has that name.
    Absent,
    Present(Facts),
}

/// The watch's progress, for whoever waits for a first answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Listing,
    Synced,
    /// The first list failed (e.g. the NAD CRD is not installed): nothing is known.
    Failing,
}

type Table = HashMap<String, HashMap<Box<str>, Facts>>;

/// The index of NADs by namespace and name.
pub struct NadIndex {
    state: Mutex<Relisting<Table>>,
    phase: watch::Sender<Phase>,
}

impl Default for NadIndex {
    fn default() -> NadIndex {
        NadIndex {
            state: Mutex::default(),
            phase: watch::Sender::new(Phase::Listing),
        }
    }
}

/// The Network a NAD belongs to: its Network owner, else the Network of the same name.
fn owner(object: &DynamicObject) -> Option<ObjectRef<Network>> {
    let namespace = object.namespace()?;
    let name = object
        .owner_references()
        .iter()
        .find(|o| o.kind == "Network")
        .map_or_else(|| object.name_any(), |o| o.name.clone());
    Some(ObjectRef::new(&name).within(&namespace))
}

/// Sets one NAD's facts (`None`: gone); true when that is news. The event of a write we
/// announced with [`NadIndex::expect`] is not news.
fn set(table: &mut Table, object: &DynamicObject, facts: Option<Facts>) -> bool {
    let (Some(namespace), Some(name)) = (object.metadata.namespace.as_deref(), object.metadata.name.as_deref()) else {
        return false;
    };
    let Some(facts) = facts else {
        return remove(table, namespace, name).is_some();
    };
    let space = table.entry(namespace.to_string()).or_default();
    let known = space
        .get(name)
        .is_some_and(|old| old.fingerprint == facts.fingerprint && (old.uid.is_none() || old.uid == facts.uid));
    space.insert(Box::from(name), facts);
    !known
}

/// Removes one NAD's facts, and its namespace once that holds none: a namespace in the
/// table always has a NAD.
fn remove(table: &mut Table, namespace: &str, name: &str) -> Option<Facts> {
    let space = table.get_mut(namespace)?;
    let removed = space.remove(name);
    if space.is_empty() {
        table.remove(namespace);
    }
    removed
}

impl NadIndex {
    pub fn new() -> NadIndex {
        NadIndex::default()
    }

    /// Applies one watcher event; returns the Networks whose NAD changed (to repair drift).
    pub fn apply(&self, event: &Event<DynamicObject>) -> Vec<ObjectRef<Network>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut affected = HashSet::new();
        match state.step(event) {
            Step::Apply(object, live) => {
                if set(live, object, Facts::of(object)) {
                    affected.extend(owner(object));
                }
            }
            Step::Delete(object, live) => {
                if set(live, object, None) {
                    affected.extend(owner(object));
                }
            }
            Step::Listed(object, fresh) => {
                set(fresh, object, Facts::of(object));
            }
            Step::Swapped { previous, live } => {
                let changed = |a: &Table, b: &Table| -> Vec<ObjectRef<Network>> {
                    a.iter()
                        .flat_map(|(ns, space)| space.iter().map(move |(name, facts)| (ns, name, facts)))
                        .filter(|(ns, name, facts)| b.get(*ns).and_then(|s| s.get(*name)) != Some(facts))
                        .map(|(ns, name, _)| ObjectRef::new(name).within(ns))
                        .collect()
                };
                // A relist after an outage: repair what moved meanwhile (the NAD's
                // name is its Network's, see `nad::render`).
                affected.extend(changed(&previous, live));
                affected.extend(changed(live, &previous));
            }
            Step::Nothing => {}
        }
        // Any `InitDone`, a relist's or not: the index has answers now.
        if matches!(event, Event::InitDone) {
            self.phase.send_replace(Phase::Synced);
        }
        affected.into_iter().collect()
    }

    /// The watch failed. Before its first list that means nothing can be known (ask the
    /// API server); after it, the last list keeps serving until the watch relists.
    pub fn failed(&self) {
        self.phase.send_if_modified(|phase| {
            let first = *phase == Phase::Listing;
            if first {
                *phase = Phase::Failing;
            }
            first
        });
    }

    /// Waits until the first list completed or failed.
    pub async fn settled(&self) -> Phase {
        let mut phase = self.phase.subscribe();
        // The sender lives in `self`: `wait_for` cannot see it dropped.
        let settled = phase.wait_for(|p| *p != Phase::Listing).await.map(|p| *p);
        settled.unwrap_or(Phase::Failing)
    }

    pub fn lookup(&self, namespace: &str, name: &str) -> Known {
        if *self.phase.borrow() != Phase::Synced {
            return Known::Unknown;
        }
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.live().get(namespace).and_then(|space| space.get(name)) {
            Some(facts) => Known::Present(facts.clone()),
            None => Known::Absent,
        }
    }

    /// Announces a write of ours before it is sent: its watch event may well arrive before
    /// its answer, and must not be taken for someone else's change. Undo with
    /// [`NadIndex::unexpect`] when the write fails.
    pub fn expect(&self, namespace: &str, name: &str, fingerprint: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let facts = Facts { uid: None, fingerprint };
        state
            .live_mut()
            .entry(namespace.to_string())
            .or_default()
            .insert(Box::from(name), facts);
    }

    /// Withdraws an [`NadIndex::expect`] whose write failed, unless the watch has shown
    /// the NAD meanwhile.
    pub fn unexpect(&self, namespace: &str, name: &str) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let live = state.live_mut();
        if live
            .get(namespace)
            .and_then(|space| space.get(name))
            .is_some_and(|f| f.uid.is_none())
        {
            remove(live, namespace, name);
        }
    }

    /// Records what a write of ours left in place, before its watch event arrives, so the
    /// next reconcile does not ask again and the event is not taken for drift.
    pub fn record(&self, object: &DynamicObject) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        set(state.live_mut(), object, Facts::of(object));
    }

    /// Forgets a NAD this controller deleted (or found gone).
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        remove(state.live_mut(), namespace, name);
    }

    /// NADs known, for the store metrics.
    pub fn len(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.live().values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nad(name: &str, config: &str, owner_uid: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": "default", "uid": format!("nad-{name}"),
                         "ownerReferences": [{"apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
                                              "name": name, "uid": owner_uid}]},
            "spec": {"config": config}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn unknown_until_listed_then_tracks_changes_and_our_own_writes() {
        let index = NadIndex::new();
        let a = nad("a", r#"{"type":"bridge"}"#, "u-a");
        assert_eq!(index.lookup("default", "a"), Known::Unknown);
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(a.clone()));
        assert_eq!(
            index.apply(&Event::InitDone),
            vec![ObjectRef::new("a").within("default")]
        );
        assert_eq!(index.settled().await, Phase::Synced);
        let Known::Present(facts) = index.lookup("default", "a") else {
            panic!("a is listed")
        };
        assert_eq!(facts.uid.as_deref(), Some("nad-a"));
        assert_eq!(index.lookup("default", "b"), Known::Absent);

        // Our own create, recorded before its event: the event is no news.
        let b = nad("b", r#"{"type":"bridge"}"#, "u-b");
        index.record(&b);
        assert!(index.apply(&Event::Apply(b.clone())).is_empty());
        // Announced before the write, its event beating the answer: no news either.
        let c = nad("c", r#"{"type":"bridge"}"#, "u-c");
        index.expect("default", "c", Facts::of(&c).unwrap().fingerprint);
        assert!(index.apply(&Event::Apply(c.clone())).is_empty());
        index.unexpect("default", "c");
        assert!(
            matches!(index.lookup("default", "c"), Known::Present(_)),
            "the watch saw it: kept"
        );
        index.expect("default", "d", 1);
        index.unexpect("default", "d");
        assert_eq!(
            index.lookup("default", "d"),
            Known::Absent,
            "a failed write is withdrawn"
        );
        // An edit by someone else: the owner is requeued.
        let edited = nad("b", r#"{"type":"macvlan"}"#, "u-b");
        assert_eq!(
            index.apply(&Event::Apply(edited)),
            vec![ObjectRef::new("b").within("default")]
        );
        assert_eq!(
            index.apply(&Event::Delete(b)),
            vec![ObjectRef::new("b").within("default")]
        );
        assert_eq!(index.lookup("default", "b"), Known::Absent);
        // A failing watch after the first list keeps what was listed.
        index.failed();
        assert!(matches!(index.lookup("default", "a"), Known::Present(_)));
    }

    #[tokio::test]
    async fn a_watch_that_never_lists_settles_as_failing() {
        let index = NadIndex::new();
        index.failed();
        assert_eq!(index.settled().await, Phase::Failing);
        assert_eq!(index.lookup("default", "a"), Known::Unknown);
    }
}
