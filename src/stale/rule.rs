//! The staleness rule, over a Pod's metadata. Pure.

use crate::inject::{InjectionStatus, REVISION_LABEL, STATUS_ANNOTATION};
use crate::template::TemplateSet;

/// Template name used for a Pod whose `status` annotation cannot be read.
pub const UNKNOWN_TEMPLATE: &str = "(unknown)";

/// Whether a Pod injected from `template` at `revision` runs an older sidecar than the live
/// templates: the template changed since, or no longer exists.
pub fn is_stale(template: &str, revision: &str, live: &TemplateSet) -> bool {
    live.get(template).is_none_or(|t| t.revision != revision)
}

/// Which template and revision an injected Pod carries, from its metadata: the revision
/// label, and the template named by the `status` annotation.
pub fn injected(meta: &kube::api::ObjectMeta) -> Option<(String, String)> {
    let revision = meta.labels.as_ref()?.get(REVISION_LABEL)?.clone();
    let template = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(STATUS_ANNOTATION))
        .and_then(|s| serde_json::from_str::<InjectionStatus>(s).ok())
        .map(|s| s.template)
        .unwrap_or_else(|| UNKNOWN_TEMPLATE.to_string());
    Some((template, revision))
}
