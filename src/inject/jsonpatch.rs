//! Renders a [`Plan`] as RFC 6902 operations against the Pod's exact JSON.
//!
//! Only `add` is ever emitted, and a whole list or map is added only where the Pod has
//! none: existing entries are never replaced (one well-known injector wiped every
//! annotation with a bare `add /metadata/annotations`).

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::VolumeMount;
use serde::Serialize;
use serde_json::{Map, Value};

use super::InjectError;
use super::plan::Plan;
use super::pod::{Dict, List, PodView};

fn pointer(tokens: &[&str]) -> PointerBuf {
    // PointerBuf escapes `~` and `/` inside tokens (`~0`, `~1`).
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn to_value<T: Serialize>(item: &T) -> Result<Value, InjectError> {
    serde_json::to_value(item).map_err(|e| InjectError::Encode(e.to_string()))
}

struct Ops(Vec<PatchOperation>);

impl Ops {
    fn add(&mut self, path: PointerBuf, value: Value) {
        self.0.push(PatchOperation::Add(AddOperation { path, value }));
    }

    /// Appends items to a list, creating it when the Pod has none.
    fn append<T: Serialize>(&mut self, list: List<'_>, path: &[&str], items: &[T]) -> Result<(), InjectError> {
        if items.is_empty() {
            return Ok(());
        }
        match list {
            List::Absent => {
                let all = items.iter().map(to_value).collect::<Result<Vec<_>, _>>()?;
                self.add(pointer(path), Value::Array(all));
            }
            List::Present(_) => {
                let mut end = path.to_vec();
                end.push("-");
                for item in items {
                    self.add(pointer(&end), to_value(item)?);
                }
            }
        }
        Ok(())
    }

    /// Inserts items at the front of a list, in order.
    fn prepend<T: Serialize>(&mut self, list: List<'_>, path: &[&str], items: &[T]) -> Result<(), InjectError> {
        if list.is_absent() {
            return self.append(list, path, items);
        }
        for (index, item) in items.iter().enumerate() {
            let index = index.to_string();
            let mut at = path.to_vec();
            at.push(&index);
            self.add(pointer(&at), to_value(item)?);
        }
        Ok(())
    }

    /// Sets keys in a metadata map, creating the map (and `metadata`) when absent.
    fn set_keys(&mut self, has_metadata: bool, dict: Dict<'_>, field: &str, entries: &BTreeMap<String, String>) {
        if entries.is_empty() {
            return;
        }
        let as_map = || -> Map<String, Value> {
            entries
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect()
        };
        match dict {
            Dict::Present(_) => {
                for (key, value) in entries {
                    self.add(pointer(&["metadata", field, key]), Value::String(value.clone()));
                }
            }
            Dict::Absent if has_metadata => self.add(pointer(&["metadata", field]), Value::Object(as_map())),
            Dict::Absent => {
                let mut metadata = Map::new();
                metadata.insert(field.to_string(), Value::Object(as_map()));
                self.add(pointer(&["metadata"]), Value::Object(metadata));
            }
        }
    }
}

/// The JSON Patch that applies `plan` to `pod`.
pub fn render(plan: &Plan, pod: &Value) -> Result<Patch, InjectError> {
    let view = PodView::read(pod)?;
    let mut ops = Ops(Vec::new());
    let adds_to_spec = !plan.init_containers.is_empty()
        || !plan.containers.is_empty()
        || !plan.volumes.is_empty()
        || !plan.image_pull_secrets.is_empty();
    if !view.has_spec && adds_to_spec {
        ops.add(pointer(&["spec"]), Value::Object(Map::new()));
    }

    // Mounts first: they address the Pod's own containers by index, which appending
    // sidecars after them does not shift. Grouped so a container without a list gets it
    // created once.
    let mut mounts_by_container: BTreeMap<usize, Vec<&VolumeMount>> = BTreeMap::new();
    for app in &plan.app_mounts {
        mounts_by_container
            .entry(app.container_index)
            .or_default()
            .push(&app.mount);
    }
    for (index, mounts) in mounts_by_container {
        let existing = match view.containers.items()[index].get("volumeMounts") {
            Some(Value::Array(items)) => List::Present(items),
            _ => List::Absent,
        };
        let index = index.to_string();
        ops.append(existing, &["spec", "containers", &index, "volumeMounts"], &mounts)?;
    }

    ops.prepend(view.init_containers, &["spec", "initContainers"], &plan.init_containers)?;
    ops.append(view.containers, &["spec", "containers"], &plan.containers)?;
    ops.append(view.volumes, &["spec", "volumes"], &plan.volumes)?;
    ops.append(
        view.image_pull_secrets,
        &["spec", "imagePullSecrets"],
        &plan.image_pull_secrets,
    )?;

    // Creating `metadata` for annotations must not then be overwritten by labels.
    ops.set_keys(view.has_metadata, view.annotations, "annotations", &plan.annotations);
    let metadata_now = view.has_metadata || !plan.annotations.is_empty();
    ops.set_keys(metadata_now, view.labels, "labels", &plan.labels);
    Ok(Patch(ops.0))
}
