//! Stale sidecars: injected Pods whose template revision is older than the live template's.
//!
//! Every injected Pod carries the label `sidecar.samplecrd.k8s.io/revision=<rev>` next to
//! its `status` annotation, so a metadata-only watch with a label selector sees injected
//! Pods alone. [`Tracker`] keeps, per Pod uid, only the template and revision (interned:
//! two small integers), never the Pods; [`run`] feeds it from that watch and keeps the gauge
//! `envoy_injector_pods_stale{template}` current, also when a template changes. `serve`
//! runs it in cluster mode.
//!
//! - `rule`: what makes a Pod stale, from its metadata (pure; `check` uses it too);
//! - `key`: a Pod uid as 16 bytes and the string interner (`uninjected` uses the interner);
//! - `by_uid`: the table of one entry per Pod uid and its tally, kept from watch events
//!   (`uninjected` keeps its own in it too);
//! - `tracker`: uid → (template, revision), kept from the watch's events;
//! - `gauge`: `envoy_injector_pods_stale` as shown, set per event for what moved;
//! - `watch`: the watch loop that feeds the tracker and the gauge.

pub(crate) mod by_uid;
mod gauge;
mod key;
mod rule;
mod tracker;
mod watch;

#[cfg(test)]
mod fixtures;

pub(crate) use by_uid::{ByUid, Change, Tally};
pub(crate) use key::Interner;
pub use rule::{UNKNOWN_TEMPLATE, injected, is_stale};
pub use tracker::{Moved, Tracker};
pub use watch::{RECOUNT_INTERVAL, feed, run, watch_config};
