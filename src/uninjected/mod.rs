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
//!
//! - `rule`: a Pod's standing from its metadata, and the rule under its namespace's label
//!   (pure; `check` uses it too);
//! - `namespaces`: what the rule reads of Namespaces (the cache's store, or a snapshot);
//! - `tracker`: uid → (namespace, standing), kept from the watch's events;
//! - `gauge`: `envoy_injector_pods_uninjected` as shown, set per event for what moved;
//! - `watch`: the watch loop that feeds the tracker and the gauge.

mod gauge;
mod namespaces;
mod rule;
mod tracker;
mod watch;

#[cfg(test)]
mod fixtures;

pub use namespaces::Namespaces;
pub use rule::{Standing, standing, uninjected};
pub use tracker::{Moved, Tracker};
pub use watch::{RECOUNT_INTERVAL, feed, run};
