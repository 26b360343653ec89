//! Why a Pod would (or would not) be injected: first the deployed
//! MutatingWebhookConfiguration as the API server applies it (rules, selectors, CEL
//! `matchConditions`), then the injector's own policy (`inject::policy`), then the engine's
//! dry run (`inject::plan`: template, collisions). Pure: the cluster comes in as data.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhook;
use serde_json::Value;

use super::cel;
use super::report::{
    Call, OverrideReport, PathReport, PodReport, PodSecurityReport, Rule, TemplateRef, Verdict, WebhookMatch,
};
use crate::cluster::injection::Policies;
use crate::cluster::snapshot::{Snapshot, Subject};
use crate::inject::join::Lookup;
use crate::inject::policy::{self, OptIn, Skip};
use crate::inject::{
    self, AnnotationOptIn, Chosen, ClusterView, Decided, Decision, INJECT_ANNOTATION, INJECT_LABEL, InjectError,
    InjectionStatus, LEGACY_INJECT_ANNOTATION, NAMESPACE_LABEL, NAMESPACE_OPT_IN, NATIVE_SIDECAR_ANNOTATION,
    NamespaceOptIn, NativeRule, NotChosen, Plan, PodView, Refused, STATUS_ANNOTATION,
};
use crate::stale::is_stale;
use crate::template::{Template, TemplateSet};

/// What is known of the deployed MutatingWebhookConfiguration.
#[derive(Debug, Clone, Copy)]
pub enum Webhooks<'a> {
    /// It exists, with these webhooks.
    Deployed(&'a [MutatingWebhook]),
    /// It does not exist: the API server sends no Pod to the injector.
    Absent,
    /// Not known: `check -f` without a cluster. A Pod that opted in is taken to reach the
    /// injector, as the shipped configuration sends it; Networks are not known either.
    Offline,
}

impl<'a> Webhooks<'a> {
    /// The deployed webhooks, none when absent or not known.
    pub fn deployed(self) -> &'a [MutatingWebhook] {
        match self {
            Webhooks::Deployed(hooks) => hooks,
            Webhooks::Absent | Webhooks::Offline => &[],
        }
    }
}

/// What the cluster has besides Namespaces and Networks.
#[derive(Debug, Clone, Copy)]
pub struct Installed<'a> {
    /// The MutatingWebhookConfiguration's name, for messages.
    pub webhook_config: &'a str,
    pub webhooks: Webhooks<'a>,
    /// The templates of the live ConfigMap, or why there are none.
    pub templates: Result<&'a TemplateSet, &'a str>,
    /// The compiled admission policies in the cluster; `None` when not known (offline).
    pub policies: Option<&'a Policies>,
    /// Whether Pods' annotations opt them in, as `serve --annotation-opt-in` says.
    pub annotation_opt_in: AnnotationOptIn,
}

/// Explains one Pod.
pub fn explain(subject: &Subject, installed: &Installed<'_>, cluster: &Snapshot) -> PodReport {
    explain_compiled(subject, installed, &compile(installed), cluster)
}

/// Explains each Pod, the webhooks' matchConditions compiled once for all of them.
pub fn explain_all(subjects: &[Subject], installed: &Installed<'_>, cluster: &Snapshot) -> Vec<PodReport> {
    let conditions = compile(installed);
    subjects
        .iter()
        .map(|subject| explain_compiled(subject, installed, &conditions, cluster))
        .collect()
}

/// Each webhook's matchConditions, in the order of `installed.webhooks`.
fn compile(installed: &Installed<'_>) -> Vec<cel::Compiled> {
    installed
        .webhooks
        .deployed()
        .iter()
        .map(|hook| cel::Compiled::new(hook.match_conditions.as_deref().unwrap_or_default()))
        .collect()
}

fn explain_compiled(
    subject: &Subject,
    installed: &Installed<'_>,
    conditions: &[cel::Compiled],
    cluster: &Snapshot,
) -> PodReport {
    let pod = &subject.pod;
    let annotations = pod.pointer("/metadata/annotations").and_then(Value::as_object);
    let view = PodView::read(pod);
    let mut warnings = policy::unreadable_flags(view.meta(), installed.annotation_opt_in);
    let webhooks: Vec<WebhookMatch> = installed
        .webhooks
        .deployed()
        .iter()
        .zip(conditions)
        .map(|(hook, conditions)| match_webhook(hook, conditions, subject, cluster))
        .collect();
    let report = |verdict, rule, reason: String| PodReport {
        subject: subject.what.clone(),
        verdict,
        rule,
        reason,
        template: None,
        adds: Vec::new(),
        values: Vec::new(),
        resources: Vec::new(),
        overrides: Vec::new(),
        webhooks: webhooks.clone(),
        path: None,
        warnings: Vec::new(),
        drift: Vec::new(),
        pod_security: None,
    };
    let seen = Seen {
        snapshot: cluster,
        networks: !matches!(installed.webhooks, Webhooks::Offline),
    };
    let templates = || installed.templates.ok();
    let decided = inject::decide(&view, &subject.namespace, installed.annotation_opt_in, templates, &seen);
    let skipped = |skip: Skip, warnings: &mut Vec<String>, called_does: &str| {
        let rule = match skip {
            Skip::NotOptedIn => Rule::NotOptedIn,
            Skip::OptedOut { .. } => Rule::OptedOut,
            Skip::AlreadyInjected { .. } => Rule::AlreadyInjected,
            Skip::HostNetwork { .. } => Rule::HostNetwork,
        };
        let mut out = report(Verdict::Skip, rule, skip.to_string());
        if rule == Rule::AlreadyInjected {
            out.template = injected_template(annotations, installed.templates.ok());
            out.overrides = recorded_overrides(annotations);
        }
        if webhooks.iter().any(|w| w.call == Call::Called) {
            warnings.push(format!(
                "the API server sends it to the webhook anyway, which {called_does}"
            ));
        }
        out
    };
    let mut out = match decided {
        Decided::Skip(skip) => skipped(skip, &mut warnings, "admits it unchanged"),
        // Injected already (by a compiled policy); the webhook adds only the join.
        Decided::JoinOnly { network, join } => {
            let already = Skip::AlreadyInjected {
                evidence: format!("annotation `{STATUS_ANNOTATION}` is present"),
            };
            let does = match join {
                Ok(_) => format!("adds only the join of Network `{network}`"),
                Err(err) => format!("refuses the join of Network `{network}`: {err}"),
            };
            skipped(already, &mut warnings, &does)
        }
        Decided::OptedIn(opt_in, choice) => {
            let opted = opt_in_reason(opt_in, &subject.namespace);
            engine(
                subject,
                installed,
                cluster,
                opted,
                (&view, &choice),
                &webhooks,
                conditions,
                report,
            )
        }
    };
    if out.verdict == Verdict::Inject && view.host_network() {
        let template = out.template.as_ref().map(|t| t.name.as_str()).unwrap_or_default();
        warnings.push(format!(
            "`hostNetwork: true`, and template `{template}` allows it (`allowHostNetwork: true`): the sidecar's ports are the node's, so a second such Pod on a node stays Pending, and its ports must be free on the node"
        ));
    }
    out.warnings.extend(warnings);
    out.pod_security = pod_security(subject, &out, installed, cluster);
    out
}

/// A Pod that would be injected, or is, by a template the injector has: the Pod Security
/// its namespace asks for and what the template's additions do to it.
fn pod_security(
    subject: &Subject,
    out: &PodReport,
    installed: &Installed<'_>,
    cluster: &Snapshot,
) -> Option<PodSecurityReport> {
    if !(out.verdict == Verdict::Inject || out.rule == Rule::AlreadyInjected) {
        return None;
    }
    let template = installed.templates.ok()?.get(&out.template.as_ref()?.name)?;
    let offline = matches!(installed.webhooks, Webhooks::Offline);
    Some(super::pod_security::judge(subject, template, cluster, offline))
}

/// The cluster as the decision sees it: offline (`check -f`), Networks are not known.
struct Seen<'a> {
    snapshot: &'a Snapshot,
    networks: bool,
}

impl ClusterView for Seen<'_> {
    fn namespace_opt_in(&self, namespace: &str) -> NamespaceOptIn {
        self.snapshot.namespace_opt_in(namespace)
    }

    fn namespace_template(&self, namespace: &str) -> Option<String> {
        self.snapshot.namespace_template(namespace)
    }

    fn network(&self, namespace: &str, name: &str) -> Lookup {
        if self.networks {
            self.snapshot.network(namespace, name)
        } else {
            Lookup::Unsupported
        }
    }
}

fn opt_in_reason(opt_in: OptIn, namespace: &str) -> (Rule, String) {
    match opt_in {
        OptIn::Annotation => (
            Rule::Annotation,
            format!("opted in by annotation `{INJECT_ANNOTATION}: \"true\"`"),
        ),
        OptIn::LegacyAnnotation => (
            Rule::LegacyAnnotation,
            format!("opted in by the legacy annotation `{LEGACY_INJECT_ANNOTATION}: \"true\"`"),
        ),
        OptIn::Label => (Rule::Label, format!("opted in by label `{INJECT_LABEL}: \"true\"`")),
        OptIn::NamespaceLabel => (
            Rule::NamespaceLabel,
            format!("opted in by label `{NAMESPACE_LABEL}={NAMESPACE_OPT_IN}` on namespace `{namespace}`"),
        ),
    }
}

/// The Pod as the decision read it, and the template chosen for it (or why none).
type Choice<'c, 'p> = (&'c PodView<'p>, &'c Result<Chosen, NotChosen>);

/// An opted-in Pod: a compiled policy acts on it if one does, else the webhook (and why).
#[allow(clippy::too_many_arguments)]
fn engine(
    subject: &Subject,
    installed: &Installed<'_>,
    cluster: &Snapshot,
    opted: (Rule, String),
    choice: Choice<'_, '_>,
    webhooks: &[WebhookMatch],
    conditions: &[cel::Compiled],
    report: impl Fn(Verdict, Rule, String) -> PodReport,
) -> PodReport {
    let why_not_policy = match installed.policies {
        None => None,
        Some(policies) => {
            let facts = path::Facts {
                subject,
                installed,
                policies,
                cluster,
                webhooks,
                conditions,
            };
            match path::acting(&facts, &opted, choice, &report) {
                path::Acting::Policy(out) => return *out,
                path::Acting::Webhook(why) => why,
            }
        }
    };
    let mut out = webhook_engine(subject, installed, opted, choice, webhooks, report);
    if let Some(why) = why_not_policy
        && out.rule != Rule::AlreadyInjected
    {
        out.path = Some(PathReport::webhook(why));
    }
    out
}

/// The webhook's path: the API server calls it (or not), then the engine's dry run.
fn webhook_engine(
    subject: &Subject,
    installed: &Installed<'_>,
    (rule, opted): (Rule, String),
    (view, choice): Choice<'_, '_>,
    webhooks: &[WebhookMatch],
    report: impl Fn(Verdict, Rule, String) -> PodReport,
) -> PodReport {
    let offline = matches!(installed.webhooks, Webhooks::Offline);
    if let Webhooks::Absent = installed.webhooks {
        return report(
            Verdict::Skip,
            Rule::WebhookAbsent,
            format!(
                "{opted}, but MutatingWebhookConfiguration {} does not exist: the API server sends no Pod to the injector",
                installed.webhook_config
            ),
        );
    }
    if !offline && !webhooks.iter().any(|w| w.call == Call::Called) {
        if let Some(failing) = webhooks.iter().find(|w| w.call == Call::Error) {
            let (verdict, policy) = if failing.fail_closed {
                (Verdict::Deny, "its failurePolicy Fail refuses the Pod")
            } else {
                (Verdict::Skip, "its failurePolicy Ignore admits the Pod unchanged")
            };
            return report(
                verdict,
                Rule::WebhookError,
                format!("{opted}, but webhook {}: {}; {policy}", failing.name, failing.reason),
            );
        }
        return report(
            Verdict::Skip,
            Rule::WebhookNotCalled,
            format!(
                "{opted}, but the API server calls no webhook of {} for it ({})",
                installed.webhook_config,
                if webhooks.is_empty() {
                    "it has no webhooks"
                } else {
                    "see each webhook below"
                }
            ),
        );
    }
    let chosen = match choice {
        Ok(chosen) => chosen,
        Err(NotChosen::NoTemplates) => {
            let why = installed.templates.err().unwrap_or("no template is loaded");
            return report(Verdict::Unknown, Rule::NoTemplates, format!("{opted}, but {why}"));
        }
        Err(NotChosen::Unknown(err)) => return report(Verdict::Deny, Rule::UnknownTemplate, err.to_string()),
    };
    let template = &chosen.template;
    let mut out = match chosen.plan(view) {
        Ok(Decision::Inject(plan)) => injected(report(Verdict::Inject, rule, opted), template, &plan, &subject.pod),
        Ok(Decision::Skip(skip)) => {
            let mut out = report(Verdict::Skip, Rule::AlreadyInjected, format!("{opted}, but {skip}"));
            out.template = Some(template_ref(template));
            out
        }
        // The Network is refused only when the template finds no fault of its own.
        Err(Refused::Network(err)) => return report(Verdict::Deny, Rule::Network, err.to_string()),
        Err(Refused::Pod(err)) => denied(&err, template, &report),
    };
    out.overrides = asked_overrides(view, template);
    out.warnings.extend(
        chosen
            .unseen_network()
            .map(|name| inject::join::offline_warning(name, Some(&subject.namespace))),
    );
    out
}

fn template_ref(template: &Template) -> TemplateRef {
    TemplateRef {
        name: template.name.clone(),
        revision: template.revision.clone(),
        live_revision: None,
        stale: false,
    }
}

/// `out` (an `Inject` verdict) with the template, what the plan adds and its warnings.
fn injected(mut out: PodReport, template: &Template, plan: &Plan<'_>, pod: &Value) -> PodReport {
    out.template = Some(template_ref(template));
    let named = |kind: &str, names: &[String]| names.iter().map(|n| format!("{kind} {n}")).collect::<Vec<_>>();
    out.adds = [
        named("init container", &plan.status.init_containers),
        named("container", &plan.status.containers),
        named("volume", &plan.status.volumes),
        named("image pull secret", &plan.status.image_pull_secrets),
    ]
    .concat();
    out.warnings.extend(never_completes(pod, plan));
    out.warnings
        .extend(plan.pod_values.iter().filter_map(|v| v.warning(template)));
    out.values = plan.pod_values.iter().map(|v| v.describe()).collect();
    out.resources = plan.resources.describe();
    out
}

/// The `Deny` verdict for what the engine refuses with `template`.
fn denied(err: &InjectError, template: &Template, report: &impl Fn(Verdict, Rule, String) -> PodReport) -> PodReport {
    let rule = match err {
        InjectError::InvalidPod { .. } | InjectError::Encode(_) => Rule::InvalidPod,
        InjectError::UnknownTemplate { .. }
        | InjectError::UnknownNamespaceTemplate { .. }
        | InjectError::NoDefaultTemplate { .. } => Rule::UnknownTemplate,
        InjectError::InvalidQuantity { .. } => Rule::InvalidPod,
        InjectError::Override(_) => Rule::Override,
        InjectError::GuaranteedLost { .. } => Rule::QosClass,
        _ => Rule::Collision,
    };
    let mut out = report(Verdict::Deny, rule, err.to_string());
    out.template = Some(template_ref(template));
    out
}

/// Each override the Pod asks for, as the engine judges it against `template`.
fn asked_overrides(view: &PodView<'_>, template: &Template) -> Vec<OverrideReport> {
    inject::overrides::evaluate(view.annotations(), template)
        .into_iter()
        .map(|outcome| match outcome {
            Ok(applied) => OverrideReport {
                name: applied.decl.name.clone(),
                value: applied.value.to_string(),
                applied: true,
                detail: format!(
                    "sets {} of container `{}`",
                    inject::overrides::target_name(&applied.decl.target),
                    applied.decl.container
                ),
            },
            Err(refused) => OverrideReport {
                name: refused.name.clone(),
                value: refused.value.clone(),
                applied: false,
                detail: refused.to_string(),
            },
        })
        .collect()
}

/// The overrides an injected Pod's status annotation records.
fn recorded_overrides(annotations: Option<&serde_json::Map<String, Value>>) -> Vec<OverrideReport> {
    let status = annotations
        .and_then(|a| a.get(STATUS_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<InjectionStatus>(s).ok());
    status
        .map(|status| status.overrides)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| OverrideReport {
            name,
            value,
            applied: true,
            detail: String::from("recorded in the status annotation"),
        })
        .collect()
}

/// A Pod meant to run to completion that would get a regular sidecar: the sidecar never
/// exits, so the Pod never completes and its Job stays `Running`. Says which explicit
/// choice made it regular and how to undo it.
fn never_completes(pod: &Value, plan: &Plan<'_>) -> Option<String> {
    let policy = pod.pointer("/spec/restartPolicy").and_then(Value::as_str);
    if plan.status.native_sidecar || !inject::runs_to_completion(policy) {
        return None;
    }
    let (because, fix) = match plan.native_rule {
        NativeRule::Annotation => (
            format!("annotation `{NATIVE_SIDECAR_ANNOTATION}: \"false\"`"),
            String::from("remove the annotation or set it to \"true\""),
        ),
        NativeRule::Template => (
            format!("template `{}` sets `nativeSidecar: false`", plan.status.template),
            format!(
                "set annotation `{NATIVE_SIDECAR_ANNOTATION}: \"true\"` on the Pod (template), or remove `nativeSidecar: false` from the template"
            ),
        ),
        // Without an explicit choice such a Pod gets native sidecars.
        NativeRule::Default => return None,
    };
    Some(format!(
        "`restartPolicy: {}` with a regular sidecar ({because}): the sidecar never exits, so the Pod never completes and its Job stays Running; {fix} to inject it as a native sidecar, stopped once the Pod's own containers are done",
        policy.unwrap_or_default()
    ))
}

/// The template named by the `status` annotation, compared with the live one.
fn injected_template(
    annotations: Option<&serde_json::Map<String, Value>>,
    live: Option<&TemplateSet>,
) -> Option<TemplateRef> {
    let status = annotations?.get(STATUS_ANNOTATION)?.as_str()?;
    let status: InjectionStatus = serde_json::from_str(status).ok()?;
    let live_revision = live.map(|set| set.get(&status.template).map(|t| t.revision.clone()));
    let stale = live.is_some_and(|set| is_stale(&status.template, &status.revision, set));
    Some(TemplateRef {
        live_revision: match live_revision {
            Some(Some(live)) if live != status.revision => Some(live),
            Some(None) => Some(String::from("(template removed)")),
            _ => None,
        },
        name: status.template,
        revision: status.revision,
        stale,
    })
}

mod path;
mod webhook;
pub use webhook::match_webhook;

#[cfg(test)]
mod tests;
