//! The JSON Patch operations the mutation writes, as CEL: one operation, and where an
//! injected container stands. `patch` and `pod_values` both write them.

use super::cel;
use super::variables::{CONTAINERS, Scope};
use crate::template::Template;

/// One JSON Patch operation as a CEL map (`JSONPatch` values are made of these by
/// `patch::operations`).
pub(super) fn op(kind: &str, path: &str, value: &str) -> String {
    format!(
        "{{\"op\": dyn({}), \"path\": dyn({path}), \"value\": dyn({value})}}",
        cel::string(kind)
    )
}

/// Where the injected container `name` stands once added: a template init container at
/// its index; a sidecar after them (native) or after the Pod's containers.
pub(super) fn container_path(template: &Template, scope: &Scope, name: &str) -> String {
    let spec = &template.spec;
    if let Some(i) = spec.init_containers.iter().position(|c| c.name == name) {
        return cel::string(&format!("/spec/initContainers/{i}"));
    }
    let j = spec.containers.iter().position(|c| c.name == name).unwrap_or(0);
    format!(
        "({} ? {} : \"/spec/containers/\" + string(size({CONTAINERS}) + {j}))",
        scope.get("native"),
        cel::string(&format!("/spec/initContainers/{}", spec.init_containers.len() + j))
    )
}
