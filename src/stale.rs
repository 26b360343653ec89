//! Stale sidecars: injected Pods whose template revision is older than the live template's.
//!
//! Every injected Pod carries the label `sidecar.samplecrd.k8s.io/revision=<rev>` next to
//! its `status` annotation, so a metadata-only watch with a label selector sees injected
//! Pods alone. [`Tracker`] keeps, per Pod uid, only the template and revision (interned:
//! two small integers), never the Pods; [`run`] feeds it from that watch and keeps the gauge
//! `envoy_injector_pods_stale{template}` current, also when a template changes. `serve`
//! runs it in cluster mode.

use std::collections::{BTreeMap, HashMap};
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
fn uid_key(uid: &str) -> u128 {
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

/// Strings seen (template names, revisions), each stored once.
#[derive(Debug, Default)]
struct Interner {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
}

impl Interner {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        let name: Arc<str> = Arc::from(name);
        self.names.push(name.clone());
        self.ids.insert(name, id);
        id
    }

    fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map(|n| &**n).unwrap_or_default()
    }
}

/// (template id, revision id).
type Entry = (u32, u32);

/// Injected Pods by uid: template and revision only. Fed with the watch's events.
#[derive(Debug, Default)]
pub struct Tracker {
    pods: HashMap<u128, Entry>,
    /// Pods per (template, revision), kept in step with `pods`.
    counts: HashMap<Entry, usize>,
    /// During a (re)list: the Pods listed so far, swapped in at `InitDone`.
    relist: Option<HashMap<u128, Entry>>,
    strings: Interner,
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Applies one watch event. Pods without the label (or uid) are ignored.
    pub fn apply(&mut self, event: Event<PartialObjectMeta<Pod>>) {
        match event {
            Event::Init => self.relist = Some(HashMap::new()),
            Event::InitApply(pod) => {
                if let Some((uid, entry)) = self.entry(&pod) {
                    self.relist.get_or_insert_with(HashMap::new).insert(uid, entry);
                }
            }
            Event::InitDone => {
                if let Some(listed) = self.relist.take() {
                    self.pods = listed;
                    self.counts.clear();
                    for entry in self.pods.values() {
                        *self.counts.entry(*entry).or_default() += 1;
                    }
                }
            }
            Event::Apply(pod) => {
                let Some(uid) = pod.metadata.uid.as_deref().map(uid_key) else {
                    return;
                };
                match self.entry(&pod) {
                    Some((_, entry)) => {
                        if let Some(old) = self.pods.insert(uid, entry) {
                            self.forget(old);
                        }
                        *self.counts.entry(entry).or_default() += 1;
                    }
                    // The label was removed: no longer an injected Pod.
                    None => self.remove(uid),
                }
            }
            Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref().map(uid_key) {
                    self.remove(uid);
                }
            }
        }
    }

    fn entry(&mut self, pod: &PartialObjectMeta<Pod>) -> Option<(u128, Entry)> {
        let uid = uid_key(pod.metadata.uid.as_deref()?);
        let (template, revision) = injected(&pod.metadata)?;
        Some((uid, (self.strings.id(&template), self.strings.id(&revision))))
    }

    fn remove(&mut self, uid: u128) {
        if let Some(old) = self.pods.remove(&uid) {
            self.forget(old);
        }
    }

    fn forget(&mut self, entry: Entry) {
        if let Some(count) = self.counts.get_mut(&entry) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&entry);
            }
        }
    }

    /// Injected Pods known.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Stale Pods per template name: every live template (0 when none is stale) and every
    /// template name stale Pods carry.
    pub fn stale_counts(&self, live: &TemplateSet) -> BTreeMap<String, i64> {
        let mut out: BTreeMap<String, i64> = live.names().map(|n| (n.to_string(), 0)).collect();
        for (&(template, revision), &count) in &self.counts {
            let (template, revision) = (self.strings.name(template), self.strings.name(revision));
            if is_stale(template, revision, live) {
                *out.entry(template.to_string()).or_default() += count as i64;
            }
        }
        out
    }

    /// Memory held for the Pods (map entries; the interned strings are a few per template
    /// edit), for the scale benchmark.
    pub fn approximate_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(u128, Entry)>() + 1;
        self.pods.capacity() * entry + self.counts.capacity() * (std::mem::size_of::<(Entry, usize)>() + 1)
    }
}

/// Sets the gauge to `counts`; template names it held before and no longer counts are
/// removed, so a deleted template does not linger.
pub fn update_gauge(gauge: &Family<TemplateLabels, Gauge>, counts: &BTreeMap<String, i64>, previous: &mut Vec<String>) {
    for name in previous.iter().filter(|n| !counts.contains_key(*n)) {
        gauge.remove(&TemplateLabels { template: name.clone() });
    }
    for (name, count) in counts {
        gauge
            .get_or_create(&TemplateLabels { template: name.clone() })
            .set(*count);
    }
    *previous = counts.keys().cloned().collect();
}

/// Feeds a tracker from `events` and keeps `envoy_injector_pods_stale` current (on each
/// event and every `recount`), until `stop` or the end of the stream.
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
    let mut shown = Vec::new();
    let mut tick = tokio::time::interval(recount);
    loop {
        tokio::select! {
            () = stop.cancelled() => return tracker,
            _ = tick.tick() => {}
            event = events.next() => match event {
                None => return tracker,
                Some(Ok(event)) => tracker.apply(event),
                Some(Err(err)) => warn!(error = %err, "stale-sidecar watch failed; retrying with backoff"),
            },
        }
        if let Some(live) = live.current() {
            update_gauge(&gauge, &tracker.stale_counts(&live), &mut shown);
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
        let mut shown = Vec::new();
        update_gauge(&gauge, &Map::from([("a".into(), 2), ("b".into(), 0)]), &mut shown);
        let value = |name: &str| gauge.get_or_create(&TemplateLabels { template: name.into() }).get();
        assert_eq!((value("a"), value("b")), (2, 0));
        update_gauge(&gauge, &Map::from([("b".into(), 1)]), &mut shown);
        assert_eq!(shown, ["b"]);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("pods_stale", "stale", gauge.clone());
        let text = crate::metrics::encode(&registry);
        assert!(text.contains("pods_stale{template=\"b\"} 1"), "{text}");
        assert!(!text.contains("template=\"a\""), "{text}");
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
