//! Every rendered document and every example parses into its k8s-openapi type and
//! re-serialises to the same JSON: a misspelt or misplaced field fails here, named.

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::support::*;

/// Where `after` differs from `before`: fields that vanished (the typed parse did not know
/// them), changed values and added ones, each with its JSON path.
fn differences(path: &str, before: &Value, after: &Value, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (key, value) in b {
                let here = format!("{path}.{key}");
                match a.get(key) {
                    Some(other) => differences(&here, value, other, out),
                    None => out.push(format!(
                        "field {here} is lost (unknown to the type: misspelt or misplaced?)"
                    )),
                }
            }
            for key in a.keys().filter(|k| !b.contains_key(*k)) {
                out.push(format!("field {path}.{key} appears after the round trip"));
            }
        }
        (Value::Array(b), Value::Array(a)) if b.len() == a.len() => {
            for (i, (value, other)) in b.iter().zip(a).enumerate() {
                differences(&format!("{path}[{i}]"), value, other, out);
            }
        }
        _ if before == after => {}
        _ => out.push(format!("{path} changes from {before} to {after}")),
    }
}

fn round_trip<T: DeserializeOwned + Serialize>(doc: &Doc) -> Vec<String> {
    let typed: T = doc.typed();
    let again = serde_json::to_value(&typed).expect("a k8s-openapi value serialises");
    let mut out = Vec::new();
    differences("", &doc.value, &again, &mut out);
    out
}

/// Round trip through the type named by `apiVersion` + `kind`; an unknown kind is an error
/// too (add it here when the manifests gain one).
fn check_round_trip(doc: &Doc) -> Vec<String> {
    let api_version = doc.value["apiVersion"].as_str().unwrap_or("?");
    match (api_version, doc.kind()) {
        ("v1", "Namespace") => round_trip::<Namespace>(doc),
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(doc),
        ("v1", "ConfigMap") => round_trip::<ConfigMap>(doc),
        ("v1", "Service") => round_trip::<Service>(doc),
        ("v1", "Pod") => round_trip::<Pod>(doc),
        ("apps/v1", "Deployment") => round_trip::<Deployment>(doc),
        ("policy/v1", "PodDisruptionBudget") => round_trip::<PodDisruptionBudget>(doc),
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>(doc),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => round_trip::<ClusterRoleBinding>(doc),
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
            round_trip::<ValidatingWebhookConfiguration>(doc)
        }
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
            round_trip::<MutatingWebhookConfiguration>(doc)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            round_trip::<ValidatingAdmissionPolicy>(doc)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            round_trip::<ValidatingAdmissionPolicyBinding>(doc)
        }
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => round_trip::<CustomResourceDefinition>(doc),
        ("samplecrd.k8s.io/v1", "Network") => round_trip::<envoy_injector::network::crd::Network>(doc),
        ("monitoring.coreos.com/v1", "PrometheusRule") => crate::alerts::check_prometheus_rule(doc),
        (api_version, kind) => vec![format!(
            "no typed check for {api_version} {kind}: add it to check_round_trip in tests/manifests.rs"
        )],
    }
}

pub(crate) fn assert_round_trips(docs: &[Doc]) {
    let failures: Vec<String> = docs
        .iter()
        .flat_map(|doc| {
            check_round_trip(doc)
                .into_iter()
                .map(move |problem| format!("{}: {problem}", doc.label()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "expected every document to survive a round trip through its k8s-openapi type, found:\n{}",
        failures.join("\n")
    );
}

pub fn the_round_trip_check_catches_a_misspelt_field() {
    let doc = Doc {
        origin: "inline".to_string(),
        value: json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "x" },
            "spec": {
                "selector": { "matchLabels": { "a": "b" } },
                "template": { "metadata": { "labels": { "a": "b" } }, "spec": {
                    "containers": [{ "name": "c", "image": "i", "securityContex": { "runAsNonRoot": true } }]
                } },
            },
        }),
    };
    let problems = check_round_trip(&doc);
    assert_eq!(
        problems,
        vec![
            "field .spec.template.spec.containers[0].securityContex is lost (unknown to the type: misspelt or misplaced?)"
        ]
    );
    let unknown = Doc {
        origin: "inline".to_string(),
        value: json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "x" } }),
    };
    assert!(check_round_trip(&unknown)[0].contains("no typed check for v1 Secret"));
}

pub fn rendered_manifests_round_trip_through_their_types() -> Outcome {
    let docs = rendered()?;
    let kinds: BTreeSet<&str> = docs.iter().map(Doc::kind).collect();
    let expected: BTreeSet<&str> = [
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ConfigMap",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "CustomResourceDefinition",
    ]
    .into();
    assert_eq!(kinds, expected, "the kinds `kubectl kustomize manifests/` renders");
    assert_round_trips(docs);

    // Everything namespaced lives in the injector's namespace, which is part of the install.
    for doc in docs {
        let cluster_scoped = matches!(
            doc.kind(),
            "Namespace"
                | "ClusterRole"
                | "ClusterRoleBinding"
                | "MutatingWebhookConfiguration"
                | "ValidatingWebhookConfiguration"
                | "CustomResourceDefinition"
        );
        let namespace = doc.value["metadata"]["namespace"].as_str();
        if cluster_scoped {
            assert_eq!(namespace, None, "{} is cluster-scoped", doc.label());
        } else {
            assert_eq!(namespace, Some(NAMESPACE), "namespace of {}", doc.label());
        }
        let labels = &doc.value["metadata"]["labels"];
        assert_eq!(
            (
                labels["app.kubernetes.io/name"].as_str(),
                labels["app.kubernetes.io/part-of"].as_str()
            ),
            (Some(NAME), Some(NAME)),
            "common labels on {}",
            doc.label()
        );
    }
    assert_eq!(one(docs, "Namespace").name(), NAMESPACE);
    Ok(())
}

pub fn examples_round_trip_through_their_types() {
    let dir = repo("manifests/examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "classic-deployment.yaml",
        "example-network.yaml",
        "network-pod.yaml",
        "opted-in-deployment.yaml",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "expected manifests/examples/{expected}, found {names:?}"
        );
    }
    let mut docs = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read the example");
        docs.extend(parse_stream(
            &format!("manifests/examples/{}", file.file_name().unwrap().to_string_lossy()),
            &text,
        ));
    }
    assert_round_trips(&docs);

    let deployment: Deployment = docs
        .iter()
        .find(|d| d.kind() == "Deployment")
        .expect("an example Deployment")
        .typed();
    let template_annotations = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    assert_eq!(
        template_annotations.get(INJECT).map(String::as_str),
        Some("true"),
        "the example Deployment opts in"
    );
    let pod: Pod = docs.iter().find(|d| d.kind() == "Pod").expect("an example Pod").typed();
    let annotations = pod.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(INJECT).map(String::as_str),
        Some("true"),
        "the example Pod opts in"
    );
    assert_eq!(
        annotations.get("sidecar.samplecrd.k8s.io/network").map(String::as_str),
        Some("example-network"),
        "the example Pod joins the seed Network"
    );
    // Template `classic` mounts ConfigMap `envoy`: its example brings one, and only its.
    let classic = std::fs::read_to_string(dir.join("classic-deployment.yaml")).expect("read the classic example");
    let classic = parse_stream("manifests/examples/classic-deployment.yaml", &classic);
    assert!(
        classic.iter().any(|d| d.kind() == "ConfigMap" && d.name() == "envoy"),
        "expected the classic example to include the `envoy` ConfigMap template `classic` mounts"
    );
    let opted_in = std::fs::read_to_string(dir.join("opted-in-deployment.yaml")).expect("read the example");
    let opted_in = parse_stream("manifests/examples/opted-in-deployment.yaml", &opted_in);
    assert!(
        opted_in.iter().all(|d| d.kind() == "Deployment"),
        "the default template needs nothing in the Pod's namespace: the opted-in example is its Deployment alone"
    );
}
