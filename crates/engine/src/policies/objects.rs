//! The Kubernetes objects of the compiled policies: names, labels, match constraints and
//! bindings, around the CEL of `variables`, `plan` and `patch`.

use std::collections::BTreeMap;

use k8s_openapi::Resource;
use k8s_openapi::api::admissionregistration::v1::{
    JSONPatch, MatchCondition, MatchResources, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
    MutatingAdmissionPolicyBindingSpec, MutatingAdmissionPolicySpec, Mutation, NamedRuleWithOperations,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use serde::Serialize;

use super::cel;
use super::options::Options;
use super::plan::REFUSAL;
use super::variables;
use crate::inject::{
    AnnotationOptIn, INJECT_LABEL, NAMESPACE_LABEL, NAMESPACE_OPT_IN, REFUSED_ANNOTATION, REFUSED_LABEL,
    STATUS_ANNOTATION,
};
use crate::template::Template;

/// `app.kubernetes.io/managed-by`: every compiled object carries it with [`crate::NAME`].
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The annotation of a mutating policy naming the templates it knows (those of the
/// ConfigMap it was compiled from), with their revisions (JSON, by name).
pub const TEMPLATES_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/templates";
/// The value of [`NAMESPACE_LABEL`] that keeps every injector out of a namespace.
const NAMESPACE_DISABLED: &str = "disabled";

/// One compiled object, serialised with its `apiVersion` and `kind`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PolicyObject {
    Mutating(Box<MutatingAdmissionPolicy>),
    MutatingBinding(Box<MutatingAdmissionPolicyBinding>),
    Validating(Box<ValidatingAdmissionPolicy>),
    ValidatingBinding(Box<ValidatingAdmissionPolicyBinding>),
}

/// The kinds of the compiled objects, as their types name them.
pub const MUTATING: &str = MutatingAdmissionPolicy::KIND;
pub const MUTATING_BINDING: &str = MutatingAdmissionPolicyBinding::KIND;
pub const VALIDATING: &str = ValidatingAdmissionPolicy::KIND;
pub const VALIDATING_BINDING: &str = ValidatingAdmissionPolicyBinding::KIND;

impl PolicyObject {
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyObject::Mutating(_) => MUTATING,
            PolicyObject::MutatingBinding(_) => MUTATING_BINDING,
            PolicyObject::Validating(_) => VALIDATING,
            PolicyObject::ValidatingBinding(_) => VALIDATING_BINDING,
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            PolicyObject::Mutating(o) => &o.metadata,
            PolicyObject::MutatingBinding(o) => &o.metadata,
            PolicyObject::Validating(o) => &o.metadata,
            PolicyObject::ValidatingBinding(o) => &o.metadata,
        }
    }

    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }
}

/// The names of the objects, fixed: a template's name never becomes an object's, so no
/// two templates' objects can collide.
pub mod names {
    /// The mutating policy of Pods a selector binds (namespace label, Pod label).
    pub const INJECT: &str = "envoy-injector-inject";
    /// The mutating policy of Pods that opt in by annotation (its one condition reads it).
    pub const INJECT_ANNOTATED: &str = "envoy-injector-inject-annotated";
    /// The binding of [`INJECT`] for labelled namespaces.
    pub const BY_NAMESPACE: &str = "envoy-injector-inject-namespace";
    /// The binding of [`INJECT`] for labelled Pods elsewhere.
    pub const BY_LABEL: &str = "envoy-injector-inject-label";
    /// The binding of [`INJECT_ANNOTATED`]: the Pods of the other namespaces, unlabelled.
    pub const BY_ANNOTATION: &str = INJECT_ANNOTATED;
    /// The validating policy (and its binding) denying a Pod a mutating policy marked.
    pub const REFUSED: &str = "envoy-injector-refused";

    /// Objects of the previous layout (one pair of policies per template, and the
    /// known-templates check): removed once the present one is in place.
    pub fn previous_layout(name: &str) -> bool {
        name.starts_with("envoy-injector-template-") || name == "envoy-injector-known-templates"
    }
}

/// The templates a mutating policy knows and their revisions, as its annotation
/// [`TEMPLATES_ANNOTATION`] holds them (JSON, by name).
pub fn templates_annotation(known: &[&Template]) -> String {
    let revisions: BTreeMap<&str, &str> = known.iter().map(|t| (t.name.as_str(), t.revision.as_str())).collect();
    serde_json::to_string(&revisions).unwrap_or_default()
}

fn metadata(name: &str, templates: Option<&[&Template]>) -> ObjectMeta {
    let labels = BTreeMap::from([(MANAGED_BY_LABEL.to_string(), crate::NAME.to_string())]);
    let annotations = templates.map(|t| BTreeMap::from([(TEMPLATES_ANNOTATION.to_string(), templates_annotation(t))]));
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(labels),
        annotations,
        ..ObjectMeta::default()
    }
}

/// Pod CREATE, the only request any compiled policy looks at.
fn pod_create() -> MatchResources {
    MatchResources {
        resource_rules: Some(vec![NamedRuleWithOperations {
            api_groups: Some(vec![String::new()]),
            api_versions: Some(vec![String::from("v1")]),
            operations: Some(vec![String::from("CREATE")]),
            resources: Some(vec![String::from("pods")]),
            ..NamedRuleWithOperations::default()
        }]),
        match_policy: Some(String::from("Equivalent")),
        ..MatchResources::default()
    }
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

/// Never kube-system nor the injector's own namespace, as the webhook configuration.
fn not_excluded(options: &Options) -> LabelSelectorRequirement {
    requirement(
        "kubernetes.io/metadata.name",
        "NotIn",
        &["kube-system", &options.injector_namespace],
    )
}

/// A binding's selectors: its namespace's `NAMESPACE_LABEL` as `namespace_label`
/// requires, and the Pod's labels as `pod` requires.
fn selected(
    options: &Options,
    namespace_label: LabelSelectorRequirement,
    pod: Option<LabelSelectorRequirement>,
) -> MatchResources {
    MatchResources {
        namespace_selector: Some(LabelSelector {
            match_expressions: Some(vec![namespace_label, not_excluded(options)]),
            match_labels: None,
        }),
        object_selector: pod.map(|pod| LabelSelector {
            match_expressions: Some(vec![pod]),
            match_labels: None,
        }),
        ..MatchResources::default()
    }
}

/// A mutating policy holding every compiled template's patch and the refusal's mark.
fn mutating(
    name: &str,
    templates: &[&Template],
    condition: MatchCondition,
    variables: Vec<Variable>,
    mutations: &[String],
) -> PolicyObject {
    let mutations = mutations
        .iter()
        .map(|expression| Mutation {
            patch_type: String::from("JSONPatch"),
            json_patch: Some(JSONPatch {
                expression: Some(expression.clone()),
            }),
            apply_configuration: None,
        })
        .collect();
    PolicyObject::Mutating(Box::new(MutatingAdmissionPolicy {
        metadata: metadata(name, Some(templates)),
        spec: Some(MutatingAdmissionPolicySpec {
            failure_policy: Some(String::from("Fail")),
            reinvocation_policy: Some(String::from("IfNeeded")),
            match_constraints: Some(pod_create()),
            match_conditions: Some(vec![condition]),
            variables: Some(variables),
            mutations: Some(mutations),
            param_kind: None,
        }),
    }))
}

fn mutating_binding(name: &str, policy: &str, resources: MatchResources) -> PolicyObject {
    PolicyObject::MutatingBinding(Box::new(MutatingAdmissionPolicyBinding {
        metadata: metadata(name, None),
        spec: Some(MutatingAdmissionPolicyBindingSpec {
            policy_name: Some(policy.to_string()),
            match_resources: Some(resources),
            param_ref: None,
        }),
    }))
}

/// The mark a mutating policy puts on a Pod it refuses: the label [`REFUSED_LABEL`], which
/// selects the validating policy, and the words in the annotation [`REFUSED_ANNOTATION`];
/// nothing when it refuses nothing.
pub fn refusal_mark() -> String {
    let set = |map: &str, key: &str, value: &str| {
        let path = cel::string(&format!(
            "/metadata/{map}/{}",
            key.replace('~', "~0").replace('/', "~1")
        ));
        format!(
            "(has(object.metadata.{map}) ? [] : [JSONPatch{{op: \"add\", path: \"/metadata/{map}\", value: {{}}}}]) + [JSONPatch{{op: \"add\", path: {path}, value: {value}}}]"
        )
    };
    format!(
        "({REFUSAL} == \"\" ? [] : {} + {})",
        set("labels", REFUSED_LABEL, "\"true\""),
        set("annotations", REFUSED_ANNOTATION, REFUSAL)
    )
}

/// The validating policy denying a Pod a mutating policy marked refused, with the words
/// the mark holds, unless it was injected after all (by the webhook, with newer templates).
fn refused(options: &Options) -> [PolicyObject; 2] {
    let key = cel::string(REFUSED_ANNOTATION);
    let status = cel::string(STATUS_ANNOTATION);
    let policy = ValidatingAdmissionPolicy {
        metadata: metadata(names::REFUSED, None),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some(String::from("Fail")),
            match_constraints: Some(pod_create()),
            validations: Some(vec![Validation {
                expression: format!(
                    "!has(object.metadata.annotations) || !({key} in object.metadata.annotations) || {status} in object.metadata.annotations"
                ),
                message_expression: Some(format!("string(object.metadata.annotations[{key}])")),
                reason: Some(String::from("Forbidden")),
                message: None,
            }]),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: metadata(names::REFUSED, None),
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: names::REFUSED.to_string(),
            validation_actions: vec![String::from("Deny")],
            match_resources: Some(selected(
                options,
                requirement(NAMESPACE_LABEL, "NotIn", &[NAMESPACE_DISABLED]),
                Some(requirement(REFUSED_LABEL, "Exists", &[])),
            )),
            param_ref: None,
        },
    };
    [
        PolicyObject::Validating(Box::new(policy)),
        PolicyObject::ValidatingBinding(Box::new(binding)),
    ]
}

/// Every object, in the order to write them: the validating policy that denies what the
/// mutating ones mark, then the mutating policies, then their bindings (a binding never
/// names a policy not there yet; a Pod is marked only once its denial is in place).
pub fn layout(
    options: &Options,
    templates: &[&Template],
    variables: Vec<Variable>,
    mutations: &[String],
) -> Vec<PolicyObject> {
    let mut out = Vec::from(refused(options));
    out.push(mutating(
        names::INJECT,
        templates,
        variables::selected_condition(templates),
        variables.clone(),
        mutations,
    ));
    let annotations = options.annotation_opt_in == AnnotationOptIn::On;
    if annotations {
        out.push(mutating(
            names::INJECT_ANNOTATED,
            templates,
            variables::annotated_condition(templates),
            variables,
            mutations,
        ));
    }
    let elsewhere = || requirement(NAMESPACE_LABEL, "NotIn", &[NAMESPACE_OPT_IN, NAMESPACE_DISABLED]);
    out.push(mutating_binding(
        names::BY_NAMESPACE,
        names::INJECT,
        selected(options, requirement(NAMESPACE_LABEL, "In", &[NAMESPACE_OPT_IN]), None),
    ));
    out.push(mutating_binding(
        names::BY_LABEL,
        names::INJECT,
        selected(options, elsewhere(), Some(requirement(INJECT_LABEL, "In", &["true"]))),
    ));
    if annotations {
        out.push(mutating_binding(
            names::BY_ANNOTATION,
            names::INJECT_ANNOTATED,
            selected(
                options,
                elsewhere(),
                Some(requirement(INJECT_LABEL, "NotIn", &["true"])),
            ),
        ));
    }
    out
}
