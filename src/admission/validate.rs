//! `POST /validate`: refuses an `envoy-injector` ConfigMap whose templates do not parse,
//! or hold values the API server would refuse in the Pods they inject, at `kubectl apply`
//! time, with the message the reload path logs for the same content (the field and its
//! line). Registered by the ValidatingWebhookConfiguration
//! `envoy-injector` for that one ConfigMap, CREATE and UPDATE, `failurePolicy: Ignore`:
//! the reload path (keep the last good templates) stays the safety net.
//!
//! A ConfigMap that parses is admitted, with a warning for each template whose additions
//! break the Pod Security level a namespace enforces (`template::pod_security`), naming
//! those namespaces: a Pod there that gets the template is refused by the API server. The
//! namespaces counted are those a Pod can get the template in: every one the cache holds
//! but `kube-system`, the injector's own (the ConfigMap's) and those labelled
//! `sidecar.samplecrd.k8s.io/inject=disabled`, since any Pod may name any template by
//! annotation.
//!
//! Pure like the rest of `admission`: body bytes in, review bytes out, no API call, no side
//! effect, so a `dryRun` request is answered exactly like a real one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::core::admission::Operation;
use serde_json::Value;
use tracing::{debug, info, info_span};

use serde::Deserialize;

use super::answer::Answer;
use super::review::RequestError;
use super::review::{self, RequestIn};
use crate::inject::{NAMESPACE_LABEL, NAMESPACE_OPT_OUT};
use crate::template::pod_security::{self, Control, LevelVersion, NamespacePolicy};
use crate::template::{KubeVersion, TemplateSet};

/// How many namespaces a warning names before `and N more`.
const NAMED_NAMESPACES: usize = 3;

/// What `/validate` reads of Namespaces: those whose labels set a Pod Security `enforce`
/// level, with their labels (the cache's store in cluster mode).
pub trait EnforcingNamespaces: Send + Sync {
    fn enforcing(&self) -> Vec<(String, BTreeMap<String, String>)>;
}

/// Namespace labels by name (tests).
impl EnforcingNamespaces for BTreeMap<String, BTreeMap<String, String>> {
    fn enforcing(&self) -> Vec<(String, BTreeMap<String, String>)> {
        self.iter()
            .filter(|(_, labels)| labels.contains_key(&pod_security::Mode::Enforce.level_label()))
            .map(|(name, labels)| (name.clone(), labels.clone()))
            .collect()
    }
}

/// The ValidatingWebhookConfiguration's handler: AdmissionReviews of the template
/// ConfigMap in, allowed (with warnings) or denied (with the parse error) out.
#[derive(Clone, Default)]
pub struct TemplateValidation {
    /// The API server's version: the value rules its Pods are checked with.
    version: KubeVersion,
    /// The Namespaces whose Pod Security levels the templates are judged against; none
    /// (`serve --standalone`): no Pod Security warning.
    namespaces: Option<Arc<dyn EnforcingNamespaces>>,
}

impl TemplateValidation {
    pub fn new(version: KubeVersion) -> TemplateValidation {
        TemplateValidation {
            version,
            namespaces: None,
        }
    }

    /// Warns of templates that break the Pod Security level one of `namespaces` enforces.
    pub fn with_namespaces(self, namespaces: Arc<dyn EnforcingNamespaces>) -> TemplateValidation {
        TemplateValidation {
            namespaces: Some(namespaces),
            ..self
        }
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
        Ok(decide(&request, body, self.version, self.namespaces.as_deref()).encode(&request.uid))
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

fn decide(
    request: &RequestIn,
    body: &[u8],
    version: KubeVersion,
    namespaces: Option<&dyn EnforcingNamespaces>,
) -> Answer {
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
    let injector_namespace = request.namespace.as_deref().unwrap_or_default();
    let source = format!("{injector_namespace}/{name}");
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
            let warnings = match namespaces {
                Some(namespaces) => {
                    // By name, so that the few named are the same on every replica.
                    let mut enforcing = namespaces.enforcing();
                    enforcing.sort();
                    pod_security_warnings(&set, injector_namespace, &enforcing)
                }
                None => Vec::new(),
            };
            info!(
                configmap = %source,
                templates = ?set.names().collect::<Vec<_>>(),
                warnings = warnings.len(),
                "templates parse; admitting"
            );
            Answer::allow(warnings)
        }
        Err(err) => Answer::deny(err.to_string()),
    }
}

/// One warning per template and level it breaks where a namespace enforces that level
/// and a Pod can get the template (not `kube-system`, not the injector's own namespace, not
/// opted out), naming the first namespaces and the controls; judged without a Pod, so
/// what a Pod's own securityContext can meet is said as such.
fn pod_security_warnings(
    set: &TemplateSet,
    injector_namespace: &str,
    namespaces: &[(String, BTreeMap<String, String>)],
) -> Vec<String> {
    let mut enforced: BTreeMap<LevelVersion, Vec<&str>> = BTreeMap::new();
    for (name, labels) in namespaces {
        let excluded = name == "kube-system"
            || name == injector_namespace
            || labels.get(NAMESPACE_LABEL).map(String::as_str) == Some(NAMESPACE_OPT_OUT);
        if !excluded {
            let applied = NamespacePolicy::from_labels(labels).enforce.applied;
            enforced.entry(applied).or_default().push(name);
        }
    }
    let mut warnings = Vec::new();
    for name in set.names() {
        let Some(template) = set.get(name) else { continue };
        for (applied, names) in &enforced {
            let findings = pod_security::judge(name, &template.spec, *applied, None);
            if findings.is_empty() {
                continue;
            }
            let controls: BTreeSet<Control> = findings.iter().map(|f| f.control).collect();
            warnings.push(warning(name, *applied, names, &controls));
        }
    }
    warnings
}

fn warning(template: &str, applied: LevelVersion, namespaces: &[&str], controls: &BTreeSet<Control>) -> String {
    let mut named: Vec<String> = namespaces
        .iter()
        .take(NAMED_NAMESPACES)
        .map(|n| format!("`{n}`"))
        .collect();
    if namespaces.len() > NAMED_NAMESPACES {
        named.push(format!("{} more", namespaces.len() - NAMED_NAMESPACES));
    }
    let named = match named.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => named.concat(),
    };
    let plural = if namespaces.len() == 1 {
        "namespace"
    } else {
        "namespaces"
    };
    // What a Pod's own securityContext can meet for every container.
    let pod_level = |c: &Control| matches!(c, Control::RunAsNonRoot | Control::Seccomp);
    let (maybe, always): (Vec<&Control>, Vec<&Control>) = controls.iter().partition(|c| pod_level(c));
    let mut broken = always.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ");
    if !maybe.is_empty() {
        let maybe = maybe.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ");
        broken = match broken.is_empty() {
            true => format!("{maybe}, unless the Pod's own securityContext meets them"),
            false => format!("{broken}; {maybe}, unless the Pod's own securityContext meets them"),
        };
    }
    format!(
        "template `{template}` breaks Pod Security {applied}, enforced in {plural} {named}: a Pod there that gets it is refused ({broken}); `envoy-injector check` names each field"
    )
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

    /// A ConfigMap whose template breaks the level namespaces enforce is admitted with a
    /// warning naming them, a few by name; namespaces a Pod cannot get the template in
    /// are not counted; without Namespaces (standalone) nothing is said.
    #[test]
    fn a_template_breaking_an_enforced_level_is_admitted_with_a_warning_naming_the_namespaces() {
        let enforce = |level: &str| ("pod-security.kubernetes.io/enforce".to_string(), level.to_string());
        let mut namespaces: BTreeMap<String, BTreeMap<String, String>> =
            ["a", "b", "c", "d", "e", "kube-system", "mesh"]
                .into_iter()
                .map(|name| (name.to_string(), BTreeMap::from([enforce("restricted")])))
                .collect();
        namespaces.insert(
            "opted-out".into(),
            BTreeMap::from([
                enforce("restricted"),
                (NAMESPACE_LABEL.to_string(), "disabled".to_string()),
            ]),
        );
        namespaces.insert("base".into(), BTreeMap::from([enforce("baseline")]));
        namespaces.insert("plain".into(), BTreeMap::new());
        let validation = TemplateValidation::new(KubeVersion::NEWEST).with_namespaces(Arc::new(namespaces));
        let data = json!({
            "config": crate::template::EMBEDDED_DEFAULT,
            "classic": crate::template::EMBEDDED_CLASSIC,
            "node": "containers:\n- name: proxy\n  image: envoy\n  volumeMounts: [{name: run, mountPath: /run/x}]\nvolumes:\n- {name: run, hostPath: {path: /run}}\n",
        });
        let body = review("UPDATE", "ConfigMap", crate::NAME, data, false);
        let bytes = validation.handle(&body).unwrap();
        let response = serde_json::from_slice::<Value>(&bytes).unwrap()["response"].clone();
        assert_eq!(response["allowed"], true, "{response}");
        let warnings: Vec<&str> = response["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        assert_eq!(
            warnings,
            [
                "template `classic` breaks Pod Security restricted:latest, enforced in namespaces `a`, `b`, `c` and 2 more: a Pod there that gets it is refused (capabilities, allowPrivilegeEscalation; seccomp, runAsNonRoot, unless the Pod's own securityContext meets them); `envoy-injector check` names each field",
                "template `node` breaks Pod Security baseline:latest, enforced in namespace `base`: a Pod there that gets it is refused (hostPath volumes); `envoy-injector check` names each field",
                "template `node` breaks Pod Security restricted:latest, enforced in namespaces `a`, `b`, `c` and 2 more: a Pod there that gets it is refused (capabilities, volume types, allowPrivilegeEscalation; seccomp, runAsNonRoot, unless the Pod's own securityContext meets them); `envoy-injector check` names each field",
            ]
        );
        // The same body without Namespaces to judge against: admitted, nothing said.
        let response = answer(&body);
        assert_eq!(response["allowed"], true);
        assert!(
            response
                .get("warnings")
                .is_none_or(|w| w.as_array().is_some_and(Vec::is_empty)),
            "{response}"
        );
        // A ConfigMap of templates that meet every level: no warning.
        let body = review(
            "UPDATE",
            "ConfigMap",
            crate::NAME,
            json!({"config": crate::template::EMBEDDED_DEFAULT}),
            false,
        );
        let bytes = validation.handle(&body).unwrap();
        let response = serde_json::from_slice::<Value>(&bytes).unwrap()["response"].clone();
        assert!(
            response
                .get("warnings")
                .is_none_or(|w| w.as_array().is_some_and(Vec::is_empty)),
            "{response}"
        );
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
