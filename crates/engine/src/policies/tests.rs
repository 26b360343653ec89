use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{MatchResources, MutatingAdmissionPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;
use crate::inject::{AnnotationOptIn, INJECT_LABEL, InjectError, REFUSED_LABEL};
use crate::template::TemplateSet;

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

fn mutating(compiled: &Compiled, name: &str) -> MutatingAdmissionPolicySpec {
    compiled
        .objects
        .iter()
        .find_map(|o| match o {
            PolicyObject::Mutating(p) if o.name() == name => p.spec.clone(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no MutatingAdmissionPolicy {name}"))
}

fn binding_resources(compiled: &Compiled, name: &str) -> MatchResources {
    compiled
        .objects
        .iter()
        .find_map(|o| match o {
            PolicyObject::MutatingBinding(b) if o.name() == name => b.spec.clone()?.match_resources,
            PolicyObject::ValidatingBinding(b) if o.name() == name => b.spec.match_resources.clone(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no binding {name}"))
}

/// `key operator [values]` of each requirement of a selector.
fn requirements(selector: Option<LabelSelector>) -> Vec<String> {
    selector
        .and_then(|s| s.match_expressions)
        .unwrap_or_default()
        .iter()
        .map(|e| format!("{} {} {:?}", e.key, e.operator, e.values.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn one_mutating_policy_holds_every_template_and_its_bindings_select_by_labels() {
    let compiled = compile(&set(&[("config", TEMPLATE), ("canary", TEMPLATE)]), &Options::default());
    assert!(compiled.not_compiled.is_empty());
    let layout: Vec<(&str, &str)> = compiled.objects.iter().map(|o| (o.kind(), o.name())).collect();
    // The denial first, then the policies, then their bindings: a binding never names a
    // policy not there yet, and a Pod is marked only once the mark is denied.
    assert_eq!(
        layout,
        [
            (VALIDATING, names::REFUSED),
            (VALIDATING_BINDING, names::REFUSED),
            (MUTATING, names::INJECT),
            (MUTATING, names::INJECT_ANNOTATED),
            (MUTATING_BINDING, names::BY_NAMESPACE),
            (MUTATING_BINDING, names::BY_LABEL),
            (MUTATING_BINDING, names::BY_ANNOTATION),
        ]
    );
    let spec = mutating(&compiled, names::INJECT);
    // One mutation: the API server evaluates each one a policy has, reading the whole Pod.
    let mutations = spec.mutations.as_ref().unwrap();
    assert_eq!(mutations.len(), 1);
    let expression = mutations[0].json_patch.as_ref().unwrap().expression.as_ref().unwrap();
    assert!(
        expression.contains("variables.choice == \"canary\" ? (variables.chosen_inject ? variables.t0_additions")
            && expression
                .contains("variables.choice == \"config\" ? (variables.chosen_inject ? variables.t1_additions"),
        "{expression}"
    );
    // Each question is one variable, for the template chosen; each template's additions
    // are its own, named by its place, so they cannot collide.
    let variables = spec.variables.unwrap();
    let names: Vec<&str> = variables.iter().map(|v| v.name.as_str()).collect();
    let distinct: std::collections::BTreeSet<&&str> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "{names:?}");
    assert!(
        names.contains(&"t0_additions") && names.contains(&"t1_additions"),
        "{names:?}"
    );
    let inject = variables
        .iter()
        .find(|v| v.name == "chosen_inject")
        .expect("chosen_inject");
    assert!(
        inject.expression.starts_with("variables.choice == \"canary\" ? (") && inject.expression.contains("\"config\""),
        "expected chosen_inject to switch on the template chosen, found {}",
        inject.expression
    );

    let namespace = binding_resources(&compiled, names::BY_NAMESPACE);
    assert_eq!(
        requirements(namespace.namespace_selector),
        [
            "sidecar.samplecrd.k8s.io/inject In [\"enabled\"]",
            "kubernetes.io/metadata.name NotIn [\"kube-system\", \"envoy-injector\"]"
        ]
    );
    assert!(namespace.object_selector.is_none());
    let label = binding_resources(&compiled, names::BY_LABEL);
    assert_eq!(
        requirements(label.namespace_selector)[0],
        "sidecar.samplecrd.k8s.io/inject NotIn [\"enabled\", \"disabled\"]"
    );
    assert_eq!(
        requirements(label.object_selector),
        [format!("{INJECT_LABEL} In [\"true\"]")]
    );
    let annotated = binding_resources(&compiled, names::BY_ANNOTATION);
    assert_eq!(
        requirements(annotated.object_selector),
        [format!("{INJECT_LABEL} NotIn [\"true\"]")]
    );
    let refused = binding_resources(&compiled, names::REFUSED);
    assert_eq!(
        requirements(refused.object_selector),
        [format!("{REFUSED_LABEL} Exists []")]
    );
}

#[test]
fn without_annotation_opt_in_nothing_looks_at_a_pod_no_selector_picks() {
    let options = Options {
        annotation_opt_in: AnnotationOptIn::Off,
        ..Options::default()
    };
    let compiled = compile(&set(&[("config", TEMPLATE)]), &options);
    let names: Vec<&str> = compiled.objects.iter().map(|o| o.name()).collect();
    assert!(!names.contains(&names::INJECT_ANNOTATED), "{names:?}");
    // Every binding selects by labels: a Pod without them costs no CEL.
    for object in &compiled.objects {
        let resources = match object {
            PolicyObject::MutatingBinding(b) => b.spec.clone().unwrap().match_resources.unwrap(),
            PolicyObject::ValidatingBinding(b) => b.spec.match_resources.clone().unwrap(),
            _ => continue,
        };
        let selects_by_label = requirements(resources.namespace_selector)
            .iter()
            .any(|r| r.contains(" In ["))
            || requirements(resources.object_selector)
                .iter()
                .any(|r| r.contains(" In [") || r.contains(" Exists"));
        assert!(selects_by_label, "{} selects Pods no label picks", object.name());
    }
    // Nor does the opt-in, read in CEL, count an annotation.
    let spec = mutating(&compiled, names::INJECT);
    let opted_in = spec
        .variables
        .unwrap()
        .into_iter()
        .find(|v| v.name == "optedIn")
        .unwrap();
    assert!(
        !opted_in.expression.contains("initializer.kubernetes.io/envoy"),
        "{}",
        opted_in.expression
    );
}

#[test]
fn each_mutating_policy_has_one_condition_and_the_annotated_one_reads_the_opt_in_first() {
    let compiled = compile(&set(&[("config", TEMPLATE)]), &Options::default());
    for name in [names::INJECT, names::INJECT_ANNOTATED] {
        let spec = mutating(&compiled, name);
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
        let conditions = spec.match_conditions.unwrap();
        assert_eq!(conditions.len(), 1, "{name}: the API server evaluates every condition");
        if name == names::INJECT_ANNOTATED {
            assert!(
                conditions[0]
                    .expression
                    .starts_with("has(object.metadata.annotations) && ((\"sidecar.samplecrd.k8s.io/inject\" in"),
                "{}",
                conditions[0].expression
            );
        }
        let mutations = spec.mutations.unwrap();
        assert_eq!(mutations.len(), 1);
        assert_eq!(mutations[0].patch_type, "JSONPatch");
        let expression = mutations[0].json_patch.as_ref().unwrap().expression.as_ref().unwrap();
        assert!(expression.starts_with("!variables.optedIn ? [] :"), "{expression}");
        // Not injected: the refusal's mark, nothing when there is no refusal.
        assert!(
            expression.ends_with(&format!(":\n{}", objects::refusal_mark())),
            "{expression}"
        );
    }
}

#[test]
fn bindings_leave_kube_system_and_the_injector_alone() {
    let options = Options {
        injector_namespace: String::from("mesh-system"),
        ..Options::default()
    };
    let compiled = compile(&set(&[("config", TEMPLATE)]), &options);
    for object in &compiled.objects {
        let resources = match object {
            PolicyObject::MutatingBinding(b) => b.spec.as_ref().unwrap().match_resources.clone(),
            PolicyObject::ValidatingBinding(b) => b.spec.match_resources.clone(),
            _ => continue,
        };
        let expressions = requirements(resources.unwrap().namespace_selector);
        assert!(
            expressions.contains(&String::from(
                "kubernetes.io/metadata.name NotIn [\"kube-system\", \"mesh-system\"]"
            )),
            "{}: {expressions:?}",
            object.name()
        );
    }
}

#[test]
fn the_validating_policy_denies_a_marked_pod_with_the_words_of_its_mark() {
    let compiled = compile(&set(&[("config", TEMPLATE)]), &Options::default());
    let PolicyObject::Validating(policy) = &compiled.objects[0] else {
        unreachable!()
    };
    let spec = policy.spec.clone().unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let validations = spec.validations.unwrap();
    assert_eq!(validations.len(), 1);
    assert_eq!(validations[0].reason.as_deref(), Some("Forbidden"));
    assert_eq!(
        validations[0].message_expression.as_deref(),
        Some("string(object.metadata.annotations[\"sidecar.samplecrd.k8s.io/refused\"])")
    );
    // The mark's words for a template the ConfigMap does not have: the webhook's sentence
    // around the Pod's choice.
    let refusal = mutating(&compiled, names::INJECT)
        .variables
        .unwrap()
        .into_iter()
        .find(|v| v.name == "refusal")
        .unwrap();
    let words = InjectError::UnknownTemplate {
        name: String::from("X"),
        available: String::from("`config`"),
    }
    .to_string();
    let (before, after) = words.split_once('X').unwrap();
    assert!(
        refusal.expression.contains(&format!("{before:?}")),
        "{}",
        refusal.expression
    );
    assert!(
        refusal.expression.contains(&format!("{after:?}")),
        "{}",
        refusal.expression
    );
    // A Pod that names none, where the set has no default: the webhook's own sentence.
    let no_default = InjectError::NoDefaultTemplate {
        available: String::from("`config`"),
    }
    .to_string();
    assert!(
        refusal.expression.contains(&format!("{no_default:?}")),
        "{}",
        refusal.expression
    );
}

#[test]
fn the_policies_name_the_templates_they_hold_and_their_revisions() {
    let templates = set(&[("config", TEMPLATE), ("canary", TEMPLATE)]);
    let compiled = compile(&templates, &Options::default());
    for object in &compiled.objects {
        let meta = object.metadata();
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels.get(MANAGED_BY_LABEL).map(String::as_str), Some("envoy-injector"));
        if object.kind() == MUTATING {
            let held: BTreeMap<String, String> =
                serde_json::from_str(&meta.annotations.as_ref().unwrap()[TEMPLATES_ANNOTATION]).unwrap();
            let revision = |name: &str| templates.get(name).unwrap().revision.clone();
            assert_eq!(
                held,
                BTreeMap::from([
                    (String::from("canary"), revision("canary")),
                    (String::from("config"), revision("config"))
                ])
            );
        }
    }
}

#[test]
fn any_configmap_key_is_a_template_without_naming_an_object() {
    let odd = ["Canary", "canary_", "CANARY", "a..b", "x-", "k".repeat(300).leak()];
    let data: Vec<(&str, &str)> = odd.iter().map(|k| (*k, TEMPLATE)).collect();
    let compiled = compile(&set(&data), &Options::default());
    assert!(compiled.not_compiled.is_empty(), "{:?}", compiled.not_compiled);
    assert_eq!(compiled.objects.len(), 7);
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
    let spec = mutating(&compiled, names::INJECT);
    let mutation = spec.mutations.unwrap()[0]
        .json_patch
        .clone()
        .unwrap()
        .expression
        .unwrap();
    assert!(!mutation.contains("\"huge\""), "no patch of `huge`");
    // The Pods naming it are the webhook's, so it is still a template that exists.
    let refusal = spec
        .variables
        .unwrap()
        .into_iter()
        .find(|v| v.name == "refusal")
        .unwrap();
    assert!(refusal.expression.contains("\"huge\""), "{}", refusal.expression);
}

#[test]
fn templates_beyond_what_one_policy_holds_are_left_to_the_webhook() {
    let big = format!(
        "containers:\n- name: envoy\n  image: envoy\n  args: [\"{}\"]\n",
        "x".repeat(MAX_EXPRESSION_BYTES / 8)
    );
    let data: Vec<(String, &str)> = (0..20).map(|i| (format!("t{i:02}"), big.as_str())).collect();
    let data: Vec<(&str, &str)> = data.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let compiled = compile(&set(&data), &Options::default());
    assert!(!compiled.not_compiled.is_empty());
    assert!(
        compiled.not_compiled[0]
            .reason
            .contains("policy holding every template"),
        "{:?}",
        compiled.not_compiled
    );
    let spec = mutating(&compiled, names::INJECT);
    let size: usize = spec
        .variables
        .unwrap()
        .iter()
        .map(|v| v.expression.len())
        .sum::<usize>()
        + spec
            .mutations
            .unwrap()
            .iter()
            .map(|m| m.json_patch.as_ref().unwrap().expression.as_ref().unwrap().len())
            .sum::<usize>();
    assert!(size <= MAX_POLICY_BYTES + 64 * 1024, "{size}");
}

/// The rules every template writes alike are held once in the policy, and count once
/// against what it holds: small templates fill it to within one template.
#[test]
fn the_rules_every_template_writes_alike_count_once_against_the_policy_s_size() {
    let small = |i: usize| {
        format!(
            "containers:\n- name: envoy\n  image: envoy:v{i}\n  args: [\"{}\"]\n",
            "y".repeat(2000)
        )
    };
    let texts: Vec<(String, String)> = (0..400).map(|i| (format!("t{i:03}"), small(i))).collect();
    let data: Vec<(&str, &str)> = texts.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let compiled = compile(&set(&data), &Options::default());
    assert!(!compiled.not_compiled.is_empty(), "400 templates fill the policy");
    let held = data.len() - compiled.not_compiled.len();
    // One template's additions and the rules, as one template's policy holds them.
    let one = mutating(&compile(&set(&data[..1]), &Options::default()), names::INJECT);
    let variables = one.variables.unwrap();
    let length = |name: &str| {
        variables
            .iter()
            .find(|v| v.name == name)
            .map_or(0, |v| v.expression.len())
    };
    let rules: usize = super::resources::RULES
        .iter()
        .map(|r| length(&format!("chosen_{r}")))
        .sum();
    let additions = length("t0_additions");
    assert!(rules > 0 && additions > 0, "{rules} {additions}");
    // Counted for each template, the rules would leave room for at most this many.
    let per_template = MAX_POLICY_BYTES / (additions + rules);
    assert!(
        held > per_template,
        "expected more than {per_template} templates held ({additions} bytes of additions each, {rules} of rules once), found {held}"
    );
}

#[test]
fn the_status_annotation_is_written_member_by_member_as_the_webhook_writes_it() {
    let templates = set(&[("config", TEMPLATE)]);
    let template = templates.get("config").unwrap();
    let compiled = compile(&templates, &Options::default());
    let expression = mutating(&compiled, names::INJECT)
        .variables
        .unwrap()
        .into_iter()
        .find(|v| v.name == "t0_additions")
        .unwrap()
        .expression;
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
        pod_resources: None,
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
            .unwrap_or_else(|| panic!("{member} after byte {from} of the additions"));
        from += at;
    }
}

/// `fromPod`: the patch replaces APP_PORT's value with the app's one TCP port, unless the
/// Pod asks the override on it (the e2e tier `policies` compares the stored Pods).
#[test]
fn the_default_template_s_app_port_is_taken_from_the_pod_in_the_patch() {
    let compiled = compile(&TemplateSet::embedded(), &Options::default());
    let spec = mutating(&compiled, names::INJECT);
    let text = serde_json::to_string(&spec).unwrap();
    assert!(text.contains(r#"\"/env/0/value\""#), "no replace of APP_PORT's value");
    assert!(
        text.contains("c.ports.filter(p, !has(p.protocol) || p.protocol == \\\"TCP\\\")"),
        "{text}"
    );
    assert!(
        text.contains(r#"!(\"sidecar.samplecrd.k8s.io/override.app-port\" in variables.annotations)"#),
        "the override wins"
    );
}

#[test]
fn the_policy_holds_only_variables_something_reads() {
    // The API server prepares every variable for each Pod it evaluates the policy for.
    let reads = |spec: &MutatingAdmissionPolicySpec, name: &str| {
        let mut texts: Vec<&str> = spec.variables.iter().flatten().map(|v| v.expression.as_str()).collect();
        texts.extend(
            spec.mutations
                .iter()
                .flatten()
                .filter_map(|m| m.json_patch.as_ref()?.expression.as_deref()),
        );
        texts.iter().any(|t| super::variables::names_read(t).contains(name))
    };
    let names = |spec: &MutatingAdmissionPolicySpec| -> Vec<String> {
        spec.variables.iter().flatten().map(|v| v.name.clone()).collect()
    };
    let full = mutating(
        &compile(&set(&[("config", TEMPLATE)]), &Options::default()),
        names::INJECT,
    );
    let bare = mutating(
        &compile(
            &set(&[("config", "containers: [{name: envoy, image: envoy:v1}]")]),
            &Options::default(),
        ),
        names::INJECT,
    );
    for spec in [&full, &bare] {
        let unread: Vec<String> = names(spec).into_iter().filter(|n| !reads(spec, n)).collect();
        assert!(
            unread.is_empty(),
            "expected every variable to be read by an expression, found unread: {unread:?}"
        );
    }
    // A template with volumes, mounts and pull secrets reads the Pod's volumes and what
    // it adds of its own; one without them has none of those variables.
    for wanted in [
        "podVolumeNames",
        "podMountPaths",
        "chosen_addedVolumes",
        "chosen_addedSecrets",
        "chosen_appMounts",
    ] {
        assert!(
            names(&full).iter().any(|n| n == wanted),
            "expected variable {wanted} in {:?}",
            names(&full)
        );
        assert!(
            !names(&bare).iter().any(|n| n == wanted),
            "expected no variable {wanted} in {:?}",
            names(&bare)
        );
    }
}

#[test]
fn more_templates_add_only_their_additions_to_the_variables() {
    // A Pod that did not opt in pays for every variable of the policy its condition is
    // evaluated in: ten templates must not make that ten times as many.
    let count = |n: usize| {
        let templates: Vec<(String, &str)> = (0..n)
            .map(|i| {
                (
                    if i == 0 {
                        String::from("config")
                    } else {
                        format!("t{i}")
                    },
                    TEMPLATE,
                )
            })
            .collect();
        let borrowed: Vec<(&str, &str)> = templates.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let compiled = compile(&set(&borrowed), &Options::default());
        assert!(compiled.not_compiled.is_empty(), "{:?}", compiled.not_compiled);
        mutating(&compiled, names::INJECT_ANNOTATED)
            .variables
            .unwrap_or_default()
            .len()
    };
    let (one, ten) = (count(1), count(10));
    assert_eq!(
        ten,
        one + 9,
        "expected ten templates to add nine additions to the {one} variables of one, found {ten}"
    );
}

/// A Pod on the node's network is skipped by the policies' one match condition, before any
/// variable: always where no template allows it, else unless it names one that does.
#[test]
fn the_match_conditions_skip_host_network_pods_unless_they_name_a_template_that_allows_them() {
    let conditions = |compiled: &Compiled| -> Vec<String> {
        [names::INJECT, names::INJECT_ANNOTATED]
            .into_iter()
            .map(|name| {
                let spec = mutating(compiled, name);
                let conditions = spec.match_conditions.unwrap_or_default();
                assert_eq!(
                    conditions.len(),
                    1,
                    "{name}: expected one match condition, found {conditions:?}"
                );
                conditions[0].expression.clone()
            })
            .collect()
    };
    let none = compile(&set(&[("config", TEMPLATE)]), &Options::default());
    for expression in conditions(&none) {
        assert!(
            expression.ends_with(" && (!has(object.spec.hostNetwork) || !object.spec.hostNetwork)"),
            "expected every host-network Pod skipped, found: {expression}"
        );
    }
    let allowing = format!("allowHostNetwork: true\n{TEMPLATE}");
    let host = compile(&set(&[("config", TEMPLATE), ("host", &allowing)]), &Options::default());
    for expression in conditions(&host) {
        assert!(
            expression.ends_with(
                " && (!has(object.spec.hostNetwork) || !object.spec.hostNetwork || (has(object.metadata.annotations) && \"sidecar.samplecrd.k8s.io/template\" in object.metadata.annotations && object.metadata.annotations[\"sidecar.samplecrd.k8s.io/template\"].trim() in [\"host\"]))"
            ),
            "expected host-network Pods naming `host` let through, found: {expression}"
        );
    }
}

/// The variable `name` of the mutating policy for selected Pods.
fn variable_of(compiled: &Compiled, name: &str) -> String {
    mutating(compiled, names::INJECT)
        .variables
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no variable {name}"))
        .expression
}

/// The rules of Pod-level resources and QoS are one expression whatever the templates:
/// each template adds only its data (the columns, its containers, their values).
#[test]
fn the_resource_rules_are_written_once_and_each_template_adds_its_data() {
    let two = compile(
        &set(&[
            ("config", TEMPLATE),
            ("canary", "containers: [{name: side, image: side:v1}]"),
        ]),
        &Options::default(),
    );
    for rule in [
        "chosen_resourcesKept",
        "chosen_resourcesDenial",
        "chosen_addedAmounts",
        "chosen_podLevelValues",
        "chosen_resourceOps",
        "chosen_resourceStatus",
    ] {
        let text = variable_of(&two, rule);
        assert!(
            !text.contains("variables.choice =="),
            "expected {rule} to be no switch, found {text}"
        );
    }
    for data in ["chosen_addedNames", "chosen_resourcesGiven"] {
        let text = variable_of(&two, data);
        assert!(
            text.starts_with("variables.choice == "),
            "expected {data} to switch, found {text}"
        );
    }
    let one = compile(&set(&[("config", TEMPLATE)]), &Options::default());
    assert_eq!(
        variable_of(&one, "chosen_podLevelValues"),
        variable_of(&two, "chosen_podLevelValues"),
        "a second template adds nothing to the rules"
    );
}

/// A value the Pod gets is the template's, or the override's the Pod asks for; cpu and
/// memory are always columns (the class asks of them), with `""` where nothing sets them.
#[test]
fn each_added_container_s_values_are_the_template_s_or_the_override_s() {
    let compiled = compile(&set(&[("config", TEMPLATE)]), &Options::default());
    assert_eq!(
        variable_of(&compiled, "chosen_resourceColumns"),
        r#"(["cpu", "memory"])"#
    );
    assert_eq!(variable_of(&compiled, "chosen_addedNames"), r#"(["init", "envoy"])"#);
    assert_eq!(variable_of(&compiled, "chosen_addedSidecars"), "([false, true])");
    let cpu = r#"("sidecar.samplecrd.k8s.io/override.cpu" in variables.annotations ? string(variables.annotations["sidecar.samplecrd.k8s.io/override.cpu"]) : "")"#;
    assert_eq!(
        variable_of(&compiled, "chosen_resourcesGiven"),
        format!(r#"([[["", ""], ["", ""]], [[{cpu}, ""], ["", ""]]])"#)
    );
    // `requests` is there in the sidecar once the override asks for it.
    assert_eq!(
        variable_of(&compiled, "chosen_addedListsThere"),
        r#"([[false, false], [("sidecar.samplecrd.k8s.io/override.cpu" in variables.annotations), false]])"#
    );
    let shipped = compile(&TemplateSet::embedded(), &Options::default());
    let given = variable_of(&shipped, "chosen_resourcesGiven");
    for value in [r#": "100m")"#, r#""1""#, r#""64Mi""#, r#": "256Mi")"#] {
        assert!(given.contains(value), "expected {value} in {given}");
    }
}

/// The refusal of a Guaranteed Pod an added container would make Burstable: the webhook's
/// words, checked after every other fault of the template.
#[test]
fn a_guaranteed_pod_an_added_container_would_make_burstable_is_refused_in_the_webhook_s_words() {
    let words = InjectError::GuaranteedLost {
        template: String::from("config"),
        container: String::from("envoy"),
        resource: "cpu",
    }
    .to_string();
    assert_eq!(
        words,
        "template `config`: container `envoy` sets no cpu request or limit, so the Guaranteed Pod would become Burstable; give it resources.limits.cpu in the template"
    );
    let compiled = compile(&set(&[("config", TEMPLATE)]), &Options::default());
    let denial = variable_of(&compiled, "chosen_resourcesDenial");
    for piece in [
        r#"("template `" + (variables.choice) + "`: container `" + (variables.chosen_addedNames[lq[0]]) + "` sets no cpu request or limit, so the Guaranteed Pod would become Burstable; give it resources.limits.cpu in the template")"#,
        "resources.limits.memory in the template",
        r#"variables.podQos == "Guaranteed" && !variables.podQosAtPodLevel"#,
    ] {
        assert!(denial.contains(piece), "expected {piece} in {denial}");
    }
    let chain = variable_of(&compiled, "chosen_denial");
    let at = chain
        .find("variables.chosen_resourcesDenial != \"\"")
        .expect("the resources' refusal");
    for earlier in ["chosen_overrideDenial", "chosen_portDenials", "chosen_volumeDenials"] {
        let before = chain.find(earlier).unwrap_or_else(|| panic!("{earlier} in {chain}"));
        assert!(
            before < at,
            "expected {earlier} before the resources' refusal in {chain}"
        );
    }
}

/// The class and Pod-level operations come after the overrides', which set the values
/// they read; the status records the Pod-level resources after the overrides it names.
#[test]
fn the_resource_operations_follow_the_overrides_and_the_status_records_the_pod_level() {
    let compiled = compile(&set(&[("config", TEMPLATE)]), &Options::default());
    let additions = variable_of(&compiled, "t0_additions");
    let overrides = additions
        .find("size(variables.overrideKeys) == 0 ? [] :")
        .expect("the overrides");
    let resources = additions
        .find("variables.chosen_resourceOps")
        .expect("the resource operations");
    assert!(overrides < resources, "{additions}");
    let status_overrides = additions.rfind(r#"\"overrides\":{"#).expect("the status's overrides");
    let status_resources = additions
        .rfind("variables.chosen_resourceStatus")
        .expect("the status's Pod-level member");
    assert!(status_overrides < status_resources, "{additions}");
    let status = variable_of(&compiled, "chosen_resourceStatus");
    assert!(status.contains(r#"\"podResources\":{"#), "{status}");
    assert!(
        status.contains("object.spec.resources.requests.map(k, k).sort()"),
        "{status}"
    );
}
