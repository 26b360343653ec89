//! Stale sidecars: injected Pods whose template revision is older than the live template's.
//!
//! Every injected Pod carries the label `sidecar.samplecrd.k8s.io/revision=<rev>` next to
//! its `status` annotation, so a metadata-only watch with a label selector sees injected
//! Pods alone. [`Tracker`] keeps, per Pod uid, only the template and revision (interned:
//! two small integers), never the Pods; [`run`] feeds it from that watch and keeps the gauge
//! `envoy_injector_pods_stale{template}` current, also when a template changes. `serve`
//! runs it in cluster mode.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tracing::warn;

use crate::inject::{InjectionStatus, REVISION_LABEL, STATUS_ANNOTATION};
use crate::metrics::{Metrics, TemplateLabels};
use crate::relist::{Relisting, Step};
use crate::shutdown::CancellationToken;
use crate::template::{LiveTemplates, TemplateSet};

/// How often the gauge is recomputed besides on Pod events (template edits change what is
/// stale without any Pod event).
pub const RECOUNT_INTERVAL: Duration = Duration::from_secs(10);

/// Template name used for a Pod whose `status` annotation cannot be read.
pub const UNKNOWN_TEMPLATE: &str = "(unknown)";

/// Whether a Pod injected from `template` at `revision` runs an older sidecar than the live
/// templates: the template changed since, or no longer exists.
pub fn is_stale(template: &str, revision: &str, live: &TemplateSet) -> bool {
    live.get(template).is_none_or(|t| t.revision != revision)
}

/// The watch's selector: injected Pods only.
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().labels(REVISION_LABEL)
}

/// Which template and revision an injected Pod carries, from its metadata: the revision
/// label, and the template named by the `status` annotation.
pub fn injected(meta: &kube::api::ObjectMeta) -> Option<(String, String)> {
    let revision = meta.labels.as_ref()?.get(REVISION_LABEL)?.clone();
    let template = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(STATUS_ANNOTATION))
        .and_then(|s| serde_json::from_str::<InjectionStatus>(s).ok())
        .map(|s| s.template)
        .unwrap_or_else(|| UNKNOWN_TEMPLATE.to_string());
    Some((template, revision))
}

/// A uid as 16 bytes: Kubernetes uids are UUIDs; anything else is hashed.
pub(crate) fn uid_key(uid: &str) -> u128 {
    let hex: String = uid.chars().filter(|c| *c != '-').collect();
    if hex.len() == 32
        && let Ok(value) = u128::from_str_radix(&hex, 16)
    {
        return value;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, uid.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    u128::from_be_bytes(bytes)
}

/// Strings seen (template names, revisions; namespaces in `uninjected`), each stored once.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
}

impl Interner {
    pub(crate) fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        let name: Arc<str> = Arc::from(name);
        self.names.push(name.clone());
        self.ids.insert(name, id);
        id
    }

    /// The id of a string seen before.
    pub(crate) fn find(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    pub(crate) fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map(|n| &**n).unwrap_or_default()
    }

    pub(crate) fn shared(&self, id: u32) -> Arc<str> {
        self.names.get(id as usize).cloned().unwrap_or_else(|| Arc::from(""))
    }
}

/// (template id, revision id).
type Entry = (u32, u32);

/// The injected Pods of one list: template and revision by uid, and how many Pods carry
/// each, kept in step.
#[derive(Debug, Default)]
struct Pods {
    by_uid: HashMap<u128, Entry>,
    /// Pods per template, then per revision: what one template's gauge value is read from.
    counts: HashMap<u32, HashMap<u32, usize>>,
}

impl Pods {
    /// Sets one Pod's entry (`None`: gone, or no longer injected); returns the one it had.
    fn set(&mut self, uid: u128, entry: Option<Entry>) -> Option<Entry> {
        let previous = match entry {
            Some(entry) => self.by_uid.insert(uid, entry),
            None => self.by_uid.remove(&uid),
        };
        if let Some((template, revision)) = previous
            && let Some(revisions) = self.counts.get_mut(&template)
        {
            if let Some(count) = revisions.get_mut(&revision) {
                *count -= 1;
                if *count == 0 {
                    revisions.remove(&revision);
                }
            }
            if revisions.is_empty() {
                self.counts.remove(&template);
            }
        }
        if let Some((template, revision)) = entry {
            *self.counts.entry(template).or_default().entry(revision).or_default() += 1;
        }
        previous
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
    pods: Relisting<Pods>,
    strings: Interner,
}

/// A Pod's uid and entry; `None` without a uid or the revision label.
fn entry_of(pod: &PartialObjectMeta<Pod>, strings: &mut Interner) -> Option<(u128, Entry)> {
    let uid = uid_key(pod.metadata.uid.as_deref()?);
    let (template, revision) = injected(&pod.metadata)?;
    Some((uid, (strings.id(&template), strings.id(&revision))))
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Applies one watch event; says which templates' counts it moved. Pods without the
    /// label (or uid) are ignored.
    pub fn apply(&mut self, event: Event<PartialObjectMeta<Pod>>) -> Moved {
        let strings = &mut self.strings;
        let (previous, now) = match self.pods.step(&event) {
            Step::Listed(pod, fresh) => {
                if let Some((uid, entry)) = entry_of(pod, strings) {
                    fresh.set(uid, Some(entry));
                }
                return Moved::Nothing;
            }
            Step::Apply(pod, live) => {
                let Some(uid) = pod.metadata.uid.as_deref().map(uid_key) else {
                    return Moved::Nothing;
                };
                // Without the label it is no longer an injected Pod.
                let now = entry_of(pod, strings).map(|(_, entry)| entry);
                (live.set(uid, now), now)
            }
            Step::Delete(pod, live) => {
                let Some(uid) = pod.metadata.uid.as_deref().map(uid_key) else {
                    return Moved::Nothing;
                };
                (live.set(uid, None), None)
            }
            Step::Swapped { .. } => return Moved::Everything,
            Step::Nothing => return Moved::Nothing,
        };
        if previous == now {
            return Moved::Nothing;
        }
        let (before, after) = (previous.map(|(t, _)| t), now.map(|(t, _)| t));
        let after = if after == before { None } else { after };
        Moved::Templates(before.map(|t| strings.shared(t)), after.map(|t| strings.shared(t)))
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
            .ids
            .get(template)
            .and_then(|id| self.pods.live().counts.get(id));
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
        let counted = self.pods.live().counts.keys().map(|id| self.strings.name(*id));
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
        let revisions: usize = pods.counts.values().map(|r| r.capacity() * revision).sum();
        pods.by_uid.capacity() * entry + pods.counts.capacity() * template + revisions
    }
}

/// `envoy_injector_pods_stale` as shown. An event sets again only the templates whose
/// counts it moved, so a Pod event costs O(its template's revisions), not O(templates);
/// everything is set again after a relist, on each tick, and when the live templates are
/// another set (an edit changes what is stale without any Pod event).
struct StaleGauge {
    family: Family<TemplateLabels, Gauge>,
    shown: HashSet<String>,
    /// The template set the shown values were computed against.
    against: Option<Arc<TemplateSet>>,
}

impl StaleGauge {
    fn new(family: Family<TemplateLabels, Gauge>) -> StaleGauge {
        StaleGauge {
            family,
            shown: HashSet::new(),
            against: None,
        }
    }

    fn show(&mut self, tracker: &Tracker, live: Arc<TemplateSet>, moved: &Moved) {
        let same_templates = self.against.as_ref().is_some_and(|shown| Arc::ptr_eq(shown, &live));
        match moved {
            Moved::Templates(before, after) if same_templates => {
                for name in [before, after].into_iter().flatten() {
                    self.show_one(name, tracker.stale_count(name, &live));
                }
            }
            Moved::Nothing if same_templates => {}
            // Another template set can change what is stale for every template.
            _ => self.show_all(&tracker.stale_counts(&live)),
        }
        self.against = Some(live);
    }

    /// Sets the gauge to `counts`; template names it held before and no longer counts are
    /// removed, so a deleted template does not linger.
    fn show_all(&mut self, counts: &BTreeMap<String, i64>) {
        for name in self.shown.iter().filter(|n| !counts.contains_key(*n)) {
            self.family.remove(&TemplateLabels { template: name.clone() });
        }
        for (name, count) in counts {
            self.family
                .get_or_create(&TemplateLabels { template: name.clone() })
                .set(*count);
        }
        self.shown = counts.keys().cloned().collect();
    }

    /// Sets one template's series (`None`: removes it), as [`StaleGauge::show_all`] would.
    fn show_one(&mut self, name: &str, count: Option<i64>) {
        let labels = TemplateLabels {
            template: name.to_string(),
        };
        match count {
            Some(count) => {
                self.family.get_or_create(&labels).set(count);
                self.shown.insert(labels.template);
            }
            None => {
                if self.shown.remove(name) {
                    self.family.remove(&labels);
                }
            }
        }
    }
}

/// Feeds a tracker from `events` and keeps `envoy_injector_pods_stale` current (on each
/// event for the templates it moved, wholly every `recount`), until `stop` or the end of
/// the stream.
pub async fn feed<S>(
    events: S,
    live: Arc<LiveTemplates>,
    gauge: Family<TemplateLabels, Gauge>,
    recount: Duration,
    stop: CancellationToken,
) -> Tracker
where
    S: Stream<Item = Result<Event<PartialObjectMeta<Pod>>, watcher::Error>> + Send,
{
    futures::pin_mut!(events);
    let mut tracker = Tracker::new();
    let mut gauge = StaleGauge::new(gauge);
    let mut tick = tokio::time::interval(recount);
    loop {
        let moved = tokio::select! {
            () = stop.cancelled() => return tracker,
            _ = tick.tick() => Moved::Everything,
            event = events.next() => match event {
                None => return tracker,
                Some(Ok(event)) => tracker.apply(event),
                Some(Err(err)) => {
                    warn!(error = %err, "stale-sidecar watch failed; retrying with backoff");
                    Moved::Nothing
                }
            },
        };
        if let Some(live) = live.current() {
            gauge.show(&tracker, live, &moved);
        }
    }
}

/// The metadata-only watch of injected Pods (cluster-wide, label-selected) feeding the
/// gauge, until `stop` (spawned by `serve` in cluster mode).
pub async fn run(client: Client, live: Arc<LiveTemplates>, metrics: Metrics, stop: CancellationToken) -> Tracker {
    let events = watcher::watcher(Api::<PartialObjectMeta<Pod>>::all(client), watch_config()).default_backoff();
    feed(events, live, metrics.pods_stale.clone(), RECOUNT_INTERVAL, stop).await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap as Map;

    use kube::api::ObjectMeta;

    use super::*;

    fn live(templates: &[(&str, &str)]) -> TemplateSet {
        let data: Map<String, String> = templates
            .iter()
            .map(|(name, image)| {
                (
                    name.to_string(),
                    format!("containers:\n- name: {name}\n  image: {image}\n"),
                )
            })
            .collect();
        TemplateSet::from_data("test", &data).unwrap()
    }

    fn pod(uid: &str, template: &str, revision: Option<&str>) -> PartialObjectMeta<Pod> {
        let status = format!(
            r#"{{"template":"{template}","revision":"{}","containers":[],"initContainers":[],"volumes":[],"imagePullSecrets":[],"nativeSidecar":false}}"#,
            revision.unwrap_or_default()
        );
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                labels: revision.map(|r| Map::from([(REVISION_LABEL.to_string(), r.to_string())])),
                annotations: Some(Map::from([(STATUS_ANNOTATION.to_string(), status)])),
                ..ObjectMeta::default()
            },
            _phantom: Default::default(),
        }
    }

    fn uid(n: u32) -> String {
        format!("00000000-0000-0000-0000-{n:012x}")
    }

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
    fn uids_are_sixteen_bytes_and_others_are_hashed() {
        assert_eq!(uid_key("00000000-0000-0000-0000-00000000000a"), 10);
        assert_ne!(uid_key("not-a-uuid"), uid_key("not-a-uuid-either"));
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

    #[test]
    fn the_gauge_drops_templates_that_are_gone() {
        let gauge: Family<TemplateLabels, Gauge> = Family::default();
        let mut shown = StaleGauge::new(gauge.clone());
        shown.show_all(&Map::from([("a".into(), 2), ("b".into(), 0)]));
        let value = |name: &str| gauge.get_or_create(&TemplateLabels { template: name.into() }).get();
        assert_eq!((value("a"), value("b")), (2, 0));
        shown.show_all(&Map::from([("b".into(), 1)]));
        assert_eq!(shown.shown, HashSet::from(["b".to_string()]));
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("pods_stale", "stale", gauge.clone());
        let text = crate::metrics::encode(&registry);
        assert!(text.contains("pods_stale{template=\"b\"} 1"), "{text}");
        assert!(!text.contains("template=\"a\""), "{text}");
    }

    /// The series of a `pods_stale` family, as /metrics shows them.
    fn series(family: &Family<TemplateLabels, Gauge>) -> Map<String, i64> {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("pods_stale", "stale", family.clone());
        crate::metrics::encode(&registry)
            .lines()
            .filter_map(|line| line.strip_prefix("pods_stale{template=\""))
            .map(|rest| {
                let (name, value) = rest.split_once("\"} ").unwrap();
                (name.to_string(), value.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn the_gauge_set_per_event_is_the_gauge_recounted_whole_after_every_event() {
        let first = Arc::new(live(&[("config", "envoy:1"), ("other", "x:1")]));
        let edited = Arc::new(live(&[("config", "envoy:2"), ("other", "x:1")]));
        let without_other = Arc::new(live(&[("config", "envoy:2")]));
        let revision = |set: &TemplateSet, name: &str| Some(set.get(name).unwrap().revision.clone());
        let (old, new, other) = (
            revision(&first, "config"),
            revision(&edited, "config"),
            revision(&first, "other"),
        );
        let injected = |n: u32, template: &str, revision: &Option<String>| pod(&uid(n), template, revision.as_deref());
        let steps: Vec<(&Arc<TemplateSet>, Event<PartialObjectMeta<Pod>>)> = vec![
            (&first, Event::Init),
            (&first, Event::InitApply(injected(0, "config", &old))),
            (&first, Event::InitApply(injected(1, "config", &old))),
            (&first, Event::InitApply(injected(2, "other", &other))),
            (&first, Event::InitApply(injected(3, "retired", &Some("r0".into())))),
            (&first, Event::InitDone),
            (&first, Event::Apply(injected(4, "config", &old))),
            // The template is edited: the next event, whatever it is, shows it.
            (&edited, Event::Apply(injected(5, "config", &new))),
            (&edited, Event::Delete(injected(0, "config", &old))),
            (&edited, Event::Apply(injected(1, "config", &new))),
            (&edited, Event::Apply(injected(2, "other", &None))),
            // A relist that drops `retired` and what changed during it.
            (&edited, Event::Init),
            (&edited, Event::InitApply(injected(1, "config", &new))),
            (&edited, Event::InitApply(injected(6, "other", &other))),
            (&edited, Event::Apply(injected(7, "config", &old))),
            (&edited, Event::Delete(injected(4, "config", &old))),
            (&edited, Event::InitDone),
            (&without_other, Event::Apply(injected(8, "other", &other))),
            (&without_other, Event::Delete(injected(6, "other", &other))),
            (&without_other, Event::Delete(injected(8, "other", &other))),
        ];
        let (per_event, whole) = (Family::default(), Family::default());
        let (mut shown, mut recounted) = (StaleGauge::new(per_event.clone()), StaleGauge::new(whole.clone()));
        let mut tracker = Tracker::new();
        let mut seen = Vec::new();
        for (set, event) in steps {
            let label = format!("{event:?}");
            let moved = tracker.apply(event);
            shown.show(&tracker, set.clone(), &moved);
            recounted.show_all(&tracker.stale_counts(set));
            assert_eq!(series(&per_event), series(&whole), "after {label}");
            seen.push(series(&per_event));
        }
        let at = |step: usize| seen[step].clone();
        let expect = |pairs: &[(&str, i64)]| -> Map<String, i64> {
            pairs.iter().map(|(name, count)| (name.to_string(), *count)).collect()
        };
        assert_eq!(
            at(4),
            expect(&[("config", 0), ("other", 0)]),
            "no Pod counts before the list is done"
        );
        assert_eq!(at(5), expect(&[("config", 0), ("other", 0), ("retired", 1)]));
        assert_eq!(at(7), expect(&[("config", 3), ("other", 0), ("retired", 1)]));
        assert_eq!(
            at(14),
            expect(&[("config", 2), ("other", 0), ("retired", 1)]),
            "p7 counts at once"
        );
        assert_eq!(
            at(16),
            expect(&[("config", 0), ("other", 0)]),
            "the relist dropped p7 and retired"
        );
        assert_eq!(
            at(17),
            expect(&[("config", 0), ("other", 2)]),
            "a removed template's Pods are stale"
        );
        assert_eq!(at(18), expect(&[("config", 0), ("other", 1)]));
        assert_eq!(
            at(19),
            expect(&[("config", 0)]),
            "a template neither live nor carried goes"
        );
    }

    #[tokio::test]
    async fn feed_updates_the_gauge_from_a_watch_stream() {
        let set = live(&[("config", "envoy:1")]);
        let old = "000000000000";
        let events = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pod(&uid(1), "config", Some(old)))),
            Ok(Event::InitApply(pod(
                &uid(2),
                "config",
                Some(&set.get("config").unwrap().revision),
            ))),
            Ok(Event::InitDone),
        ]);
        let gauge: Family<TemplateLabels, Gauge> = Family::default();
        let tracker = feed(
            events,
            Arc::new(LiveTemplates::new(Some(set))),
            gauge.clone(),
            Duration::from_secs(3600),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(tracker.len(), 2);
        assert_eq!(
            gauge
                .get_or_create(&TemplateLabels {
                    template: "config".into()
                })
                .get(),
            1
        );
    }
}
