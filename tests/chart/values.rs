//! The chart's metadata and values: what they are, where they are documented, and what
//! the schema refuses.

use std::collections::BTreeSet;

use envoy_injector::template::{EMBEDDED_CLASSIC, EMBEDDED_DEFAULT};
use serde_json::Value;

use crate::common::harness::Outcome;
use crate::common::helm::{chart_dir, engine, repo};

fn yaml_file(relative: &str) -> Value {
    let text = std::fs::read_to_string(chart_dir().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{relative} is YAML: {e}"))
}

fn schema() -> Value {
    let text = std::fs::read_to_string(chart_dir().join("values.schema.json")).expect("values.schema.json");
    serde_json::from_str(&text).expect("values.schema.json is JSON")
}

pub fn chart_metadata_and_crds_follow_the_crate() {
    let chart = yaml_file("Chart.yaml");
    assert_eq!(chart["apiVersion"], "v2", "Helm 3+ charts are apiVersion v2");
    assert_eq!(chart["name"], "envoy-injector");
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "appVersion is the crate's version (Cargo.toml)"
    );
    let crd =
        std::fs::read_to_string(chart_dir().join("crds/networks.samplecrd.k8s.io.yaml")).expect("the chart's CRD");
    let shipped = std::fs::read_to_string(repo().join("manifests/crd.yaml")).expect("manifests/crd.yaml");
    assert_eq!(
        crd, shipped,
        "charts/envoy-injector/crds/ holds manifests/crd.yaml (itself `envoy-injector crd`): copy it after `make crd`"
    );
}

pub fn the_templates_value_is_the_embedded_config_and_classic() {
    let values = yaml_file("values.yaml");
    let templates = values["templates"].as_object().expect("values.yaml has `templates`");
    assert_eq!(
        templates.keys().collect::<Vec<_>>(),
        ["classic", "config"],
        "the shipped templates, and only them"
    );
    assert_eq!(
        templates["config"], EMBEDDED_DEFAULT,
        "templates.config is crates/engine/src/template/default-template.yaml"
    );
    assert_eq!(
        templates["classic"], EMBEDDED_CLASSIC,
        "templates.classic is crates/engine/src/template/classic-template.yaml"
    );
}

/// The values' paths (`image.tag`, ...): a value whose schema lists its `properties` and
/// whose default is a non-empty map is a group of values; anything else is one value.
/// Checks on the way that values.yaml and the schema name the same values.
fn value_paths(prefix: &str, defaults: &Value, schema: &Value, out: &mut Vec<String>) {
    let properties = schema["properties"].as_object();
    let default_map = defaults.as_object().filter(|m| !m.is_empty());
    let (Some(properties), Some(default_map)) = (properties, default_map) else {
        out.push(prefix.to_string());
        return;
    };
    let in_schema: BTreeSet<&String> = properties.keys().collect();
    let in_values: BTreeSet<&String> = default_map.keys().collect();
    assert_eq!(
        in_values, in_schema,
        "values.yaml and values.schema.json must name the same values under `{prefix}`"
    );
    for (key, sub_schema) in properties {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        value_paths(&path, &default_map[key], sub_schema, out);
    }
}

pub fn every_value_is_in_the_schema_and_documented_in_docs_install() {
    let schema = schema();
    assert_eq!(
        schema["additionalProperties"], false,
        "the schema refuses a value it does not know (a misspelt one)"
    );
    let mut paths = Vec::new();
    value_paths("", &yaml_file("values.yaml"), &schema, &mut paths);
    let docs = std::fs::read_to_string(repo().join("docs/install.md")).expect("docs/install.md");
    let missing: Vec<&String> = paths.iter().filter(|p| !docs.contains(&format!("`{p}`"))).collect();
    assert!(
        missing.is_empty(),
        "every chart value must be documented in docs/install.md (as `path`); missing: {missing:?}"
    );
    assert!(paths.len() >= 25, "expected every value, found {paths:?}");
}

pub fn lint_strict_is_clean_with_the_defaults_and_every_option() -> Outcome {
    let helm = engine("helm lint --strict of the chart")?;
    let every_option = r#"{
        "image": {"digest": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
        "replicas": 1, "injection": "policy", "networks": {"enabled": false},
        "tls": {"mode": "certManager", "certManager": {"issuerRef": {"name": "ca", "kind": "ClusterIssuer"}}},
        "serviceMonitor": {"enabled": true, "labels": {"release": "prometheus"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-cluster-critical",
        "podLabels": {"team": "platform"}, "podAnnotations": {"example.com/a": "b"},
        "extraArgs": ["--api-qps=100"], "annotationOptIn": false,
        "autoRollout": {"enabled": true, "interval": "1m", "timeout": "15m"}
    }"#;
    let secret = r#"{"tls": {"mode": "secret", "secret": {"name": "my-tls", "caBundle": "Y2E="}}}"#;
    for values in ["{}", every_option, secret] {
        if let Err(findings) = helm.lint(values) {
            panic!("expected `helm lint --strict` clean with {values}, found:\n{findings}");
        }
    }
    Ok(())
}

pub fn a_bad_value_is_refused_naming_it() -> Outcome {
    let helm = engine("the chart's schema")?;
    let cases = [
        (r#"{"replicas": 0}"#, "/replicas"),
        (r#"{"replicas": "two"}"#, "/replicas"),
        (r#"{"injection": "policies"}"#, "/injection"),
        (r#"{"image": {"digest": "sha256:xyz"}}"#, "/image/digest"),
        (r#"{"image": {"tag": "", "digest": ""}}"#, "/image"),
        (r#"{"image": {"pullPolicy": "Sometimes"}}"#, "/image/pullPolicy"),
        (r#"{"tls": {"mode": "vault"}}"#, "/tls/mode"),
        (
            r#"{"autoRollout": {"enabled": true, "interval": "soon"}}"#,
            "/autoRollout/interval",
        ),
        (r#"{"tls": {"mode": "secret"}}"#, "/tls/secret/name"),
        (
            r#"{"tls": {"mode": "secret", "secret": {"name": "s"}}}"#,
            "/tls/secret/caBundle",
        ),
        (
            r#"{"tls": {"mode": "secret", "secret": {"name": "s", "caBundle": "not base64!"}}}"#,
            "/tls/secret/caBundle",
        ),
        (
            r#"{"tls": {"certManager": {"issuerRef": {"kind": "Issuer"}}}}"#,
            "/tls/certManager/issuerRef",
        ),
        (
            r#"{"tls": {"certManager": {"duration": "a year"}}}"#,
            "/tls/certManager/duration",
        ),
        (r#"{"networks": {"enabled": "yes"}}"#, "/networks/enabled"),
        (r#"{"resources": {"limits": {"cpu": "lots"}}}"#, "/resources/limits/cpu"),
        (r#"{"resources": {"limit": {"cpu": "1"}}}"#, "limit"),
        (
            r#"{"podDisruptionBudget": {"minAvailable": "half"}}"#,
            "/podDisruptionBudget/minAvailable",
        ),
        (
            r#"{"serviceMonitor": {"interval": "often"}}"#,
            "/serviceMonitor/interval",
        ),
        (r#"{"nodeSelector": {"disk": 1}}"#, "/nodeSelector/disk"),
        (r#"{"extraArgs": ["injection=webhook"]}"#, "/extraArgs/0"),
        (r#"{"templates": {"config": 42}}"#, "/templates/config"),
        (r#"{"replica": 3}"#, "replica"),
    ];
    let mut wrong = Vec::new();
    for (values, named) in cases {
        match helm.schema(values) {
            Ok(answer) => wrong.push(format!("{values}: accepted ({answer})")),
            Err(words) if !words.contains(named) => {
                wrong.push(format!("{values}: refused without naming {named}: {words}"))
            }
            Err(_) => {}
        }
    }
    assert!(
        wrong.is_empty(),
        "expected each bad value refused naming it:\n{}",
        wrong.join("\n")
    );
    // What `helm install` does with one: the render refuses it with the same words.
    let refused = helm
        .render("envoy-injector", r#"{"injection": "policies"}"#)
        .unwrap_err();
    assert!(refused.contains("/injection"), "{refused}");
    Ok(())
}
