//! What every compiled policy reads of the Pod and its Namespace, as CEL variables: the
//! same questions `inject::decide` answers for the
//! webhook, asked of the object the API server holds.

use k8s_openapi::api::admissionregistration::v1::{MatchCondition, Variable};

use super::cel;
use crate::inject::{
    INJECT_ANNOTATION, LEGACY_INJECT_ANNOTATION, NAMESPACE_LABEL, NAMESPACE_OPT_IN, NAMESPACE_TEMPLATE_LABEL,
    NATIVE_SIDECAR_ANNOTATION, STATUS_ANNOTATION, TEMPLATE_ANNOTATION,
};
use crate::template::{DEFAULT_TEMPLATE, Template};

/// The Pod's annotations (an empty map when it has none).
pub const ANNOTATIONS: &str = "variables.annotations";
/// Whether the Pod opted in (annotation, legacy annotation or namespace label).
pub const OPTED_IN: &str = "variables.optedIn";
/// The template the Pod asks for: its annotation, else its namespace's label, else `config`.
pub const CHOICE: &str = "variables.choice";
/// Whether [`CHOICE`] came from the Pod's own annotation (else the namespace label or
/// the default).
pub const CHOSEN_BY_ANNOTATION: &str = "variables.chosenByAnnotation";
/// The Pod's containers and init containers (empty lists when absent).
pub const CONTAINERS: &str = "variables.containers";
pub const INIT_CONTAINERS: &str = "variables.initContainers";
/// The Pod's volumes (an empty list when absent).
pub const VOLUMES: &str = "variables.volumes";

fn variable(name: &str, expression: String) -> Variable {
    Variable {
        name: name.to_string(),
        expression,
    }
}

/// `object.metadata.annotations[key]`, trimmed and lower-cased as the webhook reads a
/// flag; `""` when absent.
fn flag(key: &str) -> String {
    let key = cel::string(key);
    format!("({key} in {ANNOTATIONS} ? {ANNOTATIONS}[{key}].trim().lowerAscii() : \"\")")
}

/// The variables the choice of a template needs, for every policy.
/// The template the Pod's namespace names by its label (an empty string when none).
pub fn chosen_by_label() -> String {
    let label = cel::string(NAMESPACE_TEMPLATE_LABEL);
    format!("({label} in variables.namespaceLabels ? variables.namespaceLabels[{label}].trim() : \"\")")
}

pub fn choice_variables() -> Vec<Variable> {
    let template = cel::string(TEMPLATE_ANNOTATION);
    let by_annotation = format!("({template} in {ANNOTATIONS} ? {ANNOTATIONS}[{template}].trim() : \"\")");
    let by_label = chosen_by_label();
    let opt_in_label = cel::string(NAMESPACE_LABEL);
    vec![
        variable(
            "annotations",
            String::from("has(object.metadata.annotations) ? object.metadata.annotations : {}"),
        ),
        // A Pod's Namespace is in the admission request; `matchConditions` see it empty,
        // variables do not.
        variable(
            "namespaceLabels",
            String::from(
                "namespaceObject != null && has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : {}",
            ),
        ),
        variable(
            "optedIn",
            format!(
                "{} == \"true\" || {} == \"true\" || ({opt_in_label} in variables.namespaceLabels && variables.namespaceLabels[{opt_in_label}] == {})",
                flag(INJECT_ANNOTATION),
                flag(LEGACY_INJECT_ANNOTATION),
                cel::string(NAMESPACE_OPT_IN)
            ),
        ),
        variable("chosenByAnnotation", format!("{by_annotation} != \"\"")),
        variable(
            "choice",
            format!(
                "{CHOSEN_BY_ANNOTATION} ? {by_annotation} : {by_label} != \"\" ? {by_label} : {}",
                cel::string(DEFAULT_TEMPLATE)
            ),
        ),
    ]
}

/// The variables of a policy for one template: the choice's, then the Pod's lists and
/// whether its sidecars go in as native sidecars.
pub fn template_variables(template: &Template) -> Vec<Variable> {
    let mut out = choice_variables();
    out.extend([
        variable(
            "containers",
            String::from("has(object.spec.containers) ? object.spec.containers : []"),
        ),
        variable(
            "initContainers",
            String::from("has(object.spec.initContainers) ? object.spec.initContainers : []"),
        ),
        variable(
            "volumes",
            String::from("has(object.spec.volumes) ? object.spec.volumes : []"),
        ),
        variable("native", native(template)),
    ]);
    out
}

/// The rule of `inject::plan::wants_native`: the Pod's annotation, then the template's
/// `nativeSidecar`, then the Pod's `restartPolicy`.
fn native(template: &Template) -> String {
    let annotation = flag(NATIVE_SIDECAR_ANNOTATION);
    let otherwise = match template.spec.native_sidecar {
        Some(native) => native.to_string(),
        None => String::from(
            "has(object.spec.restartPolicy) && (object.spec.restartPolicy == \"Never\" || object.spec.restartPolicy == \"OnFailure\")",
        ),
    };
    format!("{annotation} == \"true\" ? true : {annotation} == \"false\" ? false : {otherwise}")
}

/// The conditions under which the API server evaluates a policy at all: the Pod carries
/// no status annotation yet and has not opted out. Cheap, and read before any variable.
pub fn match_conditions() -> Vec<MatchCondition> {
    let status = cel::string(STATUS_ANNOTATION);
    let opted_out = [INJECT_ANNOTATION, LEGACY_INJECT_ANNOTATION]
        .map(|key| {
            let key = cel::string(key);
            format!(
                "({key} in object.metadata.annotations && object.metadata.annotations[{key}].trim().lowerAscii() == \"false\")"
            )
        })
        .join(" || ");
    vec![
        MatchCondition {
            name: String::from("not-yet-injected"),
            expression: format!("!has(object.metadata.annotations) || !({status} in object.metadata.annotations)"),
        },
        MatchCondition {
            name: String::from("not-opted-out"),
            expression: format!("!has(object.metadata.annotations) || !({opted_out})"),
        },
    ]
}

/// A further condition for a template's policies: the Pod names this template or none.
pub fn may_choose(template: &str) -> MatchCondition {
    let key = cel::string(TEMPLATE_ANNOTATION);
    MatchCondition {
        name: String::from("may-choose-this-template"),
        expression: format!(
            "!has(object.metadata.annotations) || !({key} in object.metadata.annotations) || object.metadata.annotations[{key}].trim() in [\"\", {}]",
            cel::string(template)
        ),
    }
}
