//! Per-workload overrides end to end without a cluster: the admission handler on a
//! captured AdmissionReview, and the `inject` command on a Deployment.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;

use base64::Engine as _;
use envoy_injector::admission::{Admission, Standalone};
use envoy_injector::inject::{OVERRIDE_PREFIX, STATUS_ANNOTATION};
use envoy_injector::metrics::Metrics;
use envoy_injector::template::{LiveTemplates, TemplateSet};
use serde_json::{Value, json};

mod common;

use common::builders::ReviewBuilder;

const BIN: &str = env!("CARGO_BIN_EXE_envoy-injector");
const TEMPLATE: &str = include_str!("fixtures/overrides/template.yaml");

fn admission(template: &str) -> Admission {
    let templates = TemplateSet::from_text("test", template).unwrap();
    Admission::new(
        Arc::new(LiveTemplates::new(Some(templates))),
        Arc::new(Standalone),
        Metrics::unregistered(),
    )
}

fn respond(admission: &Admission, review: &Value) -> Value {
    let bytes = admission.handle(&serde_json::to_vec(review).unwrap()).unwrap();
    serde_json::from_slice::<Value>(&bytes).unwrap()["response"].clone()
}

fn review(overrides: &[(&str, &str)]) -> Value {
    let keys: Vec<(String, &str)> = overrides
        .iter()
        .map(|(name, value)| (format!("{OVERRIDE_PREFIX}{name}"), *value))
        .collect();
    let mut pairs: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    pairs.push(("sidecar.samplecrd.k8s.io/inject", "true"));
    ReviewBuilder::fixture("dry-run.json").annotations(&pairs).build()
}

fn patched(review: &Value, response: &Value) -> Value {
    assert_eq!(response["allowed"], true, "{response}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).unwrap();
    serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(pod.clone()).unwrap();
    pod
}

#[test]
fn the_webhook_applies_overrides_within_bounds_and_records_them() {
    let admission = admission(TEMPLATE);
    let asked = review(&[
        ("memory-limit", "256Mi"),
        ("cpu-request", "1500m"),
        ("log-level", "warn"),
    ]);
    let pod = patched(&asked, &respond(&admission, &asked));
    let envoy = &pod["spec"]["containers"][1];
    assert_eq!(envoy["name"], "envoy");
    assert_eq!(envoy["resources"]["limits"]["memory"], "256Mi");
    assert_eq!(envoy["resources"]["requests"]["cpu"], "1500m");
    assert_eq!(envoy["env"], json!([{"name": "LOG_LEVEL", "value": "warn"}]));
    let status: Value =
        serde_json::from_str(pod["metadata"]["annotations"][STATUS_ANNOTATION].as_str().unwrap()).unwrap();
    assert_eq!(
        status["overrides"],
        json!({"cpu-request": "1500m", "log-level": "warn", "memory-limit": "256Mi"})
    );
}

#[test]
fn the_webhook_denies_a_value_out_of_bounds_with_the_issue_s_words() {
    let admission = admission(TEMPLATE);
    let response = respond(&admission, &review(&[("cpu-request", "8")]));
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"]["message"],
        r#"override.cpu-request: "8" exceeds max "2" of template "config""#
    );
    assert!(response.get("patch").is_none(), "nothing half-applied: {response}");
}

/// Declaring overrides changes nothing for a Pod that asks for none: the patch is the
/// one the same template without `overrides` gives, byte for byte (but the revision,
/// which is the hash of the template's text).
#[test]
fn a_pod_without_override_annotations_gets_exactly_the_patch_it_got_before() {
    let plain_text = &TEMPLATE[..TEMPLATE.find("overrides:").unwrap()];
    let with = TemplateSet::from_text("t", TEMPLATE).unwrap();
    let without = TemplateSet::from_text("t", plain_text).unwrap();
    let revision = |set: &TemplateSet| set.get("config").unwrap().revision.clone();
    let plain = review(&[]);
    let patch = |template: &str| {
        let response = respond(&admission(template), &plain);
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(response["patch"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(
        patch(TEMPLATE).replace(&revision(&with), &revision(&without)),
        patch(plain_text)
    );
}

fn inject(config: &std::path::Path, input: &str) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(["inject", "-f", "-", "--config"])
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations:
        sidecar.samplecrd.k8s.io/override.memory-limit: VALUE
    spec:
      containers:
      - name: web
        image: nginx
";

#[test]
fn inject_applies_a_workload_s_overrides_offline_and_refuses_the_same_values() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("template.yaml");
    std::fs::write(&config, TEMPLATE).unwrap();
    let out = inject(&config, &DEPLOYMENT.replace("VALUE", "256Mi"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let injected: Value = serde_yaml_ng::from_str(&text).unwrap();
    let envoy = &injected["spec"]["template"]["spec"]["containers"][1];
    assert_eq!(envoy["resources"]["limits"]["memory"], "256Mi", "{text}");
    assert!(text.contains(r#""overrides":{"memory-limit":"256Mi"}"#), "{text}");

    let out = inject(&config, &DEPLOYMENT.replace("VALUE", "2Gi"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"document 1 (Deployment web) at line 1: override.memory-limit: "2Gi" exceeds max "1Gi" of template "config""#),
        "{stderr}"
    );
}
