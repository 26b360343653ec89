//! The Kubernetes objects of the compiled policies: names, labels, match constraints and
//! bindings, around the CEL of `variables`, `plan` and `patch`.

use std::collections::BTreeMap;

use k8s_openapi::Resource;
use k8s_openapi::api::admissionregistration::v1::{
    JSONPatch, MatchResources, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
    MutatingAdmissionPolicyBindingSpec, MutatingAdmissionPolicySpec, Mutation, NamedRuleWithOperations,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use serde::Serialize;

use super::plan::DENIAL;
use super::variables::{self, CHOICE, CHOSEN_BY_ANNOTATION, OPTED_IN};
use super::{Options, cel};
use crate::inject::{InjectError, NAMESPACE_LABEL, REVISION_LABEL};
use crate::template::{Template, TemplateSet};

/// `app.kubernetes.io/managed-by`: every compiled object carries it with [`crate::NAME`].
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The annotation naming the template a policy was compiled from (a ConfigMap key may
/// be no valid object name or label value).
pub const TEMPLATE_ANNOTATION_KEY: &str = "sidecar.samplecrd.k8s.io/template";
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

/// The name of a template's objects: `envoy-injector-template-NAME`, lower-cased, with
/// a hash of the key when the key is no valid name as it is.
pub fn object_name(template: &str) -> String {
    let prefix = format!("{}-template-", crate::NAME);
    let candidate = format!("{prefix}{template}");
    let valid = candidate.len() <= 253
        && template
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && template.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
        && !template.contains("..")
        && !template.contains(".-")
        && !template.contains("-.");
    if valid {
        return candidate;
    }
    let cleaned: String = template
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .take(200)
        .collect();
    format!(
        "{prefix}{}-{}",
        cleaned.trim_end_matches('-'),
        crate::template::content_revision(template)
    )
}

fn metadata(name: &str, template: Option<&Template>) -> ObjectMeta {
    let mut labels = BTreeMap::from([(MANAGED_BY_LABEL.to_string(), crate::NAME.to_string())]);
    let mut annotations = BTreeMap::new();
    if let Some(template) = template {
        if let Some(revision) = crate::inject::revision_label_value(&template.revision) {
            labels.insert(REVISION_LABEL.to_string(), revision.to_string());
        }
        annotations.insert(TEMPLATE_ANNOTATION_KEY.to_string(), template.name.clone());
    }
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
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

/// The namespaces a binding covers: as the webhook configuration, never kube-system,
/// the injector's own, or one labelled `sidecar.samplecrd.k8s.io/inject=disabled`.
fn namespaces(options: &Options) -> MatchResources {
    MatchResources {
        namespace_selector: Some(LabelSelector {
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: NAMESPACE_LABEL.to_string(),
                    operator: String::from("NotIn"),
                    values: Some(vec![NAMESPACE_DISABLED.to_string()]),
                },
                LabelSelectorRequirement {
                    key: String::from("kubernetes.io/metadata.name"),
                    operator: String::from("NotIn"),
                    values: Some(vec![String::from("kube-system"), options.injector_namespace.clone()]),
                },
            ]),
            match_labels: None,
        }),
        ..MatchResources::default()
    }
}

/// A template's mutating and validating policies with their bindings.
pub fn template_objects(
    template: &Template,
    options: &Options,
    mutation_variables: Vec<Variable>,
    mutation: String,
    validation_variables: Vec<Variable>,
) -> Vec<PolicyObject> {
    let name = object_name(&template.name);
    let mut conditions = variables::match_conditions();
    conditions.push(variables::may_choose(&template.name));
    let mutating = MutatingAdmissionPolicy {
        metadata: metadata(&name, Some(template)),
        spec: Some(MutatingAdmissionPolicySpec {
            failure_policy: Some(String::from("Fail")),
            reinvocation_policy: Some(String::from("IfNeeded")),
            match_constraints: Some(pod_create()),
            match_conditions: Some(conditions.clone()),
            variables: Some(mutation_variables),
            mutations: Some(vec![Mutation {
                patch_type: String::from("JSONPatch"),
                json_patch: Some(JSONPatch {
                    expression: Some(mutation),
                }),
                apply_configuration: None,
            }]),
            param_kind: None,
        }),
    };
    let validating = ValidatingAdmissionPolicy {
        metadata: metadata(&name, Some(template)),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some(String::from("Fail")),
            match_constraints: Some(pod_create()),
            match_conditions: Some(conditions),
            variables: Some(validation_variables),
            validations: Some(vec![Validation {
                expression: format!("{DENIAL} == \"\""),
                message_expression: Some(DENIAL.to_string()),
                reason: Some(String::from("Forbidden")),
                message: None,
            }]),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        status: None,
    };
    vec![
        PolicyObject::Validating(Box::new(validating)),
        PolicyObject::ValidatingBinding(Box::new(validating_binding(&name, options, Some(template)))),
        PolicyObject::Mutating(Box::new(mutating)),
        PolicyObject::MutatingBinding(Box::new(MutatingAdmissionPolicyBinding {
            metadata: metadata(&name, Some(template)),
            spec: Some(MutatingAdmissionPolicyBindingSpec {
                policy_name: Some(name.clone()),
                match_resources: Some(namespaces(options)),
                param_ref: None,
            }),
        })),
    ]
}

fn validating_binding(name: &str, options: &Options, template: Option<&Template>) -> ValidatingAdmissionPolicyBinding {
    ValidatingAdmissionPolicyBinding {
        metadata: metadata(name, template),
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: name.to_string(),
            validation_actions: vec![String::from("Deny")],
            match_resources: Some(namespaces(options)),
            param_ref: None,
        },
    }
}

/// The name of the policy that denies a Pod naming a template the set does not have.
pub fn known_templates_name() -> String {
    format!("{}-known-templates", crate::NAME)
}

/// The policy denying an opted-in Pod that names (or whose namespace names) a template
/// the set does not have, with the webhook's words.
pub fn known_templates(set: &TemplateSet, options: &Options) -> Vec<PolicyObject> {
    let name = known_templates_name();
    let names: Vec<&str> = set.names().collect();
    let available = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    let hole = cel::hole(0);
    let by_annotation = InjectError::UnknownTemplate {
        name: hole.clone(),
        available: available.clone(),
    }
    .to_string();
    let by_label = InjectError::UnknownNamespaceTemplate {
        name: hole.clone(),
        namespace: cel::hole(1),
        available: available.clone(),
    }
    .to_string();
    let no_default = InjectError::NoDefaultTemplate { available }.to_string();
    let message = format!(
        "{CHOSEN_BY_ANNOTATION} ? {} : {} != \"\" ? {} : {}",
        cel::words(&by_annotation, &[(&hole, CHOICE)]),
        variables::chosen_by_label(),
        cel::words(&by_label, &[(&hole, CHOICE), (&cel::hole(1), "request.namespace")]),
        cel::words(&no_default, &[])
    );
    let policy = ValidatingAdmissionPolicy {
        metadata: metadata(&name, None),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some(String::from("Fail")),
            match_constraints: Some(pod_create()),
            match_conditions: Some(variables::match_conditions()),
            variables: Some(variables::choice_variables()),
            validations: Some(vec![Validation {
                expression: format!("!{OPTED_IN} || {CHOICE} in {}", cel::strings(names)),
                message_expression: Some(message),
                reason: Some(String::from("Forbidden")),
                message: None,
            }]),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        status: None,
    };
    vec![
        PolicyObject::Validating(Box::new(policy)),
        PolicyObject::ValidatingBinding(Box::new(validating_binding(&name, options, None))),
    ]
}
