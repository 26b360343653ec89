//! envoy-injector's engine: what a sidecar injection is, with no I/O. Templates (`template`:
//! parse, values, overrides, values from the Pod, validation), the one decision and the
//! patch (`inject`), and the templates compiled into admission policies (`policies`).
//! The application (the webhook, the cache, the controllers, the commands) reads the
//! cluster and hands this crate plain data.

/// The product's name, used wherever the cluster sees us by name: the template ConfigMap,
/// the Events' reporting controller, the field manager of our writes, the `managed-by`
/// label of the objects we own.
pub const NAME: &str = "envoy-injector";

pub mod inject;
pub mod policies;
pub mod template;
