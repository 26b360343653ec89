//! The Network controller: a kube-runtime [`Controller`] over the shared Network store,
//! also triggered by member Pods (their attached count) and by the backend objects it owns
//! (drift repair).
//!
//! One reconcile, for the Network as the store holds it:
//!
//! 1. finalizer [`FINALIZER`] (kube-runtime's `finalizer` helper): added first; on deletion
//!    the backend state is removed ([`Backend::remove`]), a `Cleanup` Event is published and
//!    the finalizer is dropped;
//! 2. spec validation ([`subnet::validate`]) → Ready=False `InvalidSpec`; overlap with an
//!    earlier Network of the namespace → Ready=False `Overlaps` (no backend call for either);
//! 3. [`Backend::ensure`]: `Unavailable` → Ready=False `BackendUnavailable`, `Conflict` →
//!    Ready=False `BackendConflict` (both retried with per-object backoff); any other error
//!    is retried with backoff and leaves the status alone (a transient API error must not
//!    flip a Ready Network, admission would start denying its Pods);
//! 4. status (`conditions`, `observedGeneration`, `attachedPods`, `backendRef`): patched
//!    (merge patch on the status subresource) only when it differs from the stored status;
//!    `lastTransitionTime` moves only when the Ready status flips;
//! 5. an Event when the Ready condition changes (status, reason or message), never on a
//!    no-op resync.
//!
//! A resync that changes nothing makes read requests only (the backend's GET) and no write.
//! Every successful reconcile is requeued after [`RESYNC`] as a periodic drift check.

mod reconcile;
mod status;
mod watch;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::channel::{mpsc, oneshot};
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Controller, Error as ControllerError};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use super::backend::Backend;
use super::crd::Network;
use crate::backoff::Exponential;
use crate::events::EventSink;
use crate::metrics::Metrics;

pub use reconcile::{Error, error_policy, reconcile};
pub use status::*;
pub use watch::network_of_pod;

/// `reportingController` of the Events and field manager of the status patches.
pub const CONTROLLER_NAME: &str = crate::NAME;
/// Requeue after a successful reconcile: the periodic drift check.
pub const RESYNC: Duration = Duration::from_secs(300);
/// Retries of a failed reconcile (per Network) and of the owned-object watch: 1 s,
/// doubling per consecutive failure, at most 5 min.
pub const BACKOFF: Exponential = Exponential::new(Duration::from_secs(1), Duration::from_secs(300));
/// A failure streak of the owned-object watch ends after this long without an error.
pub const BACKOFF_QUIET: Duration = Duration::from_secs(600);

/// Everything a reconcile reads or writes. Build it with [`Context::new`].
pub struct Context {
    pub client: Client,
    pub backend: Arc<dyn Backend>,
    pub events: Arc<dyn EventSink>,
    pub networks: Store<Network>,
    pub member_pods: Store<PartialObjectMeta<Pod>>,
    pub metrics: Metrics,
    /// Consecutive failures per Network, for the exponential backoff of [`error_policy`].
    failures: Mutex<HashMap<ObjectRef<Network>, u32>>,
    /// Re-evaluation requests for the other Networks of a namespace (overlaps), consumed
    /// by [`run`].
    requeue_tx: mpsc::UnboundedSender<ObjectRef<Network>>,
    requeue_rx: Mutex<Option<mpsc::UnboundedReceiver<ObjectRef<Network>>>>,
}

impl Context {
    pub fn new(
        client: Client,
        backend: Arc<dyn Backend>,
        events: Arc<dyn EventSink>,
        networks: Store<Network>,
        member_pods: Store<PartialObjectMeta<Pod>>,
        metrics: Metrics,
    ) -> Context {
        let (requeue_tx, requeue_rx) = mpsc::unbounded();
        Context {
            client,
            backend,
            events,
            networks,
            member_pods,
            metrics,
            failures: Mutex::default(),
            requeue_tx,
            requeue_rx: Mutex::new(Some(requeue_rx)),
        }
    }

    /// Consecutive failed reconciles of this Network (0 after a success).
    pub fn failures(&self, network: &ObjectRef<Network>) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(network)
            .copied()
            .unwrap_or(0)
    }

    fn record_failure(&self, network: ObjectRef<Network>) -> u32 {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let count = failures.entry(network).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    fn reset_failures(&self, network: &ObjectRef<Network>) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(network);
    }

    /// Asks for a reconcile of every other Network of `network`'s namespace: whether they
    /// overlap depends on this one.
    fn requeue_siblings(&self, network: &Network) {
        let namespace = network.namespace();
        let name = network.name_any();
        for other in self.networks.state() {
            if other.namespace() == namespace && other.name_any() != name {
                // Fails only when `run` has ended; nothing to do then.
                let _ = self.requeue_tx.unbounded_send(ObjectRef::from_obj(&*other));
            }
        }
    }
}

/// Runs the Network controller until `shutdown` resolves, then finishes the reconciles in
/// flight and returns.
///
/// * `networks`: trigger stream of the shared Network reflector (`Writer::subscribe()`);
///   `ctx.networks` is that reflector's store. The caller prepends
///   `futures::stream::iter(store.state())` to it, so every Network that already exists is
///   reconciled once at start (a shared subscriber only sees events after it subscribed).
/// * `member_pods`: trigger stream of the member-Pod reflector; a Pod triggers the Network
///   its label names in its namespace (attached Pod count).
/// * the backend's owned objects ([`Backend::owned_resource`], the NADs for Multus) are
///   watched here (metadata only, our label), so an edited or deleted NAD is repaired. When
///   their CRD is missing that watch backs off (up to [`BACKOFF_MAX`]) and logs once per
///   failure streak; it never ends the controller.
/// * a Network whose status changes asks for a reconcile of the other Networks of its
///   namespace (overlaps depend on each other).
///
/// The applier waits until `ctx.networks` is ready before the first reconcile. Each result
/// is logged: successes at debug, failures at warn (they are retried with backoff).
pub async fn run(
    ctx: Arc<Context>,
    networks: impl Stream<Item = Arc<Network>> + Send + 'static,
    member_pods: impl Stream<Item = Arc<PartialObjectMeta<Pod>>> + Send + 'static,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut controller = Controller::for_shared_stream(networks, ctx.networks.clone())
        .watches_shared_stream(member_pods, |pod| network_of_pod(&pod));
    let requeue = ctx.requeue_rx.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(requeue) = requeue {
        controller = controller.reconcile_on(requeue);
    }
    if let Some(resource) = ctx.backend.owned_resource() {
        controller = controller.owns_stream_with(watch::owned_objects(ctx.client.clone(), &resource), resource);
    }
    // `graceful_shutdown_on` wants a `Sync` future; `shutdown` need only be `Send`.
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let stopper = tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(());
    });
    tracing::info!(backend = ctx.backend.name(), "Network controller starting");
    controller
        .graceful_shutdown_on(stop_rx.map(|_| ()))
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            match result {
                Ok((network, action)) => tracing::debug!(%network, ?action, "Network reconciled"),
                Err(ControllerError::ReconcilerFailed(error, network)) => {
                    tracing::warn!(%network, error = %error, "Network reconcile failed; retrying with backoff")
                }
                Err(ControllerError::ObjectNotFound(network)) => {
                    tracing::debug!(%network, "Network gone before its reconcile")
                }
                Err(error) => tracing::warn!(%error, "Network controller error"),
            }
            futures::future::ready(())
        })
        .await;
    stopper.abort();
    tracing::info!("Network controller stopped");
}

/// Runs the controller on the shared cache until `stop` resolves (the leader supervisor
/// calls this each time this replica starts leading).
///
/// The snapshot rule: attach to the cache's event relays *before* reading the store, so
/// an event in between is seen twice (the controller dedups), never lost; then every
/// Network the store holds is reconciled once, as a shared subscriber only sees events
/// after it subscribed.
pub async fn run_on_cache(
    ctx: Arc<Context>,
    cache: &crate::cache::Cache,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let network_events = cache.network_events.attach().await;
    let pod_events = cache.pod_events.attach().await;
    let networks = futures::stream::iter(cache.stores.networks.state()).chain(network_events);
    run(ctx, networks, pod_events, stop).await;
    cache.network_events.detach().await;
    cache.pod_events.detach().await;
}
