//! Offline injection (`envoy-injector inject`), like `istioctl kube-inject`: manifests in,
//! injected manifests or patches out. Pods and the Pod templates of workloads are
//! injected; every other document passes through unchanged.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::inject::{self, Decision, Extras, policy};
use crate::template::TemplateSet;

#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("document {index}: expected YAML or JSON{}: {message}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Syntax {
        index: usize,
        line: Option<usize>,
        message: String,
    },
    #[error("document {index} ({what}): {source}")]
    Inject {
        index: usize,
        what: String,
        source: Box<inject::InjectError>,
    },
    #[error("document {index} ({what}): field `{path}` expected an object, found {found}")]
    NotAnObject {
        index: usize,
        what: String,
        path: String,
        found: String,
    },
    #[error("cannot encode document {index} as {format}: {message}")]
    Encode {
        index: usize,
        format: &'static str,
        message: String,
    },
}

/// Where the Pod spec lives in a document of this kind, as a JSON Pointer.
pub fn pod_path(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some(""),
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" | "ReplicationController" => {
            Some("/spec/template")
        }
        "CronJob" => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

/// One input document and what injection made of it.
#[derive(Debug, Clone)]
pub struct Injected {
    pub original: Value,
    pub result: Value,
    /// RFC 6902 operations against the whole document (empty when unchanged).
    pub json_patch: json_patch::Patch,
    /// Strategic merge patch for the whole document (`{}` when unchanged).
    pub strategic: Value,
    /// Why the document was left alone, if it was.
    pub skipped: Option<String>,
}

/// Splits multi-document YAML (or JSON) into values; `kind: List` is expanded into its
/// items; empty documents are dropped.
pub fn read_documents(text: &str) -> Result<Vec<Value>, OfflineError> {
    let mut out = Vec::new();
    for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document).map_err(|e| OfflineError::Syntax {
            index: index + 1,
            line: e.location().map(|l| l.line()),
            message: e.to_string(),
        })?;
        match value {
            Value::Null => {}
            Value::Object(ref map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                out.extend(map.get("items").and_then(Value::as_array).cloned().unwrap_or_default());
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

fn describe(document: &Value) -> String {
    let kind = document
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object without kind");
    let name = document
        .pointer("/metadata/name")
        .or_else(|| document.pointer("/metadata/generateName"))
        .and_then(Value::as_str);
    match name {
        Some(name) => format!("{kind} {name}"),
        None => kind.to_string(),
    }
}

/// Nests `inner` under the object keys of `pointer` (`/spec/template` → {spec:{template:inner}}).
fn nest(pointer: &str, inner: Value) -> Value {
    pointer
        .split('/')
        .filter(|k| !k.is_empty())
        .rev()
        .fold(inner, |acc, key| {
            let mut map = Map::new();
            map.insert(key.to_string(), acc);
            Value::Object(map)
        })
}

/// Injects one document. `index` is 1-based, for messages.
pub fn inject_document(index: usize, document: &Value, templates: &TemplateSet) -> Result<Injected, OfflineError> {
    let unchanged = |reason: String| Injected {
        original: document.clone(),
        result: document.clone(),
        json_patch: json_patch::Patch(Vec::new()),
        strategic: Value::Object(Map::new()),
        skipped: Some(reason),
    };
    let kind = document.get("kind").and_then(Value::as_str).unwrap_or_default();
    let Some(path) = pod_path(kind) else {
        return Ok(unchanged(format!(
            "{} is not a Pod or a workload with a Pod template",
            describe(document)
        )));
    };
    let what = describe(document);
    let pod = match document.pointer(path) {
        Some(pod @ Value::Object(_)) => pod,
        other => {
            return Err(OfflineError::NotAnObject {
                index,
                what,
                path: if path.is_empty() {
                    String::from("(document)")
                } else {
                    path.to_string()
                },
                found: other.map(|v| v.to_string()).unwrap_or_else(|| String::from("nothing")),
            });
        }
    };
    // Asking for offline injection is the opt-in; an explicit opt-out still wins.
    if let Some(opt_out) = policy::opted_out(pod.pointer("/metadata/annotations").and_then(Value::as_object)) {
        return Ok(unchanged(opt_out.to_string()));
    }
    let err = |source| OfflineError::Inject {
        index,
        what: what.clone(),
        source: Box::new(source),
    };
    let template = inject::select_template(templates, pod).map_err(err)?;
    let plan = match inject::plan(pod, &template, &Extras::default()).map_err(err)? {
        Decision::Inject(plan) => plan,
        Decision::Skip(skip) => return Ok(unchanged(skip.to_string())),
    };
    let pod_patch = inject::jsonpatch::render(&plan, pod).map_err(err)?;
    let strategic = nest(path, inject::strategic::render(&plan, pod).map_err(err)?);
    // Re-root the Pod's operations at the Pod template's place in the document.
    let prefix = json_patch::jsonptr::PointerBuf::from_tokens(path.split('/').filter(|k| !k.is_empty()));
    let mut json_patch = pod_patch;
    for op in &mut json_patch.0 {
        if let json_patch::PatchOperation::Add(add) = op {
            add.path = prefix.concat(&add.path);
        }
    }
    let mut result = document.clone();
    json_patch::patch(&mut result, &json_patch).map_err(|e| {
        err(inject::InjectError::Encode(format!(
            "the computed patch does not apply: {e}"
        )))
    })?;
    Ok(Injected {
        original: document.clone(),
        result,
        json_patch,
        strategic,
        skipped: None,
    })
}
