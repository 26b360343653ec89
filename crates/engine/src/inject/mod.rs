//! The injection engine: pure functions from (Pod JSON, template) to a patch. No I/O,
//! no clock, no cluster: everything it needs comes in as plain data.

pub mod decide;
pub mod join;
pub mod jsonpatch;
pub mod overrides;
mod plan;
pub mod pod;
pub mod pod_values;
pub mod policy;
pub mod strategic;
pub mod uninject;

pub use decide::{Chosen, ClusterView, Decided, NotChosen, Refused, Standalone, choose, decide, select_template};
pub use overrides::OVERRIDE_PREFIX;
pub use plan::{
    Added, AppMount, Decision, Extras, Fault, InjectionStatus, MountRecord, NativeRule, Plan, VOLUME_DESCRIPTION_LIMIT,
    describe_volume, plan, revision_label_value, runs_to_completion,
};
pub use pod::PodView;
pub use policy::{AnnotationOptIn, NamespaceOptIn, OptIn, PodMeta, Skip};

pub const INJECT_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/inject";
/// The Pod label that opts a Pod in (`"true"`) or out (`"false"`), the same key as
/// [`INJECT_ANNOTATION`]: label selectors select it, so a Pod that did not opt in costs
/// the API server no CEL.
pub const INJECT_LABEL: &str = INJECT_ANNOTATION;
pub const TEMPLATE_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/template";
pub const NETWORK_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/network";
pub const STATUS_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/status";
/// Label set next to the status annotation: the template revision, so that injected Pods
/// can be selected server-side (annotations cannot be).
pub const REVISION_LABEL: &str = "sidecar.samplecrd.k8s.io/revision";
pub const NATIVE_SIDECAR_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/native-sidecar";
/// Label and annotation the compiled admission policies mark a Pod they refuse with (the
/// annotation holds the webhook's words): the label selects the validating policy that
/// denies it. A Pod never keeps them: it is denied, or the webhook injects it and takes
/// them out.
pub const REFUSED_LABEL: &str = "sidecar.samplecrd.k8s.io/refused";
pub const REFUSED_ANNOTATION: &str = REFUSED_LABEL;
/// The legacy opt-in (an Initializer annotation, from before admission webhooks), still honoured.
pub const LEGACY_INJECT_ANNOTATION: &str = "initializer.kubernetes.io/envoy";
/// Namespace label naming the template for every Pod of the namespace (cluster mode); a
/// Pod's own [`TEMPLATE_ANNOTATION`] wins over it.
pub const NAMESPACE_TEMPLATE_LABEL: &str = "sidecar.samplecrd.k8s.io/template";
/// Namespace label (value [`NAMESPACE_OPT_IN`]) for namespace-wide opt-in.
pub const NAMESPACE_LABEL: &str = "sidecar.samplecrd.k8s.io/inject";
/// The value of [`NAMESPACE_LABEL`] that opts a Namespace's Pods in.
pub const NAMESPACE_OPT_IN: &str = "enabled";

/// Why a Pod cannot be injected. Each message names what is at fault on both sides.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum InjectError {
    #[error("Pod field `{path}`: expected {expected}, found {found}")]
    InvalidPod {
        path: String,
        expected: &'static str,
        found: &'static str,
    },
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
    Override(Vec<overrides::Refused>),
    #[error("cannot encode the patch: {0}")]
    Encode(String),
    /// Only when the engine is handed a view without the Pod it was read from.
    #[error("expected to read {what} whole to compare it with the template's, found no Pod to read it from")]
    Unreadable { what: String },
}

#[cfg(test)]
mod tests;
