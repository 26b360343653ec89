//! The shared cache: one watch per kind, read by admission and by the controller.
//!
//! Every store is a kube-runtime reflector. Their streams are always polled (admission
//! needs them on every replica); the controller gets the Network and member-Pod events
//! through a [`Relay`] only while this replica leads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Lookup, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use tokio::sync::{Mutex, mpsc};
use tracing::{debug, warn};

use crate::metrics::{Metrics, StoreLabels};
use crate::network::crd::Network;
use crate::network::join::NETWORK_LABEL;

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
    pub member_pods: Store<PartialObjectMeta<Pod>>,
}

/// Which stores have completed their initial list.
#[derive(Default)]
pub struct Synced {
    configmap: AtomicBool,
    namespaces: AtomicBool,
    networks: AtomicBool,
    member_pods: AtomicBool,
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

/// The running cache: stores, readiness, and the relays the controller attaches to.
pub struct Cache {
    pub stores: Stores,
    pub synced: Arc<Synced>,
    pub network_events: Arc<Relay<Network>>,
    pub pod_events: Arc<Relay<PartialObjectMeta<Pod>>>,
}

/// ConfigMap changes, for the template reloader: the current object, or `None` once it
/// is deleted (or absent after the initial list).
pub type ConfigMapEvents = mpsc::Receiver<Option<Arc<ConfigMap>>>;

fn strip_managed_fields<K: Resource>(object: &mut K) {
    // Nothing here reads them, and they are often the largest part of an object.
    object.meta_mut().managed_fields = None;
}

fn count<K: Lookup + Clone + 'static>(metrics: &Metrics, name: &'static str, store: &Store<K>)
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    metrics
        .store_objects
        .get_or_create(&StoreLabels { store: name })
        .set(store.len() as i64);
}

/// Drives a reflector stream forever: marks the store synced after its first list and
/// keeps the object-count metric current. Watch errors are retried with backoff.
async fn drive<K, S>(
    stream: S,
    store: Store<K>,
    flag: Arc<Synced>,
    which: fn(&Synced) -> &AtomicBool,
    metrics: Metrics,
    name: &'static str,
) where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send,
{
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::InitDone) => {
                which(&flag).store(true, Ordering::Release);
                debug!(store = name, objects = store.len(), "cache synced");
            }
            Ok(_) => {}
            Err(err) => warn!(store = name, error = %err, "watch failed; retrying with backoff"),
        }
        count(&metrics, name, &store);
    }
}

/// Starts one watch per kind and returns the cache plus the ConfigMap change feed.
/// `namespace` is where the `envoy-injector` ConfigMap lives.
pub fn start(client: Client, namespace: &str, metrics: Metrics) -> (Cache, ConfigMapEvents) {
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
                        synced.configmap.store(true, Ordering::Release);
                        let current = store.state().into_iter().next();
                        let _ = configmap_tx.send(current).await;
                    }
                    Ok(_) => {}
                    Err(err) => warn!(store = "configmap", error = %err, "watch failed; retrying with backoff"),
                }
                count(&metrics, "configmap", &store);
            }
        });
    }

    let (namespaces, namespaces_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let namespace_stream = watcher::watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(strip_managed_fields)
    .reflect(namespaces_writer);
    tokio::spawn(drive(
        namespace_stream,
        namespaces.clone(),
        synced.clone(),
        |s| &s.namespaces,
        metrics.clone(),
        "namespaces",
    ));

    let (networks, networks_writer) = reflector::store_shared::<Network>(SHARED_BUFFER);
    let network_subscription = networks_writer
        .subscribe()
        .expect("a shared store can be subscribed to");
    let network_stream = watcher::watcher(Api::<Network>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(strip_managed_fields)
        .reflect_shared(networks_writer);
    tokio::spawn(drive(
        network_stream,
        networks.clone(),
        synced.clone(),
        |s| &s.networks,
        metrics.clone(),
        "networks",
    ));
    let network_events = Relay::new();
    tokio::spawn(network_events.clone().pump(network_subscription));

    // Only Pods that joined a Network: memory must not grow with the cluster.
    let (member_pods, pods_writer) = reflector::store_shared::<PartialObjectMeta<Pod>>(SHARED_BUFFER);
    let pod_subscription = pods_writer.subscribe().expect("a shared store can be subscribed to");
    let pod_stream = watcher::watcher(
        Api::<PartialObjectMeta<Pod>>::all(client),
        watcher::Config::default().labels(NETWORK_LABEL),
    )
    .default_backoff()
    .modify(strip_managed_fields)
    .reflect_shared(pods_writer);
    tokio::spawn(drive(
        pod_stream,
        member_pods.clone(),
        synced.clone(),
        |s| &s.member_pods,
        metrics,
        "member_pods",
    ));
    let pod_events = Relay::new();
    tokio::spawn(pod_events.clone().pump(pod_subscription));

    let cache = Cache {
        stores: Stores {
            configmap,
            namespaces,
            networks,
            member_pods,
        },
        synced,
        network_events,
        pod_events,
    };
    (cache, configmap_rx)
}
