//! The compiler: every template of a set into the one layout of objects, each template
//! within the API server's limits on CEL or left to the webhook with why.

use super::objects::{self, PolicyObject};
use super::options::Options;
use super::variables::{self, Scope};
use super::{cel, chosen, patch, plan, resources};
use crate::template::{Template, TemplateSet};

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

/// The largest CEL text one template's part may hold: a policy this large would cost more
/// to evaluate than the webhook's round trip.
pub const MAX_EXPRESSION_BYTES: usize = 256 * 1024;
/// The most code points the API server compiles in one CEL expression.
pub const MAX_EXPRESSION_CODE_POINTS: usize = 100_000;
/// The largest CEL text the mutating policy holds for all templates together: the API
/// server stores an object of at most about 1.5 MB, and the policy is written as JSON.
pub const MAX_POLICY_BYTES: usize = 1024 * 1024;

/// One template's part of the mutating policy: its variables, its additions among them.
struct Part<'t> {
    scope: Scope,
    template: &'t Template,
    variables: Vec<k8s_openapi::api::admissionregistration::v1::Variable>,
}

impl Part<'_> {
    fn size(&self) -> usize {
        self.variables.iter().map(|v| v.expression.len()).sum::<usize>()
    }

    /// What of its size is the rules every template writes alike, which the policy holds
    /// once (`chosen::merge`).
    fn rules_size(&self) -> usize {
        self.variables
            .iter()
            .filter(|v| {
                self.scope
                    .question(&v.name)
                    .is_some_and(|q| resources::RULES.contains(&q))
            })
            .map(|v| v.expression.len())
            .sum::<usize>()
    }

    /// Its longest expression, in code points.
    fn longest(&self) -> usize {
        self.variables
            .iter()
            .map(|v| v.expression.chars().count())
            .max()
            .unwrap_or(0)
    }
}

/// The policy's one mutation: the additions of the template the Pod chose when it injects
/// the Pod, else the refusal's mark (nothing when there is none). One expression, so the
/// API server evaluates one per Pod whatever the number of templates (each evaluation
/// reads the whole Pod); each template's additions are a variable, read only when chosen,
/// so the expression stays short.
fn mutation(parts: &[Part<'_>]) -> String {
    let mark = objects::refusal_mark();
    let mut chain = format!("!{} ? [] :\n", variables::OPTED_IN);
    for part in parts {
        chain.push_str(&format!(
            "{} == {} ? ({} ? {} : {mark}) :\n",
            variables::CHOICE,
            cel::string(&part.template.name),
            part.scope.get("inject"),
            patch::operations(&part.scope.get("additions"))
        ));
    }
    chain.push_str(&mark);
    chain
}

/// Compiles every template of `set`.
pub fn compile(set: &TemplateSet, options: &Options) -> Compiled {
    let mut parts: Vec<Part<'_>> = Vec::new();
    let mut not_compiled = Vec::new();
    let mut total = 0;
    for (index, name) in set.names().enumerate() {
        let Some(template) = set.get(name) else { continue };
        let scope = Scope::new(index);
        let mut variables = plan::variables(template, &scope);
        variables.extend(patch::variables(template, &scope));
        variables.extend(resources::variables(template, &scope));
        variables.push(scope.variable("additions", patch::additions(template, &scope)));
        let part = Part {
            scope,
            template,
            variables,
        };
        let (size, longest) = (part.size(), part.longest());
        // The rules count once in the policy: with the first template.
        let counted = if parts.is_empty() {
            size
        } else {
            size - part.rules_size()
        };
        let reason = if size > MAX_EXPRESSION_BYTES {
            format!("its policy would hold {size} bytes of CEL, more than the {MAX_EXPRESSION_BYTES} compiled at most")
        } else if longest > MAX_EXPRESSION_CODE_POINTS {
            format!(
                "its policy would hold an expression of {longest} code points, more than the {MAX_EXPRESSION_CODE_POINTS} the API server compiles"
            )
        } else if total + counted > MAX_POLICY_BYTES {
            format!(
                "with it the policy holding every template would hold {} bytes of CEL, more than the {MAX_POLICY_BYTES} compiled at most",
                total + counted
            )
        } else {
            total += counted;
            parts.push(part);
            continue;
        };
        not_compiled.push(NotCompiled {
            template: name.to_string(),
            reason,
        });
    }
    let names: Vec<&str> = set.names().collect();
    let scoped: Vec<(Scope, &Template)> = parts.iter().map(|p| (p.scope.clone(), p.template)).collect();
    let refusal = plan::refusal(&names, &scoped);
    let mut texts = [mutation(&parts), refusal.expression];
    let templates: Vec<chosen::TemplateVariables<'_>> = parts
        .iter()
        .map(|p| chosen::TemplateVariables {
            scope: &p.scope,
            template: &p.template.name,
            variables: &p.variables,
        })
        .collect();
    let per_question = chosen::merge(&templates, &mut texts, MAX_EXPRESSION_CODE_POINTS);
    let [mutation, refusal_expression] = texts;
    let mut variables = variables::shared(options.annotation_opt_in);
    // Every resource a compiled template may set: the Pod's own amounts of each.
    let named = parts.iter().flat_map(|p| resources::columns(p.template)).collect();
    variables.extend(resources::shared(&named));
    variables.extend(per_question);
    variables.push(variables::variable(&refusal.name, refusal_expression));
    let mutations = [mutation];
    // Every template the policy knows (those left to the webhook too: it refuses no Pod
    // that names one), with its revision.
    let known: Vec<&Template> = set.names().filter_map(|name| set.get(name)).map(|t| &**t).collect();
    let conditions = [
        variables::selected_condition(&known).expression,
        variables::annotated_condition(&known).expression,
    ];
    let roots: Vec<&str> = mutations.iter().chain(&conditions).map(String::as_str).collect();
    let variables = variables::read_by(variables, &roots);
    Compiled {
        objects: objects::layout(options, &known, variables, &mutations),
        not_compiled,
    }
}
