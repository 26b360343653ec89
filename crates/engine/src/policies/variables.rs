//! What the compiled policy reads of the Pod and its Namespace, as CEL variables, and the
//! one match condition of each policy: the same questions `inject::decide` answers for
//! the webhook, asked of the object the API server holds. Variables are evaluated only
//! when an expression reads them, so a Pod pays for what its own template needs.

use std::collections::BTreeSet;
use std::ops::Range;

use k8s_openapi::api::admissionregistration::v1::{MatchCondition, Variable};

use super::cel;
use crate::inject::{
    AnnotationOptIn, INJECT_ANNOTATION, INJECT_LABEL, LEGACY_INJECT_ANNOTATION, NAMESPACE_LABEL, NAMESPACE_OPT_IN,
    NAMESPACE_TEMPLATE_LABEL, NATIVE_SIDECAR_ANNOTATION, OVERRIDE_PREFIX, STATUS_ANNOTATION, TEMPLATE_ANNOTATION,
};
use crate::template::{DEFAULT_TEMPLATE, Template};

/// The Pod's annotations (an empty map when it has none).
pub const ANNOTATIONS: &str = "variables.annotations";
/// Whether the Pod opted in (annotation, legacy annotation, label or namespace label):
/// the whole rule, whatever selected the Pod, so a selector that lags costs time, never
/// a different result.
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
/// The names of the Pod's containers and init containers.
pub const POD_CONTAINER_NAMES: &str = "variables.podContainerNames";
/// The ports the Pod's containers and init containers use, each as `PORT/PROTOCOL`.
pub const POD_PORTS: &str = "variables.podPorts";
/// The names of the Pod's volumes.
pub const POD_VOLUME_NAMES: &str = "variables.podVolumeNames";
/// The paths the Pod's app containers mount volumes at.
pub const POD_MOUNT_PATHS: &str = "variables.podMountPaths";
/// The TCP ports the Pod's app containers declare, in their order (a `fromPod` value).
pub const APP_TCP_PORTS: &str = "variables.appTcpPorts";
/// The Pod's override annotations' keys, sorted (as the API server sends annotations).
pub const OVERRIDE_KEYS: &str = "variables.overrideKeys";

/// `PORT/PROTOCOL`, as [`POD_PORTS`] writes a port.
pub fn port_key(port: i32, protocol: &str) -> String {
    format!("{port}/{protocol}")
}

pub fn variable(name: &str, expression: String) -> Variable {
    Variable {
        name: name.to_string(),
        expression,
    }
}

/// The variables `roots` (the policy's other expressions) read, directly or through
/// another variable, in their order; the rest dropped. The API server prepares every
/// variable of a policy for each Pod it evaluates, match condition included, so a
/// variable nothing reads (a template without volumes has no use for the Pod's volume
/// names) is a cost to every Pod and no use to any.
pub fn read_by(variables: Vec<Variable>, roots: &[&str]) -> Vec<Variable> {
    let mut read = vec![false; variables.len()];
    let mut pending: Vec<&str> = roots.to_vec();
    while let Some(text) = pending.pop() {
        let names = names_read(text);
        for (i, v) in variables.iter().enumerate() {
            if !read[i] && names.contains(v.name.as_str()) {
                read[i] = true;
                pending.push(&v.expression);
            }
        }
    }
    let mut read = read.into_iter();
    variables.into_iter().filter(|_| read.next() == Some(true)).collect()
}

/// The names of the variables `text` reads (`variables.NAME`).
pub fn names_read(text: &str) -> BTreeSet<&str> {
    references(text).map(|at| &text[at]).collect()
}

/// Where `text` reads a variable: the place of each `NAME` of `variables.NAME`.
pub fn references(text: &str) -> impl Iterator<Item = Range<usize>> + '_ {
    const PREFIX: &str = "variables.";
    text.match_indices(PREFIX).filter_map(|(at, _)| {
        let start = at + PREFIX.len();
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(text.len(), |len| start + len);
        (end > start).then_some(start..end)
    })
}

/// The variables of one template in the policy that holds them all: each name carries
/// the template's place, so no two templates' variables collide.
#[derive(Debug, Clone)]
pub struct Scope {
    prefix: String,
}

impl Scope {
    pub fn new(index: usize) -> Scope {
        Scope {
            prefix: format!("t{index}_"),
        }
    }

    /// The variable's name as declared.
    pub fn name(&self, var: &str) -> String {
        format!("{}{var}", self.prefix)
    }

    /// The variable as an expression reads it.
    pub fn get(&self, var: &str) -> String {
        format!("variables.{}{var}", self.prefix)
    }

    pub fn variable(&self, var: &str, expression: String) -> Variable {
        variable(&self.name(var), expression)
    }

    /// The question a variable of this scope asks (its name without the scope), or `None`
    /// for a name not of this scope.
    pub fn question<'n>(&self, name: &'n str) -> Option<&'n str> {
        name.strip_prefix(self.prefix.as_str())
    }
}

/// `object.metadata.annotations[key]`, trimmed and lower-cased as the webhook reads a
/// flag; `""` when absent.
fn flag(key: &str) -> String {
    let key = cel::string(key);
    format!("({key} in {ANNOTATIONS} ? {ANNOTATIONS}[{key}].trim().lowerAscii() : \"\")")
}

/// The template the Pod's namespace names by its label (an empty string when none).
pub fn chosen_by_label() -> String {
    let label = cel::string(NAMESPACE_TEMPLATE_LABEL);
    format!("({label} in variables.namespaceLabels ? variables.namespaceLabels[{label}].trim() : \"\")")
}

/// The variables every template's part reads: the Pod's maps and lists, the opt-in, the
/// template chosen.
pub fn shared(annotations: AnnotationOptIn) -> Vec<Variable> {
    let template = cel::string(TEMPLATE_ANNOTATION);
    let by_annotation = format!("({template} in {ANNOTATIONS} ? {ANNOTATIONS}[{template}].trim() : \"\")");
    let by_label = chosen_by_label();
    let opt_in_label = cel::string(NAMESPACE_LABEL);
    let pod_label = cel::string(INJECT_LABEL);
    let mut opted_in = Vec::new();
    if annotations == AnnotationOptIn::On {
        opted_in.push(format!("{} == \"true\"", flag(INJECT_ANNOTATION)));
        opted_in.push(format!("{} == \"true\"", flag(LEGACY_INJECT_ANNOTATION)));
    }
    opted_in.push(format!(
        "(has(object.metadata.labels) && {pod_label} in object.metadata.labels && object.metadata.labels[{pod_label}] == \"true\")"
    ));
    opted_in.push(format!(
        "({opt_in_label} in variables.namespaceLabels && variables.namespaceLabels[{opt_in_label}] == {})",
        cel::string(NAMESPACE_OPT_IN)
    ));
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
        variable("optedIn", opted_in.join(" || ")),
        variable("chosenByAnnotation", format!("{by_annotation} != \"\"")),
        variable(
            "choice",
            format!(
                "{CHOSEN_BY_ANNOTATION} ? {by_annotation} : {by_label} != \"\" ? {by_label} : {}",
                cel::string(DEFAULT_TEMPLATE)
            ),
        ),
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
        variable(
            "podContainerNames",
            format!("({CONTAINERS} + {INIT_CONTAINERS}).map(c, c.name)"),
        ),
        // What the rare denials look for, read once for every template: a template's
        // collision checks run only when one of its ports, volume names, mount paths or
        // override annotations is found here.
        variable(
            "podPorts",
            format!(
                "({CONTAINERS} + {INIT_CONTAINERS}).map(c, has(c.ports) ? c.ports.map(p, (has(p.containerPort) ? string(p.containerPort) : \"\") + \"/\" + (has(p.protocol) ? p.protocol : \"TCP\")) : []).flatten()"
            ),
        ),
        variable(
            "appTcpPorts",
            format!(
                "{CONTAINERS}.map(c, has(c.ports) ? c.ports.filter(p, !has(p.protocol) || p.protocol == \"TCP\").map(p, p.containerPort) : []).flatten()"
            ),
        ),
        variable("podVolumeNames", format!("{VOLUMES}.map(v, v.name)")),
        variable(
            "podMountPaths",
            format!("{CONTAINERS}.map(c, has(c.volumeMounts) ? c.volumeMounts.map(vm, vm.mountPath) : []).flatten()"),
        ),
        variable(
            "overrideKeys",
            format!(
                "{ANNOTATIONS}.filter(k, k.startsWith({})).sort()",
                cel::string(OVERRIDE_PREFIX)
            ),
        ),
    ]
}

/// Whether template `template`'s sidecars go in as native sidecars, as
/// `inject::plan::wants_native` decides: the Pod's annotation, then the template's
/// `nativeSidecar`, then the default: native.
pub fn native(template: &Template) -> String {
    let annotation = flag(NATIVE_SIDECAR_ANNOTATION);
    let otherwise = template.spec.native_sidecar.unwrap_or(true);
    format!("{annotation} == \"true\" ? true : {annotation} == \"false\" ? false : {otherwise}")
}

/// `key` (an annotation) says `value`, read as the webhook reads a flag.
fn annotation_says(key: &str, value: &str) -> String {
    let key = cel::string(key);
    format!(
        "({key} in object.metadata.annotations && object.metadata.annotations[{key}].trim().lowerAscii() == {})",
        cel::string(value)
    )
}

// The pieces of the decision a match condition asks, each of `object` alone (a match
// condition sees no variables): the compiled policies' conditions below and the webhook
// entries' (`super::webhook`) are written of them, so the two cannot say different things.

/// Not injected yet (no status annotation): on a Pod with annotations.
pub(super) fn not_injected() -> String {
    format!("!({} in object.metadata.annotations)", cel::string(STATUS_ANNOTATION))
}

/// Not opted out by annotation, the legacy one included: on a Pod with annotations.
pub(super) fn not_opted_out_by_annotation() -> String {
    format!(
        "!{} && !{}",
        annotation_says(INJECT_ANNOTATION, "false"),
        annotation_says(LEGACY_INJECT_ANNOTATION, "false")
    )
}

/// Opted in by annotation, the legacy one included: on a Pod with annotations.
pub(super) fn opted_in_by_annotation() -> String {
    format!(
        "({} || {})",
        annotation_says(INJECT_ANNOTATION, "true"),
        annotation_says(LEGACY_INJECT_ANNOTATION, "true")
    )
}

/// Not opted out by the label.
pub(super) fn not_opted_out_by_label() -> String {
    let label = cel::string(INJECT_LABEL);
    format!(
        "!(has(object.metadata.labels) && {label} in object.metadata.labels && object.metadata.labels[{label}] == \"false\")"
    )
}

/// Not on the node's network, or naming by its own annotation a template that allows it
/// (`inject::decide::host_network`): one of `allowing`, or, `None` where the templates are
/// not known (the webhook entries, shipped before any ConfigMap), any template at all.
pub(super) fn host_network_allowed(allowing: Option<&[&str]>) -> String {
    let off = "(!has(object.spec.hostNetwork) || !object.spec.hostNetwork";
    let named = |test: String| {
        let key = cel::string(TEMPLATE_ANNOTATION);
        format!(
            "{off} || (has(object.metadata.annotations) && {key} in object.metadata.annotations && object.metadata.annotations[{key}].trim() {test}))"
        )
    };
    match allowing {
        Some([]) => format!("{off})"),
        Some(names) => named(format!("in {}", cel::strings(names.iter().copied()))),
        None => named(String::from("!= \"\"")),
    }
}

/// The templates of `templates` that allow Pods on the node's network.
fn allowing<'t>(templates: &[&'t Template]) -> Vec<&'t str> {
    templates
        .iter()
        .filter(|t| t.spec.allow_host_network)
        .map(|t| t.name.as_str())
        .collect()
}

/// The one condition of the policy its selectors bind (a labelled namespace, a labelled
/// Pod): not injected yet, not opted out, and not on the node's network unless one of
/// `templates` may be injected there. One expression, stopping at its first false part:
/// the API server evaluates every condition of a policy.
pub fn selected_condition(templates: &[&Template]) -> MatchCondition {
    MatchCondition {
        name: String::from("not-injected-nor-opted-out"),
        expression: format!(
            "(!has(object.metadata.annotations) || ({} && {})) && {} && {}",
            not_injected(),
            not_opted_out_by_annotation(),
            not_opted_out_by_label(),
            host_network_allowed(Some(&allowing(templates)))
        ),
    }
}

/// The one condition of the policy for Pods that opt in by annotation: what every Pod of
/// the namespaces it binds pays, so it reads the opt-in first and stops there for a Pod
/// without it.
pub fn annotated_condition(templates: &[&Template]) -> MatchCondition {
    MatchCondition {
        name: String::from("opted-in-by-annotation"),
        expression: format!(
            "has(object.metadata.annotations) && {} && {} && {} && {} && {}",
            opted_in_by_annotation(),
            not_injected(),
            not_opted_out_by_annotation(),
            not_opted_out_by_label(),
            host_network_allowed(Some(&allowing(templates)))
        ),
    }
}
