//! The Pod Security Standards (privileged, baseline, restricted) applied to what a template
//! adds to a Pod, field by field, by the rules of the API server's Pod Security admission
//! at the policy version a namespace pins (`latest` or `v1.MINOR`). Pure: a template (and,
//! when there is one, the Pod it goes into) in, the fields a level does not allow out,
//! each naming the template, container or volume, field, what the level expects and what
//! was found.
//!
//! | file | holds |
//! |---|---|
//! | `standard` | the levels and policy versions, read as the API server reads the labels' values |
//! | `namespace` | a Namespace's `pod-security.kubernetes.io/*` labels → its three modes |
//! | `pod` | what the rules read of the Pod: its securityContext, `hostUsers`, `hostNetwork`, `os` |
//! | `finding` | one field a level does not allow |
//! | `rules` | the rules, per level and version |

mod finding;
mod namespace;
mod pod;
mod rules;
mod standard;

pub use finding::{Control, Finding, Place};
pub use namespace::{LABEL_PREFIX, Mode, ModePolicy, NamespacePolicy};
pub use pod::PodLevel;
pub use rules::judge;
pub use standard::{Level, LevelVersion, PolicyVersion};

use super::spec::TemplateSpec;

/// The strictest level what `spec` (template `name`) adds meets at `version`, in `pod` or
/// judged alone: `privileged` when it does not meet baseline.
pub fn strictest_met(name: &str, spec: &TemplateSpec, version: PolicyVersion, pod: Option<&PodLevel>) -> Level {
    [Level::Restricted, Level::Baseline]
        .into_iter()
        .find(|&level| judge(name, spec, LevelVersion::new(level, version), pod).is_empty())
        .unwrap_or(Level::Privileged)
}

#[cfg(test)]
mod tests;
