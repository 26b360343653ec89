//! Injected Pods by uid: template and revision only (two interned ids), with how many
//! Pods carry each, kept from the watch's events through a `relist::Relisting`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;

use super::by_uid::{self, ByUid, Change, Tally};
use super::key::Interner;
use super::rule::{injected, is_stale};
use crate::relist::Relisting;
use crate::template::TemplateSet;

/// (template id, revision id).
type Entry = (u32, u32);

/// Injected Pods per template, then per revision: what one template's gauge value is read
/// from.
#[derive(Debug, Default)]
struct Revisions(HashMap<u32, HashMap<u32, usize>>);

impl Tally for Revisions {
    type Entry = Entry;

    fn add(&mut self, (template, revision): Entry) {
        *self.0.entry(template).or_default().entry(revision).or_default() += 1;
    }

    fn remove(&mut self, (template, revision): Entry) {
        let Some(revisions) = self.0.get_mut(&template) else {
            return;
        };
        if let Some(count) = revisions.get_mut(&revision) {
            *count -= 1;
            if *count == 0 {
                revisions.remove(&revision);
            }
        }
        if revisions.is_empty() {
            self.0.remove(&template);
        }
    }
}

/// Which templates' counts an event moved, so the gauge is set again for those alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    Nothing,
    /// An `Apply` or `Delete` moved one Pod: its template before and after, each named once.
    Templates(Option<Arc<str>>, Option<Arc<str>>),
    /// A relist was swapped in (or a recount is due).
    Everything,
}

/// Injected Pods by uid: template and revision only. Fed with the watch's events.
#[derive(Debug, Default)]
pub struct Tracker {
    pods: Relisting<ByUid<Revisions>>,
    strings: Interner,
}

/// A Pod's entry; `None` without the revision label.
fn entry_of(pod: &PartialObjectMeta<Pod>, strings: &mut Interner) -> Option<Entry> {
    let (template, revision) = injected(&pod.metadata)?;
    Some((strings.id(&template), strings.id(&revision)))
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Applies one watch event; says which templates' counts it moved. Pods without the
    /// label (or uid) are ignored.
    pub fn apply(&mut self, event: Event<PartialObjectMeta<Pod>>) -> Moved {
        let strings = &mut self.strings;
        // Without the label it is no longer an injected Pod.
        match by_uid::apply(&mut self.pods, &event, |pod| entry_of(pod, strings)) {
            Change::Nothing => Moved::Nothing,
            Change::Swapped => Moved::Everything,
            Change::Pod { before, after } => {
                let (before, after) = (before.map(|(t, _)| t), after.map(|(t, _)| t));
                let after = if after == before { None } else { after };
                Moved::Templates(before.map(|t| strings.shared(t)), after.map(|t| strings.shared(t)))
            }
        }
    }

    /// Injected Pods known.
    pub fn len(&self) -> usize {
        self.pods.live().by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The gauge's value for one template name: its stale Pods; `None` when it has no
    /// series (not a live template, and no Pod carries it). O(its revisions).
    pub fn stale_count(&self, template: &str, live: &TemplateSet) -> Option<i64> {
        let revisions = self
            .strings
            .find(template)
            .and_then(|id| self.pods.live().tally.0.get(&id));
        if revisions.is_none() && live.get(template).is_none() {
            return None;
        }
        let stale = revisions
            .into_iter()
            .flatten()
            .filter(|(revision, _)| is_stale(template, self.strings.name(**revision), live))
            .map(|(_, count)| *count as i64)
            .sum();
        Some(stale)
    }

    /// Stale Pods per template name: every live template (0 when none is stale) and every
    /// template name stale Pods carry.
    pub fn stale_counts(&self, live: &TemplateSet) -> BTreeMap<String, i64> {
        let counted = self.pods.live().tally.0.keys().map(|id| self.strings.name(*id));
        live.names()
            .chain(counted)
            .filter_map(|name| Some((name.to_string(), self.stale_count(name, live)?)))
            .collect()
    }

    /// Memory held for the Pods (map entries; the interned strings are a few per template
    /// edit), for the scale benchmark.
    pub fn approximate_bytes(&self) -> usize {
        let pods = self.pods.live();
        let entry = std::mem::size_of::<(u128, Entry)>() + 1;
        let template = std::mem::size_of::<(u32, HashMap<u32, usize>)>() + 1;
        let revision = std::mem::size_of::<(u32, usize)>() + 1;
        let revisions: usize = pods.tally.0.values().map(|r| r.capacity() * revision).sum();
        pods.by_uid.capacity() * entry + pods.tally.0.capacity() * template + revisions
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap as Map;

    use super::*;
    use crate::stale::fixtures::{live, pod, uid};

    #[test]
    fn counts_follow_events_and_template_edits() {
        let before = live(&[("config", "envoy:1"), ("other", "x:1")]);
        let (config, other) = (
            before.get("config").unwrap().revision.clone(),
            before.get("other").unwrap().revision.clone(),
        );
        let mut tracker = Tracker::new();
        tracker.apply(Event::Init);
        for n in 0..3 {
            tracker.apply(Event::InitApply(pod(&uid(n), "config", Some(&config))));
        }
        tracker.apply(Event::InitApply(pod(&uid(9), "other", Some(&other))));
        // Not injected (no label): ignored.
        tracker.apply(Event::InitApply(pod(&uid(10), "config", None)));
        assert!(tracker.is_empty(), "nothing counts before the list is done");
        tracker.apply(Event::InitDone);
        assert_eq!(tracker.len(), 4);
        assert_eq!(
            tracker.stale_counts(&before),
            Map::from([("config".into(), 0), ("other".into(), 0)])
        );

        // `config` is edited: its three Pods are stale; `other` is not.
        let after = live(&[("config", "envoy:2"), ("other", "x:1")]);
        assert_eq!(
            tracker.stale_counts(&after),
            Map::from([("config".into(), 3), ("other".into(), 0)])
        );
        // A Pod injected from the new revision, one deleted, one re-labelled: counts follow.
        let new = after.get("config").unwrap().revision.clone();
        tracker.apply(Event::Apply(pod(&uid(20), "config", Some(&new))));
        tracker.apply(Event::Delete(pod(&uid(0), "config", Some(&config))));
        tracker.apply(Event::Apply(pod(&uid(1), "config", Some(&new))));
        tracker.apply(Event::Apply(pod(&uid(2), "config", None)));
        assert_eq!(tracker.len(), 3);
        assert_eq!(
            tracker.stale_counts(&after),
            Map::from([("config".into(), 0), ("other".into(), 0)])
        );

        // A removed template: its Pods are stale under its name.
        let without_other = live(&[("config", "envoy:2")]);
        assert_eq!(
            tracker.stale_counts(&without_other),
            Map::from([("config".into(), 0), ("other".into(), 1)])
        );

        // A relist replaces everything.
        tracker.apply(Event::Init);
        tracker.apply(Event::InitApply(pod(&uid(30), "config", Some(&config))));
        tracker.apply(Event::InitDone);
        assert_eq!(tracker.len(), 1);
        assert_eq!(
            tracker.stale_counts(&after),
            Map::from([("config".into(), 1), ("other".into(), 0)])
        );
    }

    #[test]
    fn ten_thousand_pods_hold_well_under_a_megabyte() {
        let mut tracker = Tracker::new();
        tracker.apply(Event::Init);
        for n in 0..10_000 {
            tracker.apply(Event::InitApply(pod(&uid(n), "config", Some("0123456789ab"))));
        }
        tracker.apply(Event::InitDone);
        assert_eq!(tracker.len(), 10_000);
        // 10k Pods: well under a megabyte, against the controller's 60 MB budget.
        assert!(
            tracker.approximate_bytes() < 1024 * 1024,
            "{}",
            tracker.approximate_bytes()
        );
    }
}
