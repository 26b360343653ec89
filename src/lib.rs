//! envoy-injector: a mutating admission webhook that injects sidecars from templates.

/// The product's name, used wherever the cluster sees us by name: the template ConfigMap,
/// the Events' reporting controller, the field manager of our writes, the `managed-by`
/// label of the objects we own.
pub const NAME: &str = "envoy-injector";

pub mod admission;
pub mod backoff;
pub mod cache;
pub mod check;
pub mod client;
pub mod duration;
pub mod events;
pub mod inject;
pub mod leader;
pub mod metrics;
pub mod network;
pub mod offline;
pub mod policies;
pub mod relist;
pub mod rollout;
pub mod server;
pub mod shutdown;
pub mod stale;
pub mod template;
pub mod tls;
pub mod uninjected;
pub mod yaml;
