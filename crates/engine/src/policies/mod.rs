//! Templates compiled into admission policies the API server runs itself (Kubernetes
//! 1.36 `admissionregistration.k8s.io/v1`): one MutatingAdmissionPolicy holding every
//! template, which stores the Pod the webhook would, or marks the Pod it would deny with
//! the webhook's words; one ValidatingAdmissionPolicy, selected by that mark alone, that
//! denies it. The bindings select what opted in by its labels (a labelled namespace, a
//! labelled Pod), so a Pod that did not opt in costs the API server no CEL; the Pods that
//! opt in by annotation are a second copy of the mutating policy, whose one condition
//! reads the annotation. The compiler is pure: templates in, objects out; only `sync`
//! (`serve` keeping them in step) does I/O.
//!
//! What needs the injector's cache (joining a Network) is not compiled: it stays with the
//! webhook, which adds only the join to a Pod a policy injected.

mod amounts;
mod cel;
mod chosen;
mod compile;
pub mod mode;
mod objects;
mod ops;
mod options;
mod patch;
mod plan;
mod pod_values;
mod resources;
mod variables;
pub mod webhook;

pub use compile::{Compiled, MAX_EXPRESSION_BYTES, MAX_EXPRESSION_CODE_POINTS, MAX_POLICY_BYTES, NotCompiled, compile};
pub use mode::{Mode, Path};
pub use objects::{
    MANAGED_BY_LABEL, MUTATING, MUTATING_BINDING, PolicyObject, TEMPLATES_ANNOTATION, VALIDATING, VALIDATING_BINDING,
    names,
};
pub use options::Options;

#[cfg(test)]
mod tests;
