//! The collections of an object that `inject` adds to and `uninject` takes from, for the
//! reader to record where they are in the text (`yaml::paths::Paths`): an object's and a
//! Pod template's `metadata`, its `annotations` and `labels`, the Pod spec and its lists,
//! a container and its `volumeMounts`, the Pod-level `resources` and its `requests` and
//! `limits`, and the way down to a workload's Pod template, in a document's root or in
//! each item of a `List`. They follow [`pod_path`] for every kind.

use super::pod_path;
use crate::yaml::node::{Node, Value};
use crate::yaml::paths::{Paths, strip_layouts};

/// Roles of a node on the paths that lead to an addition, as bits: a node can be several
/// at once (a document's root is an object and, if its kind is Pod, the Pod).
mod role {
    /// A document's root, or an item of its `items` (a `List`'s objects); also a Pod.
    pub const OBJECT: u16 = 1;
    /// The document's root: its `items` may be a `List`'s.
    pub const ROOT: u16 = 1 << 1;
    /// A Pod: an object of kind Pod or a workload's Pod template.
    pub const POD: u16 = 1 << 2;
    pub const POD_METADATA: u16 = 1 << 3;
    /// `annotations` or `labels` of a Pod's metadata.
    pub const METADATA_MAP: u16 = 1 << 4;
    pub const POD_SPEC: u16 = 1 << 5;
    /// `initContainers`, `volumes`, `imagePullSecrets` of a Pod spec.
    pub const SPEC_LIST: u16 = 1 << 6;
    pub const CONTAINERS: u16 = 1 << 7;
    pub const CONTAINER: u16 = 1 << 8;
    pub const MOUNTS: u16 = 1 << 9;
    /// An object's `spec`, which may hold a Pod template.
    pub const WORKLOAD_SPEC: u16 = 1 << 10;
    pub const JOB_TEMPLATE: u16 = 1 << 11;
    pub const JOB_TEMPLATE_SPEC: u16 = 1 << 12;
    /// The root's `items`.
    pub const ITEMS: u16 = 1 << 13;
    /// A Pod spec's `resources`.
    pub const POD_RESOURCES: u16 = 1 << 14;
    /// Its `requests` or `limits`, whose values the injection raises.
    pub const RESOURCE_MAP: u16 = 1 << 15;

    /// The role of the root of a document.
    pub const DOCUMENT: u16 = OBJECT | ROOT | POD;
}

/// The paths to a Pod's collections in every object `inject` knows.
pub struct PodPaths;

impl Paths for PodPaths {
    fn root(&self) -> u16 {
        role::DOCUMENT
    }

    fn child(&self, parent: u16, key: Option<&str>) -> u16 {
        use role::*;
        let mut role = 0;
        let has = |bits: u16| parent & bits != 0;
        match key {
            None => {
                if has(CONTAINERS) {
                    role |= CONTAINER;
                }
                if has(ITEMS) {
                    role |= OBJECT | POD;
                }
            }
            Some(key) => {
                if has(POD) {
                    match key {
                        "metadata" => role |= POD_METADATA,
                        "spec" => role |= POD_SPEC,
                        _ => {}
                    }
                }
                if has(OBJECT) && key == "spec" {
                    role |= WORKLOAD_SPEC;
                }
                if has(ROOT) && key == "items" {
                    role |= ITEMS;
                }
                if has(WORKLOAD_SPEC) {
                    match key {
                        "template" => role |= POD,
                        "jobTemplate" => role |= JOB_TEMPLATE,
                        _ => {}
                    }
                }
                if has(JOB_TEMPLATE) && key == "spec" {
                    role |= JOB_TEMPLATE_SPEC;
                }
                if has(JOB_TEMPLATE_SPEC) && key == "template" {
                    role |= POD;
                }
                if has(POD_METADATA) && matches!(key, "annotations" | "labels") {
                    role |= METADATA_MAP;
                }
                if has(POD_SPEC) {
                    match key {
                        "containers" => role |= CONTAINERS,
                        "initContainers" | "volumes" | "imagePullSecrets" => role |= SPEC_LIST,
                        "resources" => role |= POD_RESOURCES,
                        _ => {}
                    }
                }
                if has(CONTAINER) && key == "volumeMounts" {
                    role |= MOUNTS;
                }
                if has(POD_RESOURCES) && matches!(key, "requests" | "limits") {
                    role |= RESOURCE_MAP;
                }
            }
        }
        role
    }

    /// An annotation or a label may be one `uninject` takes out, a Pod-level request or
    /// limit one `inject` sets anew or `uninject` puts back.
    fn every_entry(&self, role: u16) -> bool {
        role & (role::METADATA_MAP | role::RESOURCE_MAP) != 0
    }

    /// Now that the item's kind is known: the way to its Pod and the Pod's own layouts are
    /// kept (all of them for a Pod), the rest of the object goes without (all of it for a
    /// kind that holds no Pod).
    fn settle_item(&self, object: &mut Node) {
        let kind = object.get("kind").and_then(Node::as_str);
        let Some(path) = kind.and_then(pod_path) else {
            strip_layouts(object);
            return;
        };
        let mut node = object;
        for token in path.split('/').filter(|t| !t.is_empty()) {
            let Value::Map(entries) = &mut node.value else {
                return;
            };
            let mut next = None;
            for (key, value) in entries.iter_mut() {
                match key == token {
                    true => next = Some(value),
                    false => strip_layouts(value),
                }
            }
            match next {
                Some(next) => node = next,
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::role::*;
    use super::*;

    #[test]
    fn roles_follow_the_pod_paths_of_every_kind() {
        let walk = |keys: &[Option<&str>]| {
            keys.iter()
                .try_fold(PodPaths.root(), |role, key| match role {
                    0 => None,
                    role => Some(PodPaths.child(role, *key)),
                })
                .unwrap_or(0)
        };
        // A Pod.
        assert_ne!(walk(&[Some("metadata"), Some("annotations")]) & METADATA_MAP, 0);
        assert_ne!(
            walk(&[Some("spec"), Some("containers"), None, Some("volumeMounts")]) & MOUNTS,
            0
        );
        // A Deployment's and a CronJob's Pod template.
        assert_ne!(
            walk(&[Some("spec"), Some("template"), Some("spec"), Some("volumes")]) & SPEC_LIST,
            0
        );
        assert_ne!(
            walk(&[
                Some("spec"),
                Some("jobTemplate"),
                Some("spec"),
                Some("template"),
                Some("metadata"),
                Some("labels")
            ]) & METADATA_MAP,
            0
        );
        // A List's item.
        assert_ne!(walk(&[Some("items"), None, Some("spec"), Some("template")]) & POD, 0);
        // The Pod level's requests and limits.
        assert_ne!(
            walk(&[
                Some("spec"),
                Some("template"),
                Some("spec"),
                Some("resources"),
                Some("limits")
            ]) & RESOURCE_MAP,
            0
        );
        assert_eq!(
            walk(&[
                Some("spec"),
                Some("containers"),
                None,
                Some("resources"),
                Some("limits")
            ]),
            0,
            "a container's are not edited in place"
        );
        // Elsewhere nothing is recorded, and below nothing either.
        assert_eq!(walk(&[Some("data")]), 0);
        assert_eq!(walk(&[Some("spec"), Some("selector"), Some("matchLabels")]), 0);
        assert_eq!(walk(&[Some("spec"), Some("containers"), None, Some("env")]), 0);
        assert_eq!(walk(&[Some("spec"), Some("items")]), 0);
    }
}
