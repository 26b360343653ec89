use std::collections::BTreeMap;

use super::*;
use crate::inject::{InjectError, REVISION_LABEL};

const TEMPLATE: &str = "containers:
- name: envoy
  image: envoy:v1
  ports: [{containerPort: 15000}]
  env: [{name: LOG_LEVEL, value: info}]
initContainers:
- name: init
  image: busybox
volumes:
- name: conf
  configMap: {name: envoy}
volumeMounts:
- {name: conf, mountPath: /etc/envoy}
imagePullSecrets:
- name: registry
overrides:
  log-level: {container: envoy, env: LOG_LEVEL, oneOf: [debug, info]}
  cpu: {container: envoy, field: resources.requests.cpu, max: \"2\"}
";

fn set(templates: &[(&str, &str)]) -> TemplateSet {
    let data: BTreeMap<String, String> = templates.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    TemplateSet::from_data("test", &data, crate::template::KubeVersion::NEWEST).expect("templates parse")
}

fn objects(compiled: &Compiled, kind: &str) -> Vec<PolicyObject> {
    compiled.objects.iter().filter(|o| o.kind() == kind).cloned().collect()
}

#[test]
fn each_template_gets_two_policies_and_their_bindings_plus_the_known_templates_check() {
    let compiled = compile(&set(&[("config", TEMPLATE), ("canary", TEMPLATE)]), &Options::default());
    assert!(compiled.not_compiled.is_empty());
    let names = |kind: &str| -> Vec<String> { objects(&compiled, kind).iter().map(|o| o.name().to_string()).collect() };
    let per_template = vec![
        String::from("envoy-injector-template-canary"),
        String::from("envoy-injector-template-config"),
    ];
    assert_eq!(names("MutatingAdmissionPolicy"), per_template);
    assert_eq!(names("MutatingAdmissionPolicyBinding"), per_template);
    let mut validating = per_template.clone();
    validating.push(String::from("envoy-injector-known-templates"));
    assert_eq!(names("ValidatingAdmissionPolicy"), validating);
    assert_eq!(names("ValidatingAdmissionPolicyBinding"), validating);
    // A policy comes before its binding, so a binding never names a policy not there yet.
    let position = |kind: &str, name: &str| {
        compiled
            .objects
            .iter()
            .position(|o| o.kind() == kind && o.name() == name)
            .unwrap()
    };
    for name in &per_template {
        assert!(position("MutatingAdmissionPolicy", name) < position("MutatingAdmissionPolicyBinding", name));
        assert!(position("ValidatingAdmissionPolicy", name) < position("ValidatingAdmissionPolicyBinding", name));
    }
}

#[test]
fn every_object_is_labelled_ours_and_names_its_template_and_revision() {
    let templates = set(&[("config", TEMPLATE)]);
    let revision = templates.get("config").unwrap().revision.clone();
    let compiled = compile(&templates, &Options::default());
    for object in &compiled.objects {
        let meta = object.metadata();
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels.get(MANAGED_BY_LABEL).map(String::as_str), Some("envoy-injector"));
        if object.name() != "envoy-injector-known-templates" {
            assert_eq!(labels.get(REVISION_LABEL), Some(&revision), "{}", object.name());
            let annotations = meta.annotations.as_ref().unwrap();
            assert_eq!(
                annotations.get(TEMPLATE_ANNOTATION_KEY).map(String::as_str),
                Some("config")
            );
        }
    }
}

#[test]
fn the_mutating_policy_fails_closed_reinvokes_and_matches_only_pod_create() {
    let compiled = compile(&set(&[("config", TEMPLATE)]), &Options::default());
    let PolicyObject::Mutating(policy) = &objects(&compiled, "MutatingAdmissionPolicy")[0] else {
        unreachable!()
    };
    let spec = policy.spec.as_ref().unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(spec.reinvocation_policy.as_deref(), Some("IfNeeded"));
    let rules = spec
        .match_constraints
        .as_ref()
        .unwrap()
        .resource_rules
        .as_ref()
        .unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].operations.as_deref(), Some(&[String::from("CREATE")][..]));
    assert_eq!(rules[0].resources.as_deref(), Some(&[String::from("pods")][..]));
    assert_eq!(rules[0].api_groups.as_deref(), Some(&[String::new()][..]));
    let conditions: Vec<&str> = spec
        .match_conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        conditions,
        ["not-yet-injected", "not-opted-out", "may-choose-this-template"]
    );
    let mutations = spec.mutations.as_ref().unwrap();
    assert_eq!(mutations.len(), 1);
    assert_eq!(mutations[0].patch_type, "JSONPatch");
    let expression = mutations[0].json_patch.as_ref().unwrap().expression.as_ref().unwrap();
    assert!(expression.starts_with("variables.inject ? ("), "{expression}");
    assert!(expression.ends_with(": []"), "{expression}");
}

#[test]
fn bindings_leave_kube_system_the_injector_and_disabled_namespaces_alone() {
    let options = Options {
        injector_namespace: String::from("mesh-system"),
    };
    let compiled = compile(&set(&[("config", TEMPLATE)]), &options);
    for object in &compiled.objects {
        let resources = match object {
            PolicyObject::MutatingBinding(b) => b.spec.as_ref().unwrap().match_resources.clone(),
            PolicyObject::ValidatingBinding(b) => b.spec.match_resources.clone(),
            _ => continue,
        };
        let selector = resources.unwrap().namespace_selector.unwrap();
        let expressions = selector.match_expressions.unwrap();
        let values = |key: &str| -> Vec<String> {
            expressions
                .iter()
                .find(|e| e.key == key && e.operator == "NotIn")
                .and_then(|e| e.values.clone())
                .unwrap_or_default()
        };
        assert_eq!(values("kubernetes.io/metadata.name"), ["kube-system", "mesh-system"]);
        assert_eq!(values("sidecar.samplecrd.k8s.io/inject"), ["disabled"]);
    }
}

#[test]
fn the_validating_policy_denies_with_the_webhook_words_and_reason_forbidden() {
    let compiled = compile(&set(&[("config", TEMPLATE)]), &Options::default());
    for object in objects(&compiled, "ValidatingAdmissionPolicy") {
        let PolicyObject::Validating(policy) = object else {
            unreachable!()
        };
        let spec = policy.spec.unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        let validations = spec.validations.unwrap();
        assert_eq!(validations.len(), 1);
        assert_eq!(validations[0].reason.as_deref(), Some("Forbidden"));
        assert!(validations[0].message_expression.is_some());
    }
    // The known-templates check writes the webhook's sentence around the Pod's choice.
    let PolicyObject::Validating(known) = objects(&compiled, "ValidatingAdmissionPolicy").pop().unwrap() else {
        unreachable!()
    };
    let message = known.spec.unwrap().validations.unwrap()[0]
        .message_expression
        .clone()
        .unwrap();
    let words = InjectError::UnknownTemplate {
        name: String::from("X"),
        available: String::from("`config`"),
    }
    .to_string();
    let (before, after) = words.split_once('X').unwrap();
    assert!(message.contains(&format!("{before:?}")), "{message}");
    assert!(message.contains(&format!("{after:?}")), "{message}");
    // A Pod that names none, where the set has no default: the webhook's own sentence.
    let no_default = InjectError::NoDefaultTemplate {
        available: String::from("`config`"),
    }
    .to_string();
    assert!(message.contains(&format!("{no_default:?}")), "{message}");
}

#[test]
fn object_names_are_valid_and_distinct_for_any_configmap_key() {
    assert_eq!(object_name("config"), "envoy-injector-template-config");
    assert_eq!(object_name("canary.v2"), "envoy-injector-template-canary.v2");
    let odd = ["Canary", "canary_", "CANARY", "a..b", "x-"];
    let names: Vec<String> = odd.iter().map(|k| object_name(k)).collect();
    for name in &names {
        assert!(name.len() <= 253, "{name}");
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'),
            "{name}"
        );
        assert!(name.bytes().last().unwrap().is_ascii_alphanumeric(), "{name}");
    }
    let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "{names:?}");
    assert!(object_name(&"k".repeat(253)).len() <= 253);
}

#[test]
fn a_template_too_large_to_compile_is_named_and_left_to_the_webhook() {
    let huge = format!(
        "containers:\n- name: envoy\n  image: envoy\n  args: [\"{}\"]\n",
        "x".repeat(MAX_EXPRESSION_BYTES)
    );
    let compiled = compile(&set(&[("config", TEMPLATE), ("huge", &huge)]), &Options::default());
    assert_eq!(compiled.not_compiled.len(), 1);
    assert_eq!(compiled.not_compiled[0].template, "huge");
    assert!(
        compiled.not_compiled[0].reason.contains("bytes of CEL"),
        "{:?}",
        compiled.not_compiled
    );
    assert!(compiled.objects.iter().all(|o| !o.name().contains("huge")));
    // The Pods naming it are the webhook's, so it is still a template that exists.
    let PolicyObject::Validating(known) = objects(&compiled, "ValidatingAdmissionPolicy").pop().unwrap() else {
        unreachable!()
    };
    let expression = &known.spec.unwrap().validations.unwrap()[0].expression;
    assert!(expression.contains("\"huge\""), "{expression}");
}

#[test]
fn the_status_annotation_is_written_member_by_member_as_the_webhook_writes_it() {
    let templates = set(&[("config", TEMPLATE)]);
    let template = templates.get("config").unwrap();
    let compiled = compile_template(template, &Options::default()).unwrap();
    let PolicyObject::Mutating(policy) = &compiled[2] else {
        unreachable!()
    };
    let expression = policy.spec.as_ref().unwrap().mutations.as_ref().unwrap()[0]
        .json_patch
        .as_ref()
        .unwrap()
        .expression
        .clone()
        .unwrap();
    let status = crate::inject::InjectionStatus {
        template: String::from("config"),
        revision: template.revision.clone(),
        containers: vec![String::from("envoy")],
        init_containers: vec![String::from("init")],
        volumes: vec![String::from("conf")],
        image_pull_secrets: vec![String::from("registry")],
        native_sidecar: false,
        volume_mounts: Vec::new(),
        overrides: BTreeMap::new(),
    };
    let json = serde_json::to_string(&status).unwrap();
    // Every member name the webhook writes is in the CEL, in the webhook's order.
    let mut from = 0;
    for member in [
        "\"template\"",
        "\"revision\"",
        "\"containers\"",
        "\"initContainers\"",
        "\"volumes\"",
        "\"imagePullSecrets\"",
        "\"nativeSidecar\"",
    ] {
        assert!(json.contains(member));
        let escaped = member.replace('"', "\\\"");
        let at = expression[from..]
            .find(&escaped)
            .unwrap_or_else(|| panic!("{member} after byte {from} of the mutation"));
        from += at;
    }
}
