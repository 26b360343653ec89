//! The generated conditions with each entry's selectors as `manifests/webhook.yaml` ships
//! them, evaluated as the API server evaluates them (`check`'s own evaluator and selector),
//! against `inject::decide` on a table of Pods and namespaces: a Pod sent nowhere is one
//! `decide` skips, and a Pod `decide` injects, denies or joins to a Network is sent, once.

use std::collections::BTreeMap;

use envoy_injector::check::cel;
use envoy_injector::cluster::selector;
use envoy_injector::inject::join::{Lookup, NetworkView};
use envoy_injector::inject::policy::{namespace_opt_in, namespace_template};
use envoy_injector::inject::{
    AnnotationOptIn, ClusterView, Decided, Decision, NamespaceOptIn, NotChosen, PodView, Skip, decide,
};
use envoy_injector::policies::webhook::{POD_ENTRY, entries};
use envoy_injector::template::{KubeVersion, TemplateSet};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value, json};

const INJECT: &str = "sidecar.samplecrd.k8s.io/inject";
const LEGACY: &str = "initializer.kubernetes.io/envoy";
const STATUS: &str = "sidecar.samplecrd.k8s.io/status";
const NETWORK: &str = "sidecar.samplecrd.k8s.io/network";
const TEMPLATE: &str = "sidecar.samplecrd.k8s.io/template";
const NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// The template that allows Pods on the node's network.
const HOST: &str = "host";
/// The Network the cluster has, Ready; any other is missing.
const READY_NETWORK: &str = "blue";

/// One webhook entry as the API server holds it: the shipped selectors, the engine's
/// conditions compiled.
struct Hook {
    name: &'static str,
    namespace_selector: LabelSelector,
    object_selector: Option<LabelSelector>,
    conditions: cel::Compiled,
}

/// The entries, their selectors read from `manifests/webhook.yaml`.
fn hooks() -> Vec<Hook> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/webhook.yaml");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let config: MutatingWebhookConfiguration = serde_yaml_ng::from_str(&text)
        .unwrap_or_else(|e| panic!("{path}: expected a MutatingWebhookConfiguration: {e}"));
    let shipped = config.webhooks.unwrap_or_default();
    entries()
        .into_iter()
        .map(|entry| {
            let hook = shipped
                .iter()
                .find(|hook| hook.name == entry.name)
                .unwrap_or_else(|| panic!("{path}: expected webhook entry {}, found none", entry.name));
            Hook {
                name: entry.name,
                namespace_selector: hook
                    .namespace_selector
                    .clone()
                    .unwrap_or_else(|| panic!("{path}: entry {} has no namespaceSelector", entry.name)),
                object_selector: hook.object_selector.clone(),
                conditions: cel::Compiled::new(&entry.conditions),
            }
        })
        .collect()
}

fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    selector::selects(selector, labels).unwrap_or_else(|e| panic!("{e}"))
}

/// The entries the API server calls for `pod` in `namespace` (with `namespace_labels`).
fn sent<'h>(
    hooks: &'h [Hook],
    namespace: &str,
    namespace_labels: &BTreeMap<String, String>,
    pod: &Value,
) -> Vec<&'h str> {
    let pod_labels: BTreeMap<String, String> =
        serde_json::from_value(pod["metadata"]["labels"].clone()).unwrap_or_default();
    let request = cel::pod_create_request(namespace, "p");
    hooks
        .iter()
        .filter(|hook| {
            selects(&hook.namespace_selector, namespace_labels)
                && hook.object_selector.as_ref().is_none_or(|s| selects(s, &pod_labels))
                && hook.conditions.evaluate(pod, &request).into_iter().all(|result| {
                    result.value.unwrap_or_else(|err| {
                        panic!("{}: matchCondition {} for Pod {pod}: {err}", hook.name, result.name)
                    })
                })
        })
        .map(|hook| hook.name)
        .collect()
}

/// The cluster as `decide` reads it: the namespace's labels, and one Ready Network.
struct Cluster<'a> {
    labels: &'a BTreeMap<String, String>,
}

impl ClusterView for Cluster<'_> {
    fn namespace_opt_in(&self, _namespace: &str) -> NamespaceOptIn {
        namespace_opt_in(Some(self.labels))
    }

    fn network(&self, _namespace: &str, name: &str) -> Lookup {
        if name != READY_NETWORK {
            return Lookup::Missing;
        }
        Lookup::Found(NetworkView {
            cidr: String::from("10.10.0.0/24"),
            gateway: String::from("10.10.0.1"),
            ready: Ok(()),
            deleting: false,
        })
    }

    fn namespace_template(&self, _namespace: &str) -> Option<String> {
        namespace_template(Some(self.labels)).map(String::from)
    }
}

/// What `decide` (and the plan of the template it chose) makes of the Pod.
#[derive(Debug, PartialEq)]
enum Outcome {
    Skipped,
    /// Opted in, and every container of the template is in it already: no work, though
    /// it may be sent (the conditions do not read containers).
    AllThere,
    /// On the node's network and naming a template that does not allow it: no work,
    /// though it may be sent (the conditions do not read templates).
    NotAllowed,
    /// Injected, denied or joined to a Network: work the webhook must be sent.
    Work(String),
}

fn outcome(
    pod: &Value,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    rule: AnnotationOptIn,
    templates: &TemplateSet,
) -> Outcome {
    let view = PodView::read(pod);
    match decide(&view, namespace, rule, || Some(templates), &Cluster { labels }) {
        Decided::Skip(Skip::HostNetwork { template: Some(_) }) => Outcome::NotAllowed,
        Decided::Skip(_) => Outcome::Skipped,
        Decided::JoinOnly { network, join } => Outcome::Work(format!("joins {network}: {join:?}")),
        Decided::OptedIn(_, Err(NotChosen::Unknown(err))) => Outcome::Work(format!("denied: {err}")),
        Decided::OptedIn(_, Err(NotChosen::NoTemplates)) => panic!("the test's templates are loaded"),
        Decided::OptedIn(_, Ok(chosen)) => match chosen.plan(&view) {
            Ok(Decision::Inject(_)) => Outcome::Work(String::from("injected")),
            Ok(Decision::Skip(_)) => Outcome::AllThere,
            Err(refused) => Outcome::Work(format!("denied: {refused}")),
        },
    }
}

fn map(pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect()
}

fn namespace(name: &str, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    labels.insert(NAME_LABEL.to_string(), name.to_string());
    labels
}

#[test]
fn the_conditions_send_exactly_the_pods_decide_has_work_for() {
    let template = "initContainers: [{name: proxy-init, image: init}]\ncontainers: [{name: proxy, image: proxy}]\n";
    let templates = TemplateSet::from_data(
        "test",
        &BTreeMap::from([
            (String::from("config"), String::from(template)),
            // The one that allows Pods on the node's network.
            (HOST.to_string(), format!("allowHostNetwork: true\n{template}")),
        ]),
        KubeVersion::NEWEST,
    )
    .expect("the test's template parses");
    let all = hooks();
    // `serve --annotation-opt-in=false` goes with the configuration without that entry.
    let without_annotations: Vec<Hook> = hooks().into_iter().filter(|h| h.name != POD_ENTRY).collect();

    let injected = "{\"template\":\"config\"}";
    let annotation_cases: Vec<Option<Map<String, Value>>> = vec![
        None,
        Some(map(&[])),
        Some(map(&[("team", "a")])),
        Some(map(&[(INJECT, "true")])),
        Some(map(&[(INJECT, " TRUE ")])),
        Some(map(&[(INJECT, "yes")])),
        Some(map(&[(INJECT, "false")])),
        Some(map(&[(LEGACY, "true")])),
        Some(map(&[(LEGACY, "false")])),
        Some(map(&[(INJECT, "true"), (LEGACY, "false")])),
        Some(map(&[(INJECT, "false"), (LEGACY, "true")])),
        // An unknown template: denied, so sent.
        Some(map(&[(INJECT, "true"), (TEMPLATE, "nope")])),
        Some(map(&[(TEMPLATE, "nope")])),
        Some(map(&[(LEGACY, "true"), (TEMPLATE, "config")])),
        // The template that allows the node's network, named.
        Some(map(&[(INJECT, "true"), (TEMPLATE, HOST)])),
        Some(map(&[(TEMPLATE, HOST)])),
        // Already injected.
        Some(map(&[(STATUS, injected)])),
        Some(map(&[(INJECT, "true"), (STATUS, injected)])),
        // Injected by a compiled policy and naming a Network: sent until it is joined.
        Some(map(&[(INJECT, "true"), (STATUS, injected), (NETWORK, READY_NETWORK)])),
        Some(map(&[(INJECT, "true"), (STATUS, injected), (NETWORK, " blue ")])),
        Some(map(&[(INJECT, "true"), (STATUS, injected), (NETWORK, "red")])),
        Some(map(&[(INJECT, "true"), (STATUS, injected), (NETWORK, "  ")])),
        Some(map(&[(INJECT, "false"), (STATUS, injected), (NETWORK, READY_NETWORK)])),
        Some(map(&[(STATUS, injected), (NETWORK, READY_NETWORK)])),
        Some(map(&[(INJECT, "true"), (NETWORK, READY_NETWORK)])),
        Some(map(&[(INJECT, "true"), (NETWORK, "red")])),
    ];
    let label_cases: Vec<Option<Map<String, Value>>> = vec![
        None,
        Some(map(&[(INJECT, "true")])),
        Some(map(&[(INJECT, "false")])),
        // What no selector `In [true]` matches: no opt-in, for the webhook as for the API server.
        Some(map(&[(INJECT, "True")])),
        Some(map(&[(NETWORK, READY_NETWORK)])),
        Some(map(&[(INJECT, "true"), (NETWORK, READY_NETWORK)])),
    ];
    let app = json!({ "name": "app", "image": "app" });
    let proxy = json!({ "name": "proxy", "image": "proxy" });
    let proxy_init = json!({ "name": "proxy-init", "image": "init" });
    let container_cases = [
        ("the app alone", json!({ "containers": [app] })),
        // Injected only with a template it names that allows it; else left alone, and not
        // sent unless it names one (the conditions cannot tell which allow it).
        (
            "the app alone on the node's network",
            json!({ "containers": [app], "hostNetwork": true }),
        ),
        // Half-injected: denied, so sent.
        (
            "the app and the template's proxy",
            json!({ "containers": [app, proxy] }),
        ),
        (
            "the app and all the template's containers",
            json!({ "containers": [app, proxy], "initContainers": [proxy_init] }),
        ),
    ];
    let namespaces = [
        ("apps", namespace("apps", &[])),
        ("apps", namespace("apps", &[(INJECT, "enabled")])),
        // The namespace's label names a template the ConfigMap lacks: denied, so sent.
        ("apps", namespace("apps", &[(INJECT, "enabled"), (TEMPLATE, "nope")])),
        ("apps", namespace("apps", &[(TEMPLATE, "config")])),
        // Chosen by the namespace, the allowing template does not take a Pod on the node's
        // network: only one the Pod names does.
        ("apps", namespace("apps", &[(INJECT, "enabled"), (TEMPLATE, HOST)])),
    ];
    // Excluded by the installation, which `decide` does not know of: nothing is sent there.
    let excluded = [
        ("apps", namespace("apps", &[(INJECT, "disabled")])),
        ("kube-system", namespace("kube-system", &[(INJECT, "enabled")])),
        ("envoy-injector", namespace("envoy-injector", &[(INJECT, "disabled")])),
    ];

    let mut counted = BTreeMap::<&str, usize>::new();
    for annotations in &annotation_cases {
        for labels in &label_cases {
            for (containers, spec) in &container_cases {
                let mut metadata = json!({ "name": "p", "namespace": "apps" });
                if let Some(a) = annotations {
                    metadata["annotations"] = Value::Object(a.clone());
                }
                if let Some(l) = labels {
                    metadata["labels"] = Value::Object(l.clone());
                }
                let pod = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec });
                let case = || format!("a Pod with annotations {annotations:?}, labels {labels:?} and {containers}");
                for (rule, hooks) in [
                    (AnnotationOptIn::On, &all),
                    (AnnotationOptIn::Off, &without_annotations),
                ] {
                    for (name, namespace_labels) in &namespaces {
                        let sent = sent(hooks, name, namespace_labels, &pod);
                        let outcome = outcome(&pod, name, namespace_labels, rule, &templates);
                        let what = || {
                            format!(
                                "{} in namespace {namespace_labels:?} (annotation opt-in {rule:?})",
                                case()
                            )
                        };
                        assert!(
                            sent.len() <= 1,
                            "{} is sent to {sent:?}: expected one entry at most",
                            what()
                        );
                        match &outcome {
                            Outcome::Skipped => {
                                assert!(sent.is_empty(), "{} is sent to {sent:?}, but decide skips it", what())
                            }
                            Outcome::Work(work) => assert_eq!(
                                sent.len(),
                                1,
                                "{} is sent nowhere, but decide has work for it: {work}",
                                what()
                            ),
                            Outcome::AllThere | Outcome::NotAllowed => {}
                        }
                        let host = if pod["spec"]["hostNetwork"] == true {
                            "on the node's network, "
                        } else {
                            ""
                        };
                        let kind = match outcome {
                            Outcome::Skipped if !host.is_empty() => "on the node's network, skipped",
                            Outcome::Skipped => "skipped",
                            Outcome::AllThere => "all there",
                            Outcome::NotAllowed => "on the node's network, not allowed",
                            Outcome::Work(work) if work == "injected" && !host.is_empty() => {
                                "on the node's network, injected"
                            }
                            Outcome::Work(work) if work.starts_with("denied") => "denied",
                            Outcome::Work(work) if work.starts_with("joins") => "joined",
                            Outcome::Work(_) => "injected",
                        };
                        *counted.entry(kind).or_default() += 1;
                    }
                    for (name, namespace_labels) in &excluded {
                        let sent = sent(hooks, name, namespace_labels, &pod);
                        assert!(
                            sent.is_empty(),
                            "{} in the excluded namespace {namespace_labels:?} is sent to {sent:?}",
                            case()
                        );
                    }
                }
            }
        }
    }
    // The table reaches every outcome, so each direction above is asked.
    for kind in [
        "skipped",
        "all there",
        "denied",
        "joined",
        "injected",
        "on the node's network, skipped",
        "on the node's network, not allowed",
        "on the node's network, injected",
    ] {
        assert!(
            counted.get(kind).is_some_and(|n| *n > 0),
            "expected cases decided `{kind}`, found {counted:?}"
        );
    }
}
