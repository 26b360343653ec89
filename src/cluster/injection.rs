//! Which path injects: the admission policies the templates compile to (run by the API
//! server itself) or the webhook. Pure: what `fetch` read — the injector's Deployment,
//! whether the API server serves MutatingAdmissionPolicy v1, the compiled objects in the
//! cluster — comes in as data.
//!
//! - [`configured`]: the mode `serve` runs with, as it reads it: `--injection` in the
//!   Deployment's container args (or [`INJECTION_ENV`]), else `auto`;
//! - [`expectation`]: what that mode means on this API server (the `injection` line);
//! - [`Policies`]: the policies found against what the live ConfigMap compiles to (the
//!   `admission-policies` line, [`health`]), and the route a Pod takes through them
//!   ([`Policies::route`], for `decision`).

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::MatchResources;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

use super::health::{Fetched, PoliciesFound};
use super::selector;
use crate::inject::{AnnotationOptIn, INJECT_LABEL, NAMESPACE_LABEL, NAMESPACE_OPT_IN, REFUSED_LABEL};
use crate::policies::{self, MANAGED_BY_LABEL, Path, PolicyObject, TEMPLATES_ANNOTATION, names};
use crate::template::TemplateSet;

pub mod health;
mod mode;

use mode::SERVED;
pub use mode::{Configured, Expectation, INJECTION_ENV, INJECTION_FLAG, Mode, Served, configured, expectation};

pub use crate::policies::{MUTATING, MUTATING_BINDING, VALIDATING, VALIDATING_BINDING};

/// What `check` reads of one compiled object (found in the cluster, or compiled from the
/// live ConfigMap to compare with).
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// One of [`MUTATING`], [`MUTATING_BINDING`], [`VALIDATING`], [`VALIDATING_BINDING`].
    pub kind: &'static str,
    pub name: String,
    /// A mutating policy's [`TEMPLATES_ANNOTATION`]: the templates it knows, by name, with
    /// the revision it was compiled from (`None` without the annotation).
    pub templates: Option<BTreeMap<String, String>>,
    pub created: Option<Time>,
    /// A binding's `policyName`.
    pub policy_name: Option<String>,
    /// A policy's `matchConstraints`, a binding's `matchResources`: the selectors.
    pub namespace_selector: Option<LabelSelector>,
    pub object_selector: Option<LabelSelector>,
    /// A ValidatingAdmissionPolicy's validation expressions (the known-templates one lists
    /// the templates in its expression).
    pub validations: Vec<String>,
    /// A ValidatingAdmissionPolicyBinding's `validationActions`.
    pub actions: Vec<String>,
}

impl Object {
    pub fn new(object: &PolicyObject) -> Object {
        let meta = object.metadata();
        let selectors = |resources: Option<&MatchResources>| {
            (
                resources.and_then(|r| r.namespace_selector.clone()),
                resources.and_then(|r| r.object_selector.clone()),
            )
        };
        let mut out = Object {
            kind: object.kind(),
            name: object.name().to_string(),
            templates: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(TEMPLATES_ANNOTATION))
                .and_then(|json| serde_json::from_str(json).ok()),
            created: meta.creation_timestamp.clone(),
            policy_name: None,
            namespace_selector: None,
            object_selector: None,
            validations: Vec::new(),
            actions: Vec::new(),
        };
        let (namespaces, objects) = match object {
            PolicyObject::Mutating(policy) => {
                selectors(policy.spec.as_ref().and_then(|s| s.match_constraints.as_ref()))
            }
            PolicyObject::Validating(policy) => {
                let spec = policy.spec.as_ref();
                out.validations = spec
                    .and_then(|s| s.validations.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|v| v.expression.clone())
                    .collect();
                selectors(spec.and_then(|s| s.match_constraints.as_ref()))
            }
            PolicyObject::MutatingBinding(binding) => {
                let spec = binding.spec.as_ref();
                out.policy_name = spec.and_then(|s| s.policy_name.clone());
                selectors(spec.and_then(|s| s.match_resources.as_ref()))
            }
            PolicyObject::ValidatingBinding(binding) => {
                out.policy_name = Some(binding.spec.policy_name.clone());
                out.actions = binding.spec.validation_actions.clone();
                selectors(binding.spec.match_resources.as_ref())
            }
        };
        out.namespace_selector = namespaces;
        out.object_selector = objects;
        out
    }

    /// `Kind name`, for messages.
    pub fn label(&self) -> String {
        format!("{} {}", self.kind, self.name)
    }
}

/// What `fetch` read for the policies.
#[derive(Debug, Clone)]
pub struct PolicyFacts {
    /// The injector's Deployment (name, read); `None`: none to read (`--deployment ""`).
    pub deployment: Option<(String, Fetched<Deployment>)>,
    pub served: Served,
    /// The objects labelled `app.kubernetes.io/managed-by=envoy-injector` (the mutating
    /// kinds only when served), or why they could not be listed.
    pub found: Result<Vec<Object>, String>,
}

/// A template left to the webhook by the compiler, and why.
pub type LeftToWebhook = BTreeMap<String, String>;

/// The policies found, against what the live ConfigMap compiles to.
#[derive(Debug, Clone)]
pub struct Policies {
    pub expectation: Expectation,
    pub served: Served,
    pub found: Result<Vec<Object>, String>,
    /// What the live templates compile to, or why that is not known.
    pub compiled: Result<Vec<Object>, String>,
    pub left_to_webhook: LeftToWebhook,
    /// `namespace/envoy-injector`, for messages and the fix.
    pub configmap: String,
    pub injector_namespace: String,
    /// Whether `serve` lets Pods' annotations opt them in (read from its Deployment).
    pub annotation_opt_in: AnnotationOptIn,
}

/// What a Pod needs a policy for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The MutatingAdmissionPolicy that binds it injects it with its template.
    Inject,
    /// That policy marks it refused by its template, and the ValidatingAdmissionPolicy
    /// the mark selects denies it.
    Deny,
    /// As [`Need::Deny`], for a Pod naming no template the ConfigMap has.
    UnknownTemplate,
}

/// The policy that acts on a Pod, and its binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub kind: &'static str,
    pub policy: String,
    pub binding: String,
    /// (its revision label, the live template's) when they differ.
    pub out_of_step: Option<(String, String)>,
    /// The later of the policy's and the binding's creation, and which one it was.
    pub since: Option<(String, Time)>,
}

impl Policies {
    /// Puts the facts together with the live templates (compiled here, as `serve` and
    /// `policies` compile them).
    pub fn new(facts: &PolicyFacts, templates: &Result<TemplateSet, String>, injector_namespace: &str) -> Policies {
        let configured = configured(
            injector_namespace,
            facts.deployment.as_ref().map(|(n, d)| (n.as_str(), d)),
        );
        let expectation = expectation(&configured, &facts.served);
        let annotation_opt_in = mode::annotation_opt_in(facts.deployment.as_ref().map(|(_, d)| d));
        let (compiled, left_to_webhook) = match templates {
            Ok(set) => {
                let options = policies::Options {
                    injector_namespace: injector_namespace.to_string(),
                    annotation_opt_in,
                };
                let compiled = policies::compile(set, &options);
                (
                    Ok(compiled.objects.iter().map(Object::new).collect()),
                    compiled
                        .not_compiled
                        .into_iter()
                        .map(|left| (left.template, left.reason))
                        .collect(),
                )
            }
            Err(_) => (
                Err(String::from(
                    "the ConfigMap's templates cannot be read (see `templates`)",
                )),
                LeftToWebhook::new(),
            ),
        };
        Policies {
            expectation,
            served: facts.served.clone(),
            found: facts.found.clone(),
            compiled,
            left_to_webhook,
            configmap: format!("{injector_namespace}/{}", crate::NAME),
            injector_namespace: injector_namespace.to_string(),
            annotation_opt_in,
        }
    }

    /// Whether any compiled object labelled as ours was found, for the health lines.
    pub fn found_any(&self) -> PoliciesFound {
        match &self.found {
            Ok(found) if found.is_empty() => PoliciesFound::None,
            Ok(_) => PoliciesFound::Some,
            Err(_) => PoliciesFound::Unknown,
        }
    }

    fn found(&self, kind: &str, name: &str) -> Option<&Object> {
        self.found
            .as_ref()
            .ok()?
            .iter()
            .find(|o| o.kind == kind && o.name == name)
    }

    fn compiled(&self, kind: &str, name: &str) -> Option<&Object> {
        self.compiled
            .as_ref()
            .ok()?
            .iter()
            .find(|o| o.kind == kind && o.name == name)
    }

    /// The policy that acts on a Pod choosing `template` for `need`, in a namespace with
    /// `namespace_labels`, with `pod_labels`; or why none does (so the webhook is its path).
    pub fn route(
        &self,
        template: &str,
        need: Need,
        namespace: &str,
        namespace_labels: &BTreeMap<String, String>,
        pod_labels: &BTreeMap<String, String>,
    ) -> Result<Route, String> {
        // Every route starts at a mutating policy: it injects, or marks the Pod refused.
        if self.served == Served::No {
            return Err(format!("the API server does not serve {SERVED}"));
        }
        if need != Need::UnknownTemplate
            && let Some(reason) = self.left_to_webhook.get(template)
        {
            return Err(format!("template `{template}` is left to the webhook: {reason}"));
        }
        let found = match &self.found {
            Err(err) => return Err(format!("whether a policy acts is not known: {err}")),
            Ok(found) => found,
        };
        // The binding meant for the Pod, as the selectors partition Pods: a labelled
        // namespace's, a labelled Pod's, the rest's (annotations); tried first, and its
        // reason is the one given when no binding acts.
        let mut candidates = vec![
            (names::INJECT, names::BY_NAMESPACE),
            (names::INJECT, names::BY_LABEL),
            (names::INJECT_ANNOTATED, names::BY_ANNOTATION),
        ];
        let meant = if namespace_labels.get(NAMESPACE_LABEL).map(String::as_str) == Some(NAMESPACE_OPT_IN) {
            0
        } else if pod_labels.get(INJECT_LABEL).map(String::as_str) == Some("true") {
            1
        } else {
            2
        };
        candidates.swap(0, meant);
        let mut meant_unmet = None;
        let mut mutating = None;
        for (policy, binding) in candidates {
            let selected = self.bound(
                found,
                (MUTATING, policy),
                (MUTATING_BINDING, Some(binding)),
                namespace,
                namespace_labels,
                pod_labels,
            );
            match selected {
                Ok(bound) => {
                    mutating = Some(bound);
                    break;
                }
                Err(why) => {
                    meant_unmet.get_or_insert(why);
                }
            }
        }
        let Some((policy, binding)) = mutating else {
            return Err(meant_unmet.unwrap_or_default());
        };
        let live = self
            .compiled(MUTATING, &policy.name)
            .and_then(|o| o.templates.as_ref()?.get(template).cloned());
        let held = policy.templates.as_ref().and_then(|t| t.get(template)).cloned();
        let out_of_step = match (held, live) {
            (held, Some(live)) if need != Need::UnknownTemplate && held.as_deref() != Some(live.as_str()) => {
                Some((held.unwrap_or_else(|| String::from("(none)")), live))
            }
            _ => None,
        };
        if need == Need::Inject {
            return Ok(route(MUTATING, policy, binding, out_of_step));
        }
        // The mark adds a label the validating policy's binding selects.
        let mut marked = pod_labels.clone();
        marked.insert(REFUSED_LABEL.to_string(), String::from("true"));
        let (refused, refused_binding) = self.bound(
            found,
            (VALIDATING, names::REFUSED),
            (VALIDATING_BINDING, None),
            namespace,
            namespace_labels,
            &marked,
        )?;
        Ok(route(VALIDATING, refused, refused_binding, out_of_step))
    }

    /// The policy (`kind`, `name`) found, and the first binding of it (of `binding_kind`,
    /// named `binding` when given) that acts on the Pod; or why there is none.
    fn bound<'f>(
        &self,
        found: &'f [Object],
        (kind, name): (&'static str, &str),
        (binding_kind, binding): (&'static str, Option<&str>),
        namespace: &str,
        namespace_labels: &BTreeMap<String, String>,
        pod_labels: &BTreeMap<String, String>,
    ) -> Result<(&'f Object, &'f Object), String> {
        let Some(policy) = found.iter().find(|o| o.kind == kind && o.name == name) else {
            return Err(match self.expectation.expected {
                Some(Path::Webhook) if found.is_empty() => {
                    format!("webhook mode is configured ({})", self.expectation.from)
                }
                Some(Path::Policy) if self.compiled(kind, name).is_some() => format!(
                    "{kind} {name} does not exist (the Lease holder applies it in policy mode: see `admission-policies`)"
                ),
                _ => format!("{kind} {name} does not exist"),
            });
        };
        let bindings: Vec<&Object> = found
            .iter()
            .filter(|o| o.kind == binding_kind && o.policy_name.as_deref() == Some(name))
            .filter(|o| binding.is_none_or(|b| o.name == b))
            .filter(|o| o.kind == MUTATING_BINDING || o.actions.iter().any(|a| a == "Deny"))
            .collect();
        if bindings.is_empty() {
            let deny = if kind == VALIDATING {
                " with validationActions [Deny]"
            } else {
                ""
            };
            let named = binding.map(|b| format!(" {b}")).unwrap_or_default();
            return Err(format!("no {binding_kind}{named} binds {kind} {name}{deny}"));
        }
        let mut first_unmet = None;
        for binding in bindings {
            match unmet(policy, binding, namespace, namespace_labels, pod_labels) {
                None => return Ok((policy, binding)),
                Some(why) => {
                    first_unmet.get_or_insert(why);
                }
            }
        }
        Err(first_unmet.unwrap_or_default())
    }

    /// Why the mutating policy `name` may refuse a template the ConfigMap has, or know
    /// one it no longer has: the templates it holds are not those of the live ConfigMap.
    /// `None` when they are, or cannot be told.
    pub fn templates_out_of_step(&self, name: &str) -> Option<String> {
        let compiled = self.compiled(MUTATING, name)?.templates.as_ref()?;
        let found = self.found(MUTATING, name)?;
        let held = found.templates.as_ref();
        (held.map(|h| h.keys().collect::<Vec<_>>()) != Some(compiled.keys().collect())).then(|| {
            format!(
                "{MUTATING} {name} does not hold the templates of ConfigMap {}: it refuses a Pod choosing a template it does not hold",
                self.configmap
            )
        })
    }
}

/// A route through `policy` and its `binding`; `since`, the later of their creations.
fn route(kind: &'static str, policy: &Object, binding: &Object, out_of_step: Option<(String, String)>) -> Route {
    let since = [policy, binding]
        .into_iter()
        .filter_map(|o| Some((o.label(), o.created.clone()?)))
        .max_by(|a, b| a.1.cmp(&b.1));
    Route {
        kind,
        policy: policy.name.clone(),
        binding: binding.name.clone(),
        out_of_step,
        since,
    }
}

/// Why `binding` (with its `policy`) does not act on the Pod; `None` when it does.
fn unmet(
    policy: &Object,
    binding: &Object,
    namespace: &str,
    namespace_labels: &BTreeMap<String, String>,
    pod_labels: &BTreeMap<String, String>,
) -> Option<String> {
    let checks = [
        (
            policy,
            "matchConstraints.namespaceSelector",
            &policy.namespace_selector,
            namespace_labels,
            true,
        ),
        (
            policy,
            "matchConstraints.objectSelector",
            &policy.object_selector,
            pod_labels,
            false,
        ),
        (
            binding,
            "matchResources.namespaceSelector",
            &binding.namespace_selector,
            namespace_labels,
            true,
        ),
        (
            binding,
            "matchResources.objectSelector",
            &binding.object_selector,
            pod_labels,
            false,
        ),
    ];
    for (object, field, selector, labels, of_namespace) in checks {
        let Some(selector) = selector else { continue };
        let whom = if of_namespace {
            format!("namespace `{namespace}`")
        } else {
            String::from("the Pod")
        };
        match selector::unmet(selector, labels) {
            Ok(None) => {}
            Ok(Some(unmet)) => {
                return Some(format!(
                    "{}'s {field} wants `{}`: {whom} {}",
                    object.label(),
                    unmet.wanted,
                    unmet.found
                ));
            }
            Err(err) => return Some(format!("{}'s {field}: {err}", object.label())),
        }
    }
    None
}

/// The label selector of the objects that are ours: `app.kubernetes.io/managed-by=envoy-injector`.
pub fn labelled() -> String {
    format!("{MANAGED_BY_LABEL}={}", crate::NAME)
}

#[cfg(test)]
pub(crate) mod tests;
