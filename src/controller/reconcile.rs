//! One reconcile of one Network (the steps are in the module docs of `controller`).

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::Instrument;

use super::context::Context;
use super::finalizer::{self, Outcome};
use super::settings::{BACKOFF, CONTROLLER_NAME, RESYNC};
use super::status::*;
use crate::events;
use crate::inject::join::NETWORK_LABEL;
use crate::metrics::{ReconcileErrorLabels, ReconcileErrorReason, ReconcileLabels, ReconcileResult};
use crate::network::backend::BackendError;
use crate::network::crd::{FINALIZER, IN_USE, Network, READY};
use crate::network::members::NOT_TERMINAL;

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
    #[error("listing the Pods that use Network {reference} before removing it failed: {source}")]
    ListPods {
        reference: String,
        #[source]
        source: kube::Error,
    },
    #[error("{action} finalizer {FINALIZER} on Network {reference} failed: {source}")]
    Finalizer {
        action: &'static str,
        reference: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The `reason` label of `envoy_injector_reconcile_errors_total`.
    pub fn reason(&self) -> ReconcileErrorReason {
        match self {
            Error::NoNamespace { .. } => ReconcileErrorReason::NoNamespace,
            Error::PatchStatus { .. } => ReconcileErrorReason::Status,
            Error::BackendUnavailable { .. } => ReconcileErrorReason::BackendUnavailable,
            Error::BackendConflict { .. } => ReconcileErrorReason::BackendConflict,
            Error::Backend { .. } => ReconcileErrorReason::Backend,
            Error::Finalizer { .. } => ReconcileErrorReason::Finalizer,
            Error::ListPods { .. } => ReconcileErrorReason::Pods,
        }
    }
}

/// How a reconcile that did not fail ended.
struct Pass {
    action: Action,
    /// Something was written (finalizer, backend object, status).
    wrote: bool,
    /// A write met a stale copy (409/422) and is retried shortly.
    conflict: bool,
}

impl Pass {
    fn done(action: Action, wrote: bool) -> Pass {
        Pass {
            action,
            wrote,
            conflict: false,
        }
    }

    /// Retried shortly: the watch brings the fresh copy meanwhile. Not a failure, so the
    /// failure streak (and its backoff) is untouched.
    fn conflict(reference: &str, message: &str) -> Pass {
        tracing::debug!(
            network = reference,
            message,
            "stale copy of the Network; retrying shortly"
        );
        Pass {
            action: Action::requeue(BACKOFF.jittered(1)),
            wrote: false,
            conflict: true,
        }
    }
}

/// Best effort: an Event that cannot be published is logged, the reconcile goes on.
async fn publish(ctx: &Context, network: &Network, warning: bool, reason: &str, action: &str, message: &str) {
    let event = events::event(warning, reason, action, message.to_string());
    ctx.events.publish(network.object_ref(&()), event).await;
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
    // The store may not show our last write yet: work on the newest copy.
    let network = ctx.written.freshest(network);
    ctx.written.begin(&network);
    let outcome = reconcile_once(network, &ctx).instrument(span).await;
    if ctx.written.finish(&object) {
        // Someone else changed it while we worked: look again.
        ctx.indexes.pending.push([object.clone()]);
    }
    ctx.metrics.reconcile_duration.observe(start.elapsed().as_secs_f64());
    let result = match &outcome {
        Ok(pass) if pass.conflict => ReconcileResult::Conflict,
        Ok(pass) if pass.wrote => ReconcileResult::Changed,
        Ok(_) => ReconcileResult::Unchanged,
        Err(error) => {
            let reason = error.reason();
            ctx.metrics
                .reconcile_errors
                .get_or_create(&ReconcileErrorLabels { reason })
                .inc();
            ReconcileResult::Error
        }
    };
    ctx.metrics.reconciles.get_or_create(&ReconcileLabels { result }).inc();
    if outcome.is_ok() {
        ctx.reset_failures(&object);
    }
    outcome.map(|pass| pass.action)
}

async fn reconcile_once(network: Arc<Network>, ctx: &Context) -> Result<Pass, Error> {
    let name = network.name_any();
    let namespace = network
        .namespace()
        .ok_or_else(|| Error::NoNamespace { name: name.clone() })?;
    let reference = format!("{namespace}/{name}");
    let api: Api<Network> = Api::namespaced(ctx.client.clone(), &namespace);
    let has_finalizer = network.finalizers().iter().any(|f| f == FINALIZER);
    if network.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Pass::done(Action::await_change(), false));
        }
        return cleanup(&network, ctx, &api, &reference).await;
    }
    if has_finalizer {
        return apply(&network, ctx, &api, &reference).await;
    }
    // Finalizer first, so no backend state can exist without it; then on with the copy the
    // API server returned, in the same pass (no round trip through the watch).
    let failed = |source| Error::Finalizer {
        action: "adding",
        reference: reference.clone(),
        source,
    };
    match finalizer::add(&api, &network).await.map_err(failed)? {
        Outcome::Done(Some(updated)) => {
            let updated = Arc::new(crate::cache::slim_network(*updated));
            ctx.written.record(&network, (*updated).clone());
            let mut pass = apply(&updated, ctx, &api, &reference).await?;
            pass.wrote = true;
            Ok(pass)
        }
        Outcome::Done(None) | Outcome::Gone => Ok(Pass::done(Action::await_change(), false)),
        Outcome::Conflict(message) => Ok(Pass::conflict(&reference, &message)),
    }
}

async fn apply(network: &Network, ctx: &Context, api: &Api<Network>, reference: &str) -> Result<Pass, Error> {
    let name = network.name_any();
    let namespace = network.namespace().unwrap_or_default();
    let backend = ctx.backend.name();
    let current = network.status.clone().unwrap_or_default();

    let mut wrote = false;
    let mut failure = None;
    let cidr_of = |namespace: &str, other: &str| {
        ctx.networks
            .get(&ObjectRef::new(other).within(namespace))
            .map(|n| n.spec.cidr.clone())
    };
    let (readiness, backend_ref) = match spec_problem(network, &ctx.indexes.overlaps, cidr_of) {
        // No backend state for a Network that cannot be Ready: a junior that overlaps must
        // not hold a NAD (its bridge would put a second gateway into the senior's range). A
        // listed NAD index makes this free when there is none.
        Some(problem) => match ctx.backend.remove(network).await {
            Ok(state) => {
                wrote |= state.changed;
                (problem, None)
            }
            Err(source) => {
                // Not Ready whatever the backend holds: the status still says so, and the
                // removal is retried with backoff.
                failure = Some(Error::Backend {
                    backend,
                    reference: reference.to_string(),
                    source,
                });
                (problem, current.backend_ref.clone())
            }
        },
        None => match ctx.backend.ensure(network).await {
            Ok(state) => {
                wrote |= state.changed;
                let message = format!("{backend} backend: {} is in place", state.reference);
                (Readiness::ready(message), Some(state.reference))
            }
            Err(BackendError::Unavailable { message }) => {
                failure = Some(Error::BackendUnavailable {
                    backend,
                    reference: reference.to_string(),
                    message: message.clone(),
                });
                (Readiness::not_ready(REASON_BACKEND_UNAVAILABLE, message), None)
            }
            Err(BackendError::Conflict { message }) => {
                failure = Some(Error::BackendConflict {
                    backend,
                    reference: reference.to_string(),
                    message: message.clone(),
                });
                (Readiness::not_ready(REASON_BACKEND_CONFLICT, message), None)
            }
            Err(source @ BackendError::Failed { .. }) => {
                // A transient API error must not flip a Ready Network: status untouched.
                return Err(Error::Backend {
                    backend,
                    reference: reference.to_string(),
                    source,
                });
            }
        },
    };
    let finish = |wrote| match failure {
        Some(error) => Err(error),
        None => Ok(Pass::done(Action::requeue(RESYNC), wrote)),
    };

    let attached = ctx.indexes.members.count(&namespace, &name);
    let generation = network.metadata.generation;
    let desired = desired_status(&current, &readiness, generation, attached, backend_ref, &now_rfc3339());
    if desired == current {
        return finish(wrote);
    }
    write_status(network, ctx, api, reference, &desired).await?;

    let previous = current.conditions.iter().find(|c| c.type_ == READY);
    let next = desired.conditions.iter().find(|c| c.type_ == READY);
    tracing::info!(
        ready = readiness.ready,
        reason = readiness.reason,
        attached_pods = attached,
        "Network status updated"
    );
    if next.is_some_and(|next| is_transition(previous, next)) {
        let action = match readiness.reason {
            REASON_INVALID_SPEC | REASON_OVERLAPS => "Validate",
            REASON_READY => "Reconcile",
            _ => "EnsureBackend",
        };
        publish(
            ctx,
            network,
            !readiness.ready,
            readiness.reason,
            action,
            &readiness.message,
        )
        .await;
    }
    finish(true)
}

/// Writes `desired` as the whole status (a merge patch of the status subresource) and
/// records the API server's copy until the watch shows it.
async fn write_status(
    network: &Network,
    ctx: &Context,
    api: &Api<Network>,
    reference: &str,
    desired: &crate::network::crd::NetworkStatus,
) -> Result<(), Error> {
    let params = PatchParams {
        field_manager: Some(CONTROLLER_NAME.to_string()),
        ..PatchParams::default()
    };
    let updated = api
        .patch_status(&network.name_any(), &params, &Patch::Merge(status_patch(desired)))
        .await
        .map_err(|source| Error::PatchStatus {
            reference: reference.to_string(),
            source,
        })?;
    ctx.written.record(network, crate::cache::slim_network(updated));
    Ok(())
}

/// A Network being deleted: it stays while joined Pods use it (as
/// `kubernetes.io/pvc-protection` keeps a claim), then its backend state goes, then the
/// finalizer.
async fn cleanup(network: &Network, ctx: &Context, api: &Api<Network>, reference: &str) -> Result<Pass, Error> {
    let name = network.name_any();
    let namespace = network.namespace().unwrap_or_default();
    let counts = ctx.indexes.members.counts(&namespace, &name);
    if counts.in_use > 0 {
        return wait_for_pods(network, ctx, api, reference, counts).await;
    }
    // The cache sees none. A Pod admitted just before the webhook saw the deletion may not
    // have reached the member watch yet: ask the API server too, once per deletion (as
    // pvc-protection does). Its watch event requeues this Network when it arrives.
    if used_per_api_server(ctx, &namespace, &name)
        .await
        .map_err(|source| Error::ListPods {
            reference: reference.to_string(),
            source,
        })?
    {
        tracing::debug!(
            network = reference,
            "the API server knows a Pod that uses it; waiting for the watch"
        );
        return Ok(Pass::done(Action::requeue(BACKOFF.jittered(1)), false));
    }
    let backend = ctx.backend.name();
    let state = ctx.backend.remove(network).await.map_err(|source| Error::Backend {
        backend,
        reference: reference.to_string(),
        source,
    })?;
    let message = if state.changed {
        format!("{backend} backend: removed {}", state.reference)
    } else {
        format!("{backend} backend: nothing to remove for {}", state.reference)
    };
    publish(ctx, network, false, REASON_CLEANUP, "Cleanup", &message).await;
    let failed = |source| Error::Finalizer {
        action: "removing",
        reference: reference.to_string(),
        source,
    };
    match finalizer::remove(api, network).await.map_err(failed)? {
        Outcome::Done(_) | Outcome::Gone => {
            ctx.written.forget(&ObjectRef::from_obj(network));
            Ok(Pass::done(Action::await_change(), true))
        }
        Outcome::Conflict(message) => Ok(Pass::conflict(reference, &message)),
    }
}

/// Whether the API server lists a Pod of `namespace` that joined Network `name` and is not
/// Succeeded or Failed (one request, at most one item).
async fn used_per_api_server(ctx: &Context, namespace: &str, name: &str) -> Result<bool, kube::Error> {
    // Longer names cannot be label values, so no Pod can have joined such a Network.
    if name.len() > 63 {
        return Ok(false);
    }
    let pods: Api<PartialObjectMeta<Pod>> = Api::namespaced(ctx.client.clone(), namespace);
    let params = ListParams::default()
        .labels(&format!("{NETWORK_LABEL}={name}"))
        .fields(NOT_TERMINAL)
        .limit(1);
    Ok(!pods.list_metadata(&params).await?.items.is_empty())
}

/// The deletion waits: the `InUse` condition counts the Pods, an Event names them once.
/// The member index requeues the Network whenever its count moves.
async fn wait_for_pods(
    network: &Network,
    ctx: &Context,
    api: &Api<Network>,
    reference: &str,
    counts: crate::network::members::Counts,
) -> Result<Pass, Error> {
    let name = network.name_any();
    let namespace = network.namespace().unwrap_or_default();
    let current = network.status.clone().unwrap_or_default();
    let generation = network.metadata.generation;
    let desired = deleting_status(&current, counts.in_use, counts.attached, generation, &now_rfc3339());
    if desired == current {
        return Ok(Pass::done(Action::requeue(RESYNC), false));
    }
    write_status(network, ctx, api, reference, &desired).await?;
    tracing::info!(pods = counts.in_use, "Network deletion waits for the Pods that use it");
    let previous = current.conditions.iter().find(|c| c.type_ == IN_USE);
    let next = desired.conditions.iter().find(|c| c.type_ == IN_USE);
    if next.is_some_and(|next| is_new(previous, next)) {
        let first = ctx.indexes.members.users(&namespace, &name, NAMED_USERS);
        let note = users_note(&first, counts.in_use);
        publish(ctx, network, false, REASON_IN_USE, "Delete", &note).await;
    }
    Ok(Pass::done(Action::requeue(RESYNC), true))
}

/// Per-object exponential backoff with jitter ([`BACKOFF`] of the consecutive failure
/// count): Networks failing together (an API server answering 429/5xx) retry spread out.
pub fn error_policy(network: Arc<Network>, _error: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx.record_failure(ObjectRef::from_obj(&*network));
    Action::requeue(BACKOFF.jittered(failures))
}

#[cfg(test)]
mod tests;
