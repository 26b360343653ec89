//! Injection templates: a template as written (`spec`), parsed and checked (`parse`: it
//! names every fault it finds, each with the field and its YAML line, the nearest known
//! field for an unknown one (`fields`); `overrides`, `pod_values`, `validate`), prepared as
//! JSON once (`prepared`), and the set a ConfigMap holds (`set`); what a template adds judged
//! by the Pod Security Standards (`pod_security`). The live set admission
//! reads, and its reload from the ConfigMap, are the application's (`live`).

mod error;
mod fields;
pub mod overrides;
mod parse;
pub mod pod_security;
pub mod pod_values;
mod prepared;
pub mod quantity;
mod set;
mod spec;
pub mod validate;
pub mod yaml_locate;

pub use error::{ConfigError, Fault, MAX_FAULTS, MAX_REPORT_BYTES, TemplateError, UnknownField};
pub use overrides::{Bound, OutOfBounds, Override, Overrides, Target};
pub use parse::{INJECTION_RULES, Template, content_revision, template_revision};
pub use prepared::{BestEffort, BestEffortForms, Prepared, without_qos_resources};
pub use set::{CLASSIC_TEMPLATE, DEFAULT_TEMPLATE, EMBEDDED_CLASSIC, EMBEDDED_DEFAULT, TemplateSet};
pub use spec::{OverrideDecl, PodValue, PodValueKind, TemplateSpec};
pub use validate::{KubeVersion, NATIVE_SIDECAR_KUBELET_MINOR, ValueError, VersionError};

#[cfg(test)]
mod tests;
