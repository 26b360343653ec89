//! The install manifests, checked everywhere (`make test`; no cluster needed):
//!
//! - `kubectl kustomize manifests/` renders (skipped, loudly, without kubectl);
//! - every rendered document, and every example, parses into its k8s-openapi type and
//!   re-serialises to the same JSON: a misspelt or misplaced field is dropped by the typed
//!   parse and fails here, naming the document and the field path;
//! - RBAC: no `*` anywhere, and exactly the permissions the process needs;
//! - the MutatingWebhookConfiguration: two entries, `Fail`, `None`, 5 s, `IfNeeded`,
//!   Service clientConfig, kube-system and the injector's namespace excluded; its
//!   namespace selectors send no Pod twice, and its CEL `matchConditions` (evaluated with
//!   kube's CEL engine) select exactly the Pods the injector's own policy would inject;
//! - the Deployment's replicas, probes, resources and security context, and the wiring
//!   between Deployment, Service, PodDisruptionBudget and ServiceAccount;
//! - the ConfigMap's `config` is `src/config/default-template.yaml`, byte for byte;
//! - every shell script passes shellcheck (skipped, loudly, without shellcheck).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use envoy_injector::inject::policy::{NamespaceOptIn, decide};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, MutatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::cel::{AdmissionRequest, VapEvaluator, VapExpression};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

const NAMESPACE: &str = "envoy-injector";
const NAME: &str = "envoy-injector";
const INJECT: &str = "sidecar.samplecrd.k8s.io/inject";
const LEGACY: &str = "initializer.kubernetes.io/envoy";
const STATUS: &str = "sidecar.samplecrd.k8s.io/status";

/// One line on the real stderr: libtest captures `eprintln!` of passing tests, and a skip
/// must be seen in a plain `cargo test` run.
fn shout(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// One YAML document of a stream, as JSON, with where it came from.
#[derive(Debug, Clone)]
struct Doc {
    origin: String,
    value: Value,
}

impl Doc {
    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or("?")
    }
    fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or("?")
    }
    fn label(&self) -> String {
        format!("{} ({} {})", self.origin, self.kind(), self.name())
    }
    fn typed<T: DeserializeOwned>(&self) -> T {
        serde_json::from_value(self.value.clone())
            .unwrap_or_else(|e| panic!("{} does not parse as its k8s-openapi type: {e}", self.label()))
    }
}

fn parse_stream(origin: &str, text: &str) -> Vec<Doc> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .enumerate()
        .filter_map(|(i, de)| {
            let value =
                Value::deserialize(de).unwrap_or_else(|e| panic!("{origin}: document {} is not YAML: {e}", i + 1));
            (!value.is_null()).then(|| Doc {
                origin: format!("{origin} document {}", i + 1),
                value,
            })
        })
        .collect()
}

/// `kubectl kustomize manifests/`, once per test binary; `None` (said loudly) without kubectl.
fn rendered() -> Option<&'static [Doc]> {
    static RENDERED: OnceLock<Option<Vec<Doc>>> = OnceLock::new();
    RENDERED
        .get_or_init(|| {
            if !have_kubectl() {
                return None;
            }
            let output = Command::new("kubectl")
                .arg("kustomize")
                .arg(repo("manifests"))
                .output()
                .expect("run kubectl kustomize");
            assert!(
                output.status.success(),
                "expected `kubectl kustomize manifests/` to render, found {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            let text = String::from_utf8(output.stdout).expect("kustomize prints UTF-8");
            Some(parse_stream("kubectl kustomize manifests/", &text))
        })
        .as_deref()
}

fn have_kubectl() -> bool {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        shout("SKIPPED manifests: kubectl is not installed, so `kubectl kustomize manifests/` cannot be checked");
    }
    found
}

/// Exactly one rendered document of `kind`.
fn one(docs: &[Doc], kind: &str) -> Doc {
    let found: Vec<&Doc> = docs.iter().filter(|d| d.kind() == kind).collect();
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {kind} in the rendered manifests, found {:?}",
        found.iter().map(|d| d.label()).collect::<Vec<_>>()
    );
    found[0].clone()
}

// ---- typed round trip --------------------------------------------------------------------

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
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
            round_trip::<MutatingWebhookConfiguration>(doc)
        }
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => round_trip::<CustomResourceDefinition>(doc),
        ("samplecrd.k8s.io/v1", "Network") => round_trip::<envoy_injector::network::crd::Network>(doc),
        (api_version, kind) => vec![format!(
            "no typed check for {api_version} {kind}: add it to check_round_trip in tests/manifests.rs"
        )],
    }
}

fn assert_round_trips(docs: &[Doc]) {
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

#[test]
fn the_round_trip_check_catches_a_misspelt_field() {
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

#[test]
fn rendered_manifests_round_trip_through_their_types() {
    let Some(docs) = rendered() else { return };
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
}

#[test]
fn examples_round_trip_through_their_types() {
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
    for expected in ["example-network.yaml", "network-pod.yaml", "opted-in-deployment.yaml"] {
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
    // The default template mounts ConfigMap `envoy`: the examples bring one.
    assert!(
        docs.iter().any(|d| d.kind() == "ConfigMap" && d.name() == "envoy"),
        "expected the examples to include the `envoy` ConfigMap the default template mounts"
    );
}

// ---- RBAC ----------------------------------------------------------------------------------

/// (apiGroup, resource, resourceName or "", verb) for every permission a rule grants.
fn grants(rules: &[PolicyRule]) -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in rules {
        let names = rule.resource_names.clone().unwrap_or_default();
        let names = if names.is_empty() { vec![String::new()] } else { names };
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for name in &names {
                    for verb in &rule.verbs {
                        out.insert((group.clone(), resource.clone(), name.clone(), verb.clone()));
                    }
                }
            }
        }
    }
    out
}

fn expected_grants(table: &[(&str, &str, &str, &[&str])]) -> BTreeSet<(String, String, String, String)> {
    table
        .iter()
        .flat_map(|(group, resource, name, verbs)| {
            verbs.iter().map(move |verb| {
                (
                    group.to_string(),
                    resource.to_string(),
                    name.to_string(),
                    verb.to_string(),
                )
            })
        })
        .collect()
}

fn strings_in(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings_in(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings_in(v, out)),
        _ => {}
    }
}

#[test]
fn rbac_is_least_privilege_without_wildcards() {
    let Some(docs) = rendered() else { return };
    for doc in docs.iter().filter(|d| d.kind().contains("Role")) {
        let mut strings = Vec::new();
        strings_in(&doc.value["rules"], &mut strings);
        let wild: Vec<&String> = strings.iter().filter(|s| s.contains('*')).collect();
        assert!(
            wild.is_empty(),
            "expected no wildcard in the rules of {}, found {wild:?}",
            doc.label()
        );
    }

    let role: Role = one(docs, "Role").typed();
    let found = grants(role.rules.as_deref().unwrap_or_default());
    let expected = expected_grants(&[
        ("", "configmaps", NAME, &["get", "list", "watch"]),
        ("", "secrets", "", &["create"]),
        ("", "secrets", "envoy-injector-tls", &["get", "list", "watch", "update"]),
        ("coordination.k8s.io", "leases", "", &["create"]),
        (
            "coordination.k8s.io",
            "leases",
            "envoy-injector-controller",
            &["get", "update", "patch"],
        ),
    ]);
    assert_eq!(found, expected, "the Role's permissions (namespace {NAMESPACE})");

    let cluster_role: ClusterRole = one(docs, "ClusterRole").typed();
    let found = grants(cluster_role.rules.as_deref().unwrap_or_default());
    let expected = expected_grants(&[
        (
            "samplecrd.k8s.io",
            "networks",
            "",
            &["get", "list", "watch", "patch", "update"],
        ),
        ("samplecrd.k8s.io", "networks/status", "", &["get", "patch", "update"]),
        ("samplecrd.k8s.io", "networks/finalizers", "", &["update"]),
        (
            "k8s.cni.cncf.io",
            "network-attachment-definitions",
            "",
            &["get", "list", "watch", "create", "update", "delete"],
        ),
        ("", "pods", "", &["get", "list", "watch"]),
        ("", "namespaces", "", &["get", "list", "watch"]),
        ("events.k8s.io", "events", "", &["create", "patch"]),
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            NAME,
            &["get", "patch"],
        ),
    ]);
    assert_eq!(found, expected, "the ClusterRole's permissions");
    assert!(
        cluster_role.aggregation_rule.is_none(),
        "no aggregation into the ClusterRole"
    );

    // Both bindings give their role to the injector's ServiceAccount, and only to it.
    let account = one(docs, "ServiceAccount");
    assert_eq!(account.name(), NAME);
    let role_binding: RoleBinding = one(docs, "RoleBinding").typed();
    let cluster_binding: ClusterRoleBinding = one(docs, "ClusterRoleBinding").typed();
    for (what, role_ref, subjects) in [
        (
            "RoleBinding",
            &role_binding.role_ref,
            role_binding.subjects.clone().unwrap_or_default(),
        ),
        (
            "ClusterRoleBinding",
            &cluster_binding.role_ref,
            cluster_binding.subjects.clone().unwrap_or_default(),
        ),
    ] {
        let kind = what.trim_end_matches("Binding");
        assert_eq!(
            (role_ref.kind.as_str(), role_ref.name.as_str()),
            (kind, NAME),
            "{what} roleRef"
        );
        let subjects: Vec<(String, String, Option<String>)> =
            subjects.into_iter().map(|s| (s.kind, s.name, s.namespace)).collect();
        assert_eq!(
            subjects,
            vec![(
                "ServiceAccount".to_string(),
                NAME.to_string(),
                Some(NAMESPACE.to_string())
            )],
            "{what} subjects"
        );
    }
}

// ---- the webhook ---------------------------------------------------------------------------

fn webhooks(docs: &[Doc]) -> Vec<MutatingWebhook> {
    let config: MutatingWebhookConfiguration = one(docs, "MutatingWebhookConfiguration").typed();
    assert_eq!(config.metadata.name.as_deref(), Some(NAME));
    config.webhooks.unwrap_or_default()
}

/// What the API server does with a label selector (matchLabels, In/NotIn/Exists/DoesNotExist).
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => panic!("unknown selector operator {other}"),
        }
    });
    by_labels && by_expressions
}

#[test]
fn webhook_configuration_has_the_designed_properties() {
    let Some(docs) = rendered() else { return };
    let hooks = webhooks(docs);
    let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(
        names,
        ["namespace.sidecar.samplecrd.k8s.io", "pod.sidecar.samplecrd.k8s.io"],
        "two webhook entries"
    );
    for hook in &hooks {
        let name = &hook.name;
        assert_eq!(hook.failure_policy.as_deref(), Some("Fail"), "{name} failurePolicy");
        assert_eq!(hook.side_effects, "None", "{name} sideEffects");
        assert_eq!(hook.timeout_seconds, Some(5), "{name} timeoutSeconds");
        assert_eq!(
            hook.reinvocation_policy.as_deref(),
            Some("IfNeeded"),
            "{name} reinvocationPolicy"
        );
        assert_eq!(hook.match_policy.as_deref(), Some("Equivalent"), "{name} matchPolicy");
        assert_eq!(hook.admission_review_versions, ["v1"], "{name} admissionReviewVersions");
        assert!(
            hook.object_selector.is_none(),
            "{name}: no objectSelector (matchConditions decide)"
        );

        let client = &hook.client_config;
        assert!(client.url.is_none(), "{name}: Service clientConfig, not url");
        assert!(
            client.ca_bundle.is_none(),
            "{name}: caBundle is written by the running injector, not shipped"
        );
        let service = client
            .service
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: clientConfig.service"));
        assert_eq!(
            (
                service.namespace.as_str(),
                service.name.as_str(),
                service.port,
                service.path.as_deref()
            ),
            (NAMESPACE, NAME, Some(443), Some("/mutate")),
            "{name} clientConfig.service"
        );

        let rules = hook.rules.clone().unwrap_or_default();
        assert_eq!(rules.len(), 1, "{name}: one rule");
        let rule = &rules[0];
        assert_eq!(
            (
                rule.operations.clone().unwrap_or_default(),
                rule.api_groups.clone().unwrap_or_default(),
                rule.api_versions.clone().unwrap_or_default(),
                rule.resources.clone().unwrap_or_default(),
                rule.scope.as_deref()
            ),
            (
                vec!["CREATE".to_string()],
                vec![String::new()],
                vec!["v1".to_string()],
                vec!["pods".to_string()],
                Some("Namespaced")
            ),
            "{name} rule: Pod CREATE only"
        );
        assert!(
            !hook.match_conditions.as_deref().unwrap_or_default().is_empty(),
            "{name}: matchConditions"
        );

        let selector = hook
            .namespace_selector
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: namespaceSelector"));
        let excluded = selector.match_expressions.iter().flatten().any(|e| {
            e.key == "kubernetes.io/metadata.name"
                && e.operator == "NotIn"
                && e.values
                    .as_ref()
                    .is_some_and(|v| v.iter().any(|x| x == "kube-system") && v.iter().any(|x| x == NAMESPACE))
        });
        assert!(
            excluded,
            "{name}: namespaceSelector must exclude kube-system and {NAMESPACE} by kubernetes.io/metadata.name NotIn, found {selector:?}"
        );
    }
}

#[test]
fn namespace_selectors_send_no_pod_twice_and_never_the_injectors_own() {
    let Some(docs) = rendered() else { return };
    let hooks = webhooks(docs);
    let own: Namespace = one(docs, "Namespace").typed();
    let own_labels = {
        let mut labels = own.metadata.labels.clone().unwrap_or_default();
        labels.insert("kubernetes.io/metadata.name".to_string(), NAMESPACE.to_string());
        labels
    };
    let ns = |name: &str, label: Option<&str>| {
        let mut labels = BTreeMap::from([("kubernetes.io/metadata.name".to_string(), name.to_string())]);
        if let Some(value) = label {
            labels.insert(INJECT.to_string(), value.to_string());
        }
        labels
    };
    // (namespace labels, the entries that must select it)
    let cases: Vec<(&str, BTreeMap<String, String>, Vec<&str>)> = vec![
        (
            "plain namespace",
            ns("apps", None),
            vec!["pod.sidecar.samplecrd.k8s.io"],
        ),
        (
            "labelled enabled",
            ns("apps", Some("enabled")),
            vec!["namespace.sidecar.samplecrd.k8s.io"],
        ),
        ("labelled disabled", ns("apps", Some("disabled")), vec![]),
        ("kube-system", ns("kube-system", None), vec![]),
        (
            "kube-system labelled enabled",
            ns("kube-system", Some("enabled")),
            vec![],
        ),
        ("the injector's namespace as shipped", own_labels, vec![]),
        (
            "the injector's namespace without its label",
            ns(NAMESPACE, None),
            vec![],
        ),
        (
            "the injector's namespace labelled enabled",
            ns(NAMESPACE, Some("enabled")),
            vec![],
        ),
    ];
    for (what, labels, expected) in cases {
        let selected: Vec<&str> = hooks
            .iter()
            .filter(|h| selects(h.namespace_selector.as_ref().expect("checked elsewhere"), &labels))
            .map(|h| h.name.as_str())
            .collect();
        assert_eq!(selected, expected, "webhook entries selecting a {what} ({labels:?})");
    }
}

/// kube's client-side CEL (kube-cel 0.8) escapes *every* JSON object key the way Kubernetes
/// escapes schema property names (`.` → `__dot__`, `/` → `__slash__`, `-` → `__dash__`,
/// `_` → `__`), map keys included; the API server does not escape map keys, so
/// `object.metadata.annotations['sidecar.samplecrd.k8s.io/inject']` finds the annotation
/// there. To evaluate the shipped expressions here, the annotation keys they quote are
/// written the escaped way first; any other quoted key with such characters fails the test
/// (it would not be looked up as the API server does).
fn for_kube_cel(expression: &str) -> String {
    let escape = |key: &str| {
        key.replace('_', "__")
            .replace('.', "__dot__")
            .replace('-', "__dash__")
            .replace('/', "__slash__")
    };
    let mut out = expression.to_string();
    for key in [INJECT, LEGACY, STATUS] {
        out = out.replace(&format!("'{key}'"), &format!("'{}'", escape(key)));
    }
    let leftover = out
        .split('\'')
        .skip(1)
        .step_by(2)
        .find(|literal| literal.contains(['.', '/', '-']) && !literal.contains("__"));
    assert!(
        leftover.is_none(),
        "matchCondition quotes {leftover:?}: add it to for_kube_cel in tests/manifests.rs"
    );
    out
}

/// Each matchCondition of `hook` for `pod`: its name and value. Panics on an evaluation
/// error (the API server would then apply the failurePolicy to a Pod that may not have
/// opted in).
fn match_conditions(hook: &MutatingWebhook, pod: &Value) -> Vec<(String, bool)> {
    let request = AdmissionRequest {
        operation: "CREATE".to_string(),
        namespace: "apps".to_string(),
        ..AdmissionRequest::default()
    };
    let evaluator = VapEvaluator::builder().object(pod.clone()).request(request).build();
    let conditions = hook.match_conditions.clone().unwrap_or_default();
    let expressions: Vec<VapExpression> = conditions
        .iter()
        .map(|c| VapExpression {
            expression: for_kube_cel(&c.expression),
            message: Some("false".to_string()),
            message_expression: None,
        })
        .collect();
    let results = evaluator.evaluate(&expressions);
    conditions
        .iter()
        .zip(results)
        .map(|(condition, result)| {
            if !result.passed {
                assert_eq!(
                    result.message.as_deref(),
                    Some("false"),
                    "{}: matchCondition {} does not evaluate to a boolean for Pod {pod}",
                    hook.name,
                    condition.name
                );
            }
            (condition.name.clone(), result.passed)
        })
        .collect()
}

#[test]
fn match_conditions_select_exactly_the_pods_the_injector_injects() {
    let Some(docs) = rendered() else { return };
    let hooks = webhooks(docs);
    let by_name = |name: &str| {
        hooks
            .iter()
            .find(|h| h.name == name)
            .expect("checked elsewhere")
            .clone()
    };
    let namespace_hook = by_name("namespace.sidecar.samplecrd.k8s.io");
    let pod_hook = by_name("pod.sidecar.samplecrd.k8s.io");

    let cases: Vec<Option<Value>> = vec![
        None,
        Some(json!({})),
        Some(json!({ "team": "a" })),
        Some(json!({ INJECT: "true" })),
        Some(json!({ INJECT: "TRUE" })),
        Some(json!({ INJECT: " True " })),
        Some(json!({ INJECT: "false" })),
        Some(json!({ INJECT: "False" })),
        Some(json!({ INJECT: "yes" })),
        Some(json!({ INJECT: "" })),
        Some(json!({ LEGACY: "true" })),
        Some(json!({ LEGACY: "false" })),
        Some(json!({ LEGACY: "maybe" })),
        Some(json!({ INJECT: "true", LEGACY: "false" })),
        Some(json!({ INJECT: "false", LEGACY: "true" })),
        Some(json!({ INJECT: "yes", LEGACY: "true" })),
        Some(json!({ INJECT: "true", STATUS: "{\"template\":\"config\"}" })),
        Some(json!({ STATUS: "{}" })),
    ];
    for annotations in cases {
        let mut metadata = json!({ "name": "p", "namespace": "apps" });
        if let Some(a) = &annotations {
            metadata["annotations"] = a.clone();
        }
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": { "containers": [{ "name": "app", "image": "app" }] },
        });
        let map: Option<Map<String, Value>> = annotations.as_ref().and_then(|a| a.as_object().cloned());
        for (hook, namespace) in [
            (&namespace_hook, NamespaceOptIn::Labeled),
            (&pod_hook, NamespaceOptIn::NotLabeled),
        ] {
            let injects = decide(map.as_ref(), namespace).is_ok();
            let conditions = match_conditions(hook, &pod);
            let called = conditions.iter().all(|(_, value)| *value);
            assert_eq!(
                called,
                injects,
                "{}: the API server would {} the webhook for a Pod with annotations {annotations:?} (conditions \
                 {conditions:?}), but the injector's policy ({namespace:?}) {} it",
                hook.name,
                if called { "call" } else { "not call" },
                if injects { "injects" } else { "does not inject" }
            );
        }
    }
}

// ---- Deployment, Service, PDB --------------------------------------------------------------

fn container(deployment: &Deployment) -> &Container {
    let spec = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a Pod template");
    assert_eq!(spec.containers.len(), 1, "one container in the injector Pod");
    &spec.containers[0]
}

#[test]
fn deployment_is_hardened_and_wired_to_service_and_pdb() {
    let Some(docs) = rendered() else { return };
    let deployment: Deployment = one(docs, "Deployment").typed();
    let spec = deployment.spec.as_ref().expect("Deployment spec");
    assert_eq!(spec.replicas, Some(2), "replicas");
    let template_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    assert!(
        selects(&spec.selector, &template_labels),
        "the Deployment's selector matches its Pod template"
    );
    let pod = spec.template.spec.as_ref().expect("Pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some(NAME), "serviceAccountName");
    assert_eq!(
        pod.automount_service_account_token,
        Some(true),
        "automountServiceAccountToken"
    );
    assert_eq!(
        pod.termination_grace_period_seconds,
        Some(30),
        "terminationGracePeriodSeconds"
    );

    let anti = pod
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.clone())
        .unwrap_or_default();
    assert!(
        anti.iter()
            .any(|t| t.pod_affinity_term.topology_key == "kubernetes.io/hostname"
                && t.pod_affinity_term
                    .label_selector
                    .as_ref()
                    .is_some_and(|s| selects(s, &template_labels))),
        "preferred podAntiAffinity on kubernetes.io/hostname over its own Pods, found {anti:?}"
    );

    let pod_security = pod.security_context.as_ref().expect("Pod securityContext");
    assert_eq!(pod_security.run_as_non_root, Some(true), "Pod runAsNonRoot");
    assert_eq!(pod_security.run_as_user, Some(65532), "Pod runAsUser");
    assert_eq!(
        pod_security.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault"),
        "Pod seccompProfile"
    );

    let c = container(&deployment);
    assert_eq!(
        c.image.as_deref(),
        Some("envoy-injector:dev"),
        "image (kind load target)"
    );
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(args, ["serve", "--log-format", "json"], "args");
    let security = c.security_context.as_ref().expect("container securityContext");
    assert_eq!(security.run_as_non_root, Some(true), "runAsNonRoot");
    assert_eq!(security.run_as_user, Some(65532), "runAsUser");
    assert_eq!(security.read_only_root_filesystem, Some(true), "readOnlyRootFilesystem");
    assert_eq!(
        security.allow_privilege_escalation,
        Some(false),
        "allowPrivilegeEscalation"
    );
    assert_ne!(security.privileged, Some(true), "privileged");
    assert_eq!(
        security.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_string()]),
        "capabilities.drop"
    );
    assert!(
        security
            .capabilities
            .as_ref()
            .and_then(|c| c.add.as_ref())
            .is_none_or(Vec::is_empty),
        "no capability added"
    );
    assert_eq!(
        security.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault"),
        "seccompProfile"
    );

    let env: BTreeMap<&str, Option<&str>> = c
        .env
        .iter()
        .flatten()
        .map(|e| {
            let field = e
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str());
            (e.name.as_str(), field)
        })
        .collect();
    assert_eq!(
        env.get("POD_NAMESPACE"),
        Some(&Some("metadata.namespace")),
        "env POD_NAMESPACE"
    );
    assert_eq!(env.get("POD_NAME"), Some(&Some("metadata.name")), "env POD_NAME");

    let ports: BTreeMap<&str, i32> = c
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.as_deref().unwrap_or("?"), p.container_port))
        .collect();
    assert_eq!(
        ports,
        BTreeMap::from([("admin", 9090), ("webhook", 8443)]),
        "container ports"
    );
    let probe_path = |probe: Option<&k8s_openapi::api::core::v1::Probe>| {
        let get = probe.and_then(|p| p.http_get.as_ref()).expect("an httpGet probe");
        let port = match &get.port {
            IntOrString::Int(n) => *n,
            IntOrString::String(name) => ports[name.as_str()],
        };
        (get.path.clone().unwrap_or_default(), port)
    };
    assert_eq!(
        probe_path(c.liveness_probe.as_ref()),
        ("/healthz".to_string(), 9090),
        "livenessProbe"
    );
    assert_eq!(
        probe_path(c.readiness_probe.as_ref()),
        ("/readyz".to_string(), 9090),
        "readinessProbe"
    );
    assert_eq!(
        probe_path(c.startup_probe.as_ref()),
        ("/healthz".to_string(), 9090),
        "startupProbe"
    );
    let startup = c.startup_probe.as_ref().expect("startupProbe");
    let budget = startup.period_seconds.unwrap_or(10) * startup.failure_threshold.unwrap_or(3);
    assert!(
        budget >= 60,
        "a generous startupProbe (period x threshold = {budget} s)"
    );

    let resources = c.resources.as_ref().expect("resources");
    for (what, list) in [("requests", &resources.requests), ("limits", &resources.limits)] {
        let list = list.clone().unwrap_or_default();
        assert!(
            list.contains_key("cpu") && list.contains_key("memory"),
            "resources.{what} has cpu and memory, found {list:?}"
        );
    }

    let service: Service = one(docs, "Service").typed();
    let service_spec = service.spec.as_ref().expect("Service spec");
    let selector = service_spec.selector.clone().unwrap_or_default();
    assert!(
        !selector.is_empty() && selector.iter().all(|(k, v)| template_labels.get(k) == Some(v)),
        "the Service selects the injector Pods: {selector:?} vs {template_labels:?}"
    );
    let service_ports = service_spec.ports.clone().unwrap_or_default();
    assert_eq!(service_ports.len(), 1, "one Service port");
    let target = match service_ports[0].target_port.as_ref().expect("targetPort") {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => ports[name.as_str()],
    };
    assert_eq!((service_ports[0].port, target), (443, 8443), "Service 443 -> 8443");
    assert_eq!(
        service.metadata.name.as_deref(),
        Some(NAME),
        "the Service the webhook calls"
    );

    let pdb: PodDisruptionBudget = one(docs, "PodDisruptionBudget").typed();
    let pdb_spec = pdb.spec.as_ref().expect("PDB spec");
    assert_eq!(pdb_spec.min_available, Some(IntOrString::Int(1)), "PDB minAvailable");
    assert!(
        pdb_spec.selector.as_ref().is_some_and(|s| selects(s, &template_labels)),
        "the PDB selects the injector Pods"
    );
}

// ---- ConfigMap -----------------------------------------------------------------------------

#[test]
fn configmap_holds_the_default_template_verbatim() {
    let path = repo("src/template/default-template.yaml");
    let template = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    // Straight from the file too, so the check holds without kubectl.
    let text = std::fs::read_to_string(repo("manifests/configmap.yaml")).expect("read manifests/configmap.yaml");
    let docs = parse_stream("manifests/configmap.yaml", &text);
    let mut candidates = vec![docs.first().expect("one document").clone()];
    if let Some(docs) = rendered() {
        candidates.push(one(docs, "ConfigMap"));
    }
    for doc in candidates {
        let cm: ConfigMap = doc.typed();
        assert_eq!(cm.metadata.name.as_deref(), Some(NAME), "{}", doc.label());
        let data = cm.data.unwrap_or_default();
        let config = data.get("config").map(String::as_str);
        assert!(
            config == Some(template.as_str()),
            "{}: data.config must equal src/config/default-template.yaml byte for byte; found:\n{}",
            doc.label(),
            config.unwrap_or("<missing>")
        );
        assert_eq!(data.len(), 1, "{}: only the default template ships", doc.label());
    }
    assert_eq!(
        template,
        envoy_injector::template::EMBEDDED_DEFAULT,
        "the embedded default is the file"
    );
}

// ---- shell scripts -------------------------------------------------------------------------

fn shell_scripts(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules") {
                shell_scripts(&path, out);
            }
        } else if name.ends_with(".sh") {
            out.push(path);
        }
    }
}

#[test]
fn shell_scripts_pass_shellcheck() {
    let root = repo("");
    let mut scripts = vec![root.join(".ci/run")];
    shell_scripts(&root, &mut scripts);
    scripts.sort();
    for script in &scripts {
        assert!(script.is_file(), "expected {} to exist", script.display());
    }
    if !have("shellcheck") {
        shout(&format!(
            "SKIPPED shellcheck of {} scripts: shellcheck is not installed (apt-get install shellcheck)",
            scripts.len()
        ));
        return;
    }
    let output = Command::new("shellcheck")
        .args(["--severity=style", "--external-sources"])
        .args(&scripts)
        .current_dir(&root)
        .output()
        .expect("run shellcheck");
    assert!(
        output.status.success(),
        "expected shellcheck to pass on {:?}, found {}:\n{}{}",
        scripts,
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
