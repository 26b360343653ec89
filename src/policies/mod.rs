//! Templates compiled into admission policies the API server runs itself (Kubernetes
//! 1.36 `admissionregistration.k8s.io/v1`): for each template a MutatingAdmissionPolicy
//! that stores the Pod the webhook would, and a ValidatingAdmissionPolicy that denies what
//! the webhook denies, with its words; one more that denies a Pod naming a template the
//! ConfigMap does not have. The compiler is pure: templates in, objects out; only `sync`
//! (`serve` keeping them in step) does I/O.
//!
//! What needs the injector's cache (joining a Network) is not compiled: it stays with the
//! webhook, which adds only the join to a Pod a policy injected.

mod cel;
pub mod mode;
mod objects;
mod patch;
mod plan;
pub mod sync;
mod variables;

pub use mode::{Mode, Path};
pub use objects::{
    MANAGED_BY_LABEL, MUTATING, MUTATING_BINDING, PolicyObject, TEMPLATE_ANNOTATION_KEY, VALIDATING,
    VALIDATING_BINDING, known_templates_name, object_name,
};

use crate::template::{Template, TemplateSet};

/// What the compiled objects depend on besides the templates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The injector's own namespace: its Pods are never injected (as the webhook
    /// configuration excludes it).
    pub injector_namespace: String,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            injector_namespace: crate::NAME.to_string(),
        }
    }
}

/// A template left to the webhook, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotCompiled {
    pub template: String,
    pub reason: String,
}

/// The objects of one template set, in the order to apply them (each policy before its
/// binding), and the templates left to the webhook.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    pub objects: Vec<PolicyObject>,
    pub not_compiled: Vec<NotCompiled>,
}

/// The largest CEL text one template's policies may hold: the API server stores an
/// object of at most about 1.5 MB, and a policy this large would cost more to evaluate
/// than the webhook's round trip.
pub const MAX_EXPRESSION_BYTES: usize = 256 * 1024;

/// Compiles every template of `set`.
pub fn compile(set: &TemplateSet, options: &Options) -> Compiled {
    let mut objects = Vec::new();
    let mut not_compiled = Vec::new();
    for name in set.names() {
        let Some(template) = set.get(name) else { continue };
        match compile_template(template, options) {
            Ok(compiled) => objects.extend(compiled),
            Err(reason) => not_compiled.push(NotCompiled {
                template: name.to_string(),
                reason,
            }),
        }
    }
    objects.extend(objects::known_templates(set, options));
    Compiled { objects, not_compiled }
}

/// One template's four objects: the mutating policy and binding, the validating policy
/// and binding.
pub fn compile_template(template: &Template, options: &Options) -> Result<Vec<PolicyObject>, String> {
    let mut variables = variables::template_variables(template);
    variables.extend(plan::variables(template));
    let mut mutation_variables = variables.clone();
    mutation_variables.extend(patch::variables(template));
    let mutation = patch::expression(template);
    let size: usize = mutation_variables.iter().map(|v| v.expression.len()).sum::<usize>() + mutation.len();
    if size > MAX_EXPRESSION_BYTES {
        return Err(format!(
            "its policy would hold {size} bytes of CEL, more than the {MAX_EXPRESSION_BYTES} compiled at most"
        ));
    }
    Ok(objects::template_objects(
        template,
        options,
        mutation_variables,
        mutation,
        variables,
    ))
}

#[cfg(test)]
mod tests;
