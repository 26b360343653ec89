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
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

use super::health::{Check, Fetched, Status};
use super::selector;
use crate::inject::REVISION_LABEL;
use crate::policies::{self, MANAGED_BY_LABEL, PolicyObject, TEMPLATE_ANNOTATION_KEY};
use crate::template::TemplateSet;

pub mod health;

/// `serve`'s flag choosing the path.
pub const INJECTION_FLAG: &str = "--injection";
/// The environment variable `serve` reads the same choice from when the flag is absent.
pub const INJECTION_ENV: &str = "INJECTION";

/// The kinds of the compiled objects, as `PolicyObject::kind` names them.
pub const MUTATING: &str = "MutatingAdmissionPolicy";
pub const MUTATING_BINDING: &str = "MutatingAdmissionPolicyBinding";
pub const VALIDATING: &str = "ValidatingAdmissionPolicy";
pub const VALIDATING_BINDING: &str = "ValidatingAdmissionPolicyBinding";

/// `serve --injection`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Policies when the API server serves MutatingAdmissionPolicy v1, else the webhook.
    Auto,
    Policy,
    Webhook,
}

impl Mode {
    /// The flag's value as `serve` accepts it.
    pub fn parse(value: &str) -> Option<Mode> {
        match value {
            "auto" => Some(Mode::Auto),
            "policy" => Some(Mode::Policy),
            "webhook" => Some(Mode::Webhook),
            _ => None,
        }
    }
}

/// The mode `serve` runs with, and where that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Configured {
    /// `from` says where: `` `--injection=policy` in the args of Deployment ns/name ``.
    Mode { mode: Mode, from: String },
    /// A value `serve` refuses (it does not start).
    Invalid { value: String, from: String },
    /// Cannot be read; why.
    Unknown(String),
}

/// The container that runs `serve`: the one named `envoy-injector`, else the first whose
/// command or args say `serve`, else the first.
fn serve_container(deployment: &Deployment) -> Option<&Container> {
    let containers = &deployment.spec.as_ref()?.template.spec.as_ref()?.containers;
    let says_serve = |c: &&Container| {
        c.command
            .iter()
            .chain(c.args.iter())
            .flatten()
            .any(|word| word == "serve")
    };
    containers
        .iter()
        .find(|c| c.name == crate::NAME)
        .or_else(|| containers.iter().find(says_serve))
        .or_else(|| containers.first())
}

/// `$(NAME)` references replaced by the container's literal env values, as the kubelet
/// expands args (`$$` escapes one `$`); an unknown name stays as written.
fn expand(word: &str, env: &BTreeMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(value) = env.get(&inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The mode of the `serve` the Deployment runs: `--injection` in its container's command
/// and args (the last one given), else [`INJECTION_ENV`], else `auto`. `deployment` is
/// `None` when none is to be read (`check --deployment ""`): `serve`'s default is taken.
pub fn configured(namespace: &str, deployment: Option<(&str, &Fetched<Deployment>)>) -> Configured {
    let Some((name, deployment)) = deployment else {
        return Configured::Mode {
            mode: Mode::Auto,
            from: String::from("serve's default (no Deployment read: --deployment \"\")"),
        };
    };
    let label = format!("Deployment {namespace}/{name}");
    let deployment = match deployment {
        Err(err) => return Configured::Unknown(format!("cannot read {label}: {err}")),
        Ok(None) => {
            return Configured::Unknown(format!(
                "expected {label}, found none (name the injector's Deployment with --deployment, or pass --deployment \"\" when serve runs elsewhere with the default mode)"
            ));
        }
        Ok(Some(deployment)) => deployment,
    };
    let Some(container) = serve_container(deployment) else {
        return Configured::Unknown(format!("expected a container in {label}, found none"));
    };
    let env: BTreeMap<&str, &str> = container
        .env
        .iter()
        .flatten()
        .filter_map(|var| Some((var.name.as_str(), var.value.as_deref()?)))
        .collect();
    let words: Vec<String> = container
        .command
        .iter()
        .chain(container.args.iter())
        .flatten()
        .map(|word| expand(word, &env))
        .collect();
    let mut given = None;
    let mut words_iter = words.iter();
    while let Some(word) = words_iter.next() {
        if let Some(value) = word.strip_prefix(INJECTION_FLAG).and_then(|v| v.strip_prefix('=')) {
            given = Some(value.to_string());
        } else if word == INJECTION_FLAG {
            given = words_iter.next().cloned();
        }
    }
    let container_label = format!("container `{}` of {label}", container.name);
    let (value, from) = match given {
        Some(value) => {
            let from = format!("`{INJECTION_FLAG}={value}` in the args of {container_label}");
            (value, from)
        }
        None => match container.env.iter().flatten().find(|var| var.name == INJECTION_ENV) {
            Some(var) => match &var.value {
                Some(value) => (
                    value.clone(),
                    format!("env `{INJECTION_ENV}={value}` of {container_label}"),
                ),
                None => {
                    return Configured::Unknown(format!(
                        "env `{INJECTION_ENV}` of {container_label} comes from `valueFrom`, which check does not resolve"
                    ));
                }
            },
            None => {
                return Configured::Mode {
                    mode: Mode::Auto,
                    from: format!("`{INJECTION_FLAG}=auto`, serve's default (not set in {container_label})"),
                };
            }
        },
    };
    match Mode::parse(&value) {
        Some(mode) => Configured::Mode { mode, from },
        None => Configured::Invalid { value, from },
    }
}

/// Whether the API server serves `admissionregistration.k8s.io/v1`
/// `mutatingadmissionpolicies` (discovery).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    Yes,
    No,
    Unknown(String),
}

/// Which path `serve` sets up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// The Lease holder applies the compiled policies and keeps them in step.
    Policy,
    /// The webhook alone; no policy should exist.
    Webhook,
    /// Cannot be told: the policies found are checked as they are.
    Unknown,
}

/// What the configured mode means on this API server: the path, and the `injection` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub expected: Expected,
    /// Where the mode was read, for messages (empty when it could not be).
    pub from: String,
    pub check: Check,
}

const SERVED: &str = "MutatingAdmissionPolicy (admissionregistration.k8s.io/v1)";
const POLICY_PATH: &str = "the Lease holder applies the compiled admission policies and keeps them in step with the ConfigMap; the webhook joins Networks and injects the templates left to it";
const WEBHOOK_PATH: &str = "the webhook injects every template";

/// The `injection` line: which path `serve` sets up, from its mode and discovery.
pub fn expectation(configured: &Configured, served: &Served) -> Expectation {
    let line = |expected, from: &str, status, message: String| Expectation {
        expected,
        from: from.to_string(),
        check: Check::new("injection", status, message),
    };
    match configured {
        Configured::Invalid { value, from } => line(
            Expected::Unknown,
            "",
            Status::Fail,
            format!(
                "expected `{INJECTION_FLAG}` auto, policy or webhook, found `{value}` ({from}): serve refuses to start"
            ),
        ),
        Configured::Unknown(why) => line(
            Expected::Unknown,
            "",
            Status::Warn,
            format!(
                "cannot tell which path serve sets up: {why}; the admission policies found are checked as they are"
            ),
        ),
        Configured::Mode { mode, from } => match (mode, served) {
            (Mode::Webhook, _) => line(
                Expected::Webhook,
                from,
                Status::Ok,
                format!("webhook: {from}: {WEBHOOK_PATH}"),
            ),
            (Mode::Policy, Served::Yes) => line(
                Expected::Policy,
                from,
                Status::Ok,
                format!("policies: {from}: {POLICY_PATH}"),
            ),
            (Mode::Policy, Served::No) => line(
                Expected::Policy,
                from,
                Status::Fail,
                format!(
                    "{from}, but the API server does not serve {SERVED} (Kubernetes 1.36 or later): no policy can be applied; use `{INJECTION_FLAG}=auto` or `webhook`"
                ),
            ),
            (Mode::Policy, Served::Unknown(err)) => line(
                Expected::Policy,
                from,
                Status::Warn,
                format!("policies: {from}; cannot tell whether the API server serves {SERVED}: {err}"),
            ),
            (Mode::Auto, Served::Yes) => line(
                Expected::Policy,
                from,
                Status::Ok,
                format!("policies: {from}, and the API server serves {SERVED}: {POLICY_PATH}"),
            ),
            (Mode::Auto, Served::No) => line(
                Expected::Webhook,
                from,
                Status::Ok,
                format!("webhook: {from}, and the API server does not serve {SERVED}: {WEBHOOK_PATH}"),
            ),
            (Mode::Auto, Served::Unknown(err)) => line(
                Expected::Unknown,
                from,
                Status::Warn,
                format!(
                    "cannot tell which path {from} sets up: whether the API server serves {SERVED} is not known: {err}"
                ),
            ),
        },
    }
}

/// What `check` reads of one compiled object (found in the cluster, or compiled from the
/// live ConfigMap to compare with).
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// One of [`MUTATING`], [`MUTATING_BINDING`], [`VALIDATING`], [`VALIDATING_BINDING`].
    pub kind: &'static str,
    pub name: String,
    /// Its [`REVISION_LABEL`]: the revision of the template it was compiled from.
    pub revision: Option<String>,
    /// Its [`TEMPLATE_ANNOTATION_KEY`]: the ConfigMap key it was compiled from.
    pub template: Option<String>,
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
            revision: meta.labels.as_ref().and_then(|l| l.get(REVISION_LABEL)).cloned(),
            template: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(TEMPLATE_ANNOTATION_KEY))
                .cloned(),
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
}

/// What a Pod needs a policy for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Its template's MutatingAdmissionPolicy injects it.
    Inject,
    /// Its template's ValidatingAdmissionPolicy denies it.
    Deny,
    /// The known-templates ValidatingAdmissionPolicy denies it (it names no template the
    /// ConfigMap has).
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
        let (compiled, left_to_webhook) = match templates {
            Ok(set) => {
                let options = policies::Options {
                    injector_namespace: injector_namespace.to_string(),
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
        let (kind, binding_kind, name) = match need {
            Need::Inject => (MUTATING, MUTATING_BINDING, policies::object_name(template)),
            Need::Deny => (VALIDATING, VALIDATING_BINDING, policies::object_name(template)),
            Need::UnknownTemplate => (VALIDATING, VALIDATING_BINDING, policies::known_templates_name()),
        };
        if kind == MUTATING && self.served == Served::No {
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
        let Some(policy) = self.found(kind, &name) else {
            return Err(match self.expectation.expected {
                Expected::Webhook if found.is_empty() => {
                    format!("webhook mode is configured ({})", self.expectation.from)
                }
                Expected::Policy => format!(
                    "{kind} {name} does not exist (the Lease holder applies it in policy mode: see `admission-policies`)"
                ),
                Expected::Webhook | Expected::Unknown => format!("{kind} {name} does not exist"),
            });
        };
        let bindings: Vec<&Object> = found
            .iter()
            .filter(|o| o.kind == binding_kind && o.policy_name.as_deref() == Some(name.as_str()))
            .filter(|o| o.kind == MUTATING_BINDING || o.actions.iter().any(|a| a == "Deny"))
            .collect();
        if bindings.is_empty() {
            let deny = if kind == VALIDATING {
                " with validationActions [Deny]"
            } else {
                ""
            };
            return Err(format!("no {binding_kind} binds {kind} {name}{deny}"));
        }
        let mut first_unmet = None;
        for binding in bindings {
            match unmet(policy, binding, namespace, namespace_labels, pod_labels) {
                None => {
                    let since = [policy, binding]
                        .into_iter()
                        .filter_map(|o| Some((o.label(), o.created.clone()?)))
                        .max_by(|a, b| a.1.cmp(&b.1));
                    let live = self.compiled(kind, &name).and_then(|o| o.revision.clone());
                    let out_of_step = match (&policy.revision, live) {
                        (found, Some(live)) if found.as_deref() != Some(live.as_str()) => {
                            Some((found.clone().unwrap_or_else(|| String::from("(none)")), live))
                        }
                        _ => None,
                    };
                    return Ok(Route {
                        kind,
                        policy: name,
                        binding: binding.name.clone(),
                        out_of_step,
                        since,
                    });
                }
                Some(why) => {
                    first_unmet.get_or_insert(why);
                }
            }
        }
        Err(first_unmet.unwrap_or_default())
    }

    /// Why the known-templates policy may deny a template the ConfigMap has: it is not
    /// the one the live ConfigMap compiles to. `None` when it is, or cannot be told.
    pub fn known_templates_out_of_step(&self) -> Option<String> {
        let name = policies::known_templates_name();
        let compiled = self.compiled(VALIDATING, &name)?;
        let found = self.found(VALIDATING, &name)?;
        (found.validations != compiled.validations).then(|| {
            format!(
                "{VALIDATING} {name} does not list the templates of ConfigMap {}: it denies a Pod choosing a template it does not list",
                self.configmap
            )
        })
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
mod tests;
