//! The way back: what the status annotation records of an injection, removed from the Pod
//! it was made in. Only what the status names is taken out (containers, init containers,
//! volumes, pull secrets, app mounts, the revision label and the status itself), never
//! something of the same kind the user wrote; the Pod-level resources the injection
//! raised are put back as the status records them. Pure: a Pod in, RFC 6902 `remove`s
//! out (and an `add` for each Pod-level value put back).

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use serde_json::{Map, Value};

use super::{InjectionStatus, REVISION_LABEL, STATUS_ANNOTATION};

/// Why a Pod's injection cannot be undone.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum UninjectError {
    #[error("annotation `{STATUS_ANNOTATION}`: expected the JSON the injector writes, found {found}")]
    Status { found: String },
    #[error("Pod field `{path}`: expected {expected}, found {found}")]
    InvalidPod {
        path: String,
        expected: &'static str,
        found: &'static str,
    },
}

/// What undoing one injection takes out.
#[derive(Debug, Clone, PartialEq)]
pub struct Removal {
    /// `remove` operations against the Pod (and the `add`s that put Pod-level values
    /// back), in an order that applies.
    pub patch: Patch,
    pub status: InjectionStatus,
    /// What the status records but the Pod no longer has (removed by hand since).
    pub missing: Vec<String>,
}

/// The removal of what `pod`'s status annotation records, or `None` when it has none.
pub fn removal(pod: &Value) -> Result<Option<Removal>, UninjectError> {
    let annotations = pod.pointer("/metadata/annotations").and_then(Value::as_object);
    let Some(recorded) = annotations.and_then(|a| a.get(STATUS_ANNOTATION)) else {
        return Ok(None);
    };
    let status: InjectionStatus = recorded
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .ok_or_else(|| UninjectError::Status {
            found: truncated(&recorded.to_string()),
        })?;
    let mut ops = Ops::default();
    let spec = object_at(pod, "spec")?;

    // Mounts first: they address app containers by index, which removing sidecars shifts.
    // The injection's are those of a volume it added (a valid Pod cannot mount a volume it
    // does not have), and those the status records (of a volume the Pod already had).
    let containers = list_at(spec, "spec", "containers")?;
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    for (index, container) in containers.iter().enumerate() {
        let name = container.get("name").and_then(Value::as_str).unwrap_or_default();
        if status.containers.iter().any(|c| c == name) {
            continue;
        }
        let at = format!("spec.containers[{index}]");
        let mounts = list_at(Some(container), &at, "volumeMounts")?;
        let recorded = status
            .volume_mounts
            .iter()
            .filter(|m| m.container == name)
            .map(|m| m.mount_path.clone());
        let of_added_volumes = mounts
            .iter()
            .filter(|m| text(m, "name").is_some_and(|volume| status.volumes.contains(&volume)))
            .filter_map(|m| text(m, "mountPath"));
        let paths: Vec<String> = recorded
            .chain(of_added_volumes)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if paths.is_empty() {
            continue;
        }
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        ops.remove_from(
            &["spec", "containers", &index.to_string(), "volumeMounts"],
            mounts,
            |m| text(m, "mountPath"),
            &paths,
            &mut Vec::new(),
        );
    }
    let mut missing = Vec::new();
    for (field, names) in [
        ("containers", &status.containers),
        ("initContainers", &status.init_containers),
        ("volumes", &status.volumes),
        ("imagePullSecrets", &status.image_pull_secrets),
    ] {
        let items = list_at(spec, "spec", field)?;
        let wanted: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut not_found = Vec::new();
        let keyed = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_string);
        ops.remove_from(&["spec", field], items, keyed, &wanted, &mut not_found);
        missing.extend(not_found.into_iter().map(|name| format!("{field} entry `{name}`")));
    }
    for mount in &status.volume_mounts {
        let found = containers.iter().any(|c| {
            c.get("name").and_then(Value::as_str) == Some(mount.container.as_str())
                && c.get("volumeMounts").and_then(Value::as_array).is_some_and(|m| {
                    m.iter()
                        .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(&mount.mount_path))
                })
        });
        if !found {
            missing.push(format!(
                "mount `{}` of container `{}`",
                mount.mount_path, mount.container
            ));
        }
    }

    if let Some(recorded) = &status.pod_resources {
        put_back_resources(&mut ops, spec, recorded)?;
    }

    // Metadata last: a map the injection created goes when it is left empty.
    let metadata = pod.get("metadata").and_then(Value::as_object);
    let labels = metadata.and_then(|m| m.get("labels")).and_then(Value::as_object);
    let label_gone = labels.is_some_and(|l| l.contains_key(REVISION_LABEL));
    let annotations_left = annotations.map_or(0, Map::len) - 1;
    let labels_left = labels.map_or(0, Map::len) - usize::from(label_gone);
    let others_left = metadata.map_or(0, |m| {
        m.keys()
            .filter(|k| !matches!(k.as_str(), "annotations" | "labels"))
            .count()
    });
    let annotations_emptied = annotations_left == 0;
    let labels_emptied = label_gone && labels_left == 0;
    let labels_stay = labels.is_some() && !labels_emptied;
    if others_left == 0 && annotations_emptied && !labels_stay {
        ops.remove(&["metadata"]);
    } else {
        match annotations_emptied {
            true => ops.remove(&["metadata", "annotations"]),
            false => ops.remove(&["metadata", "annotations", STATUS_ANNOTATION]),
        }
        if label_gone {
            match labels_emptied {
                true => ops.remove(&["metadata", "labels"]),
                false => ops.remove(&["metadata", "labels", REVISION_LABEL]),
            }
        }
    }
    Ok(Some(Removal {
        patch: Patch(ops.0),
        status,
        missing,
    }))
}

/// Puts `spec.resources` back as `recorded` says the Pod wrote it: each value the
/// injection changed set back, each key it added taken out, and a map it created whole.
fn put_back_resources(ops: &mut Ops, spec: Option<&Value>, recorded: &Value) -> Result<(), UninjectError> {
    let now = match spec.and_then(|s| s.get("resources")) {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(now)) => now,
        Some(other) => {
            return Err(UninjectError::InvalidPod {
                path: String::from("spec.resources"),
                expected: "an object",
                found: type_name(other),
            });
        }
    };
    if !recorded.is_object() {
        return Err(UninjectError::Status {
            found: format!("podResources {}", truncated(&recorded.to_string())),
        });
    }
    for field in ["requests", "limits"] {
        let path = ["spec", "resources", field];
        match (recorded.get(field), now.get(field)) {
            (None, None) => {}
            (None, Some(_)) => ops.remove(&path),
            (Some(Value::Object(was)), Some(Value::Object(is))) => {
                for key in is.keys().filter(|k| !was.contains_key(*k)) {
                    ops.remove(&["spec", "resources", field, key]);
                }
                for (key, value) in was.iter().filter(|(k, v)| is.get(*k) != Some(*v)) {
                    ops.put(&["spec", "resources", field, key], value.clone());
                }
            }
            (Some(was), _) => ops.put(&path, was.clone()),
        }
    }
    Ok(())
}

#[derive(Default)]
struct Ops(Vec<PatchOperation>);

impl Ops {
    /// Sets the value at `path` (an `add`, which replaces a member that is there).
    fn put(&mut self, path: &[&str], value: Value) {
        self.0.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(path.iter().copied()),
            value,
        }));
    }

    fn remove(&mut self, path: &[&str]) {
        self.0.push(PatchOperation::Remove(RemoveOperation {
            path: PointerBuf::from_tokens(path.iter().copied()),
        }));
    }

    /// Removes the entries of the list at `path` whose key is `wanted` (each once), from
    /// the last so earlier indices hold; the whole list when nothing else is left in it.
    /// Keys not found are added to `not_found`.
    fn remove_from<'w>(
        &mut self,
        path: &[&str],
        items: &[Value],
        key: impl Fn(&Value) -> Option<String>,
        wanted: &[&'w str],
        not_found: &mut Vec<&'w str>,
    ) {
        let mut hits: Vec<usize> = Vec::new();
        for name in wanted {
            match items
                .iter()
                .enumerate()
                .find(|(i, item)| !hits.contains(i) && key(item).as_deref() == Some(*name))
            {
                Some((index, _)) => hits.push(index),
                None => not_found.push(name),
            }
        }
        if hits.is_empty() {
            return;
        }
        if hits.len() == items.len() {
            self.remove(path);
            return;
        }
        hits.sort_unstable();
        for index in hits.into_iter().rev() {
            let index = index.to_string();
            let mut at = path.to_vec();
            at.push(&index);
            self.remove(&at);
        }
    }
}

fn truncated(text: &str) -> String {
    if text.len() > 120 {
        format!("{}…", &text[..text.floor_char_boundary(120)])
    } else {
        text.to_string()
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn object_at<'v>(parent: &'v Value, key: &str) -> Result<Option<&'v Value>, UninjectError> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value @ Value::Object(_)) => Ok(Some(value)),
        Some(other) => Err(UninjectError::InvalidPod {
            path: key.to_string(),
            expected: "an object",
            found: type_name(other),
        }),
    }
}

fn list_at<'v>(parent: Option<&'v Value>, at: &str, key: &str) -> Result<&'v [Value], UninjectError> {
    match parent.and_then(|p| p.get(key)) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(UninjectError::InvalidPod {
            path: format!("{at}.{key}"),
            expected: "an array",
            found: type_name(other),
        }),
    }
}

#[cfg(test)]
mod tests;
