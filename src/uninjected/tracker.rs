//! Pods that could count, by uid: namespace (interned) and standing only, with their
//! counts per namespace, kept from the watch's events through a `relist::Relisting`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;

use super::namespaces::Namespaces;
use super::rule::{Standing, standing};
use crate::inject::{AnnotationOptIn, NamespaceOptIn};
use crate::relist::Relisting;
use crate::stale::{ByUid, Change, Interner, Tally, by_uid};

/// Pods that could count in one namespace, by standing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    own: u32,
    follows: u32,
}

impl Counts {
    fn slot(&mut self, standing: Standing) -> &mut u32 {
        match standing {
            Standing::Own(_) => &mut self.own,
            Standing::FollowsNamespace => &mut self.follows,
        }
    }

    fn uninjected(self, namespace: NamespaceOptIn) -> i64 {
        let follows = if namespace == NamespaceOptIn::Labeled {
            self.follows
        } else {
            0
        };
        i64::from(self.own) + i64::from(follows)
    }
}

/// (namespace id, standing).
type Entry = (u32, Standing);

/// Pods that could count, per namespace.
#[derive(Debug, Default)]
struct PerNamespace(HashMap<u32, Counts>);

impl Tally for PerNamespace {
    type Entry = Entry;

    fn add(&mut self, (namespace, standing): Entry) {
        *self.0.entry(namespace).or_default().slot(standing) += 1;
    }

    fn remove(&mut self, (namespace, standing): Entry) {
        let Some(counts) = self.0.get_mut(&namespace) else {
            return;
        };
        let slot = counts.slot(standing);
        *slot = slot.saturating_sub(1);
        if *counts == Counts::default() {
            self.0.remove(&namespace);
        }
    }
}

/// Which namespaces' values an event moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    Nothing,
    /// One Pod of this namespace came, went or changed standing.
    Namespace(Arc<str>),
    /// A relist was swapped in (or a Namespace changed, or a recount is due).
    Everything,
}

/// Pods that could count, by uid: namespace and standing only. Fed with the watch's events.
#[derive(Debug, Default)]
pub struct Tracker {
    pods: Relisting<ByUid<PerNamespace>>,
    namespaces: Interner,
    /// The first list is done: before it, nothing is shown.
    listed: bool,
    /// Whether Pods' annotations opt them in (`serve --annotation-opt-in`).
    annotations: AnnotationOptIn,
}

/// A Pod's entry; `None` without a namespace, or when it never counts.
fn entry_of(pod: &PartialObjectMeta<Pod>, namespaces: &mut Interner, annotations: AnnotationOptIn) -> Option<Entry> {
    let meta = &pod.metadata;
    let standing = standing(meta, annotations)?;
    Some((namespaces.id(meta.namespace.as_deref()?), standing))
}

impl Tracker {
    pub fn new(annotations: AnnotationOptIn) -> Tracker {
        Tracker {
            annotations,
            ..Tracker::default()
        }
    }

    /// Applies one watch event; says which namespace's value it moved.
    pub fn apply(&mut self, event: Event<PartialObjectMeta<Pod>>) -> Moved {
        let (namespaces, annotations) = (&mut self.namespaces, self.annotations);
        match by_uid::apply(&mut self.pods, &event, |pod| entry_of(pod, namespaces, annotations)) {
            Change::Nothing => Moved::Nothing,
            Change::Swapped => {
                self.listed = true;
                Moved::Everything
            }
            Change::Pod { before, after } => match before.or(after) {
                Some((namespace, _)) => Moved::Namespace(namespaces.shared(namespace)),
                None => Moved::Nothing,
            },
        }
    }

    /// Pods held (those that could count).
    pub fn len(&self) -> usize {
        self.pods.live().by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the first list is done.
    pub fn is_listed(&self) -> bool {
        self.listed
    }

    /// One namespace's value: its uninjected Pods; `None` (no series) when it holds no
    /// Pod that could count and is not labelled.
    pub fn uninjected(&self, namespace: &str, namespaces: &dyn Namespaces) -> Option<i64> {
        let opt_in = namespaces.opt_in(namespace);
        let counts = self
            .namespaces
            .find(namespace)
            .and_then(|id| self.pods.live().tally.0.get(&id));
        match counts {
            Some(counts) => Some(counts.uninjected(opt_in)),
            None => (opt_in == NamespaceOptIn::Labeled).then_some(0),
        }
    }

    /// Every namespace's value: each namespace holding a Pod that could count, and each
    /// labelled one.
    pub fn all_uninjected(&self, namespaces: &dyn Namespaces) -> BTreeMap<String, i64> {
        let held = self
            .pods
            .live()
            .tally
            .0
            .keys()
            .map(|id| self.namespaces.name(*id).to_string());
        held.chain(namespaces.labelled())
            .filter_map(|name| Some((name.clone(), self.uninjected(&name, namespaces)?)))
            .collect()
    }

    /// Memory held for the Pods (map entries; namespace names are interned once each).
    pub fn approximate_bytes(&self) -> usize {
        let pods = self.pods.live();
        let entry = std::mem::size_of::<(u128, Entry)>() + 1;
        let counts = std::mem::size_of::<(u32, Counts)>() + 1;
        pods.by_uid.capacity() * entry + pods.tally.0.capacity() * counts
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap as Map;

    use super::*;
    use crate::uninjected::fixtures::{IN, INJECTED, OUT, namespaces, pod};

    #[test]
    fn counts_follow_pods_namespace_labels_and_relists() {
        let mut labels = namespaces(&["apps"], &["other"]);
        let mut tracker = Tracker::new(AnnotationOptIn::On);
        tracker.apply(Event::Init);
        tracker.apply(Event::InitApply(pod(1, "apps", &[])));
        tracker.apply(Event::InitApply(pod(2, "apps", &[IN])));
        tracker.apply(Event::InitApply(pod(3, "apps", &[INJECTED])));
        tracker.apply(Event::InitApply(pod(4, "other", &[])));
        tracker.apply(Event::InitApply(pod(5, "other", &[IN])));
        tracker.apply(Event::InitApply(pod(6, "other", &[OUT])));
        assert!(
            !tracker.is_listed() && tracker.is_empty(),
            "nothing counts before the list is done"
        );
        assert_eq!(tracker.apply(Event::InitDone), Moved::Everything);
        assert_eq!(tracker.len(), 4, "injected and opted-out Pods are not held");
        assert_eq!(
            tracker.all_uninjected(&labels),
            Map::from([("apps".into(), 2), ("other".into(), 1)])
        );

        // The label moves on `other`: its plain Pod counts, with no Pod event.
        labels = namespaces(&["apps", "other"], &[]);
        assert_eq!(
            tracker.all_uninjected(&labels),
            Map::from([("apps".into(), 2), ("other".into(), 2)])
        );
        labels = namespaces(&[], &["apps", "other"]);
        assert_eq!(
            tracker.all_uninjected(&labels),
            Map::from([("apps".into(), 1), ("other".into(), 1)])
        );

        // A restart replaces the Pods: the new ones are injected, the old ones go.
        labels = namespaces(&["apps"], &["other"]);
        let moved = tracker.apply(Event::Apply(pod(1, "apps", &[INJECTED])));
        assert_eq!(moved, Moved::Namespace(Arc::from("apps")));
        tracker.apply(Event::Delete(pod(2, "apps", &[IN])));
        assert_eq!(tracker.apply(Event::Apply(pod(7, "apps", &[INJECTED]))), Moved::Nothing);
        assert_eq!(
            tracker.apply(Event::Apply(pod(4, "other", &[]))),
            Moved::Nothing,
            "an update that changes nothing moves nothing"
        );
        assert_eq!(
            tracker.uninjected("apps", &labels),
            Some(0),
            "a labelled namespace shows 0"
        );
        assert_eq!(
            tracker.all_uninjected(&labels),
            Map::from([("apps".into(), 0), ("other".into(), 1)])
        );

        // A relist drops what it no longer holds.
        tracker.apply(Event::Init);
        tracker.apply(Event::InitApply(pod(8, "third", &[IN])));
        tracker.apply(Event::InitDone);
        assert_eq!(
            tracker.all_uninjected(&labels),
            Map::from([("apps".into(), 0), ("third".into(), 1)])
        );
        assert_eq!(
            tracker.uninjected("other", &labels),
            None,
            "no Pod held, not labelled: no series"
        );
    }

    #[test]
    fn ten_thousand_pods_hold_well_under_300_bytes_each() {
        let mut tracker = Tracker::new(AnnotationOptIn::On);
        tracker.apply(Event::Init);
        for n in 0..10_000 {
            let namespace = format!("team-{:03}", n % 100);
            tracker.apply(Event::InitApply(pod(n, &namespace, &[])));
        }
        tracker.apply(Event::InitDone);
        assert_eq!(tracker.len(), 10_000);
        let per_pod = tracker.approximate_bytes() / 10_000;
        assert!(per_pod <= 100, "{per_pod} bytes per Pod");
    }
}
