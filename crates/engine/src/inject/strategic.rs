//! Renders a [`Plan`] as a Kubernetes strategic merge patch (`kubectl patch --type
//! strategic`): lists merge by their keys (containers, volumes and pull secrets by
//! `name`, mounts by `mountPath`), so the patch holds only what is added.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::InjectError;
use super::plan::Plan;
use super::pod::PodView;

fn to_value<T: serde::Serialize>(item: &T) -> Result<Value, InjectError> {
    serde_json::to_value(item).map_err(|e| InjectError::Encode(e.to_string()))
}

fn list<T: serde::Serialize>(items: &[T]) -> Result<Value, InjectError> {
    Ok(Value::Array(items.iter().map(to_value).collect::<Result<_, _>>()?))
}

/// `$setElementOrder/<list>`: strategic merge puts new entries first unless told the
/// final order, so whenever a list that already has entries grows, say where each goes.
fn set_order<'n>(
    spec: &mut Map<String, Value>,
    list: &str,
    existing: impl Iterator<Item = &'n str>,
    added: &[&'n str],
    prepend: bool,
) {
    let mut existing = existing.peekable();
    if existing.peek().is_none() || added.is_empty() {
        return;
    }
    let order: Vec<&str> = if prepend {
        added.iter().copied().chain(existing).collect()
    } else {
        existing.chain(added.iter().copied()).collect()
    };
    let order = order.into_iter().map(|name| json!({ "name": name })).collect();
    spec.insert(format!("$setElementOrder/{list}"), Value::Array(order));
}

/// An existing mount's `mountPath` in `$setElementOrder` (null when it has none).
fn mount_path(path: Option<&std::borrow::Cow<'_, str>>) -> Value {
    path.map_or(Value::Null, |p| Value::from(p.as_ref()))
}

/// The strategic merge patch that applies `plan` to `pod`.
pub fn render(plan: &Plan<'_>, pod: &PodView<'_>) -> Result<Value, InjectError> {
    let view = pod.check()?;
    let mut spec = Map::new();

    if !plan.init_containers.is_empty() {
        spec.insert("initContainers".into(), list(&plan.init_containers)?);
        let added: Vec<&str> = plan.init_containers.iter().map(|c| c.name.as_str()).collect();
        let existing = view.init_containers.items().map(|c| c.name());
        set_order(&mut spec, "initContainers", existing, &added, true);
    }

    // Mount entries only name an existing container (merge key `name`) and add to its
    // `volumeMounts` (merge key `mountPath`), whose new entries go last.
    let mut containers = Vec::new();
    let mut mounts: BTreeMap<usize, Vec<Value>> = BTreeMap::new();
    for app in &plan.app_mounts {
        mounts
            .entry(app.container_index)
            .or_default()
            .push(to_value(&app.mount)?);
    }
    for (index, added) in mounts {
        // A plan only mounts into containers of this Pod: the index is in the list.
        let Some(container) = view.containers.get(index) else {
            continue;
        };
        let mut entry = Map::new();
        entry.insert("name".into(), json!(container.name()));
        let existing: Vec<Value> = container
            .volume_mounts
            .get()
            .map(|mounts| {
                mounts
                    .iter()
                    .map(|m| mount_path(m.get().and_then(|m| m.mount_path.get())))
                    .collect()
            })
            .unwrap_or_default();
        if !existing.is_empty() {
            let order = existing
                .into_iter()
                .chain(added.iter().map(|m| m.get("mountPath").cloned().unwrap_or(Value::Null)))
                .map(|path| json!({ "mountPath": path }))
                .collect();
            entry.insert("$setElementOrder/volumeMounts".into(), Value::Array(order));
        }
        entry.insert("volumeMounts".into(), Value::Array(added));
        containers.push(Value::Object(entry));
    }
    for sidecar in &plan.containers {
        containers.push(to_value(sidecar)?);
    }
    if !containers.is_empty() {
        spec.insert("containers".into(), Value::Array(containers));
        let added: Vec<&str> = plan.containers.iter().map(|c| c.name.as_str()).collect();
        // Even with no new container, naming the order keeps the mount-only entries
        // from being moved to the front.
        if !view.containers.is_empty() {
            let order = view
                .containers
                .items()
                .map(|c| c.name())
                .chain(added.iter().copied())
                .map(|n| json!({ "name": n }));
            spec.insert("$setElementOrder/containers".into(), Value::Array(order.collect()));
        }
    }
    if !plan.volumes.is_empty() {
        spec.insert("volumes".into(), list(&plan.volumes)?);
        let added: Vec<&str> = plan.volumes.iter().map(|v| v.name.as_str()).collect();
        set_order(
            &mut spec,
            "volumes",
            view.volumes.items().map(|v| v.name()),
            &added,
            false,
        );
    }
    if !plan.image_pull_secrets.is_empty() {
        spec.insert("imagePullSecrets".into(), list(&plan.image_pull_secrets)?);
        let added: Vec<&str> = plan.image_pull_secrets.iter().map(|s| s.name.as_str()).collect();
        set_order(
            &mut spec,
            "imagePullSecrets",
            view.image_pull_secrets.items().map(|s| s.name()),
            &added,
            false,
        );
    }
    if let Some(pod_level) = &plan.resources.pod_level {
        // Maps merge key by key: only the values the injection writes.
        let mut resources = Map::new();
        for change in &pod_level.changes {
            let field = if change.limits { "limits" } else { "requests" };
            let map = resources.entry(field).or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = map {
                map.insert(change.resource.clone(), Value::String(change.new.clone()));
            }
        }
        spec.insert("resources".into(), Value::Object(resources));
    }
    let mut metadata = Map::new();
    if !plan.annotations.is_empty() {
        metadata.insert("annotations".into(), to_value(&plan.annotations)?);
    }
    if !plan.labels.is_empty() {
        metadata.insert("labels".into(), to_value(&plan.labels)?);
    }
    let mut patch = Map::new();
    if !metadata.is_empty() {
        patch.insert("metadata".into(), Value::Object(metadata));
    }
    if !spec.is_empty() {
        patch.insert("spec".into(), Value::Object(spec));
    }
    Ok(Value::Object(patch))
}
