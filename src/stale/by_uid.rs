//! The table both trackers (`stale`, `uninjected`) keep from a metadata watch of Pods: one
//! small entry per Pod uid, and a tally of the entries kept in step, relisted through a
//! `relist::Relisting`. Each tracker says only what a Pod's entry is and what its tally
//! counts.

use std::collections::HashMap;
use std::fmt::Debug;

use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;

use super::key::uid_key;
use crate::relist::{Relisting, Step};

/// What a tracker counts of its entries (Pods per template and revision, per namespace).
pub(crate) trait Tally: Default + Debug {
    type Entry: Copy + PartialEq + Debug;
    fn add(&mut self, entry: Self::Entry);
    /// Takes back one [`Tally::add`] of `entry`; keys left empty are removed.
    fn remove(&mut self, entry: Self::Entry);
}

/// The Pods of one list by uid, and their tally.
#[derive(Debug)]
pub(crate) struct ByUid<T: Tally> {
    pub(crate) by_uid: HashMap<u128, T::Entry>,
    pub(crate) tally: T,
}

// By hand: a derive would ask for `T::Entry: Default`, which an entry need not be.
impl<T: Tally> Default for ByUid<T> {
    fn default() -> Self {
        ByUid {
            by_uid: HashMap::new(),
            tally: T::default(),
        }
    }
}

impl<T: Tally> ByUid<T> {
    /// Sets one Pod's entry (`None`: gone, or no longer held); returns the one it had.
    fn set(&mut self, uid: u128, entry: Option<T::Entry>) -> Option<T::Entry> {
        let previous = match entry {
            Some(entry) => self.by_uid.insert(uid, entry),
            None => self.by_uid.remove(&uid),
        };
        if let Some(previous) = previous {
            self.tally.remove(previous);
        }
        if let Some(entry) = entry {
            self.tally.add(entry);
        }
        previous
    }
}

/// What one watch event did to the live table.
#[derive(Debug, PartialEq)]
pub(crate) enum Change<E> {
    /// Nothing a reader sees (a Pod listed into a relist, an event that changed no entry).
    Nothing,
    /// One Pod's entry changed from `before` to `after` (`None`: not held).
    Pod { before: Option<E>, after: Option<E> },
    /// A relist was swapped in.
    Swapped,
}

/// Applies one watch event to `pods`; `entry_of` says what a Pod's entry is (`None`: the
/// Pod is not held). Pods without a uid are ignored.
pub(crate) fn apply<T: Tally>(
    pods: &mut Relisting<ByUid<T>>,
    event: &Event<PartialObjectMeta<Pod>>,
    mut entry_of: impl FnMut(&PartialObjectMeta<Pod>) -> Option<T::Entry>,
) -> Change<T::Entry> {
    let uid = |pod: &PartialObjectMeta<Pod>| pod.metadata.uid.as_deref().map(uid_key);
    let (before, after) = match pods.step(event) {
        Step::Listed(pod, fresh) => {
            if let Some(uid) = uid(pod)
                && let Some(entry) = entry_of(pod)
            {
                fresh.set(uid, Some(entry));
            }
            return Change::Nothing;
        }
        Step::Apply(pod, live) => {
            let Some(uid) = uid(pod) else {
                return Change::Nothing;
            };
            let after = entry_of(pod);
            (live.set(uid, after), after)
        }
        Step::Delete(pod, live) => {
            let Some(uid) = uid(pod) else {
                return Change::Nothing;
            };
            (live.set(uid, None), None)
        }
        Step::Swapped { .. } => return Change::Swapped,
        Step::Nothing => return Change::Nothing,
    };
    if before == after {
        Change::Nothing
    } else {
        Change::Pod { before, after }
    }
}
