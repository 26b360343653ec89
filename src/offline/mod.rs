//! Offline injection (`envoy-injector inject`), like `istioctl kube-inject`, and its
//! undoing (`uninject`): manifests in, changed manifests or patches out, one document at a
//! time.
//!
//! Input is read the way kubectl reads it (`crate::yaml`), so the injector decides on
//! the same values the API server will see; output is the input's text with the
//! additions spliced in, or written so that kubectl reads back exactly those values.
//! `run` streams documents from a reader to a writer, handing the engine only its `view`
//! of each object, and has the reader record where in the text the collections on the
//! ways to a Pod are (`paths`); this module holds the per-object decision, which is pure.

mod kinds;
mod paths;
pub mod run;
pub mod view;

use serde_json::{Map, Value};

use crate::inject::{self, AnnotationOptIn, Decision, NotChosen, PodView, Standalone, policy};
use crate::template::TemplateSet;
use crate::yaml::node::{Node, Value as NodeValue};
use crate::yaml::read::{ReadError, read_documents};
use kinds::nest;
pub use kinds::pod_path;

/// Why one object could not be injected. `at` names it: document number, kind and name,
/// line (`document 2 (Pod web) at line 14`).
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("{at}: expected YAML that kubectl can read: {message}")]
    Syntax { at: String, message: String },
    #[error("{at}: expected an object (a Kubernetes manifest), found {found}")]
    NotAnObject { at: String, found: &'static str },
    #[error("{at}: expected a `kind` naming the object's type, found {found}")]
    NoKind { at: String, found: String },
    #[error("{at}: {source}")]
    Inject {
        at: String,
        source: Box<inject::InjectError>,
    },
    #[error("{at}: {source}")]
    Uninject {
        at: String,
        source: inject::uninject::UninjectError,
    },
    #[error("{at}: field `{path}`: expected an object (the Pod template), found {found}")]
    PodTemplateNotAnObject { at: String, path: String, found: String },
    #[error("{at}: cannot write it as {format}: {message}")]
    Encode {
        at: String,
        format: &'static str,
        message: String,
    },
}

/// One object of a manifest and the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestObject {
    pub object: Value,
    pub line: Option<usize>,
}

/// The objects of `text` as JSON, read the way kubectl reads them: every document's
/// root, with a `List` replaced by its items, each with its line. For callers that want
/// values, not the writer's tree (`check -f`).
pub fn objects(text: &str) -> Result<Vec<ManifestObject>, ReadError> {
    let mut objects = Vec::new();
    for mut document in read_documents(text, 1)? {
        document.unpack();
        let Some(root) = document.root else { continue };
        let list = root.get("kind").and_then(Node::as_str) == Some("List");
        match (&root.value, root.get("items").map(|items| &items.value)) {
            (NodeValue::Map(_), Some(NodeValue::Seq(items))) if list => {
                objects.extend(items.iter().map(|item| ManifestObject {
                    object: item.to_json(),
                    line: item.line(),
                }))
            }
            // A List without items has none to explain.
            (NodeValue::Map(_), _) if list => {}
            _ => objects.push(ManifestObject {
                object: root.to_json(),
                line: root.line(),
            }),
        }
    }
    Ok(objects)
}

/// Kinds of Kubernetes' own API groups (`v1`, `apps/v1`, `*.k8s.io/...`) are all known:
/// one that holds no Pod (Service, ConfigMap, ...) passes without a word. A custom
/// resource might hold a Pod template inject cannot see, so passing one gets a note.
fn is_builtin_api(api_version: &str) -> bool {
    match api_version.split_once('/') {
        None => true,
        Some((group, _)) => !group.contains('.') || group.ends_with(".k8s.io"),
    }
}

/// Short description of an object for messages: `Deployment web`.
pub fn describe(object: &Value) -> String {
    let kind = object.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty());
    // `get`, not `pointer`: this names every object, and `pointer` copies each token.
    let metadata = object.get("metadata");
    let name = metadata
        .and_then(|m| m.get("name"))
        .or_else(|| metadata.and_then(|m| m.get("generateName")))
        .and_then(Value::as_str);
    match (kind, name) {
        (Some(kind), Some(name)) => format!("{kind} {name}"),
        (Some(kind), None) => kind.to_string(),
        (None, Some(name)) => format!("no kind, name {name}"),
        (None, None) => String::from("no kind"),
    }
}

pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map without `kind`",
    }
}

/// An object left as it was, and whether that is worth telling the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub reason: String,
    /// Quiet for kinds that simply hold no Pod (Service, ConfigMap, ...).
    pub quiet: bool,
}

/// Which renderings of an injection a caller needs. The JSON Patch is always made (the
/// YAML and JSON outputs are the input with it applied); the strategic merge patch
/// only when it is the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renderings {
    JsonPatch,
    JsonPatchAndStrategic,
}

/// What injection makes of one object.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// RFC 6902 operations against the whole object (empty when unchanged); `add` only.
    pub json_patch: json_patch::Patch,
    /// Strategic merge patch for the whole object (`{}` when unchanged), when asked for.
    pub strategic: Option<Value>,
    pub skipped: Option<Skipped>,
    /// Things the user should fix, though injection went ahead (or was skipped).
    pub warnings: Vec<String>,
}

/// An object left unchanged, and why.
fn unchanged(renderings: Renderings, reason: String, quiet: bool, warnings: Vec<String>) -> Outcome {
    Outcome {
        json_patch: json_patch::Patch(Vec::new()),
        strategic: (renderings == Renderings::JsonPatchAndStrategic).then(|| Value::Object(Map::new())),
        skipped: Some(Skipped { reason, quiet }),
        warnings,
    }
}

/// Where an object's Pod is: its JSON Pointer in the object and the Pod; or, for a kind
/// that holds none, the outcome that leaves it unchanged.
enum Located<'v> {
    Pod { path: &'static str, pod: &'v Value },
    NoPod(Outcome),
}

fn locate<'v>(at: &str, object: &'v Value, renderings: Renderings) -> Result<Located<'v>, OfflineError> {
    let Value::Object(fields) = object else {
        return Err(OfflineError::NotAnObject {
            at: at.to_string(),
            found: type_name(object),
        });
    };
    let kind = match fields.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => kind.as_str(),
        other => {
            return Err(OfflineError::NoKind {
                at: at.to_string(),
                found: other.map_or_else(|| String::from("none"), |v| format!("{v}")),
            });
        }
    };
    let Some(path) = pod_path(kind) else {
        let api_version = fields.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        return Ok(Located::NoPod(if is_builtin_api(api_version) {
            unchanged(renderings, format!("kind {kind} holds no Pod"), true, Vec::new())
        } else {
            unchanged(
                renderings,
                format!(
                    "kind {kind} ({api_version}) is not one inject knows; if it holds a Pod template, that Pod is not injected here (the webhook injects it when the Pod is created)"
                ),
                false,
                Vec::new(),
            )
        }));
    };
    match object.pointer(path) {
        Some(pod @ Value::Object(_)) => Ok(Located::Pod { path, pod }),
        other => Err(OfflineError::PodTemplateNotAnObject {
            at: at.to_string(),
            path: path.trim_start_matches('/').replace('/', "."),
            found: other.map_or_else(|| String::from("nothing"), |v| type_name(v).to_string()),
        }),
    }
}

/// How a message names the `index`th document (from 1): `document 2 (Pod web) at line 14`;
/// a non-object by number only, since its error says what was found.
pub fn at_document(index: usize, object: &Value, line: Option<usize>) -> String {
    let what = object.is_object().then(|| describe(object));
    place(&format!("document {index}"), what.as_deref(), line)
}

/// How every message names what it is about (`document 2 (Pod web) at line 14`,
/// `document 1 (List), item 3 (a string) at line 9`): `what` it is and its line, when
/// known.
fn place(name: &str, what: Option<&str>, line: Option<usize>) -> String {
    let mut at = name.to_string();
    if let Some(what) = what {
        at.push_str(&format!(" ({what})"));
    }
    if let Some(line) = line {
        at.push_str(&format!(" at line {line}"));
    }
    at
}

/// Why `inject` refuses `object` before looking at its Pod (not an object, no `kind`, a Pod
/// template that is not an object), if it does: what `check -f` reports of the same file.
pub fn refused(at: &str, object: &Value) -> Option<OfflineError> {
    locate(at, object, Renderings::JsonPatch).err()
}

/// Re-roots the Pod's operations at the Pod's place in the object.
fn reroot(patch: &mut json_patch::Patch, path: &str) {
    let prefix = json_patch::jsonptr::PointerBuf::from_tokens(path.split('/').filter(|k| !k.is_empty()));
    for op in &mut patch.0 {
        match op {
            json_patch::PatchOperation::Add(add) => add.path = prefix.concat(&add.path),
            json_patch::PatchOperation::Remove(remove) => remove.path = prefix.concat(&remove.path),
            _ => {}
        }
    }
}

/// Decides and plans the injection of one object (a Pod or a workload), named `at` in
/// messages. Pure: the caller reads and writes.
pub fn inject_object(
    at: &str,
    object: &Value,
    templates: &TemplateSet,
    renderings: Renderings,
) -> Result<Outcome, OfflineError> {
    let (path, pod) = match locate(at, object, renderings)? {
        Located::Pod { path, pod } => (path, pod),
        Located::NoPod(outcome) => return Ok(outcome),
    };
    let view = PodView::read(pod);
    // Asking for offline injection is the opt-in (an annotation opt-in is always read
    // here); an explicit opt-out still wins.
    let mut warnings = policy::unreadable_flags(view.meta(), AnnotationOptIn::On);
    if let Some(skip) = policy::opted_out(view.meta()).or_else(|| inject::host_network(&view, Some(templates))) {
        return Ok(unchanged(renderings, skip.to_string(), false, warnings));
    }
    let err = |source| OfflineError::Inject {
        at: at.to_string(),
        source: Box::new(source),
    };
    // From the template on, the decision every path takes; no namespace and no Networks here.
    let chosen = match inject::choose(&view, "", || Some(templates), &Standalone) {
        Ok(chosen) => chosen,
        Err(NotChosen::Unknown(unknown)) => return Err(err(unknown)),
        Err(NotChosen::NoTemplates) => unreachable!("the templates are handed in"),
    };
    let plan = match chosen.plan_without_join(&view).map_err(err)? {
        Decision::Inject(plan) => plan,
        Decision::Skip(skip) => return Ok(unchanged(renderings, skip.to_string(), false, warnings)),
    };
    if let Some(name) = chosen.unseen_network() {
        let namespace = object.pointer("/metadata/namespace").and_then(Value::as_str);
        warnings.push(inject::join::offline_warning(name, namespace));
    }
    warnings.extend(plan.pod_values.iter().filter_map(|v| v.warning(&chosen.template)));
    let mut json_patch = inject::jsonpatch::render(&plan, &view).map_err(err)?;
    let strategic = match renderings {
        Renderings::JsonPatch => None,
        Renderings::JsonPatchAndStrategic => Some(nest(path, inject::strategic::render(&plan, &view).map_err(err)?)),
    };
    reroot(&mut json_patch, path);
    Ok(Outcome {
        json_patch,
        strategic,
        skipped: None,
        warnings,
    })
}

/// Plans the removal of what one object's status annotation records (`uninject`): JSON
/// Patch `remove`s only. An object without the annotation is left unchanged with a note.
pub fn uninject_object(at: &str, object: &Value) -> Result<Outcome, OfflineError> {
    let renderings = Renderings::JsonPatch;
    let (path, pod) = match locate(at, object, renderings)? {
        Located::Pod { path, pod } => (path, pod),
        Located::NoPod(outcome) => return Ok(outcome),
    };
    let removal = inject::uninject::removal(pod).map_err(|source| OfflineError::Uninject {
        at: at.to_string(),
        source,
    })?;
    let Some(removal) = removal else {
        return Ok(unchanged(
            renderings,
            format!(
                "no `{}` annotation: it was not injected, or not by this injector",
                inject::STATUS_ANNOTATION
            ),
            false,
            Vec::new(),
        ));
    };
    let warnings = removal
        .missing
        .iter()
        .map(|m| format!("the status annotation records {m}, which is no longer there"))
        .collect();
    let mut json_patch = removal.patch;
    reroot(&mut json_patch, path);
    Ok(Outcome {
        json_patch,
        strategic: None,
        skipped: None,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_kinds_pass_quietly_custom_ones_with_a_note() {
        let set = TemplateSet::embedded();
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}});
        let skipped = inject_object("d", &service, &set, Renderings::JsonPatch)
            .unwrap()
            .skipped
            .unwrap();
        assert!(skipped.quiet);
        let dc = json!({"apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig", "metadata": {"name": "f"},
                        "spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}});
        let skipped = inject_object("d", &dc, &set, Renderings::JsonPatch)
            .unwrap()
            .skipped
            .unwrap();
        assert!(!skipped.quiet);
        assert!(
            skipped.reason.contains("DeploymentConfig (apps.openshift.io/v1)"),
            "{}",
            skipped.reason
        );
        let ingress = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress"});
        assert!(
            inject_object("d", &ingress, &set, Renderings::JsonPatch)
                .unwrap()
                .skipped
                .unwrap()
                .quiet
        );
    }

    #[test]
    fn objects_without_kind_and_non_objects_are_errors_naming_what_was_found() {
        let set = TemplateSet::embedded();
        let err = inject_object("document 3", &json!("just text"), &set, Renderings::JsonPatch)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "document 3: expected an object (a Kubernetes manifest), found a string"
        );
        let err = inject_object("document 4", &json!({"metadata": {}}), &set, Renderings::JsonPatch)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "document 4: expected a `kind` naming the object's type, found none"
        );
        let err = inject_object(
            "d",
            &json!({"kind": "Deployment", "spec": {"template": []}}),
            &set,
            Renderings::JsonPatch,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("field `spec.template`") && err.contains("found a list"),
            "{err}"
        );
    }

    #[test]
    fn unreadable_opt_in_values_warn_but_inject() {
        let set = TemplateSet::embedded();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "p", "annotations": {(inject::INJECT_ANNOTATION): "yes"}},
                         "spec": {"containers": [{"name": "app", "ports": [{"containerPort": 8080}]}]}});
        let outcome = inject_object("d", &pod, &set, Renderings::JsonPatch).unwrap();
        assert!(outcome.skipped.is_none());
        assert_eq!(outcome.warnings.len(), 1);
        assert!(outcome.warnings[0].contains("\"yes\""), "{:?}", outcome.warnings);
    }
}
