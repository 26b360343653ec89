//! The Network controller: a kube-runtime [`Controller`] over the shared Network store,
//! also triggered by the cache's indexes (a senior Network's CIDR changed, a member Pod came
//! or went) and by the backend objects it owns (drift repair).
//!
//! One reconcile, for the Network as the store holds it (or as our last write left it, when
//! the store has not caught up: [`writes`]):
//!
//! 1. finalizer [`FINALIZER`] ([`finalizer`]): added by server-side apply, then the same
//!    pass goes on; on deletion the backend state is removed ([`Backend::remove`]), a
//!    `Cleanup` Event is published and the finalizer is dropped;
//! 2. spec validation ([`subnet::validate`]) → Ready=False `InvalidSpec`; overlap with a
//!    senior Network of the namespace ([`OverlapIndex`]) → Ready=False `Overlaps` (no backend
//!    call for either);
//! 3. [`Backend::ensure`]: `Unavailable` → Ready=False `BackendUnavailable`, `Conflict` →
//!    Ready=False `BackendConflict` (both retried with per-object backoff); any other error
//!    is retried with backoff and leaves the status alone (a transient API error must not
//!    flip a Ready Network, admission would start denying its Pods);
//! 4. status (`conditions`, `observedGeneration`, `attachedPods` from the member index,
//!    `backendRef`): patched (merge patch on the status subresource) only when it differs
//!    from the stored status; `lastTransitionTime` moves only when the Ready status flips;
//! 5. an Event when the Ready condition changes (status, reason or message), never on a
//!    no-op resync.
//!
//! A converged Network costs no API call at all (the Multus backend compares with its NAD
//! index in memory), so a restart writes nothing and reads nothing per Network. Every
//! successful reconcile is requeued after [`RESYNC`] as a periodic drift check.
//!
//! [`subnet::validate`]: crate::network::subnet::validate
//! [`FINALIZER`]: crate::network::crd::FINALIZER
//! [`OverlapIndex`]: crate::network::overlaps::OverlapIndex

mod context;
mod finalizer;
mod indexes;
pub mod queue;
mod reconcile;
mod settings;
mod status;
mod watch;
mod writes;

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::controller::{Config, Controller, Error as ControllerError};

use crate::network::crd::Network;
use crate::network::nad_index::NadIndex;
use crate::shutdown::CancellationToken;

pub use context::Context;
pub use indexes::Indexes;
pub use reconcile::{Error, error_policy, reconcile};
pub use settings::{BACKOFF, BACKOFF_QUIET, CONCURRENCY, CONTROLLER_NAME, DEBOUNCE, RESYNC};
pub use status::*;

/// Runs the Network controller until `stop` is cancelled, then finishes the reconciles in
/// flight and returns.
///
/// * `networks`: trigger stream of the shared Network reflector (`Writer::subscribe()`);
///   `ctx.networks` is that reflector's store. The caller prepends
///   `futures::stream::iter(store.state())` to it, so every Network that already exists is
///   reconciled once at start (a shared subscriber only sees events after it subscribed).
///   Events that only show back our own writes are dropped ([`writes`]).
/// * the requests of the cache's indexes (`ctx.indexes.pending`): collected from the start
///   of this call to its end, each Network at most once.
/// * the backend's owned objects ([`Backend::owned_resource`], the NADs for Multus) are
///   watched here (our label) into the backend's [`NadIndex`]: an edited or deleted NAD
///   requeues its Network. Reconciles wait for that watch's first list (or first failure),
///   so a converged Network is never taken for a missing NAD. When the CRD is missing the
///   watch backs off (up to [`BACKOFF`]'s max) and logs once per failure streak; it never
///   ends the controller.
///
/// At most [`CONCURRENCY`] reconciles run at once, requests [`DEBOUNCE`]d per Network.
/// Each result is logged: successes at debug, failures at warn (retried with backoff).
pub async fn run(
    ctx: Arc<Context>,
    networks: impl Stream<Item = Arc<Network>> + Send + 'static,
    stop: CancellationToken,
) {
    let requests = ctx.indexes.pending.start();
    let owned = ctx.backend.owned_resource().map(|resource| {
        let index = ctx.backend.nad_index().unwrap_or_else(|| Arc::new(NadIndex::new()));
        let follow = watch::follow_owned(ctx.client.clone(), resource, index.clone(), ctx.indexes.pending.clone());
        (index, tokio::spawn(follow))
    });
    let stopped_early = match &owned {
        Some((index, _)) => tokio::select! {
            _ = index.settled() => false,
            () = stop.cancelled() => true,
        },
        None => false,
    };
    if !stopped_early {
        tracing::info!(backend = ctx.backend.name(), "Network controller starting");
        let echoes = ctx.clone();
        let networks = networks.filter(move |network| futures::future::ready(echoes.written.is_trigger(network)));
        Controller::for_shared_stream(networks, ctx.networks.clone())
            .with_config(Config::default().concurrency(CONCURRENCY).debounce(DEBOUNCE))
            .reconcile_on(requests)
            .graceful_shutdown_on(stop.cancelled_owned())
            .run(reconcile, error_policy, ctx.clone())
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
    }
    if let Some((_, follow)) = owned {
        follow.abort();
    }
    ctx.indexes.pending.stop();
    tracing::info!("Network controller stopped");
}

/// Runs the controller on the shared cache until `stop` is cancelled (the leader
/// supervisor calls this each time this replica starts leading, with a child token of the
/// process's shutdown token).
///
/// First the Network store and the member-Pod index must have listed: a reconcile before
/// that would count no Pods and write a wrong `attachedPods`. Then the snapshot rule:
/// attach to the Network relay *before* reading the store, so an event in between is seen
/// twice (the controller dedups), never lost; every Network the store holds is reconciled
/// once, as a shared subscriber only sees events after it subscribed.
pub async fn run_on_cache(ctx: Arc<Context>, cache: &crate::cache::Cache, stop: CancellationToken) {
    tokio::select! {
        () = cache.synced.wait_for_controller() => {}
        () = stop.cancelled() => return,
    }
    let network_events = cache.network_events.attach().await;
    let networks = futures::stream::iter(cache.stores.networks.state()).chain(network_events);
    run(ctx, networks, stop).await;
    cache.network_events.detach().await;
}
