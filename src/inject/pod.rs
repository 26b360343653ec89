//! A read-only view of a Pod's raw JSON: what is there, what is absent, and what is of
//! the wrong type. The patch is computed against this exact JSON, never against a
//! re-serialised copy, so fields this binary does not know survive untouched.

use serde_json::{Map, Value};

use super::InjectError;

/// What of a JSON value to keep (see [`POD`]).
#[derive(Debug, Clone, Copy)]
pub enum Keep {
    /// The whole value.
    All,
    /// Of an object, these keys (each kept as said); other keys are skipped.
    Fields(&'static [(&'static str, Keep)]),
    /// Of an array, each item as said.
    Each(&'static Keep),
}

/// A container: what mounts, ports and names the engine compares with the template's.
static CONTAINER: Keep = Keep::Fields(&[("name", Keep::All), ("volumeMounts", Keep::All), ("ports", Keep::All)]);

/// All that the engine (policy, plan, both renderings) reads of a Pod. Callers that
/// hold a large Pod (the admission review, offline `inject`) hand it only this, so it
/// must stay in step with every read in this module and its users.
pub static POD: Keep = Keep::Fields(&[
    ("apiVersion", Keep::All),
    ("kind", Keep::All),
    (
        "metadata",
        Keep::Fields(&[
            ("name", Keep::All),
            ("generateName", Keep::All),
            ("namespace", Keep::All),
            ("annotations", Keep::All),
            ("labels", Keep::All),
        ]),
    ),
    (
        "spec",
        Keep::Fields(&[
            ("containers", Keep::Each(&CONTAINER)),
            ("initContainers", Keep::Each(&CONTAINER)),
            // Whole: a same-named volume is compared field by field.
            ("volumes", Keep::All),
            ("imagePullSecrets", Keep::All),
        ]),
    ),
]);

/// A list field of the Pod: absent (or `null`) is different from empty for JSON Patch.
#[derive(Debug, Clone, Copy)]
pub enum List<'a> {
    Absent,
    Present(&'a [Value]),
}

impl<'a> List<'a> {
    pub fn items(&self) -> &'a [Value] {
        match self {
            List::Absent => &[],
            List::Present(items) => items,
        }
    }

    pub fn is_absent(&self) -> bool {
        matches!(self, List::Absent)
    }
}

/// A map field (`annotations`, `labels`).
#[derive(Debug, Clone, Copy)]
pub enum Dict<'a> {
    Absent,
    Present(&'a Map<String, Value>),
}

impl<'a> Dict<'a> {
    pub fn get(&self) -> Option<&'a Map<String, Value>> {
        match self {
            Dict::Absent => None,
            Dict::Present(map) => Some(map),
        }
    }
}

pub struct PodView<'a> {
    pub has_metadata: bool,
    pub has_spec: bool,
    pub annotations: Dict<'a>,
    pub labels: Dict<'a>,
    pub containers: List<'a>,
    pub init_containers: List<'a>,
    pub volumes: List<'a>,
    pub image_pull_secrets: List<'a>,
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

fn wrong(path: &str, expected: &'static str, found: &Value) -> InjectError {
    InjectError::InvalidPod {
        path: path.to_string(),
        expected,
        found: type_name(found),
    }
}

fn object<'a>(
    parent: Option<&'a Map<String, Value>>,
    key: &str,
    path: &str,
) -> Result<Option<&'a Map<String, Value>>, InjectError> {
    match parent.and_then(|p| p.get(key)) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(wrong(path, "an object", other)),
    }
}

fn list<'a>(parent: Option<&'a Map<String, Value>>, key: &str, path: &str) -> Result<List<'a>, InjectError> {
    match parent.and_then(|p| p.get(key)) {
        None | Some(Value::Null) => Ok(List::Absent),
        Some(Value::Array(items)) => {
            if let Some((index, bad)) = items.iter().enumerate().find(|(_, v)| !v.is_object()) {
                return Err(wrong(&format!("{path}[{index}]"), "an object", bad));
            }
            Ok(List::Present(items))
        }
        Some(other) => Err(wrong(path, "an array", other)),
    }
}

impl<'a> PodView<'a> {
    pub fn read(pod: &'a Value) -> Result<PodView<'a>, InjectError> {
        let Value::Object(root) = pod else {
            return Err(wrong("(the Pod)", "an object", pod));
        };
        let metadata = object(Some(root), "metadata", "metadata")?;
        let spec = object(Some(root), "spec", "spec")?;
        let dict = |key: &str, path: &str| -> Result<Dict<'a>, InjectError> {
            Ok(match object(metadata, key, path)? {
                Some(map) => Dict::Present(map),
                None => Dict::Absent,
            })
        };
        Ok(PodView {
            has_metadata: metadata.is_some(),
            has_spec: spec.is_some(),
            annotations: dict("annotations", "metadata.annotations")?,
            labels: dict("labels", "metadata.labels")?,
            containers: list(spec, "containers", "spec.containers")?,
            init_containers: list(spec, "initContainers", "spec.initContainers")?,
            volumes: list(spec, "volumes", "spec.volumes")?,
            image_pull_secrets: list(spec, "imagePullSecrets", "spec.imagePullSecrets")?,
        })
    }
}

/// The `name` of a list entry, or "" when it has none (the API server will refuse such
/// a Pod later; it must not make us panic now).
pub fn name_of(item: &Value) -> &str {
    item.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// `volumeMounts` of a container entry, as (name, mountPath) pairs.
pub fn mounts_of(container: &Value) -> impl Iterator<Item = (&str, &str)> {
    container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m.get("name").and_then(Value::as_str).unwrap_or_default(),
                m.get("mountPath").and_then(Value::as_str).unwrap_or_default(),
            )
        })
}

/// `(port, protocol)` of each containerPort of a container entry (protocol defaults to TCP).
pub fn ports_of(container: &Value) -> impl Iterator<Item = (i64, &str)> {
    container
        .get("ports")
        .and_then(Value::as_array)
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| {
            let port = p.get("containerPort")?.as_i64()?;
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            Some((port, protocol))
        })
}

/// True when every field set in `wanted` is set to the same value in `actual`. The API
/// server fills defaults (`defaultMode: 420`, ...) into stored objects, so an equal
/// definition may carry more fields than the template wrote.
pub fn is_subset(wanted: &Value, actual: &Value) -> bool {
    match (wanted, actual) {
        (Value::Object(w), Value::Object(a)) => w.iter().all(|(k, wv)| a.get(k).is_some_and(|av| is_subset(wv, av))),
        (Value::Array(w), Value::Array(a)) => w.len() == a.len() && w.iter().zip(a).all(|(wv, av)| is_subset(wv, av)),
        (w, a) => w == a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_null_and_present_lists_are_told_apart() {
        let pod = json!({"metadata": {"annotations": null}, "spec": {"containers": [], "volumes": null}});
        let view = PodView::read(&pod).unwrap();
        assert!(view.annotations.get().is_none());
        assert!(!view.containers.is_absent());
        assert!(view.volumes.is_absent());
        assert!(view.init_containers.is_absent());
    }

    #[test]
    fn wrong_types_name_the_field() {
        let pod = json!({"spec": {"containers": "nginx"}});
        let err = PodView::read(&pod).err().unwrap().to_string();
        assert!(err.contains("spec.containers"), "{err}");
        assert!(err.contains("expected an array, found a string"), "{err}");
        let pod = json!({"spec": {"volumes": [1]}});
        let err = PodView::read(&pod).err().unwrap().to_string();
        assert!(err.contains("spec.volumes[0]"), "{err}");
    }

    #[test]
    fn subset_tolerates_server_defaults() {
        let template = json!({"name": "v", "configMap": {"name": "envoy"}});
        let stored = json!({"name": "v", "configMap": {"name": "envoy", "defaultMode": 420}});
        assert!(is_subset(&template, &stored));
        assert!(!is_subset(&stored, &template));
        assert!(!is_subset(&json!({"name": "v", "emptyDir": {}}), &stored));
    }
}
