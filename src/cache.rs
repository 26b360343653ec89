//! The shared cache: one watch per kind, read by admission and by the controller.
//!
//! Every watch is always followed (admission needs the stores on every replica). Its events
//! also keep the controller's indexes current, here in the one loop per watch that sees
//! every event, `Delete` and relists included:
//!
//! | watch | kept | indexes |
//! |---|---|---|
//! | ConfigMap `envoy-injector` | store (managedFields stripped) | — |
//! | Namespaces, metadata only | store: name and labels | — |
//! | Networks | store of [`slim_network`]s, shared | the controller's, through a [`Follower`] |
//! | Pods, metadata only, as [`PodIndexWatch`] selects them | nothing but the index | the controller's member index, through a [`Follower`] |
//!
//! The indexes are the controller's: it hands them in as [`Followers`], so the cache names
//! none of its types. The controller gets the Network events through a [`Relay`] only while
//! this replica leads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::core::{ObjectMeta, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use tokio::sync::{Mutex, Notify, mpsc};
use tracing::{debug, warn};

use crate::live::reload::ConfigMapEvents;
use crate::metrics::{Metrics, StoreLabels};
use crate::network::crd::Network;

/// Name of the ConfigMap holding the templates.
pub const CONFIGMAP_NAME: &str = crate::NAME;
/// Buffer of the shared reflectors' fan-out channel.
const SHARED_BUFFER: usize = 1024;

/// Read handles to every store, cheap to clone.
#[derive(Clone)]
pub struct Stores {
    pub configmap: Store<ConfigMap>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub networks: Store<Network>,
}

/// What follows a watch besides its store: an index kept current from every event, the
/// relists included (one watch feeds every index that needs its kind).
pub trait Follower<K>: Send + Sync {
    fn observe(&self, event: &Event<K>);
}

/// A watch of Pods' metadata kept only as an index: memory must not grow with the cluster.
pub struct PodIndexWatch {
    /// The label selector of the watch.
    pub labels: &'static str,
    /// The field selector of the watch.
    pub fields: &'static str,
    pub index: Arc<dyn Follower<PartialObjectMeta<Pod>>>,
    /// How many Pods the index holds, for the store gauge.
    pub count: Arc<dyn Fn() -> usize + Send + Sync>,
}

/// The indexes the cache keeps current for others.
pub struct Followers {
    pub networks: Arc<dyn Follower<Network>>,
    pub member_pods: PodIndexWatch,
}

/// Which watches have completed their initial list.
#[derive(Default)]
pub struct Synced {
    configmap: AtomicBool,
    namespaces: AtomicBool,
    networks: AtomicBool,
    member_pods: AtomicBool,
    changed: Notify,
}

impl Synced {
    /// `Err` names the stores still listing.
    pub fn check(&self) -> Result<(), String> {
        let pending: Vec<&str> = [
            ("configmap", &self.configmap),
            ("namespaces", &self.namespaces),
            ("networks", &self.networks),
            ("member_pods", &self.member_pods),
        ]
        .into_iter()
        .filter(|(_, flag)| !flag.load(Ordering::Acquire))
        .map(|(name, _)| name)
        .collect();
        if pending.is_empty() {
            Ok(())
        } else {
            Err(format!("caches not synced yet: {}", pending.join(", ")))
        }
    }

    fn mark(&self, which: fn(&Synced) -> &AtomicBool) {
        if !which(self).swap(true, Ordering::AcqRel) {
            self.changed.notify_waiters();
        }
    }

    /// Waits until what the controller reads has listed: the Networks and the member Pods.
    pub async fn wait_for_controller(&self) {
        loop {
            let changed = self.changed.notified();
            futures::pin_mut!(changed);
            // Registered before the check, so a `mark` in between is not missed.
            changed.as_mut().enable();
            if self.networks.load(Ordering::Acquire) && self.member_pods.load(Ordering::Acquire) {
                return;
            }
            changed.await;
        }
    }
}

/// Forwards a shared reflector's events to the controller while it runs, and drains them
/// otherwise, so an idle replica never holds the reflector back.
pub struct Relay<K> {
    target: Mutex<Option<mpsc::Sender<Arc<K>>>>,
}

impl<K: Send + Sync + 'static> Relay<K> {
    fn new() -> Arc<Relay<K>> {
        Arc::new(Relay {
            target: Mutex::new(None),
        })
    }

    /// Starts forwarding; the stream ends when [`Relay::detach`] is called.
    pub async fn attach(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (tx, rx) = mpsc::channel(SHARED_BUFFER);
        *self.target.lock().await = Some(tx);
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
    }

    pub async fn detach(&self) {
        *self.target.lock().await = None;
    }

    async fn pump(self: Arc<Self>, events: impl Stream<Item = Arc<K>> + Send) {
        futures::pin_mut!(events);
        while let Some(item) = events.next().await {
            let target = self.target.lock().await.clone();
            if let Some(tx) = target {
                // The controller stopped between the lock and the send: drop the event.
                let _ = tx.send(item).await;
            }
        }
    }
}

/// The running cache: stores, readiness and the relay the controller attaches to.
pub struct Cache {
    pub stores: Stores,
    pub synced: Arc<Synced>,
    pub network_events: Arc<Relay<Network>>,
    /// Notified after each Namespace event (the store already holds it), for what follows
    /// Namespace labels outside admission (`uninjected`). One stored permit: bursts coalesce.
    pub namespace_changed: Arc<Notify>,
}

fn strip_managed_fields<K: Resource>(object: &mut K) {
    // Nothing here reads them, and they are often the largest part of an object.
    object.meta_mut().managed_fields = None;
}

/// A Network as the store keeps it: what admission and the controller read (spec, status,
/// and metadata name, namespace, uid, generation, resourceVersion, creation and deletion
/// timestamps, finalizers), nothing else. Labels, annotations (none is read; kubectl's
/// `last-applied-configuration` repeats the whole spec), ownerReferences and managedFields
/// are dropped, so each Network costs a known, small number of bytes.
pub fn slim_network(mut network: Network) -> Network {
    slim_network_in_place(&mut network);
    network
}

fn slim_network_in_place(network: &mut Network) {
    let meta = &mut network.metadata;
    meta.managed_fields = None;
    meta.labels = None;
    meta.owner_references = None;
    meta.generate_name = None;
    meta.self_link = None;
    meta.deletion_grace_period_seconds = None;
    meta.annotations = None;
}

/// A Namespace as the store keeps it: name and labels (the injection opt-in label).
fn slim_namespace(namespace: &mut PartialObjectMeta<Namespace>) {
    let meta = &mut namespace.metadata;
    *meta = ObjectMeta {
        name: meta.name.take(),
        labels: meta.labels.take(),
        resource_version: meta.resource_version.take(),
        ..ObjectMeta::default()
    };
}

/// Follows one watch forever: `observe` sees every event (the indexes), the synced flag is
/// set after the first list, the object-count metric follows `count`. Watch errors are
/// retried with the watch's backoff.
async fn drive<K, S>(
    stream: S,
    synced: Arc<Synced>,
    which: fn(&Synced) -> &AtomicBool,
    name: &'static str,
    mut observe: impl FnMut(&Event<K>) + Send,
    count: impl Fn() -> usize + Send,
    metrics: Metrics,
) where
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send,
{
    let gauge = metrics
        .store_objects
        .get_or_create(&StoreLabels { store: name })
        .clone();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                observe(&event);
                if matches!(event, Event::InitDone) {
                    synced.mark(which);
                    debug!(store = name, objects = count(), "cache synced");
                }
            }
            Err(err) => warn!(store = name, error = %err, "watch failed; retrying with backoff"),
        }
        gauge.set(count() as i64);
    }
}

/// Starts one watch per kind and returns the cache plus the ConfigMap change feed.
/// `namespace` is where the `envoy-injector` ConfigMap lives; `followers` are kept current
/// from the Network and member-Pod watches. Without them (`serve --networks=false`)
/// neither Networks nor member Pods are watched: their stores stay empty and count as
/// synced, so no Network CRD is needed.
pub fn start(
    client: Client,
    namespace: &str,
    metrics: Metrics,
    followers: Option<Followers>,
) -> (Cache, ConfigMapEvents) {
    let synced = Arc::new(Synced::default());

    let (configmap, configmap_writer) = reflector::store::<ConfigMap>();
    let (configmap_tx, configmap_rx) = mpsc::channel(16);
    let configmap_stream = watcher::watcher(
        Api::<ConfigMap>::namespaced(client.clone(), namespace),
        watcher::Config::default().fields(&format!("metadata.name={CONFIGMAP_NAME}")),
    )
    .default_backoff()
    .modify(strip_managed_fields)
    .reflect(configmap_writer);
    {
        let store = configmap.clone();
        let synced = synced.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            futures::pin_mut!(configmap_stream);
            while let Some(event) = configmap_stream.next().await {
                match event {
                    Ok(Event::InitDone) | Ok(Event::Apply(_)) | Ok(Event::Delete(_)) => {
                        synced.mark(|s| &s.configmap);
                        let current = store.state().into_iter().next();
                        let _ = configmap_tx.send(current).await;
                    }
                    Ok(_) => {}
                    Err(err) => warn!(store = "configmap", error = %err, "watch failed; retrying with backoff"),
                }
                metrics
                    .store_objects
                    .get_or_create(&StoreLabels { store: "configmap" })
                    .set(store.len() as i64);
            }
        });
    }

    let (namespaces, namespaces_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let namespace_stream = watcher::watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(slim_namespace)
    .reflect(namespaces_writer);
    let store = namespaces.clone();
    let namespace_changed = Arc::new(Notify::new());
    let changed = namespace_changed.clone();
    tokio::spawn(drive(
        namespace_stream,
        synced.clone(),
        |s| &s.namespaces,
        "namespaces",
        move |_| changed.notify_one(),
        move || store.len(),
        metrics.clone(),
    ));

    let network_events = Relay::new();
    let Some(followers) = followers else {
        synced.mark(|s| &s.networks);
        synced.mark(|s| &s.member_pods);
        let cache = Cache {
            stores: Stores {
                configmap,
                namespaces,
                networks: reflector::store::<Network>().0,
            },
            synced,
            network_events,
            namespace_changed,
        };
        return (cache, configmap_rx);
    };
    let (networks, networks_writer) = reflector::store_shared::<Network>(SHARED_BUFFER);
    let network_subscription = networks_writer
        .subscribe()
        .expect("a shared store can be subscribed to");
    let network_stream = watcher::watcher(Api::<Network>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(slim_network_in_place)
        .reflect_shared(networks_writer);
    let (network_index, store) = (followers.networks, networks.clone());
    tokio::spawn(drive(
        network_stream,
        synced.clone(),
        |s| &s.networks,
        "networks",
        move |event| network_index.observe(event),
        move || store.len(),
        metrics.clone(),
    ));
    tokio::spawn(network_events.clone().pump(network_subscription));

    // Metadata only (`PartialObjectMeta` requests), as selected, and nothing stored but the
    // index: memory must not grow with the cluster.
    let PodIndexWatch {
        labels,
        fields,
        index,
        count,
    } = followers.member_pods;
    let pod_stream = watcher::watcher(
        Api::<PartialObjectMeta<Pod>>::all(client),
        watcher::Config::default().labels(labels).fields(fields),
    )
    .default_backoff();
    tokio::spawn(drive(
        pod_stream,
        synced.clone(),
        |s| &s.member_pods,
        "member_pods",
        move |event| index.observe(event),
        move || count(),
        metrics,
    ));

    let cache = Cache {
        stores: Stores {
            configmap,
            namespaces,
            networks,
        },
        synced,
        network_events,
        namespace_changed,
    };
    (cache, configmap_rx)
}
