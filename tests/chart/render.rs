//! With default values the chart renders what `kubectl kustomize manifests/` renders.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common::helm::{engine, repo, yaml_documents};
use crate::common::kubectl;

/// The differences Helm imposes on the chart's objects, each also said in docs/install.md
/// (`What the chart installs`):
/// - Helm's own labels on every object it renders and on the Pod template;
/// - no Namespace object: the release namespace is Helm's (`--create-namespace` makes it
///   bare), so its labels are the user's (docs/install.md says which);
/// - the CRD carries no labels: Helm installs `crds/` as they are, untemplated.
///
/// The namespace is templated into every selector and reference, which with the default
/// `envoy-injector` renders the same.
pub const HELM_IMPOSES: [&str; 3] = [
    "Helm's labels (helm.sh/chart, app.kubernetes.io/managed-by: Helm, app.kubernetes.io/instance, app.kubernetes.io/version)",
    "no Namespace object (the release namespace is not the chart's)",
    "the CRD without the kustomization's labels (crds/ is not templated)",
];

/// The labels Helm adds ([`HELM_IMPOSES`]).
pub const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

/// `kind/name` of each object.
fn key(object: &Value) -> String {
    format!(
        "{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn without_helm_labels(mut object: Value) -> Value {
    for at in ["/metadata/labels", "/spec/template/metadata/labels"] {
        if let Some(map) = object.pointer_mut(at).and_then(Value::as_object_mut) {
            for label in HELM_LABELS {
                map.remove(label);
            }
        }
    }
    object
}

/// Where two JSON values differ, as `path: kustomize … chart …` lines.
fn differences(path: &str, kustomize: &Value, chart: &Value, out: &mut Vec<String>) {
    match (kustomize, chart) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let null = Value::Null;
                differences(
                    &format!("{path}/{key}"),
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), x, y, out);
            }
        }
        (a, b) if a != b => out.push(format!("{path}: kustomize {a} / chart {b}")),
        _ => {}
    }
}

#[test]
fn default_values_render_the_objects_of_the_kustomization() {
    let what = "the chart's default render against manifests/";
    let Some(helm) = engine(what) else { return };
    if !kubectl::present_or_skip(what) {
        return;
    }
    let kustomized: BTreeMap<String, Value> =
        yaml_documents(&kubectl::kustomize(&repo().join("manifests")).expect("kubectl kustomize runs"))
            .into_iter()
            .map(|o| (key(&o), o))
            .collect();
    let rendered: BTreeMap<String, Value> = helm
        .render("envoy-injector", "{}")
        .unwrap_or_else(|e| panic!("expected the chart to render with default values, found: {e}"))
        .into_iter()
        .map(|o| (key(&o), without_helm_labels(o)))
        .collect();

    let mut found = Vec::new();
    for (name, kustomize) in &kustomized {
        let Some(chart) = rendered.get(name) else {
            found.push(format!("{name}: only in manifests/"));
            continue;
        };
        let mut lines = Vec::new();
        differences(name, kustomize, chart, &mut lines);
        found.extend(lines);
    }
    found.extend(
        rendered
            .keys()
            .filter(|k| !kustomized.contains_key(*k))
            .map(|k| format!("{k}: only in the chart")),
    );
    // What Helm imposes, and nothing else.
    let expected = [
        "CustomResourceDefinition/networks.samplecrd.k8s.io/metadata/labels: kustomize \
         {\"app.kubernetes.io/name\":\"envoy-injector\",\"app.kubernetes.io/part-of\":\"envoy-injector\"} / chart null"
            .to_string(),
        "Namespace/envoy-injector: only in manifests/".to_string(),
    ];
    assert_eq!(
        found, expected,
        "expected the default render to differ from `kubectl kustomize manifests/` only by what Helm imposes \
         ({HELM_IMPOSES:?})"
    );
    assert!(
        kustomized.len() >= 13,
        "expected every object of manifests/, found {:?}",
        kustomized.keys()
    );
}

#[test]
fn helm_labels_are_on_every_object_and_the_selectors_are_the_kustomization_s() {
    let Some(helm) = engine("the chart's labels") else {
        return;
    };
    for object in helm.render("envoy-injector", "{}").expect("renders") {
        if object["kind"] == "CustomResourceDefinition" {
            continue;
        }
        let labels = &object["metadata"]["labels"];
        for label in HELM_LABELS {
            assert!(
                labels.get(label).is_some(),
                "expected label {label} on {}, found {labels}",
                key(&object)
            );
        }
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{}", key(&object));
        if object["kind"] == "Deployment" {
            // Immutable: as manifests/ has it, so a release can take that Deployment over.
            assert_eq!(
                object["spec"]["selector"],
                serde_json::json!({"matchLabels": {"app.kubernetes.io/name": "envoy-injector", "app.kubernetes.io/component": "webhook"}})
            );
        }
    }
}
