//! The Namespace label that opts a namespace into the automatic rollout.

/// The Namespace label that opts a namespace into the automatic rollout (value `auto`).
pub const AUTO_LABEL: &str = "sidecar.samplecrd.k8s.io/rollout";
/// The value of [`AUTO_LABEL`] that turns it on.
pub const AUTO_VALUE: &str = "auto";
