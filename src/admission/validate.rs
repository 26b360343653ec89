//! `POST /validate`: refuses an `envoy-injector` ConfigMap whose templates do not parse,
//! or hold values the API server would refuse in the Pods they inject, at `kubectl apply`
//! time, with the message the reload path logs for the same content (the field and its
//! line). Registered by the ValidatingWebhookConfiguration
//! `envoy-injector` for that one ConfigMap, CREATE and UPDATE, `failurePolicy: Ignore`:
//! the reload path (keep the last good templates) stays the safety net.
//!
//! Pure like the rest of `admission`: body bytes in, review bytes out, no API call, no side
//! effect, so a `dryRun` request is answered exactly like a real one.

use std::collections::BTreeMap;

use kube::core::admission::Operation;
use serde_json::Value;
use tracing::{debug, info, info_span};

use serde::Deserialize;

use super::answer::Answer;
use super::review::RequestError;
use super::review::{self, RequestIn};
use crate::template::{KubeVersion, TemplateSet};

/// The ValidatingWebhookConfiguration's handler: AdmissionReviews of the template
/// ConfigMap in, allowed or denied (with the parse error) out.
#[derive(Debug, Default, Clone, Copy)]
pub struct TemplateValidation {
    /// The API server's version: the value rules its Pods are checked with.
    version: KubeVersion,
}

impl TemplateValidation {
    pub fn new(version: KubeVersion) -> TemplateValidation {
        TemplateValidation { version }
    }

    /// Answers one HTTP body. `Ok` is a JSON AdmissionReview to send with status 200;
    /// `Err` is a request that is not a readable AdmissionReview v1 (HTTP 400).
    pub fn handle(&self, body: &[u8]) -> Result<Vec<u8>, RequestError> {
        let request = review::parse(body)?;
        let span = info_span!(
            "validate",
            uid = %request.uid,
            namespace = request.namespace.as_deref().unwrap_or(""),
            name = request.name.as_deref().unwrap_or(""),
            dry_run = request.dry_run.unwrap_or(false),
        );
        let _entered = span.enter();
        Ok(decide(&request, body, self.version).encode(&request.uid))
    }
}

/// Of the review, the written ConfigMap's `data`: the Pod-shaped parse of the admission
/// path keeps none of a ConfigMap, so this rare path reads the body once more.
#[derive(Deserialize)]
struct ConfigMapReview {
    request: Option<ConfigMapRequest>,
}

#[derive(Deserialize)]
struct ConfigMapRequest {
    #[serde(default)]
    object: Option<Value>,
}

fn decide(request: &RequestIn, body: &[u8], version: KubeVersion) -> Answer {
    let is_configmap = request.kind.group.is_empty() && request.kind.kind == "ConfigMap";
    let writes = matches!(request.operation, Operation::Create | Operation::Update);
    let name = request.name.as_deref().unwrap_or_default();
    if !is_configmap || !writes || request.sub_resource.is_some() || name != crate::NAME {
        debug!(
            operation = ?request.operation,
            kind = %request.kind.kind,
            "passing through: not a CREATE or UPDATE of ConfigMap {}",
            crate::NAME
        );
        return Answer::allow(Vec::new());
    }
    let object = serde_json::from_slice::<ConfigMapReview>(body)
        .ok()
        .and_then(|review| review.request)
        .and_then(|request| request.object);
    let Some(object) = object.as_ref().filter(|o| !o.is_null()) else {
        return Answer::deny(format!(
            "expected `request.object` to hold ConfigMap {name} being written, found none"
        ));
    };
    let source = format!("{}/{name}", request.namespace.as_deref().unwrap_or_default());
    let data = match object.get("data") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(data) => match serde_json::from_value::<BTreeMap<String, String>>(data.clone()) {
            Ok(data) => data,
            Err(err) => {
                return Answer::deny(format!(
                    "ConfigMap {source}: expected `data` to map keys to template strings, found: {err}"
                ));
            }
        },
    };
    match TemplateSet::from_data(&source, &data, version) {
        Ok(set) => {
            info!(configmap = %source, templates = ?set.names().collect::<Vec<_>>(), "templates parse; admitting");
            Answer::allow(Vec::new())
        }
        Err(err) => Answer::deny(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn review(operation: &str, kind: &str, name: &str, data: Value, dry_run: bool) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": kind},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "operation": operation,
                "namespace": "mesh",
                "name": name,
                "dryRun": dry_run,
                "object": {
                    "apiVersion": "v1", "kind": kind,
                    "metadata": {"name": name, "namespace": "mesh"},
                    "data": data,
                },
            },
        }))
        .unwrap()
    }

    fn answer(body: &[u8]) -> Value {
        let bytes = TemplateValidation::new(KubeVersion::NEWEST).handle(body).unwrap();
        let review: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(review["response"]["uid"], "u-1", "{review}");
        assert!(review["response"].get("patch").is_none(), "{review}");
        review["response"].clone()
    }

    const GOOD: &str = "containers:\n- name: proxy\n  image: envoy\n";
    const BAD: &str = "containers:\n- name: proxy\n  imag: envoy\n";
    const BAD_VALUE: &str = "containers:\n- name: proxy\n  image: envoy\n  resources:\n    limits: {cpu: banana}\n";

    #[test]
    fn a_template_that_does_not_parse_is_refused_with_field_and_line() {
        for operation in ["CREATE", "UPDATE"] {
            for dry_run in [false, true] {
                let response = answer(&review(
                    operation,
                    "ConfigMap",
                    crate::NAME,
                    json!({"config": BAD}),
                    dry_run,
                ));
                assert_eq!(response["allowed"], false, "{operation} {response}");
                assert_eq!(response["status"]["code"], 403);
                let message = response["status"]["message"].as_str().unwrap();
                // The very words the reload path logs and records as an Event.
                let expected = TemplateSet::from_data(
                    "mesh/envoy-injector",
                    &BTreeMap::from([("config".to_string(), BAD.to_string())]),
                    KubeVersion::NEWEST,
                )
                .unwrap_err()
                .to_string();
                assert_eq!(message, expected);
                assert!(
                    message.contains("unknown field `containers[0].imag` at line 3"),
                    "{message}"
                );
            }
        }
    }

    #[test]
    fn an_override_mistake_is_refused_with_field_and_line() {
        let good = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/overrides/template.yaml"
        ));
        let ok = answer(&review(
            "UPDATE",
            "ConfigMap",
            crate::NAME,
            json!({"config": good}),
            false,
        ));
        assert_eq!(ok["allowed"], true, "{ok}");
        let bad = good.replace("oneOf: [debug, info, warn, error]", "max: \"2\"");
        let refused = answer(&review(
            "UPDATE",
            "ConfigMap",
            crate::NAME,
            json!({"config": bad}),
            false,
        ));
        assert_eq!(refused["allowed"], false, "{refused}");
        let message = refused["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("field `overrides.log-level.max` at line 13: `max` bounds a resource quantity"),
            "{message}"
        );
    }

    #[test]
    fn a_value_the_api_server_refuses_is_refused_by_its_version_s_rules() {
        let response = answer(&review(
            "UPDATE",
            "ConfigMap",
            crate::NAME,
            json!({"config": BAD_VALUE}),
            false,
        ));
        assert_eq!(response["allowed"], false, "{response}");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(
            message.contains(r#"field `containers[0].resources.limits.cpu` at line 5: expected a quantity"#)
                && message.contains(r#"found "banana""#),
            "{message}"
        );
        // A name Kubernetes 1.32 allows and 1.31 does not.
        let relaxed = "containers:\n- name: proxy\n  image: envoy\n  env: [{name: 1st, value: x}]\n";
        let body = review("UPDATE", "ConfigMap", crate::NAME, json!({"config": relaxed}), false);
        let on = |version: &str| {
            let bytes = TemplateValidation::new(version.parse().unwrap()).handle(&body).unwrap();
            serde_json::from_slice::<Value>(&bytes).unwrap()["response"]["allowed"].clone()
        };
        assert_eq!(on("1.31"), false);
        assert_eq!(on("1.32"), true);
    }

    /// The denial names every fault of every template, up to the bound, where the old
    /// reading named only the first phase's.
    #[test]
    fn the_denial_names_every_fault_up_to_the_bound() {
        let several = "containers:\n- name: proxy\n  image: envoy\n  imagePullPolcy: Always\n  ports: [{containerPort: 80, protocol: tcp}]\n  volumeMounts: [{name: conf, mountPath: /etc/conf}]\n";
        let many: String = (0..100)
            .map(|i| format!("- {{name: c{i}, image: e, imagePullPolicy: always}}\n"))
            .collect();
        let response = answer(&review(
            "UPDATE",
            "ConfigMap",
            crate::NAME,
            json!({"a": several, "b": BAD_VALUE}),
            false,
        ));
        assert_eq!(response["allowed"], false, "{response}");
        let message = response["status"]["message"].as_str().unwrap();
        for fault in [
            "template `a`: unknown field `containers[0].imagePullPolcy` at line 4 (did you mean `imagePullPolicy`?)",
            "field `containers[0].ports[0].protocol` at line 5",
            "field `containers[0].volumeMounts[0].name` at line 6: a mount of volume `conf`",
            "template `b`: field `containers[0].resources.limits.cpu` at line 5",
        ] {
            assert!(message.contains(fault), "{fault}: {message}");
        }
        assert!(!message.contains("more fault"), "{message}");

        let response = answer(&review(
            "UPDATE",
            "ConfigMap",
            crate::NAME,
            json!({"config": format!("containers:\n{many}")}),
            false,
        ));
        let message = response["status"]["message"].as_str().unwrap();
        assert_eq!(
            message.matches("found \"always\"").count(),
            crate::template::MAX_FAULTS,
            "{message}"
        );
        assert!(message.ends_with("; and 70 more faults"), "{message}");
        assert!(message.len() <= crate::template::MAX_REPORT_BYTES, "{}", message.len());
    }

    #[test]
    fn good_templates_are_admitted_and_other_objects_pass() {
        let ok = answer(&review(
            "UPDATE",
            "ConfigMap",
            crate::NAME,
            json!({"config": GOOD, "other": GOOD}),
            false,
        ));
        assert_eq!(ok["allowed"], true, "{ok}");
        for body in [
            review("CREATE", "ConfigMap", "someone-else", json!({"config": BAD}), false),
            review("DELETE", "ConfigMap", crate::NAME, json!({"config": BAD}), false),
            review("CREATE", "Secret", crate::NAME, json!({"config": BAD}), false),
        ] {
            let response = answer(&body);
            assert_eq!(response["allowed"], true, "{response}");
        }
    }

    #[test]
    fn no_templates_and_wrong_data_types_are_refused() {
        let response = answer(&review("CREATE", "ConfigMap", crate::NAME, Value::Null, false));
        assert_eq!(response["allowed"], false);
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains("no `data` keys"), "{message}");
        let response = answer(&review("CREATE", "ConfigMap", crate::NAME, json!({"config": 3}), false));
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains("expected `data` to map keys"), "{message}");
    }

    #[test]
    fn unreadable_bodies_are_request_errors() {
        let validation = TemplateValidation::new(KubeVersion::NEWEST);
        assert!(matches!(validation.handle(b"{"), Err(RequestError::NotJson(_))));
        assert!(matches!(
            validation.handle(br#"{"apiVersion":"v1","kind":"AdmissionReview"}"#),
            Err(RequestError::WrongVersion { .. })
        ));
    }
}
