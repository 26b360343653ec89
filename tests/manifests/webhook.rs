//! The MutatingWebhookConfiguration: its properties, its namespace selectors, and its CEL
//! `matchConditions` evaluated against the injector's own policy (with the evaluator
//! `envoy-injector check` uses). The ValidatingWebhookConfiguration: the template
//! ConfigMap only, `Ignore`, same Service as the mutating one.

use std::collections::BTreeMap;

use envoy_injector::check::cel;
use envoy_injector::inject::PodView;
use envoy_injector::inject::join::joined;
use envoy_injector::inject::join::network_name;
use envoy_injector::inject::policy::{AnnotationOptIn, NamespaceOptIn, decide, opted_in};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use serde_json::{Value, json};

use crate::support::*;

fn webhooks(docs: &[Doc]) -> Vec<MutatingWebhook> {
    let config: MutatingWebhookConfiguration = one(docs, "MutatingWebhookConfiguration").typed();
    assert_eq!(config.metadata.name.as_deref(), Some(NAME));
    config.webhooks.unwrap_or_default()
}

pub fn webhook_configuration_has_the_designed_properties() -> Outcome {
    let docs = rendered()?;
    let hooks = webhooks(docs);
    let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "namespace.sidecar.samplecrd.k8s.io",
            "label.sidecar.samplecrd.k8s.io",
            "pod.sidecar.samplecrd.k8s.io"
        ],
        "three webhook entries"
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
        assert_eq!(
            hook.match_conditions.as_deref().unwrap_or_default().len(),
            1,
            "{name}: one matchCondition (the API server evaluates every one of an entry)"
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
    Ok(())
}

pub fn namespace_selectors_send_no_pod_twice_and_never_the_injectors_own() -> Outcome {
    let docs = rendered()?;
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
            vec!["label.sidecar.samplecrd.k8s.io", "pod.sidecar.samplecrd.k8s.io"],
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
    Ok(())
}

/// Each matchCondition of `hook` for `pod`: its name and value. Panics on an evaluation
/// error (the API server would then apply the failurePolicy to a Pod that may not have
/// opted in).
fn match_conditions(hook: &MutatingWebhook, pod: &Value) -> Vec<(String, bool)> {
    let conditions = hook.match_conditions.clone().unwrap_or_default();
    cel::evaluate(&conditions, pod, &cel::pod_create_request("apps", "p"))
        .into_iter()
        .map(|result| {
            let value = result.value.unwrap_or_else(|err| {
                panic!(
                    "{}: matchCondition {} does not evaluate to a boolean for Pod {pod}: {err}",
                    hook.name, result.name
                )
            });
            (result.name, value)
        })
        .collect()
}

/// The entries the API server calls for `pod` in a namespace with `namespace_labels`: the
/// selectors select it and the one matchCondition holds.
fn called<'h>(hooks: &'h [MutatingWebhook], namespace_labels: &BTreeMap<String, String>, pod: &Value) -> Vec<&'h str> {
    let pod_labels: BTreeMap<String, String> = pod["metadata"]["labels"]
        .as_object()
        .map(|l| {
            l.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    hooks
        .iter()
        .filter(|hook| {
            selects(
                hook.namespace_selector.as_ref().expect("checked elsewhere"),
                namespace_labels,
            ) && hook
                .object_selector
                .as_ref()
                .is_none_or(|selector| selects(selector, &pod_labels))
                && match_conditions(hook, pod).iter().all(|(_, value)| *value)
        })
        .map(|hook| hook.name.as_str())
        .collect()
}

pub fn match_conditions_select_exactly_the_pods_the_injector_injects() -> Outcome {
    let docs = rendered()?;
    let hooks = webhooks(docs);
    let annotation_entry = "pod.sidecar.samplecrd.k8s.io";
    // `serve --annotation-opt-in=false` goes with the configuration without that entry.
    let without_annotations: Vec<MutatingWebhook> =
        hooks.iter().filter(|h| h.name != annotation_entry).cloned().collect();

    let annotation_cases: Vec<Option<Value>> = vec![
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
        // Injected by a policy and naming a Network: sent until it is joined.
        Some(json!({ INJECT: "true", STATUS: "{}", NETWORK: "blue" })),
        Some(json!({ INJECT: "true", STATUS: "{}", NETWORK: " blue " })),
        Some(json!({ INJECT: "true", STATUS: "{}", NETWORK: "  " })),
        Some(json!({ INJECT: "false", STATUS: "{}", NETWORK: "blue" })),
        Some(json!({ STATUS: "{}", NETWORK: "blue" })),
        Some(json!({ INJECT: "true", NETWORK: "blue" })),
    ];
    let label_cases = [
        None,
        Some(json!({ NETWORK: "blue" })),
        Some(json!({ NETWORK: "red" })),
        Some(json!({ INJECT: "true" })),
        Some(json!({ INJECT: "true", NETWORK: "blue" })),
        Some(json!({ INJECT: "false" })),
        // What no selector `In [true]` matches: no opt-in, for the webhook as for the API server.
        Some(json!({ INJECT: "True" })),
    ];
    let namespaces = [
        (
            NamespaceOptIn::Labeled,
            BTreeMap::from([
                ("kubernetes.io/metadata.name".to_string(), "apps".to_string()),
                (INJECT.to_string(), "enabled".to_string()),
            ]),
        ),
        (
            NamespaceOptIn::NotLabeled,
            BTreeMap::from([("kubernetes.io/metadata.name".to_string(), "apps".to_string())]),
        ),
    ];
    for (annotations, labels) in annotation_cases
        .iter()
        .flat_map(|a| label_cases.iter().map(move |l| (a.clone(), l.clone())))
    {
        let mut metadata = json!({ "name": "p", "namespace": "apps" });
        if let Some(a) = &annotations {
            metadata["annotations"] = a.clone();
        }
        if let Some(l) = &labels {
            metadata["labels"] = l.clone();
        }
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": { "containers": [{ "name": "app", "image": "app" }] },
        });
        let view = PodView::read(&pod);
        for (namespace, namespace_labels) in &namespaces {
            for (rule, hooks) in [
                (AnnotationOptIn::On, &hooks),
                (AnnotationOptIn::Off, &without_annotations),
            ] {
                // Its work: an injection, or the join of a Pod a policy injected.
                let annotated = view.annotations_for_policy();
                let joins = annotated.is_some_and(|a| a.flag(STATUS).is_some())
                    && opted_in(view.meta(), *namespace, rule).is_ok()
                    && network_name(annotated).is_some_and(|name| !joined(&view, name));
                let injects = decide(view.meta(), *namespace, rule).is_ok() || joins;
                let called = called(hooks, namespace_labels, &pod);
                assert_eq!(
                    called.len(),
                    usize::from(injects),
                    "the API server would call {called:?} for a Pod with annotations {annotations:?} and labels {labels:?} \
                     in a namespace {namespace:?} (annotation opt-in {rule:?}), but the injector's decision {} it",
                    if injects { "injects" } else { "does not inject" }
                );
            }
        }
    }
    Ok(())
}

pub fn validating_configuration_checks_only_the_template_configmap() -> Outcome {
    let docs = rendered()?;
    let config: ValidatingWebhookConfiguration = one(docs, "ValidatingWebhookConfiguration").typed();
    assert_eq!(config.metadata.name.as_deref(), Some(NAME));
    let hooks = config.webhooks.unwrap_or_default();
    assert_eq!(hooks.len(), 1, "one webhook entry");
    let hook = &hooks[0];
    assert_eq!(hook.name, "templates.sidecar.samplecrd.k8s.io");
    assert_eq!(
        hook.failure_policy.as_deref(),
        Some("Ignore"),
        "the reload path is the safety net"
    );
    assert_eq!(hook.side_effects, "None", "dry-run safe");
    assert_eq!(hook.admission_review_versions, ["v1"]);
    assert_eq!(hook.timeout_seconds, Some(5));
    let client = &hook.client_config;
    assert!(
        client.ca_bundle.is_none(),
        "caBundle is written by the running injector"
    );
    let service = client.service.as_ref().expect("clientConfig.service");
    // Same Service (and so the same certificate) as the mutating webhook, path /validate.
    let mutating = webhooks(docs)[0].client_config.service.clone().expect("service");
    assert_eq!(
        (service.namespace.as_str(), service.name.as_str(), service.port),
        (mutating.namespace.as_str(), mutating.name.as_str(), mutating.port),
        "same Service as the mutating webhook"
    );
    assert_eq!(service.path.as_deref(), Some("/validate"));
    let rules = hook.rules.clone().unwrap_or_default();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        (
            rules[0].operations.clone().unwrap_or_default(),
            rules[0].api_groups.clone().unwrap_or_default(),
            rules[0].resources.clone().unwrap_or_default(),
        ),
        (
            vec!["CREATE".to_string(), "UPDATE".to_string()],
            vec![String::new()],
            vec!["configmaps".to_string()]
        ),
        "ConfigMap CREATE and UPDATE"
    );

    // Only the injector's namespace, and there only the ConfigMap named envoy-injector.
    let selector = hook.namespace_selector.as_ref().expect("namespaceSelector");
    let labels = |name: &str| BTreeMap::from([("kubernetes.io/metadata.name".to_string(), name.to_string())]);
    assert!(selects(selector, &labels(NAMESPACE)));
    assert!(!selects(selector, &labels("apps")));
    let conditions = hook.match_conditions.clone().unwrap_or_default();
    for (name, sent) in [(NAME, true), ("envoy", false), ("kube-root-ca.crt", false)] {
        let configmap =
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name, "namespace": NAMESPACE } });
        let results = cel::evaluate(&conditions, &configmap, &json!({ "operation": "UPDATE" }));
        let called = results.iter().all(|r| r.value == Ok(true));
        assert_eq!(called, sent, "ConfigMap {name}: {results:?}");
    }
    Ok(())
}
