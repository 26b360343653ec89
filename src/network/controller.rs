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

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::channel::{mpsc, oneshot};
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller, Error as ControllerError};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;
use tracing::Instrument;

use super::backend::{Backend, BackendError};
use super::crd::{FINALIZER, Network, NetworkCondition, NetworkStatus, READY};
use super::nad::{MANAGED_BY_LABEL, MANAGER};
use super::subnet;
use crate::inject::NETWORK_ANNOTATION;
use crate::metrics::{Metrics, ReconcileLabels, ReconcileResult};

/// Label that member Pods carry (same key as the annotation that asks to join).
pub const NETWORK_LABEL: &str = NETWORK_ANNOTATION;
/// `reportingController` of the Events and field manager of the status patches.
pub const CONTROLLER_NAME: &str = "envoy-injector";
/// Requeue after a successful reconcile: the periodic drift check.
pub const RESYNC: Duration = Duration::from_secs(300);
/// First retry after a failure; doubles per consecutive failure of the same Network.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest retry delay, for a failing reconcile and for the owned-object watch.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Condition reasons (and Event reasons).
pub const REASON_READY: &str = "Ready";
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
pub const REASON_OVERLAPS: &str = "Overlaps";
pub const REASON_BACKEND_UNAVAILABLE: &str = "BackendUnavailable";
pub const REASON_BACKEND_CONFLICT: &str = "BackendConflict";
pub const REASON_CLEANUP: &str = "Cleanup";

/// Everything a reconcile reads or writes. Build it with [`Context::new`].
pub struct Context {
    pub client: Client,
    pub backend: Arc<dyn Backend>,
    pub recorder: Recorder,
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
        recorder: Recorder,
        networks: Store<Network>,
        member_pods: Store<PartialObjectMeta<Pod>>,
        metrics: Metrics,
    ) -> Context {
        let (requeue_tx, requeue_rx) = mpsc::unbounded();
        Context {
            client,
            backend,
            recorder,
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

/// The Recorder the controller publishes Events with (`reportingController:
/// envoy-injector`, instance = host name, i.e. the Pod name in a cluster).
pub fn recorder(client: Client) -> Recorder {
    Recorder::new(client, Reporter::from(CONTROLLER_NAME))
}

/// Why a reconcile failed. Each one is retried with per-object exponential backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Network {name:?} has no metadata.namespace: expected a namespaced object from the API server")]
    NoNamespace { name: String },
    #[error("patching the status of Network {reference} failed: {source}")]
    PatchStatus {
        reference: String,
        #[source]
        source: kube::Error,
    },
    #[error("backend {backend} is unavailable for Network {reference}: {message}")]
    BackendUnavailable {
        backend: &'static str,
        reference: String,
        message: String,
    },
    #[error("backend {backend} cannot realise Network {reference}: {message}")]
    BackendConflict {
        backend: &'static str,
        reference: String,
        message: String,
    },
    #[error("backend {backend} failed for Network {reference}: {source}")]
    Backend {
        backend: &'static str,
        reference: String,
        #[source]
        source: BackendError,
    },
    #[error("finalizer {FINALIZER} of Network {reference}: {source}")]
    Finalizer {
        reference: String,
        #[source]
        source: Box<FinalizerError<Error>>,
    },
}

/// The outcome the Ready condition reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Readiness {
    pub fn ready(message: impl Into<String>) -> Readiness {
        Readiness {
            ready: true,
            reason: REASON_READY,
            message: message.into(),
        }
    }

    pub fn not_ready(reason: &'static str, message: impl Into<String>) -> Readiness {
        Readiness {
            ready: false,
            reason,
            message: message.into(),
        }
    }
}

/// The Ready condition for `readiness`, keeping the previous `lastTransitionTime` when
/// the condition's status (True/False) did not change.
pub fn ready_condition(
    previous: Option<&NetworkCondition>,
    readiness: &Readiness,
    generation: Option<i64>,
    now: &str,
) -> NetworkCondition {
    let status = if readiness.ready { "True" } else { "False" };
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => now.to_string(),
    };
    NetworkCondition {
        type_: READY.to_string(),
        status: status.to_string(),
        reason: readiness.reason.to_string(),
        message: readiness.message.clone(),
        last_transition_time,
        observed_generation: generation,
    }
}

/// The status the controller wants, from the current one: the Ready condition replaced in
/// place (other conditions kept), the rest recomputed.
pub fn desired_status(
    current: &NetworkStatus,
    readiness: &Readiness,
    generation: Option<i64>,
    attached_pods: i64,
    backend_ref: Option<String>,
    now: &str,
) -> NetworkStatus {
    let previous = current.conditions.iter().find(|c| c.type_ == READY);
    let ready = ready_condition(previous, readiness, generation, now);
    let mut conditions = current.conditions.clone();
    match conditions.iter_mut().find(|c| c.type_ == READY) {
        Some(slot) => *slot = ready,
        None => conditions.push(ready),
    }
    NetworkStatus {
        conditions,
        observed_generation: generation,
        attached_pods,
        backend_ref,
    }
}

/// The merge patch that sets `status` to exactly `desired`: absent optional fields are
/// sent as `null` so a stale value is removed, `conditions` is sent whole.
pub fn status_patch(desired: &NetworkStatus) -> Value {
    let mut status = serde_json::to_value(desired).unwrap_or_else(|_| Value::Object(Default::default()));
    if let Value::Object(map) = &mut status {
        for key in ["conditions", "observedGeneration", "backendRef"] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    serde_json::json!({ "status": status })
}

/// True when the Ready condition says something new (status, reason or message): the
/// moments an Event is published.
pub fn is_transition(previous: Option<&NetworkCondition>, next: &NetworkCondition) -> bool {
    previous.is_none_or(|p| p.status != next.status || p.reason != next.reason || p.message != next.message)
}

/// Retry delay after `failures` consecutive failures (1 → [`BACKOFF_BASE`], doubling,
/// capped at [`BACKOFF_MAX`]).
pub fn backoff_delay(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(20);
    BACKOFF_BASE.saturating_mul(1u32 << exponent).min(BACKOFF_MAX)
}

fn order_key(network: &Network) -> (Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>, &str) {
    (
        network.metadata.creation_timestamp.as_ref(),
        network.metadata.name.as_deref().unwrap_or(""),
    )
}

/// What is wrong with `network`'s spec, given the other Networks (any namespace; only its
/// own is considered): invalid cidr/gateway, or an overlap with a Network of the same
/// namespace created earlier (creationTimestamp, then name). The earlier one stays Ready.
/// Networks being deleted and Networks whose own spec is invalid do not count.
pub fn spec_problem(network: &Network, others: &[Arc<Network>]) -> Option<Readiness> {
    let subnet = match subnet::validate(&network.spec.cidr, &network.spec.gateway) {
        Ok((subnet, _)) => subnet,
        Err(error) => return Some(Readiness::not_ready(REASON_INVALID_SPEC, error.to_string())),
    };
    let key = order_key(network);
    let namespace = network.metadata.namespace.as_deref();
    let earliest = others
        .iter()
        .filter(|o| o.metadata.namespace.as_deref() == namespace && o.metadata.name != network.metadata.name)
        .filter(|o| o.metadata.deletion_timestamp.is_none() && order_key(o) < key)
        .filter(|o| subnet::validate(&o.spec.cidr, &o.spec.gateway).is_ok_and(|(other, _)| other.overlaps(&subnet)))
        .min_by(|a, b| order_key(a).cmp(&order_key(b)))?;
    Some(Readiness::not_ready(
        REASON_OVERLAPS,
        format!(
            "cidr {} overlaps cidr {} of Network {:?}, which was created earlier; expected cidrs that do not overlap within namespace {}",
            network.spec.cidr,
            earliest.spec.cidr,
            earliest.name_any(),
            namespace.unwrap_or("")
        ),
    ))
}

/// Member Pods of Network `namespace/name` in the store: same namespace, label value `name`,
/// not terminating.
pub fn attached_pods(pods: &[Arc<PartialObjectMeta<Pod>>], namespace: &str, name: &str) -> i64 {
    let count = pods
        .iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && p.metadata.deletion_timestamp.is_none()
                && p.labels().get(NETWORK_LABEL).is_some_and(|v| v == name)
        })
        .count();
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The Network a member Pod belongs to (its label + namespace).
pub fn network_of_pod(pod: &PartialObjectMeta<Pod>) -> Option<ObjectRef<Network>> {
    let name = pod.labels().get(NETWORK_LABEL)?;
    let namespace = pod.metadata.namespace.as_deref()?;
    Some(ObjectRef::new(name).within(namespace))
}

/// RFC 3339, second precision, UTC.
fn now_rfc3339() -> String {
    use k8s_openapi::jiff::Timestamp;
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now).to_string()
}

/// Event notes are limited to 1 kB.
fn note(text: &str) -> String {
    const MAX: usize = 1024;
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Best effort: an Event that cannot be published is logged, the reconcile goes on.
async fn publish(ctx: &Context, network: &Network, type_: EventType, reason: &str, action: &str, message: &str) {
    let event = KubeEvent {
        type_,
        reason: reason.to_string(),
        note: Some(note(message)),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &network.object_ref(&())).await {
        tracing::warn!(%error, reason, "could not publish Event for Network");
    }
}

/// Reconciles one Network (see the module docs). `pub` for the mocked-API tests; [`run`]
/// drives it.
pub async fn reconcile(network: Arc<Network>, ctx: Arc<Context>) -> Result<Action, Error> {
    let span = tracing::info_span!(
        "reconcile_network",
        namespace = network.metadata.namespace.as_deref().unwrap_or(""),
        name = network.metadata.name.as_deref().unwrap_or("")
    );
    let start = Instant::now();
    let object = ObjectRef::from_obj(&*network);
    let outcome = reconcile_once(network, &ctx).instrument(span).await;
    ctx.metrics.reconcile_duration.observe(start.elapsed().as_secs_f64());
    let result = match &outcome {
        Ok((_, true)) => ReconcileResult::Changed,
        Ok((_, false)) => ReconcileResult::Unchanged,
        Err(_) => ReconcileResult::Error,
    };
    ctx.metrics.reconciles.get_or_create(&ReconcileLabels { result }).inc();
    if outcome.is_ok() {
        ctx.reset_failures(&object);
    }
    outcome.map(|(action, _)| action)
}

/// The action and whether anything was written.
async fn reconcile_once(network: Arc<Network>, ctx: &Context) -> Result<(Action, bool), Error> {
    let name = network.name_any();
    let namespace = network
        .namespace()
        .ok_or_else(|| Error::NoNamespace { name: name.clone() })?;
    let api: Api<Network> = Api::namespaced(ctx.client.clone(), &namespace);
    let wrote = AtomicBool::new(false);
    // The finalizer helper writes when it adds ours (not deleting, absent) or removes it
    // (deleting, present).
    let has_finalizer = network.finalizers().iter().any(|f| f == FINALIZER);
    let deleting = network.metadata.deletion_timestamp.is_some();
    let wrote_ref = &wrote;
    let result = finalizer(&api, FINALIZER, network, move |event| async move {
        match event {
            FinalizerEvent::Apply(network) => apply(&network, ctx, wrote_ref).await,
            FinalizerEvent::Cleanup(network) => cleanup(&network, ctx, wrote_ref).await,
        }
    })
    .await;
    match result {
        Ok(action) => Ok((action, has_finalizer == deleting || wrote.load(Ordering::Relaxed))),
        Err(FinalizerError::ApplyFailed(error) | FinalizerError::CleanupFailed(error)) => Err(error),
        Err(other) => Err(Error::Finalizer {
            reference: format!("{namespace}/{name}"),
            source: Box::new(other),
        }),
    }
}

async fn apply(network: &Network, ctx: &Context, wrote: &AtomicBool) -> Result<Action, Error> {
    let name = network.name_any();
    let namespace = network.namespace().unwrap_or_default();
    let reference = format!("{namespace}/{name}");
    let backend = ctx.backend.name();
    let current = network.status.clone().unwrap_or_default();

    let mut outcome = Ok(Action::requeue(RESYNC));
    let (readiness, backend_ref) = match spec_problem(network, &ctx.networks.state()) {
        // The backend is not touched: whatever it holds stays as it was.
        Some(problem) => (problem, current.backend_ref.clone()),
        None => match ctx.backend.ensure(network).await {
            Ok(state) => {
                if state.changed {
                    wrote.store(true, Ordering::Relaxed);
                }
                let message = format!("{backend} backend: {} is in place", state.reference);
                (Readiness::ready(message), Some(state.reference))
            }
            Err(BackendError::Unavailable { message }) => {
                outcome = Err(Error::BackendUnavailable {
                    backend,
                    reference: reference.clone(),
                    message: message.clone(),
                });
                (Readiness::not_ready(REASON_BACKEND_UNAVAILABLE, message), None)
            }
            Err(BackendError::Conflict { message }) => {
                outcome = Err(Error::BackendConflict {
                    backend,
                    reference: reference.clone(),
                    message: message.clone(),
                });
                (Readiness::not_ready(REASON_BACKEND_CONFLICT, message), None)
            }
            Err(source @ BackendError::Failed { .. }) => {
                return Err(Error::Backend {
                    backend,
                    reference,
                    source,
                });
            }
        },
    };

    let attached = attached_pods(&ctx.member_pods.state(), &namespace, &name);
    let generation = network.metadata.generation;
    let desired = desired_status(&current, &readiness, generation, attached, backend_ref, &now_rfc3339());
    if desired == current {
        return outcome;
    }
    let api: Api<Network> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = PatchParams {
        field_manager: Some(CONTROLLER_NAME.to_string()),
        ..PatchParams::default()
    };
    api.patch_status(&name, &params, &Patch::Merge(status_patch(&desired)))
        .await
        .map_err(|source| Error::PatchStatus {
            reference: reference.clone(),
            source,
        })?;
    wrote.store(true, Ordering::Relaxed);

    let previous = current.conditions.iter().find(|c| c.type_ == READY);
    let next = desired.conditions.iter().find(|c| c.type_ == READY);
    let transition = next.is_some_and(|next| is_transition(previous, next));
    tracing::info!(
        ready = readiness.ready,
        reason = readiness.reason,
        attached_pods = attached,
        "Network status updated"
    );
    if transition {
        let type_ = if readiness.ready {
            EventType::Normal
        } else {
            EventType::Warning
        };
        let action = match readiness.reason {
            REASON_INVALID_SPEC | REASON_OVERLAPS => "Validate",
            REASON_READY => "Reconcile",
            _ => "EnsureBackend",
        };
        publish(ctx, network, type_, readiness.reason, action, &readiness.message).await;
    }
    if transition || current.observed_generation != generation {
        ctx.requeue_siblings(network);
    }
    outcome
}

async fn cleanup(network: &Network, ctx: &Context, wrote: &AtomicBool) -> Result<Action, Error> {
    let backend = ctx.backend.name();
    let state = ctx.backend.remove(network).await.map_err(|source| Error::Backend {
        backend,
        reference: format!("{}/{}", network.namespace().unwrap_or_default(), network.name_any()),
        source,
    })?;
    let message = if state.changed {
        wrote.store(true, Ordering::Relaxed);
        format!("{backend} backend: removed {}", state.reference)
    } else {
        format!("{backend} backend: nothing to remove for {}", state.reference)
    };
    publish(ctx, network, EventType::Normal, REASON_CLEANUP, "Cleanup", &message).await;
    ctx.requeue_siblings(network);
    Ok(Action::await_change())
}

/// Per-object exponential backoff ([`backoff_delay`] of the consecutive failure count).
pub fn error_policy(network: Arc<Network>, _error: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx.record_failure(ObjectRef::from_obj(&*network));
    Action::requeue(backoff_delay(failures))
}

/// A failure streak of the owned-object watch ends after this long without an error.
pub const WATCH_BACKOFF_RESET: Duration = Duration::from_secs(600);

/// [`backoff_delay`] as a watch-stream backoff: 1 s, 2 s, … 5 min.
///
/// [`Backoff::reset`] is deliberately a no-op: kube's watcher yields an `Ok(Init)` before
/// every (re)list, *before* the list request can fail, so resetting on every `Ok` item (what
/// `StreamBackoff` does) would pin the delay at its minimum while the CRD is missing. A
/// streak ends instead when no error was seen for [`WATCH_BACKOFF_RESET`] (longer than the
/// longest delay), as with kube's `ResetTimerBackoff` timer.
#[derive(Debug, Default)]
pub struct WatchBackoff {
    failures: u32,
    last_failure: Option<tokio::time::Instant>,
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = tokio::time::Instant::now();
        if self
            .last_failure
            .is_some_and(|last| now.duration_since(last) > WATCH_BACKOFF_RESET)
        {
            self.failures = 0;
        }
        self.last_failure = Some(now);
        self.failures = self.failures.saturating_add(1);
        Some(backoff_delay(self.failures))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {}
}

/// Metadata watch of the backend's objects (labelled as ours, all namespaces), as owner
/// triggers. Its errors never reach the controller: the watch backs off on its own (so a
/// missing NAD CRD does not delay the Network triggers sharing the controller's queue),
/// the first error of a streak is logged at warn, the rest at debug.
fn owned_objects(
    client: Client,
    resource: &ApiResource,
) -> impl Stream<Item = Result<PartialObjectMeta<DynamicObject>, watcher::Error>> + Send + 'static {
    // `Api<PartialObjectMeta<_>>` makes metadata-only list/watch requests.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, resource);
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGER}"));
    let kind = resource.kind.clone();
    let mut failing = false;
    watcher(api, config)
        .backoff(WatchBackoff::default())
        .filter_map(move |event| {
            let item = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o)) => Some(Ok(o)),
                // `Init` comes before every (re)list attempt; only a completed list
                // (`InitDone`) shows the watch works again.
                Ok(watcher::Event::Init) => None,
                Ok(watcher::Event::InitDone) => {
                    if failing {
                        tracing::info!(kind = %kind, "watch of owned backend objects recovered");
                        failing = false;
                    }
                    None
                }
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(
                        %error,
                        kind = %kind,
                        "cannot watch owned backend objects (is the CRD installed? RBAC list/watch?); retrying with backoff up to {}s",
                        BACKOFF_MAX.as_secs()
                    );
                    None
                }
                Err(error) => {
                    tracing::debug!(%error, kind = %kind, "watch of owned backend objects still failing");
                    None
                }
            };
            futures::future::ready(item)
        })
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
        controller = controller.owns_stream_with(owned_objects(ctx.client.clone(), &resource), resource);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::crd::NetworkSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::core::ObjectMeta;

    fn network(name: &str, cidr: &str, gateway: &str, created_second: i64) -> Arc<Network> {
        let mut n = Network::new(
            name,
            NetworkSpec {
                cidr: cidr.into(),
                gateway: gateway.into(),
            },
        );
        n.metadata.namespace = Some("default".into());
        n.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + created_second).unwrap(),
        ));
        Arc::new(n)
    }

    fn condition(status: &str, reason: &str, message: &str, time: &str) -> NetworkCondition {
        NetworkCondition {
            type_: READY.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: time.into(),
            observed_generation: Some(1),
        }
    }

    #[test]
    fn condition_keeps_transition_time_unless_status_flips() {
        let old = condition("False", REASON_INVALID_SPEC, "bad", "2020-01-01T00:00:00Z");
        let now = "2030-01-01T00:00:00Z";
        // Same status, other reason: time kept.
        let same = ready_condition(Some(&old), &Readiness::not_ready(REASON_OVERLAPS, "x"), Some(2), now);
        assert_eq!(same.last_transition_time, "2020-01-01T00:00:00Z");
        assert_eq!(same.reason, REASON_OVERLAPS);
        assert_eq!(same.observed_generation, Some(2));
        // Flip: time moves.
        let flipped = ready_condition(Some(&old), &Readiness::ready("ok"), Some(2), now);
        assert_eq!(flipped.last_transition_time, now);
        assert_eq!(flipped.status, "True");
        // First condition: now.
        assert_eq!(
            ready_condition(None, &Readiness::ready("ok"), None, now).last_transition_time,
            now
        );
    }

    #[test]
    fn status_diff_is_empty_when_nothing_changed() {
        let readiness = Readiness::ready("multus backend: NAD is in place");
        let first = desired_status(
            &NetworkStatus::default(),
            &readiness,
            Some(3),
            2,
            Some("ref".into()),
            "2020-01-01T00:00:00Z",
        );
        assert_ne!(first, NetworkStatus::default());
        // Recomputed later with the same facts: identical, so no patch.
        let again = desired_status(
            &first,
            &readiness,
            Some(3),
            2,
            Some("ref".into()),
            "2031-01-01T00:00:00Z",
        );
        assert_eq!(again, first);
        // Any fact that changes makes a diff.
        assert_ne!(
            desired_status(&first, &readiness, Some(4), 2, Some("ref".into()), "x"),
            first
        );
        assert_ne!(
            desired_status(&first, &readiness, Some(3), 3, Some("ref".into()), "x"),
            first
        );
        assert_ne!(desired_status(&first, &readiness, Some(3), 2, None, "x"), first);
    }

    #[test]
    fn other_conditions_are_kept_and_ready_replaced_in_place() {
        let mut other = condition("True", "Foo", "", "t");
        other.type_ = "Other".into();
        let current = NetworkStatus {
            conditions: vec![other.clone(), condition("True", REASON_READY, "ok", "t0")],
            ..NetworkStatus::default()
        };
        let next = desired_status(
            &current,
            &Readiness::not_ready(REASON_OVERLAPS, "o"),
            Some(1),
            0,
            None,
            "t1",
        );
        assert_eq!(next.conditions.len(), 2);
        assert_eq!(next.conditions[0], other);
        assert_eq!(next.conditions[1].reason, REASON_OVERLAPS);
        assert_eq!(next.conditions[1].last_transition_time, "t1");
    }

    #[test]
    fn status_patch_nulls_absent_fields() {
        let patch = status_patch(&NetworkStatus::default());
        assert_eq!(patch["status"]["backendRef"], Value::Null);
        assert!(patch["status"].as_object().unwrap().contains_key("backendRef"));
        assert!(patch["status"].as_object().unwrap().contains_key("observedGeneration"));
        assert_eq!(patch["status"]["attachedPods"], 0);
    }

    #[test]
    fn transitions_are_status_reason_or_message_changes() {
        let a = condition("True", REASON_READY, "ok", "t");
        assert!(is_transition(None, &a));
        assert!(!is_transition(Some(&a), &a));
        let mut b = a.clone();
        b.observed_generation = Some(9);
        b.last_transition_time = "other".into();
        assert!(!is_transition(Some(&a), &b), "generation/time alone is no Event");
        b.message = "new".into();
        assert!(is_transition(Some(&a), &b));
        assert!(is_transition(Some(&a), &condition("False", REASON_READY, "ok", "t")));
    }

    #[test]
    fn backoff_doubles_then_caps() {
        assert_eq!(backoff_delay(0), BACKOFF_BASE);
        assert_eq!(backoff_delay(1), Duration::from_secs(1));
        assert_eq!(backoff_delay(2), Duration::from_secs(2));
        assert_eq!(backoff_delay(3), Duration::from_secs(4));
        assert_eq!(backoff_delay(9), Duration::from_secs(256));
        assert_eq!(backoff_delay(10), BACKOFF_MAX);
        assert_eq!(backoff_delay(u32::MAX), BACKOFF_MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn watch_backoff_grows_through_resets_and_restarts_after_a_quiet_period() {
        let mut watch = WatchBackoff::default();
        assert_eq!(watch.next(), Some(Duration::from_secs(1)));
        // The watcher's `Ok(Init)` before each relist resets the StreamBackoff: ignored.
        watch.reset();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(watch.next(), Some(Duration::from_secs(2)));
        watch.reset();
        tokio::time::advance(BACKOFF_MAX).await;
        assert_eq!(
            watch.next(),
            Some(Duration::from_secs(4)),
            "a max-length wait is still the same streak"
        );
        tokio::time::advance(WATCH_BACKOFF_RESET + Duration::from_secs(1)).await;
        assert_eq!(
            watch.next(),
            Some(Duration::from_secs(1)),
            "a new streak after a quiet period"
        );
    }

    #[test]
    fn invalid_spec_and_overlap_go_to_the_later_network() {
        let bad = network("bad", "10.0.0.0/24", "10.0.1.1", 0);
        let problem = spec_problem(&bad, &[]).unwrap();
        assert_eq!(problem.reason, REASON_INVALID_SPEC);
        assert!(problem.message.contains("not inside"), "{}", problem.message);

        let a = network("a", "10.0.0.0/16", "10.0.0.1", 0);
        let b = network("b", "10.0.5.0/24", "10.0.5.1", 10);
        let all = [a.clone(), b.clone()];
        assert_eq!(spec_problem(&a, &all), None, "the earlier one stays");
        let overlap = spec_problem(&b, &all).unwrap();
        assert_eq!(overlap.reason, REASON_OVERLAPS);
        for part in ["\"a\"", "10.0.0.0/16", "10.0.5.0/24"] {
            assert!(overlap.message.contains(part), "{part} in {}", overlap.message);
        }
        // Same creation time: the name decides.
        let a2 = network("a2", "10.0.5.0/24", "10.0.5.1", 0);
        assert_eq!(spec_problem(&a, &[a.clone(), a2.clone()]), None);
        assert!(spec_problem(&a2, &[a.clone(), a2.clone()]).is_some());
        // Other namespace or deleting: no overlap.
        let mut elsewhere = (*a).clone();
        elsewhere.metadata.namespace = Some("other".into());
        assert_eq!(spec_problem(&b, &[Arc::new(elsewhere)]), None);
        let mut going = (*a).clone();
        going.metadata.deletion_timestamp = a.metadata.creation_timestamp.clone();
        assert_eq!(spec_problem(&b, &[Arc::new(going)]), None);
        // Disjoint: fine.
        let c = network("c", "10.1.0.0/16", "10.1.0.1", 20);
        assert_eq!(spec_problem(&c, &[a, b, c.clone()]), None);
    }

    #[test]
    fn member_pods_are_counted_by_namespace_and_label() {
        let pod = |ns: &str, net: Option<&str>, terminating: bool| {
            let mut meta = ObjectMeta {
                name: Some("p".into()),
                namespace: Some(ns.into()),
                ..ObjectMeta::default()
            };
            if let Some(net) = net {
                meta.labels = Some([(NETWORK_LABEL.to_string(), net.to_string())].into());
            }
            if terminating {
                meta.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
            }
            Arc::new(PartialObjectMeta::<Pod> {
                types: None,
                metadata: meta,
                _phantom: std::marker::PhantomData,
            })
        };
        let pods = [
            pod("default", Some("net"), false),
            pod("default", Some("net"), false),
            pod("default", Some("net"), true),
            pod("default", Some("other"), false),
            pod("team", Some("net"), false),
            pod("default", None, false),
        ];
        assert_eq!(attached_pods(&pods, "default", "net"), 2);
        assert_eq!(network_of_pod(&pods[4]), Some(ObjectRef::new("net").within("team")));
        assert_eq!(network_of_pod(&pods[5]), None);
    }

    #[test]
    fn notes_are_cut_at_a_char_boundary() {
        let long = "é".repeat(600);
        let cut = note(&long);
        assert!(cut.len() <= 1024);
        assert!(long.starts_with(&cut));
        assert_eq!(note("short"), "short");
    }

    #[test]
    fn now_is_second_precision_rfc3339() {
        let now = now_rfc3339();
        assert!(now.ends_with('Z') && !now.contains('.'), "{now}");
        assert_eq!(now.len(), "2024-01-01T00:00:00Z".len());
    }
}
