//! The injection engine: pure functions from (Pod JSON, template) to a patch. No I/O,
//! no clock, no cluster: everything it needs comes in as plain data.

pub mod decide;
mod error;
pub mod join;
pub mod jsonpatch;
mod names;
pub mod overrides;
mod plan;
pub mod pod;
pub mod pod_values;
pub mod policy;
mod refused;
pub mod resources;
pub mod strategic;
pub mod uninject;

pub use decide::{
    Chosen, ClusterView, Decided, NotChosen, Refused, Standalone, choose, decide, host_network, select_template,
};
pub use overrides::OVERRIDE_PREFIX;
pub use plan::{
    Added, AppMount, Decision, Extras, Fault, InjectionStatus, MountRecord, NativeRule, Plan, VOLUME_DESCRIPTION_LIMIT,
    describe_volume, plan, revision_label_value, runs_to_completion,
};
pub use pod::PodView;
pub use policy::{AnnotationOptIn, NamespaceOptIn, OptIn, PodMeta, Skip};
pub use resources::{PodLevel, PodLevelChange, QosClass, QosEdit, Resourcing};

pub use error::InjectError;
pub use names::{
    INJECT_ANNOTATION, INJECT_LABEL, LEGACY_INJECT_ANNOTATION, NAMESPACE_LABEL, NAMESPACE_OPT_IN, NAMESPACE_OPT_OUT,
    NAMESPACE_TEMPLATE_LABEL, NATIVE_SIDECAR_ANNOTATION, NETWORK_ANNOTATION, REFUSED_ANNOTATION, REFUSED_LABEL,
    REVISION_LABEL, STATUS_ANNOTATION, TEMPLATE_ANNOTATION,
};

#[cfg(test)]
mod tests;
