//! With default values the chart renders what `kubectl kustomize manifests/` renders.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common::harness::Outcome;
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

/// Where the chart rendered with `values` differs from `kubectl kustomize dir`, one line
/// each (Helm's labels aside).
fn against_kustomize(helm: &crate::common::helm::Engine, dir: &std::path::Path, values: &str) -> Vec<String> {
    let kustomized: BTreeMap<String, Value> = yaml_documents(&kubectl::kustomize(dir).expect("kubectl kustomize runs"))
        .into_iter()
        .map(|o| (key(&o), o))
        .collect();
    let rendered: BTreeMap<String, Value> = helm
        .render("envoy-injector", values)
        .unwrap_or_else(|e| panic!("expected the chart to render with {values}, found: {e}"))
        .into_iter()
        .map(|o| (key(&o), without_helm_labels(o)))
        .collect();
    assert!(
        kustomized.len() >= 13,
        "expected every object of {}, found {:?}",
        dir.display(),
        kustomized.keys()
    );
    let mut found = Vec::new();
    for (name, kustomize) in &kustomized {
        let Some(chart) = rendered.get(name) else {
            found.push(format!("{name}: only in {}", dir.display()));
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
    found
}

/// What Helm imposes ([`HELM_IMPOSES`]) as [`against_kustomize`] says it.
fn imposed(dir: &std::path::Path) -> Vec<String> {
    vec![
        "CustomResourceDefinition/networks.samplecrd.k8s.io/metadata/labels: kustomize \
         {\"app.kubernetes.io/name\":\"envoy-injector\",\"app.kubernetes.io/part-of\":\"envoy-injector\"} / chart null"
            .to_string(),
        format!("Namespace/envoy-injector: only in {}", dir.display()),
    ]
}

pub fn default_values_render_the_objects_of_the_kustomization() -> Outcome {
    let what = "the chart's default render against manifests/";
    let helm = engine(what)?;
    kubectl::required(what)?;
    let dir = repo().join("manifests");
    assert_eq!(
        against_kustomize(&helm, &dir, "{}"),
        imposed(&dir),
        "expected the default render to differ from `kubectl kustomize manifests/` only by what Helm imposes \
         ({HELM_IMPOSES:?})"
    );
    Ok(())
}

/// `autoRollout.enabled: true` renders what manifests/ with the component
/// manifests/auto-rollout/ renders: the flag and the same rights, nothing more.
pub fn auto_rollout_renders_the_kustomize_component() -> Outcome {
    let what = "the chart's autoRollout against manifests/auto-rollout/";
    let helm = engine(what)?;
    kubectl::required(what)?;
    // kustomize takes a base only by a relative path: an overlay inside the repository.
    let dir = repo()
        .join("target")
        .join(format!("chart-auto-rollout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        "resources: [../../manifests]\ncomponents: [../../manifests/auto-rollout]\n",
    )
    .unwrap();
    let found = against_kustomize(&helm, &dir, r#"{"autoRollout": {"enabled": true}}"#);
    let expected = imposed(&dir);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        found, expected,
        "expected the render with autoRollout.enabled to differ from manifests/ with manifests/auto-rollout/ only by \
         what Helm imposes ({HELM_IMPOSES:?})"
    );
    Ok(())
}

pub fn helm_labels_are_on_every_object_and_the_selectors_are_the_kustomization_s() -> Outcome {
    let helm = engine("the chart's labels")?;
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
    Ok(())
}
