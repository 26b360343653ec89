//! What the engine refuses a Pod for: one error type, each message naming the field or
//! the template at fault and what was expected.

use super::names::{NAMESPACE_TEMPLATE_LABEL, TEMPLATE_ANNOTATION};
use super::refused::Refused;
use crate::template::quantity::QuantityError;

/// Why a Pod cannot be injected. Each message names what is at fault on both sides.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum InjectError {
    #[error("Pod field `{path}`: expected {expected}, found {found}")]
    InvalidPod {
        path: String,
        expected: &'static str,
        found: &'static str,
    },
    /// A resource value the API server would not read as a quantity.
    #[error("Pod field `{path}`: {source}")]
    InvalidQuantity { path: String, source: QuantityError },
    /// The API server refuses a Pod without containers; injecting would turn it into a
    /// different Pod that holds only the sidecar, so it is refused here first.
    #[error("Pod field `spec.containers`: expected at least one container, found {found}")]
    NoContainers { found: &'static str },
    #[error(
        "template `{name}` named by annotation `{TEMPLATE_ANNOTATION}` does not exist; the injector has: {available}"
    )]
    UnknownTemplate { name: String, available: String },
    #[error(
        "template `{name}` named by label `{NAMESPACE_TEMPLATE_LABEL}` of namespace `{namespace}` does not exist; the injector has: {available}"
    )]
    UnknownNamespaceTemplate {
        name: String,
        namespace: String,
        available: String,
    },
    /// Neither the Pod nor its namespace names a template, and the ConfigMap has no default.
    #[error(
        "the injector's ConfigMap has no `{}` template, which a Pod gets when neither its annotation `{TEMPLATE_ANNOTATION}` nor its namespace's label `{NAMESPACE_TEMPLATE_LABEL}` names one; the injector has: {available}",
        crate::template::DEFAULT_TEMPLATE
    )]
    NoDefaultTemplate { available: String },
    #[error(
        "Pod already has container(s) {present} of template `{template}` but not {missing}: refusing to inject half a template (rename the Pod's container or remove it)"
    )]
    PartiallyInjected {
        template: String,
        present: String,
        missing: String,
    },
    #[error(
        "Pod volume `{name}` ({pod}) collides with volume `{name}` of template `{template}` ({wanted}): rename the Pod's volume"
    )]
    VolumeCollision {
        name: String,
        pod: String,
        template: String,
        wanted: String,
    },
    #[error(
        "Pod container `{container}` already mounts volume `{existing}` at `{path}`, where template `{template}` mounts volume `{volume}`"
    )]
    MountCollision {
        container: String,
        existing: String,
        path: String,
        template: String,
        volume: String,
    },
    #[error(
        "port {port}/{protocol} of template `{template}` container `{sidecar}` is already used by Pod container `{container}`: pick a template whose sidecar uses another port (annotation `{TEMPLATE_ANNOTATION}`, or `inject --config FILE`)"
    )]
    PortCollision {
        template: String,
        sidecar: String,
        port: i32,
        protocol: String,
        container: String,
    },
    /// Override annotations the template refuses, each named with its value and bound.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Override(Vec<Refused>),
    /// A Pod Guaranteed by its containers would become Burstable: an added container that
    /// sets neither a request nor a limit of cpu or memory cannot have them equal. The
    /// compiled policies write these words too (`policies::resources`).
    #[error(
        "template `{template}`: container `{container}` sets no {resource} request or limit, so the Guaranteed Pod would become Burstable; give it resources.limits.{resource} in the template"
    )]
    GuaranteedLost {
        template: String,
        container: String,
        resource: &'static str,
    },
    #[error("cannot encode the patch: {0}")]
    Encode(String),
    /// Only when the engine is handed a view without the Pod it was read from.
    #[error("expected to read {what} whole to compare it with the template's, found no Pod to read it from")]
    Unreadable { what: String },
}
