//! Our finalizer on Networks, added and removed so that a stale copy is a conflict to
//! retry, never a failure.
//!
//! kube-runtime's `finalizer()` helper adds it with a JSON Patch whose `test` op compares the
//! whole finalizer list with the reconciled copy; in a burst the watch lags behind the API
//! server, the test fails (422 Invalid) and the reconcile was logged as failed. Instead:
//!
//! * **add**: server-side apply of `metadata.finalizers: [ours]` as field manager
//!   `envoy-injector`. `finalizers` is a set-type list, so apply adds ours and keeps
//!   everyone else's, needs no resourceVersion and cannot fail validation. The apply names
//!   the uid: a Network deleted (409) or recreated under the same name (422: uid immutable)
//!   since our copy was read is a conflict, never resurrected or finalized by mistake.
//! * **remove** (after the backend cleanup): a JSON Patch `test`s that our finalizer is at
//!   the index our copy has it, then removes that index; removing by index without the test
//!   could remove someone else's. 409/422 there also mean "stale copy".
//!
//! A conflict is retried shortly (the watch brings the fresh copy meanwhile), logged at
//! debug and counted as `result="conflict"`.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::network::crd::{FINALIZER, Network};

/// What a finalizer write found.
#[derive(Debug)]
pub enum Outcome {
    /// Written; the API server's copy after the write (`None` when the Network is gone
    /// after its last finalizer left).
    Done(Option<Box<Network>>),
    /// Our copy is stale (HTTP 409/422): retry with a fresh one.
    Conflict(String),
    /// The Network no longer exists.
    Gone,
}

fn settle(result: Result<Network, kube::Error>) -> Result<Outcome, kube::Error> {
    match result {
        Ok(network) => Ok(Outcome::Done(Some(Box::new(network)))),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Outcome::Gone),
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 422 => {
            Ok(Outcome::Conflict(status.message))
        }
        Err(other) => Err(other),
    }
}

/// Adds [`FINALIZER`] (see the module docs).
pub async fn add(api: &Api<Network>, network: &Network) -> Result<Outcome, kube::Error> {
    let apply = json!({
        "apiVersion": Network::api_version(&()),
        "kind": Network::kind(&()),
        "metadata": {
            "name": network.name_any(),
            "uid": network.metadata.uid,
            "finalizers": [FINALIZER],
        },
    });
    // Not forced: finalizer entries are keyed by value, so no other manager can own ours
    // with a different value.
    let params = PatchParams::apply(crate::NAME);
    settle(api.patch(&network.name_any(), &params, &Patch::Apply(&apply)).await)
}

/// Removes [`FINALIZER`] (see the module docs); nothing to do when our copy lacks it.
pub async fn remove(api: &Api<Network>, network: &Network) -> Result<Outcome, kube::Error> {
    let Some(index) = network.finalizers().iter().position(|f| f == FINALIZER) else {
        return Ok(Outcome::Done(None));
    };
    let path = format!("/metadata/finalizers/{index}");
    let patch: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": path, "value": FINALIZER },
        { "op": "remove", "path": path },
    ]))
    .map_err(kube::Error::SerdeError)?;
    let params = PatchParams {
        field_manager: Some(crate::NAME.to_string()),
        ..PatchParams::default()
    };
    match settle(api.patch(&network.name_any(), &params, &Patch::<()>::Json(patch)).await)? {
        // The last finalizer leaving a deleted object returns the object one last time.
        Outcome::Done(_) => Ok(Outcome::Done(None)),
        other => Ok(other),
    }
}
