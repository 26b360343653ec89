//! Pods that escaped injection: opted in now — by their own annotation, or by their
//! namespace's label and not opted out — yet without the `status` annotation the injector
//! writes (created before the label or the webhook configuration, while it was deleted, or
//! admitted unchanged under `failurePolicy: Ignore`).
//!
//! [`standing`] and [`Standing::under`] are the one rule, over Pod metadata: what
//! `inject::policy::decide` says of the Pod's own annotations, with its namespace's label
//! applied apart, so a label change moves the count without any Pod event. `check
//! --missing` applies it to a metadata list (and then reads the candidates' specs, which a
//! metadata watch never sees). [`run`] keeps `envoy_injector_pods_uninjected{namespace}`
//! from a metadata-only watch of every Pod: the [`Tracker`] keeps, per Pod that could
//! count, its uid, namespace (interned) and standing, never the Pod. Nothing here deletes
//! or restarts a Pod: the operator decides.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tracing::warn;

use crate::inject::policy::{self, Annotations};
use crate::inject::{NamespaceOptIn, OptIn};
use crate::metrics::{Metrics, NamespaceLabels};
use crate::relist::{Relisting, Step};
use crate::shutdown::CancellationToken;
use crate::stale::{Interner, uid_key};

/// How often the gauge is recomputed whole besides on events.
pub const RECOUNT_INTERVAL: Duration = Duration::from_secs(10);

/// What a Pod's own metadata says about its injection, before its namespace is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Opted in by its own annotation: it should carry the sidecar wherever it runs.
    Own(OptIn),
    /// No annotation either way: it should carry the sidecar when its namespace is labelled.
    FollowsNamespace,
}

impl Standing {
    /// How the Pod is opted in under its namespace's label; `None`: it is not.
    pub fn under(self, namespace: NamespaceOptIn) -> Option<OptIn> {
        match self {
            Standing::Own(opt_in) => Some(opt_in),
            Standing::FollowsNamespace => (namespace == NamespaceOptIn::Labeled).then_some(OptIn::NamespaceLabel),
        }
    }
}

/// A Pod's standing from its metadata; `None` when it never counts: it carries the
/// `status` annotation (injected), opts out, or is being deleted (its replacement is on
/// the way already).
pub fn standing(meta: &ObjectMeta) -> Option<Standing> {
    if meta.deletion_timestamp.is_some() {
        return None;
    }
    let annotations = meta.annotations.as_ref().map(|a| a as &dyn Annotations);
    // With the label assumed, `decide` answers for the Pod's own annotations alone.
    match policy::decide(annotations, NamespaceOptIn::Labeled) {
        Ok(OptIn::NamespaceLabel) => Some(Standing::FollowsNamespace),
        Ok(own) => Some(Standing::Own(own)),
        Err(_) => None,
    }
}

/// The rule: how the Pod is opted in, when it is and carries no `status` annotation.
pub fn uninjected(meta: &ObjectMeta, namespace: NamespaceOptIn) -> Option<OptIn> {
    standing(meta)?.under(namespace)
}

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

/// The Pods of one list that could count, and their counts per namespace, kept in step.
#[derive(Debug, Default)]
struct Pods {
    by_uid: HashMap<u128, Entry>,
    counts: HashMap<u32, Counts>,
}

impl Pods {
    /// Sets one Pod's entry (`None`: gone, or it no longer counts); returns the one it had.
    fn set(&mut self, uid: u128, entry: Option<Entry>) -> Option<Entry> {
        let previous = match entry {
            Some(entry) => self.by_uid.insert(uid, entry),
            None => self.by_uid.remove(&uid),
        };
        if let Some((namespace, standing)) = previous
            && let Some(counts) = self.counts.get_mut(&namespace)
        {
            let slot = counts.slot(standing);
            *slot = slot.saturating_sub(1);
            if *counts == Counts::default() {
                self.counts.remove(&namespace);
            }
        }
        if let Some((namespace, standing)) = entry {
            *self.counts.entry(namespace).or_default().slot(standing) += 1;
        }
        previous
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
    pods: Relisting<Pods>,
    namespaces: Interner,
    /// The first list is done: before it, nothing is shown.
    listed: bool,
}

/// A Pod's uid and entry; `None` without a uid or namespace, or when it never counts.
fn entry_of(pod: &PartialObjectMeta<Pod>, namespaces: &mut Interner) -> Option<(u128, Entry)> {
    let meta = &pod.metadata;
    let uid = uid_key(meta.uid.as_deref()?);
    let standing = standing(meta)?;
    Some((uid, (namespaces.id(meta.namespace.as_deref()?), standing)))
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Applies one watch event; says which namespace's value it moved.
    pub fn apply(&mut self, event: Event<PartialObjectMeta<Pod>>) -> Moved {
        let namespaces = &mut self.namespaces;
        let (previous, now) = match self.pods.step(&event) {
            Step::Listed(pod, fresh) => {
                if let Some((uid, entry)) = entry_of(pod, namespaces) {
                    fresh.set(uid, Some(entry));
                }
                return Moved::Nothing;
            }
            Step::Apply(pod, live) => {
                let Some(uid) = pod.metadata.uid.as_deref().map(uid_key) else {
                    return Moved::Nothing;
                };
                let now = entry_of(pod, namespaces).map(|(_, entry)| entry);
                (live.set(uid, now), now)
            }
            Step::Delete(pod, live) => {
                let Some(uid) = pod.metadata.uid.as_deref().map(uid_key) else {
                    return Moved::Nothing;
                };
                (live.set(uid, None), None)
            }
            Step::Swapped { .. } => {
                self.listed = true;
                return Moved::Everything;
            }
            Step::Nothing => return Moved::Nothing,
        };
        match previous.or(now) {
            Some((namespace, _)) if previous != now => Moved::Namespace(namespaces.shared(namespace)),
            _ => Moved::Nothing,
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
            .and_then(|id| self.pods.live().counts.get(&id));
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
            .counts
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
        pods.by_uid.capacity() * entry + pods.counts.capacity() * counts
    }
}

/// `envoy_injector_pods_uninjected` as shown: an event sets its namespace's series alone,
/// everything is set again after a relist, a Namespace change and on each tick; a
/// namespace that no longer has a value loses its series.
struct UninjectedGauge {
    family: Family<NamespaceLabels, Gauge>,
    shown: HashSet<String>,
}

impl UninjectedGauge {
    fn new(family: Family<NamespaceLabels, Gauge>) -> UninjectedGauge {
        UninjectedGauge {
            family,
            shown: HashSet::new(),
        }
    }

    fn show(&mut self, tracker: &Tracker, namespaces: &dyn Namespaces, moved: &Moved) {
        if !tracker.is_listed() {
            return;
        }
        match moved {
            Moved::Nothing => {}
            Moved::Namespace(name) => self.show_one(name, tracker.uninjected(name, namespaces)),
            Moved::Everything => self.show_all(&tracker.all_uninjected(namespaces)),
        }
    }

    fn show_all(&mut self, values: &BTreeMap<String, i64>) {
        for name in self.shown.iter().filter(|n| !values.contains_key(*n)) {
            self.family.remove(&NamespaceLabels {
                namespace: name.clone(),
            });
        }
        for (name, value) in values {
            self.family
                .get_or_create(&NamespaceLabels {
                    namespace: name.clone(),
                })
                .set(*value);
        }
        self.shown = values.keys().cloned().collect();
    }

    fn show_one(&mut self, name: &str, value: Option<i64>) {
        let labels = NamespaceLabels {
            namespace: name.to_string(),
        };
        match value {
            Some(value) => {
                self.family.get_or_create(&labels).set(value);
                self.shown.insert(labels.namespace);
            }
            None => {
                if self.shown.remove(name) {
                    self.family.remove(&labels);
                }
            }
        }
    }
}

/// Feeds a tracker from `events` and keeps `gauge` current: per event for its namespace,
/// wholly after a relist, when `namespace_changed` is notified and every `recount`, until
/// `stop` or the end of the stream.
pub async fn feed<S, N>(
    events: S,
    namespaces: N,
    namespace_changed: Arc<Notify>,
    gauge: Family<NamespaceLabels, Gauge>,
    recount: Duration,
    stop: CancellationToken,
) -> Tracker
where
    S: Stream<Item = Result<Event<PartialObjectMeta<Pod>>, watcher::Error>> + Send,
    N: Namespaces,
{
    futures::pin_mut!(events);
    let mut tracker = Tracker::new();
    let mut gauge = UninjectedGauge::new(gauge);
    let mut tick = tokio::time::interval(recount);
    loop {
        let moved = tokio::select! {
            () = stop.cancelled() => return tracker,
            _ = tick.tick() => Moved::Everything,
            () = namespace_changed.notified() => Moved::Everything,
            event = events.next() => match event {
                None => return tracker,
                Some(Ok(event)) => tracker.apply(event),
                Some(Err(err)) => {
                    warn!(error = %err, "uninjected-Pod watch failed; retrying with backoff");
                    Moved::Nothing
                }
            },
        };
        gauge.show(&tracker, &namespaces, &moved);
    }
}

/// The metadata-only watch of every Pod feeding `envoy_injector_pods_uninjected`, until
/// `stop` (spawned by `serve` in cluster mode unless `--watch-uninjected=false`).
/// `namespaces` is the shared cache's store; `namespace_changed` is notified on its events.
pub async fn run(
    client: Client,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    namespace_changed: Arc<Notify>,
    metrics: Metrics,
    stop: CancellationToken,
) -> Tracker {
    let events =
        watcher::watcher(Api::<PartialObjectMeta<Pod>>::all(client), watcher::Config::default()).default_backoff();
    feed(
        events,
        namespaces,
        namespace_changed,
        metrics.pods_uninjected.clone(),
        RECOUNT_INTERVAL,
        stop,
    )
    .await
}

#[cfg(test)]
mod tests;
