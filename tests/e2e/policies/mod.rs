//! Tier `policies`: the proof that the admission policies `envoy-injector policies`
//! compiles store the Pod the webhook stores, on the real API server. One ConfigMap of
//! templates (every template feature, every override kind, native and regular sidecars,
//! the largest template of the tests) is served by a local `serve` behind the shipped
//! MutatingWebhookConfiguration for the webhook's namespaces, and compiled (by the binary)
//! into policies bound to the policies' namespaces, where the webhook is called only to
//! join a Network. Every shape of the corpus (`shapes.rs`), every captured fixture Pod, and
//! the Pods of a Deployment and two Jobs are created once on each side; what the API
//! server stored (spec, labels, annotations, QoS class) or the words of its refusal must be
//! the same, with namespace names, generated names, `kube-api-access-*` names, Job uids and
//! each side's Network addresses aside. A difference fails the tier, naming the shape and
//! the paths that differ. Each shape's Pod stored must also have the QoS class the API
//! server gives it without injection (a dry run where no injector acts), or the tier fails
//! naming the shape, the path and both classes.

mod shapes;
mod templates;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use envoy_injector::tls;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, ListParams, PostParams};
use serde_json::{Value, json};

use self::shapes::{Place, Shape};
use crate::common::policies::{self, narrow, resource_of};
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "policies",
    run: |suite| Box::pin(run(suite)),
};

const TEMPLATE_LABEL: &str = "sidecar.samplecrd.k8s.io/template";
const NETWORK_NAME: &str = "blue";

/// One side of the proof: the namespaces of one injection path.
struct Side {
    path: &'static str,
    namespaces: Vec<(Place, TestNs)>,
    /// The addresses of this side's Network (each side has its own, so neither overlaps).
    cidr: &'static str,
    gateway: &'static str,
}

impl Side {
    fn ns(&self, place: Place) -> &TestNs {
        &self
            .namespaces
            .iter()
            .find(|(p, _)| *p == place)
            .expect("a namespace for every place")
            .1
    }

    fn names(&self) -> Vec<String> {
        self.namespaces.iter().map(|(_, ns)| ns.name.clone()).collect()
    }

    /// `text` with this side's namespaces, Network addresses and random names replaced.
    fn normalise(&self, text: &str) -> String {
        let mut text = text.to_string();
        for name in self.names() {
            text = text.replace(&name, "NAMESPACE");
        }
        text = text.replace(self.cidr, "CIDR").replace(self.gateway, "GATEWAY");
        let access = regex::Regex::new("kube-api-access-[a-z0-9]{5}").expect("a regex");
        access.replace_all(&text, "kube-api-access-XXXXX").into_owned()
    }
}

/// What the API server did with one create.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// The stored Pod's spec, labels, annotations and QoS class, normalised.
    Stored(Value),
    /// The HTTP code and the refusal's own words (after the API server's prefix).
    Denied(u16, String),
}

impl Outcome {
    fn summary(&self) -> String {
        match self {
            Outcome::Stored(pod) => {
                let names = |list: &str| -> Vec<String> {
                    pod["spec"][list]
                        .as_array()
                        .map(|l| l.iter().filter_map(|c| c["name"].as_str().map(String::from)).collect())
                        .unwrap_or_default()
                };
                format!("stored, init {:?}, containers {:?}", names("initContainers"), names("containers"))
            }
            Outcome::Denied(code, text) => format!("denied ({code}): {text}"),
        }
    }
}

fn configmap(templates: &[(&str, String)]) -> Value {
    let data: serde_json::Map<String, Value> = templates.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": INJECTOR_NAME}, "data": data})
}

/// One configuration proven: the ConfigMap's templates, annotation opt-in on or off (both
/// paths alike: `serve --annotation-opt-in`, the webhook configuration without its
/// annotation entry, `policies --annotation-opt-in`), and the shapes created.
struct Phase {
    name: &'static str,
    templates: Vec<(&'static str, String)>,
    annotations: bool,
    shapes: Vec<Shape>,
    /// The workloads' Pods too, and Networks on both sides (the corpus joins them).
    full: bool,
}

/// Ten templates: the tier's six, and four copies of `config` (another CPU request each).
fn ten_templates() -> Vec<(&'static str, String)> {
    let mut out = templates::templates();
    let config = out[0].1.clone();
    for (i, name) in ["t7", "t8", "t9", "t10"].into_iter().enumerate() {
        out.push((name, config.replacen("cpu: 100m", &format!("cpu: {}m", 107 + i), 1)));
    }
    out
}

async fn run(suite: &Suite) -> TierResult {
    suite.loopback_webhooks()?;
    require_kubectl()?;
    let scope = Scope::new(suite.settings.mode);
    suite.install_network_crd().await;

    let mut all_templates = templates::templates();
    all_templates.push(("largest", templates::largest()));
    all_templates.push(("host", templates::host()));
    let three: Vec<(&'static str, String)> = templates::templates().into_iter().take(3).collect();
    let ten = ten_templates();
    let names = |templates: &[(&'static str, String)]| -> Vec<&'static str> { templates.iter().map(|(n, _)| *n).collect() };
    let main_shapes: Vec<Shape> = shapes::corpus()
        .into_iter()
        .chain(shapes::opt_in_corpus())
        .chain(largest_shapes())
        .chain(fixture_shapes())
        .chain(shapes::host_network())
        .chain(shapes::resource_shapes())
        .chain(shapes::restricted())
        .collect();
    let phases = vec![
        Phase {
            name: "all",
            templates: all_templates,
            annotations: true,
            shapes: main_shapes,
            full: true,
        },
        Phase {
            name: "labels-only",
            shapes: shapes::opt_in_corpus().into_iter().chain(shapes::choosing(&names(&three))).collect(),
            templates: three,
            annotations: false,
            full: false,
        },
        Phase {
            name: "ten",
            shapes: shapes::opt_in_corpus().into_iter().chain(shapes::choosing(&names(&ten))).collect(),
            templates: ten,
            annotations: true,
            full: false,
        },
    ];

    let started = Instant::now();
    let mut cases: Vec<(String, Outcome, Outcome)> = Vec::new();
    let mut counts = Vec::new();
    let mut classes_lost = Vec::new();
    for phase in &phases {
        let proven = prove(suite, &scope, phase).await;
        counts.push(format!("{} {}", proven.cases.len(), phase.name));
        cases.extend(proven.cases);
        classes_lost.extend(proven.classes_lost);
    }

    let mut differences = Vec::new();
    for (name, webhook, policies) in &cases {
        if webhook != policies {
            differences.push(format!(
                "{name}:\n  webhook:  {}\n  policies: {}\n  {}",
                webhook.summary(),
                policies.summary(),
                diff_outcomes(webhook, policies).join("\n  ")
            ));
        }
    }
    // Both alike is not enough for Pods on the node's network: left alone, or injected
    // where the template they name allows it.
    let on_host: Vec<_> = cases.iter().filter(|(name, ..)| name.starts_with("all/hostnet-")).collect();
    assert_eq!(
        on_host.len(),
        shapes::host_network().len(),
        "expected every shape on the node's network proven, found {:?}",
        on_host.iter().map(|(name, ..)| name).collect::<Vec<_>>()
    );
    for (name, webhook, _) in on_host {
        let injected = matches!(webhook, Outcome::Stored(pod) if !pod["metadata"]["annotations"]["sidecar.samplecrd.k8s.io/status"].is_null());
        let stored = matches!(webhook, Outcome::Stored(_));
        let expected = name.starts_with("all/hostnet-allowed");
        assert!(
            stored && injected == expected,
            "{name}: expected stored {}, found {}",
            if expected { "injected" } else { "unchanged" },
            webhook.summary()
        );
    }
    // In a namespace enforcing Pod Security `restricted`: the shipped default meets it (the
    // Pod is stored, injected), `classic` does not (Pod Security admission refuses the
    // injected Pod, naming what the sidecar breaks), an app that breaks it alone is refused
    // with nothing injected; each alike on both paths (compared above).
    let restricted: Vec<_> = cases.iter().filter(|(name, ..)| name.starts_with("all/psa-restricted-")).collect();
    assert_eq!(restricted.len(), shapes::restricted().len(), "expected every restricted shape proven");
    for (name, webhook, _) in restricted {
        let injected = matches!(webhook, Outcome::Stored(pod) if !pod["metadata"]["annotations"]["sidecar.samplecrd.k8s.io/status"].is_null());
        let refused_by_pod_security =
            matches!(webhook, Outcome::Denied(_, words) if words.contains("violates PodSecurity \"restricted:latest\""));
        let expected = if name.starts_with("all/psa-restricted-shipped") { injected } else { refused_by_pod_security };
        assert!(expected, "{name}: found {}", webhook.summary());
    }
    let injected = cases
        .iter()
        .filter(|(_, w, _)| matches!(w, Outcome::Stored(pod) if !pod["metadata"]["annotations"]["sidecar.samplecrd.k8s.io/status"].is_null()))
        .count();
    let denied = cases.iter().filter(|(_, w, _)| matches!(w, Outcome::Denied(..))).count();
    for (name, webhook, _) in &cases {
        step!("{name}: {}", webhook.summary());
    }
    assert!(
        differences.is_empty(),
        "expected the policies to store what the webhook stores and deny with its words, found {} of {} cases differing:\n{}",
        differences.len(),
        cases.len(),
        differences.join("\n")
    );
    assert!(
        classes_lost.is_empty(),
        "expected every Pod stored with the QoS class it has without injection, found {}:\n{}",
        classes_lost.len(),
        classes_lost.join("\n")
    );
    Ok(format!(
        "{} cases the same through both paths ({}; {injected} injected, {denied} denied, the rest left alone) in {:.1} s",
        cases.len(),
        counts.join(", "),
        started.elapsed().as_secs_f64()
    ))
}

/// What one phase proved: each case, named `PHASE/SHAPE`, with what each path did; and each
/// Pod a path stored with another QoS class than the same Pod has without injection.
struct Proven {
    cases: Vec<(String, Outcome, Outcome)>,
    classes_lost: Vec<String>,
}

/// Creates every shape of `phase` once through each path, in namespaces of its own.
async fn prove(suite: &Suite, scope: &Scope, phase: &Phase) -> Proven {
    let client = &suite.client;
    let injector = TestNs::create(client, scope, "policies-injector", &[]).await;
    let configmap = configmap(&phase.templates);
    kubectl_apply(&[in_namespace(&configmap, &injector.name)]).await;

    let labels_of = |place: Place| -> Vec<(&'static str, &'static str)> {
        match place {
            Place::Plain => Vec::new(),
            Place::Labelled => vec![NAMESPACE_OPT_IN, (TEMPLATE_LABEL, "canary")],
            Place::MissingTemplate => vec![NAMESPACE_OPT_IN, (TEMPLATE_LABEL, "missing")],
            Place::Disabled => vec![("sidecar.samplecrd.k8s.io/inject", "disabled")],
            Place::Restricted => vec![("pod-security.kubernetes.io/enforce", "restricted")],
        }
    };
    let mut sides = Vec::new();
    for (path, cidr, gateway) in [
        ("webhook", "198.18.70.0/24", "198.18.70.1"),
        ("policies", "198.18.71.0/24", "198.18.71.1"),
    ] {
        let mut namespaces = Vec::new();
        for place in [Place::Plain, Place::Labelled, Place::MissingTemplate, Place::Disabled, Place::Restricted] {
            let tier = format!("pol-{}", &path[..3]);
            namespaces.push((place, TestNs::create(client, scope, &tier, &labels_of(place)).await));
        }
        sides.push(Side {
            path,
            namespaces,
            cidr,
            gateway,
        });
    }
    let (webhook_side, policy_side) = (&sides[0], &sides[1]);
    let opt_in_flag = format!("--annotation-opt-in={}", phase.annotations);

    // The webhook: the shipped configuration for the webhook's namespaces (without its
    // annotation entry when annotations opt nothing in); for the policies' namespaces only
    // the join of a Network (a Pod already injected).
    let certs = tls::generate(INJECTOR_NAME, &injector.name, &["127.0.0.1".to_string()], 1).expect("test certificates");
    let identity = format!("policies-{}", phase.name);
    let (serve, webhook) = serve_on_loopback(
        "policies",
        &certs,
        &["--namespace", &injector.name, "--network-backend", "none", "--identity", &identity, &opt_in_flag],
    )
    .await;
    serve.wait_ready().await;
    let url = format!("https://{webhook}/mutate");
    let webhook_names = webhook_side.names();
    let webhook_names: Vec<&str> = webhook_names.iter().map(String::as_str).collect();
    let config_name = format!("envoy-injector-{}", injector.name);
    let mut shipped = shipped_webhooks_at(
        "manifests/webhook.yaml",
        &config_name,
        &url,
        certs.ca.cert_pem.as_bytes(),
        &webhook_names,
    );
    if !phase.annotations {
        shipped["webhooks"]
            .as_array_mut()
            .expect("webhooks")
            .retain(|hook| hook["name"] != "pod.sidecar.samplecrd.k8s.io");
    }
    scope.delete_later(ApiResource::erase::<MutatingWebhookConfiguration>(&()), None, &config_name);
    kubectl_apply(&[shipped]).await;
    let join_name = format!("envoy-injector-join-{}", injector.name);
    scope.delete_later(ApiResource::erase::<MutatingWebhookConfiguration>(&()), None, &join_name);
    kubectl_apply(&[join_webhook(&join_name, &url, certs.ca.cert_pem.as_bytes(), &policy_side.names())]).await;

    // The policies, compiled by the binary from the same ConfigMap.
    let compiled = compile_with(&configmap, &injector.name, &[&opt_in_flag]);
    let narrowed = narrow(&compiled, &policy_side.names());
    for object in &narrowed {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        scope.delete_later(resource_of(object), None, name);
    }
    kubectl_apply(&narrowed).await;
    step!(
        "phase {}: {} compiled objects applied, bound to {:?}",
        phase.name,
        narrowed.len(),
        policy_side.names()
    );

    if phase.full {
        for side in &sides {
            let ns = side.ns(Place::Plain);
            ns.create_network(NETWORK_NAME, side.cidr, side.gateway).await;
            ns.network_ready(NETWORK_NAME, PATIENCE).await;
        }
    }
    let names: Vec<&str> = phase.templates.iter().map(|(name, _)| *name).collect();
    wait_until_active(webhook_side, policy_side, &names).await;

    let mut cases: Vec<(String, Outcome, Outcome)> = Vec::new();
    let mut classes_lost = Vec::new();
    for shape in &phase.shapes {
        let name = format!("{}/{}", phase.name, shape.name);
        // Before the shape's own create: a shape of the disabled namespace is created there.
        let without = class_without_injection(webhook_side, shape).await;
        let webhook = create(webhook_side, shape).await;
        let policies = create(policy_side, shape).await;
        for (path, outcome) in [("webhook", &webhook), ("policies", &policies)] {
            if let Some(lost) = class_lost(&name, path, outcome, &without) {
                classes_lost.push(lost);
            }
        }
        cases.push((name, webhook, policies));
    }
    if phase.full {
        for (kind, workload) in workloads() {
            let webhook = workload_pods(webhook_side, kind, &workload).await;
            let policies = workload_pods(policy_side, kind, &workload).await;
            let name = workload["metadata"]["name"].as_str().unwrap_or_default().to_string();
            for (i, (w, p)) in webhook.into_iter().zip(policies).enumerate() {
                cases.push((format!("{}/{kind} {name} Pod {i}", phase.name), w, p));
            }
        }
    }
    drop(serve);
    Proven { cases, classes_lost }
}

/// The QoS class the API server gives `shape`'s Pod as it is: a server-side dry run in the
/// namespace of `side` that no injector acts in (labelled `disabled`).
async fn class_without_injection(side: &Side, shape: &Shape) -> Result<String, String> {
    let pod: Pod = serde_json::from_value(shape.pod.clone()).unwrap_or_else(|e| panic!("shape {}: {e}", shape.name));
    let stored = side.ns(Place::Disabled).create_pod(&pod, true).await.map_err(|e| api_error(&e))?;
    Ok(stored.status.and_then(|s| s.qos_class).unwrap_or_default())
}

/// Where `outcome` (of `path`, case `name`) is a Pod stored with another QoS class than
/// `without`, the class of the same Pod without injection: the words saying so.
fn class_lost(name: &str, path: &str, outcome: &Outcome, without: &Result<String, String>) -> Option<String> {
    let Outcome::Stored(pod) = outcome else { return None };
    let stored = pod["status"]["qosClass"].as_str().unwrap_or_default();
    match without {
        Ok(class) if class == stored => None,
        Ok(class) => Some(format!(
            "{name}: the {path} path stored QoS class {stored:?}, the Pod without injection has {class:?}"
        )),
        Err(e) => Some(format!(
            "{name}: the {path} path stored QoS class {stored:?}; expected the Pod without injection stored by a dry run, found: {e}"
        )),
    }
}

/// The webhook for the policies' namespaces: only a Pod already injected that names a
/// Network without the label the join sets.
fn join_webhook(name: &str, url: &str, ca_pem: &[u8], namespaces: &[String]) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {PART_OF.0: PART_OF.1}},
        "webhooks": [{
            "name": "join.e2e.sidecar.samplecrd.k8s.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": url, "caBundle": base64(ca_pem)},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]},
            "matchConditions": [{
                "name": "injected-not-joined",
                "expression": "has(object.metadata.annotations) && 'sidecar.samplecrd.k8s.io/status' in object.metadata.annotations && 'sidecar.samplecrd.k8s.io/network' in object.metadata.annotations && object.metadata.annotations['sidecar.samplecrd.k8s.io/network'].trim() != '' && (!has(object.metadata.labels) || !('sidecar.samplecrd.k8s.io/network' in object.metadata.labels))",
            }],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
        }],
    })
}

/// `envoy-injector policies -f CONFIGMAP -o json`, as a user runs it.
pub fn compile(configmap: &Value, namespace: &str) -> Vec<Value> {
    compile_with(configmap, namespace, &[])
}

/// [`compile`] with further flags of `policies`.
pub fn compile_with(configmap: &Value, namespace: &str, flags: &[&str]) -> Vec<Value> {
    let items = policies::compile_with(Path::new(env!("CARGO_BIN_EXE_envoy-injector")), configmap, namespace, flags)
        .unwrap_or_else(|e| panic!("{e}"));
    for item in &items {
        assert_eq!(
            item["metadata"]["labels"]["app.kubernetes.io/managed-by"], "envoy-injector",
            "every compiled object carries the managed-by label: {}",
            item["metadata"]["name"]
        );
    }
    items
}

/// Until both paths answer: a Pod injected with each template and one denied on each side
/// (the API server picks up each policy, binding and webhook configuration a moment after
/// it is written, each on its own).
async fn wait_until_active(webhook: &Side, policies: &Side, templates: &[&str]) {
    let corpus = shapes::corpus();
    // Opted in by the label: what selects a Pod with annotation opt-in off too.
    let probe = |name: &str| {
        let mut pod = corpus.iter().find(|s| s.name == name).map(|s| s.pod.clone()).expect("a shape");
        if let Some(annotations) = pod["metadata"]["annotations"].as_object_mut() {
            annotations.remove(shapes::INJECT);
        }
        pod["metadata"]["labels"][shapes::INJECT] = json!("true");
        pod
    };
    let mut probes: Vec<(String, Value, bool)> = vec![
        (String::from("port-collision"), probe("port-collision"), false),
        (String::from("unknown-template"), probe("unknown-template"), false),
    ];
    for template in templates {
        let mut pod = probe("not-opted-in");
        pod["metadata"]["annotations"] = json!({shapes::TEMPLATE: template});
        probes.push((format!("a Pod of template {template}"), pod, true));
    }
    for (probe_name, pod, injected) in probes {
        let pod: Pod = serde_json::from_value(pod).expect("a Pod");
        for side in [webhook, policies] {
            let ns = side.ns(Place::Plain);
            wait_for(&format!("the {} path to act on {probe_name}", side.path), PATIENCE, async || {
                match ns.create_pod(&pod, true).await {
                    Ok(p) if injected && annotation(&p, STATUS).is_some() => Ok(()),
                    Err(kube::Error::Api(s)) if !injected && s.code == 403 => Ok(()),
                    Ok(p) => Err(format!("admitted: {}", describe_pod(&p))),
                    Err(e) => Err(api_error(&e)),
                }
            })
            .await;
        }
    }
    step!("both paths active, for every template");
}

async fn create(side: &Side, shape: &Shape) -> Outcome {
    let ns = side.ns(shape.place);
    let pod: Pod = serde_json::from_value(shape.pod.clone()).unwrap_or_else(|e| panic!("shape {}: {e}", shape.name));
    match ns.create_pod(&pod, shape.dry_run).await {
        Ok(stored) => Outcome::Stored(normalised_pod(side, &serde_json::to_value(&stored).expect("JSON"))),
        Err(kube::Error::Api(status)) => Outcome::Denied(status.code, refusal(side, &status.message)),
        Err(e) => panic!("shape {}: expected an answer from the API server, found: {e}", shape.name),
    }
}

/// The refusal's own words: after the API server's prefix (a webhook's name or a
/// policy's and binding's names differ by path).
fn refusal(side: &Side, message: &str) -> String {
    let inner = ["denied the request: ", "denied request: "]
        .iter()
        .find_map(|marker| message.find(marker).map(|at| &message[at + marker.len()..]))
        .unwrap_or(message);
    side.normalise(inner)
}

/// What is compared of a stored Pod: its name (or `generateName`), labels, annotations,
/// spec and QoS class, with what differs by path by construction replaced.
fn normalised_pod(side: &Side, pod: &Value) -> Value {
    let generated = pod["metadata"]["generateName"].as_str().filter(|g| !g.is_empty());
    let mut labels = pod["metadata"]["labels"].clone();
    if let Some(map) = labels.as_object_mut() {
        for key in ["controller-uid", "batch.kubernetes.io/controller-uid"] {
            if map.contains_key(key) {
                map.insert(key.to_string(), json!("UID"));
            }
        }
    }
    let kept = json!({
        "metadata": {
            "name": generated.map_or(pod["metadata"]["name"].clone(), |g| json!(format!("{g}*"))),
            "labels": labels,
            "annotations": pod["metadata"]["annotations"],
        },
        "spec": pod["spec"],
        "status": {"qosClass": pod["status"]["qosClass"]},
    });
    serde_json::from_str(&side.normalise(&kept.to_string())).expect("normalised JSON")
}

/// The paths where two outcomes differ, with both values.
fn diff_outcomes(a: &Outcome, b: &Outcome) -> Vec<String> {
    let mut out = Vec::new();
    if let (Outcome::Stored(a), Outcome::Stored(b)) = (a, b) {
        diff(a, b, String::new(), &mut out);
    }
    out
}

fn diff(a: &Value, b: &Value, at: String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                diff(
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                    format!("{at}/{key}"),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(p, q, format!("{at}/{i}"), out);
            }
        }
        _ if a != b => out.push(format!("{at}: webhook {a} / policies {b}")),
        _ => {}
    }
}

/// Shapes on the largest template of the tests: its policies stay within the API
/// server's CEL cost limits on the paths that cost most (every override, a collision).
fn largest_shapes() -> Vec<Shape> {
    let mut annotations = vec![
        (shapes::INJECT.to_string(), String::from("true")),
        (shapes::TEMPLATE.to_string(), String::from("largest")),
    ];
    for c in 0..4 {
        let key = |kind: &str| format!("sidecar.samplecrd.k8s.io/override.{kind}-{c}");
        annotations.extend([
            (key("cpu"), String::from("250m")),
            (key("mem"), String::from("512Mi")),
            (key("var"), String::from("b")),
            (key("tag"), String::from("1.37")),
        ]);
    }
    annotations.push((
        String::from("sidecar.samplecrd.k8s.io/override.init-var"),
        String::from("y"),
    ));
    let meta = |name: &str, annotations: &[(String, String)]| {
        let annotations: serde_json::Map<String, Value> =
            annotations.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        json!({"name": name, "labels": {"corpus": name}, "annotations": annotations})
    };
    let app = json!({"name": "app", "image": "registry.k8s.io/pause:3.10"});
    let base = annotations[..2].to_vec();
    vec![
        Shape {
            name: "largest-every-override",
            place: Place::Plain,
            dry_run: false,
            pod: json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("largest-every-override", &annotations),
                        "spec": {"containers": [app.clone(), {"name": "app2", "image": "registry.k8s.io/pause:3.10"}]}}),
        },
        Shape {
            name: "largest-volume-collision",
            place: Place::Plain,
            dry_run: false,
            pod: json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("largest-volume-collision", &base),
                        "spec": {"containers": [app.clone()], "volumes": [{"name": "big-conf", "projected": {"sources": [{"configMap": {"name": "x"}}, {"secret": {"name": "y"}}]}}]}}),
        },
        Shape {
            name: "largest-mount-collision",
            place: Place::Plain,
            dry_run: false,
            pod: json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("largest-mount-collision", &base),
                        "spec": {"containers": [app.clone(), {"name": "b", "image": "registry.k8s.io/pause:3.10", "volumeMounts": [{"name": "own", "mountPath": "/big-conf"}]}],
                                 "volumes": [{"name": "own", "emptyDir": {}}]}}),
        },
    ]
}

/// Every captured fixture Pod, as a client would create it (what the API server set on
/// it at capture time taken away).
fn fixture_shapes() -> Vec<Shape> {
    let dir = manifest_path("tests/fixtures/admission");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/admission")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().contains("_request"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            let review: Value = serde_json::from_slice(&std::fs::read(&path).expect("a fixture")).expect("JSON");
            let mut pod = review["request"]["object"].clone();
            let metadata = pod["metadata"].as_object_mut().expect("a Pod's metadata");
            for key in ["uid", "namespace", "creationTimestamp", "resourceVersion", "managedFields", "ownerReferences"] {
                metadata.remove(key);
            }
            pod.as_object_mut().expect("a Pod").remove("status");
            strip_service_account_volume(&mut pod);
            let name: &'static str = Box::leak(format!("fixture {stem}").into_boxed_str());
            Shape {
                name,
                place: if stem == "namespace-labeled" { Place::Labelled } else { Place::Plain },
                dry_run: review["request"]["dryRun"] == json!(true),
                pod,
            }
        })
        .collect()
}

/// The API server adds the ServiceAccount token volume itself: the one captured goes.
fn strip_service_account_volume(pod: &mut Value) {
    let is_token = |name: &Value| name.as_str().is_some_and(|n| n.starts_with("kube-api-access-"));
    if let Some(volumes) = pod["spec"]["volumes"].as_array_mut() {
        volumes.retain(|v| !is_token(&v["name"]));
    }
    for list in ["containers", "initContainers"] {
        for container in pod["spec"][list].as_array_mut().into_iter().flatten() {
            if let Some(mounts) = container["volumeMounts"].as_array_mut() {
                mounts.retain(|m| !is_token(&m["name"]));
            }
        }
    }
    if let Some(spec) = pod["spec"].as_object_mut() {
        spec.remove("nodeName");
    }
}

/// A Deployment's Pods, a Job's (`Never`) and a Job made from a CronJob's template
/// (`OnFailure`, as `kubectl create job --from=cronjob/...` makes it).
fn workloads() -> Vec<(&'static str, Value)> {
    let template = |restart: &str| {
        json!({
            "metadata": {"labels": {"workload": "w"}, "annotations": {shapes::INJECT: "true", "sidecar.samplecrd.k8s.io/override.log-level": "debug"}},
            "spec": {"restartPolicy": restart, "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
        })
    };
    vec![
        (
            "Deployment",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                   "spec": {"replicas": 2, "selector": {"matchLabels": {"workload": "w"}}, "template": template("Always")}}),
        ),
        (
            "Job",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch"},
                   "spec": {"backoffLimit": 0, "template": template("Never")}}),
        ),
        (
            "Job",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "from-cronjob", "annotations": {"cronjob.kubernetes.io/instantiate": "manual"}},
                   "spec": {"backoffLimit": 2, "template": template("OnFailure")}}),
        ),
    ]
}

/// Creates the workload on `side` and returns its Pods' outcomes, in a stable order.
async fn workload_pods(side: &Side, kind: &str, workload: &Value) -> Vec<Outcome> {
    let ns = side.ns(Place::Plain);
    let name = workload["metadata"]["name"].as_str().unwrap_or_default();
    let expected = workload["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
    let created = match kind {
        "Deployment" => {
            let api: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
            let object: Deployment = serde_json::from_value(workload.clone()).expect("a Deployment");
            api.create(&PostParams::default(), &object).await.map(|_| ())
        }
        _ => {
            let api: Api<Job> = Api::namespaced(ns.client.clone(), &ns.name);
            let object: Job = serde_json::from_value(workload.clone()).expect("a Job");
            api.create(&PostParams::default(), &object).await.map(|_| ())
        }
    };
    created
        .map_err(|e| api_error(&e))
        .unwrap_or_else(|e| panic!("expected to create {kind} {name} on the {} side, found: {e}", side.path));
    let selector = match kind {
        "Deployment" => String::from("workload=w,pod-template-hash"),
        _ => format!("job-name={name}"),
    };
    let pods = wait_for(&format!("{expected} Pods of {kind} {name} ({})", side.path), PATIENCE, async || {
        let pods = ns.pods.list(&ListParams::default().labels(&selector)).await.map_err(|e| api_error(&e))?.items;
        if pods.len() >= expected { Ok(pods) } else { Err(format!("{} Pods", pods.len())) }
    })
    .await;
    let mut outcomes: BTreeMap<String, Outcome> = BTreeMap::new();
    for pod in pods.iter().take(expected) {
        let normalised = normalised_pod(side, &serde_json::to_value(pod).expect("JSON"));
        outcomes.insert(normalised.to_string(), Outcome::Stored(normalised));
    }
    let mut list: Vec<Outcome> = outcomes.into_values().collect();
    // Two identical Pods of one Deployment fold into one entry: say each is there.
    while list.len() < expected {
        list.push(list.last().cloned().expect("a Pod"));
    }
    list
}
