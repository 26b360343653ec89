//! What the benchmark applies and creates: the compiled policies of a ConfigMap (renamed
//! for the benchmark, bound to its namespaces), the hand-written floors they are compared
//! with, and the Pods.

use std::collections::BTreeMap;

use envoy_injector::inject::AnnotationOptIn;
use envoy_injector::policies::{self, Options};
use envoy_injector::template::{DEFAULT_TEMPLATE, TemplateSet};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::common::policies::narrow;
use crate::scale::Result;

pub const FIELD_MANAGER: &str = "envoy-injector-bench";
/// The opt-in key: the Pod annotation and label, and the namespace label.
pub const INJECT: &str = "sidecar.samplecrd.k8s.io/inject";
/// The first container of the shipped default template.
pub const SIDECAR: &str = "envoy";
/// What every object of the benchmark is named after (and labelled with), so an earlier
/// run's leftovers are found.
pub const PREFIX: &str = "bench-adm-";

/// The shipped default template's sidecar: its containers and volumes, as JSON.
pub fn sidecar() -> (Vec<Value>, Vec<Value>) {
    let set = TemplateSet::embedded();
    let template = set.get(DEFAULT_TEMPLATE).expect("the embedded default template");
    let json = |items: &[Box<serde_json::value::RawValue>]| -> Vec<Value> {
        items
            .iter()
            .map(|raw| serde_json::from_str(raw.get()).expect("prepared JSON"))
            .collect()
    };
    (json(&template.prepared.containers), json(&template.prepared.volumes))
}

/// A ConfigMap's data of `count` templates: the shipped default as `config`, and copies
/// of it (another CPU request each) as `t1`, `t2`, ...
pub fn templates(count: usize) -> BTreeMap<String, String> {
    let default = envoy_injector::template::EMBEDDED_DEFAULT;
    (0..count)
        .map(|i| {
            if i == 0 {
                (DEFAULT_TEMPLATE.to_string(), default.to_string())
            } else {
                let text = default.replace("cpu: 100m", &format!("cpu: {}m", 100 + i));
                (format!("t{i}"), text)
            }
        })
        .collect()
}

/// The objects `policies` compiles from `data` (annotation opt-in as `annotations`),
/// renamed `bench-adm-VARIANT-…` and labelled the benchmark's (so no `serve` takes them
/// for its own), bound to `namespaces` only.
pub fn compiled(
    data: &BTreeMap<String, String>,
    annotations: AnnotationOptIn,
    variant: &str,
    namespaces: &[String],
) -> Result<Vec<Value>> {
    let set = TemplateSet::from_data("bench", data, envoy_injector::template::KubeVersion::NEWEST)
        .map_err(|e| e.to_string())?;
    let options = Options {
        annotation_opt_in: annotations,
        ..Options::default()
    };
    let compiled = policies::compile(&set, &options);
    if let Some(left) = compiled.not_compiled.first() {
        return Err(format!(
            "template `{}` left to the webhook: {}",
            left.template, left.reason
        ));
    }
    let objects: Vec<Value> = compiled
        .objects
        .iter()
        .map(|o| serde_json::to_value(o).map_err(|e| e.to_string()))
        .collect::<Result<_>>()?;
    Ok(narrow(&objects, namespaces)
        .into_iter()
        .map(|object| renamed(object, variant))
        .collect())
}

/// `envoy-injector-…` becomes `bench-adm-VARIANT-…` (a binding's `policyName` too),
/// `managed-by` names the benchmark.
fn renamed(mut object: Value, variant: &str) -> Value {
    let rename = |name: &str| name.replacen("envoy-injector-", &format!("{PREFIX}{variant}-"), 1);
    let name = object["metadata"]["name"].as_str().map(rename).unwrap_or_default();
    object["metadata"]["name"] = json!(name);
    object["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!(FIELD_MANAGER);
    if let Some(policy) = object["spec"]["policyName"].as_str().map(rename) {
        object["spec"]["policyName"] = json!(policy);
    }
    object
}

/// A CEL literal of a JSON value (every entry `dyn`: CEL refuses mixed list literals).
fn cel(json: &Value) -> String {
    match json {
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|v| format!("dyn({})", cel(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(members) => format!(
            "{{{}}}",
            members
                .iter()
                .map(|(k, v)| format!("{}: dyn({})", Value::from(k.as_str()), cel(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// The floor for this patch: a MutatingAdmissionPolicy that adds the sidecar's containers
/// and volumes, nothing else; with `condition`, that one match condition. Bound to
/// `namespace`, and with `object_selector` to the Pods it selects.
pub fn hand_written(
    name: &str,
    condition: Option<&str>,
    namespace: &str,
    object_selector: Option<Value>,
) -> Vec<Value> {
    let (containers, volumes) = sidecar();
    let mut ops: Vec<String> = containers
        .iter()
        .map(|c| {
            format!(
                "JSONPatch{{op: \"add\", path: \"/spec/containers/-\", value: {}}}",
                cel(c)
            )
        })
        .collect();
    for volume in &volumes {
        ops.push(format!(
            "JSONPatch{{op: \"add\", path: \"/spec/volumes/-\", value: {}}}",
            cel(volume)
        ));
    }
    let mut spec = json!({
        "failurePolicy": "Fail",
        "reinvocationPolicy": "Never",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": format!("[{}]", ops.join(", "))}}],
    });
    if let Some(condition) = condition {
        spec["matchConditions"] = json!([{"name": "opted-in", "expression": condition}]);
    }
    let labels = json!({"app.kubernetes.io/managed-by": FIELD_MANAGER});
    let mut binding_resources =
        json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}});
    if let Some(selector) = object_selector {
        binding_resources["objectSelector"] = selector;
    }
    vec![
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
               "metadata": {"name": name, "labels": labels}, "spec": spec}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
               "metadata": {"name": name, "labels": labels},
               "spec": {"policyName": name, "matchResources": binding_resources}}),
    ]
}

/// The one-line condition that reads the opt-in annotation, as a policy for annotated
/// Pods must.
pub fn annotation_condition() -> String {
    format!(
        "has(object.metadata.annotations) && '{INJECT}' in object.metadata.annotations && object.metadata.annotations['{INJECT}'] == 'true'"
    )
}

/// How a benchmark Pod is opted in, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Nothing opts it in (in a namespace without the label).
    Plain,
    Annotation,
    Label,
    /// Its namespace's label opts it in: the Pod carries nothing.
    Namespace,
}

/// A Pod of `shape`, one small app container; `huge`: 50 containers of 30 env vars each.
pub fn pod(name: &str, shape: Shape, huge: bool) -> Pod {
    let containers: Vec<Value> = if huge {
        (0..50)
            .map(|c| {
                let env: Vec<Value> = (0..30)
                    .map(|e| json!({"name": format!("VAR_{e:02}"), "value": format!("value of variable {e} of container {c}")}))
                    .collect();
                json!({"name": format!("app-{c:02}"), "image": "registry.k8s.io/pause:3.10", "env": env})
            })
            .collect()
    } else {
        vec![json!({"name": "app", "image": "registry.k8s.io/pause:3.10"})]
    };
    let mut metadata = json!({"name": name, "annotations": {"team": "bench"}});
    match shape {
        Shape::Annotation => metadata["annotations"][INJECT] = json!("true"),
        Shape::Label => metadata["labels"] = json!({INJECT: "true"}),
        Shape::Plain | Shape::Namespace => {}
    }
    serde_json::from_value(json!({"metadata": metadata, "spec": {"containers": containers}})).expect("a Pod")
}

/// The JSON Patch our webhook answers for `pod` (the shipped default template; the
/// decision and the patch as the webhook makes them), to serve from a stand-in.
pub fn our_patch(pod: &Pod) -> Result<Value> {
    use envoy_injector::inject::{self, Decision, PodView, Standalone};
    let json = serde_json::to_value(pod).map_err(|e| e.to_string())?;
    let view = PodView::read(&json);
    let set = TemplateSet::embedded();
    let chosen = inject::choose(&view, "", || Some(&set), &Standalone).map_err(|e| format!("{e:?}"))?;
    let Decision::Inject(plan) = chosen.plan(&view).map_err(|e| e.to_string())? else {
        return Err(String::from("the default template does not inject the benchmark's Pod"));
    };
    let patch = inject::jsonpatch::render(&plan, &view).map_err(|e| e.to_string())?;
    serde_json::to_value(patch).map_err(|e| e.to_string())
}
