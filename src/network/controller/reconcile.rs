//! One reconcile of one Network (the steps are in the module docs of `controller`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::Instrument;

use super::status::*;
use super::{BACKOFF, CONTROLLER_NAME, Context, RESYNC};
use crate::events;
use crate::metrics::{ReconcileLabels, ReconcileResult};
use crate::network::backend::BackendError;
use crate::network::crd::{FINALIZER, Network, READY};

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
    publish(ctx, network, false, REASON_CLEANUP, "Cleanup", &message).await;
    ctx.requeue_siblings(network);
    Ok(Action::await_change())
}

/// Per-object exponential backoff ([`BACKOFF`] of the consecutive failure count).
pub fn error_policy(network: Arc<Network>, _error: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx.record_failure(ObjectRef::from_obj(&*network));
    Action::requeue(BACKOFF.delay(failures))
}
