//! Whether a compiled admission policy acts on an opted-in Pod, as the API server runs
//! them: mutating policies first (its template's MutatingAdmissionPolicy injects what the
//! engine would), then the mutating webhooks with the Pod as the policy left it (the join
//! of a Network stays with the webhook), then the validating policies (its template's
//! ValidatingAdmissionPolicy denies what the engine denies; the known-templates one, a
//! template the ConfigMap does not have) — unless a mutating webhook is called for the
//! Pod, which then refuses it first, with the same words. The policies decide as the
//! engine does (tier
//! `policies` proves it), so the engine's dry run is their verdict; what `check` adds is
//! whether the objects are there and bound to the Pod's namespace. Pure.

use serde_json::Value;

use super::{Choice, Installed, asked_overrides, denied, injected, match_webhook};
use crate::check::cel;
use crate::check::report::{Call, PathReport, PodReport, Rule, Verdict, WebhookMatch};
use crate::cluster::injection::{Need, Policies, Route};
use crate::cluster::snapshot::{Snapshot, Subject};
use crate::inject::{self, Decided, Decision, InjectError, NotChosen, Plan, PodView};
use crate::policies::Path;
use crate::template::TemplateSet;

/// Who acts on the Pod.
pub(super) enum Acting {
    /// A policy: the whole report.
    Policy(Box<PodReport>),
    /// The webhook, and why no policy acts (`None`: the policies do not decide this Pod,
    /// or it cannot be told).
    Webhook(Option<String>),
}

fn policy_path(route: &Route, reason: String) -> PathReport {
    PathReport {
        via: Path::Policy,
        kind: Some(route.kind),
        policy: Some(route.policy.clone()),
        binding: Some(route.binding.clone()),
        reason,
        since: route.since.clone(),
    }
}

/// A Pod the policies refuse: the validating policy of `route` denies it, unless a mutating
/// webhook is called for it (`webhooks`, for the Pod as created: no policy changed it),
/// which runs first and refuses it with the same words.
fn refused(route: &Route, webhooks: &[WebhookMatch], out: impl FnOnce() -> PodReport) -> Acting {
    if let Some(hook) = webhooks.iter().find(|w| w.call == Call::Called) {
        return Acting::Webhook(Some(format!(
            "mutating webhooks run before validating policies: webhook {} is called and refuses it first ({} {} with binding {} would deny it with the same words)",
            hook.name, route.kind, route.policy, route.binding
        )));
    }
    let mut out = out();
    out.path = Some(policy_path(route, String::new()));
    Acting::Policy(Box::new(out))
}

/// What the policies' path reads besides the Pod: the installation and the cluster, and
/// `webhooks`, what the API server does with each webhook for the Pod as created.
pub(super) struct Facts<'a> {
    pub subject: &'a Subject,
    pub installed: &'a Installed<'a>,
    pub policies: &'a Policies,
    pub cluster: &'a Snapshot,
    pub webhooks: &'a [WebhookMatch],
    pub conditions: &'a [cel::Compiled],
}

/// The Pod, opted in (`opted`: the rule and its words), through the policies, with the
/// template the decision chose for it.
pub(super) fn acting(
    facts: &Facts<'_>,
    (rule, opted): &(Rule, String),
    (view, choice): Choice<'_, '_>,
    report: &impl Fn(Verdict, Rule, String) -> PodReport,
) -> Acting {
    let Facts {
        subject,
        policies,
        cluster,
        webhooks,
        ..
    } = *facts;
    let namespace = subject.namespace.as_str();
    let namespace_labels = cluster.namespace_labels(namespace);
    let pod_labels = subject.labels();
    let route = |template: &str, need| policies.route(template, need, namespace, &namespace_labels, &pod_labels);
    let chosen = match choice {
        Ok(chosen) => chosen,
        Err(NotChosen::NoTemplates) => return Acting::Webhook(None),
        Err(NotChosen::Unknown(err)) => {
            let name = match err {
                InjectError::UnknownTemplate { name, .. } | InjectError::UnknownNamespaceTemplate { name, .. } => {
                    name.as_str()
                }
                InjectError::NoDefaultTemplate { .. } => crate::template::DEFAULT_TEMPLATE,
                _ => return Acting::Webhook(None),
            };
            return match route(name, Need::UnknownTemplate) {
                Err(why) => Acting::Webhook(Some(why)),
                Ok(route) => refused(&route, webhooks, || {
                    report(Verdict::Deny, Rule::UnknownTemplate, err.to_string())
                }),
            };
        }
    };
    let template = &chosen.template;
    match chosen.plan_without_join(view) {
        // Already holds the sidecar: no policy and no webhook adds anything.
        Ok(Decision::Skip(_)) => Acting::Webhook(None),
        Err(err) => match route(&template.name, Need::Deny) {
            Err(why) => Acting::Webhook(Some(why)),
            Ok(route) => refused(&route, webhooks, || {
                let mut out = denied(&err, template, report);
                out.overrides = asked_overrides(view, template);
                out
            }),
        },
        Ok(Decision::Inject(plan)) => match route(&template.name, Need::Inject) {
            Err(why) => Acting::Webhook(Some(why)),
            Ok(route) => {
                let out = injected(
                    report(Verdict::Inject, *rule, opted.clone()),
                    template,
                    &plan,
                    &subject.pod,
                );
                let mut out = injected_by_policy(out, facts, &route, (&plan, view));
                out.overrides = asked_overrides(view, template);
                Acting::Policy(Box::new(out))
            }
        },
    }
}

/// `out`, injected by the policy of `route`: the webhooks as the API server calls them
/// next (with the Pod the policy made), the join of a Network by one of them, and what is
/// out of step.
fn injected_by_policy(
    mut out: PodReport,
    facts: &Facts<'_>,
    route: &Route,
    (plan, view): (&Plan<'_>, &PodView<'_>),
) -> PodReport {
    let Facts {
        subject,
        installed,
        policies,
        cluster,
        conditions,
        ..
    } = *facts;
    let after = as_injected(&subject.pod, plan, view);
    if let Some(after) = &after {
        let after = Subject {
            pod: after.clone(),
            ..subject.clone()
        };
        out.webhooks = installed
            .webhooks
            .deployed()
            .iter()
            .zip(conditions)
            .map(|(hook, conditions)| match_webhook(hook, conditions, &after, cluster))
            .collect();
    }
    if let Some((held, live)) = &route.out_of_step {
        let template = out.template.as_ref().map(|t| t.name.as_str()).unwrap_or_default();
        out.warnings.push(format!(
            "{} {} holds template `{template}` at revision {held}, the ConfigMap's is revision {live}: until the Lease holder applies the new policies, the Pod gets the template the policy was compiled from",
            route.kind, route.policy
        ));
    }
    out.warnings.extend(policies.templates_out_of_step(&route.policy));
    let mut reason = String::new();
    if let Some(name) = subject.network() {
        let namespace = subject.namespace.as_str();
        let called: Option<WebhookMatch> = out.webhooks.iter().find(|w| w.call == Call::Called).cloned();
        let broken = out
            .webhooks
            .iter()
            .find(|w| w.call == Call::Error && w.fail_closed)
            .cloned();
        match (called, broken) {
            (Some(hook), _) => {
                // The webhook decides on the Pod the policy made: it adds only the join.
                let after = after.as_ref().unwrap_or(&subject.pod);
                let no_templates = || None::<&TemplateSet>;
                if let Decided::JoinOnly { join: Err(err), .. } =
                    inject::decide(&PodView::read(after), namespace, installed.annotation_opt_in, no_templates, cluster)
                {
                    let mut denied = PodReport {
                        verdict: Verdict::Deny,
                        rule: Rule::Network,
                        reason: err.to_string(),
                        adds: Vec::new(),
                        ..out
                    };
                    denied.path = Some(policy_path(
                        route,
                        format!("then webhook {} refuses the join of Network `{name}`", hook.name),
                    ));
                    return denied;
                }
                reason = format!("then webhook {} adds the join of Network `{name}`", hook.name);
            }
            (None, Some(hook)) => {
                let mut denied = PodReport {
                    verdict: Verdict::Deny,
                    rule: Rule::WebhookError,
                    reason: format!(
                        "webhook {}: {}; its failurePolicy Fail refuses the Pod the policy injected",
                        hook.name, hook.reason
                    ),
                    adds: Vec::new(),
                    ..out
                };
                denied.path = Some(policy_path(route, String::new()));
                return denied;
            }
            (None, None) => out.warnings.push(format!(
                "names Network `{name}`, but the API server calls no webhook of {} for the Pod the policy injected: it is created without joining the Network",
                installed.webhook_config
            )),
        }
    }
    out.path = Some(policy_path(route, reason));
    out
}

/// The Pod as the policy leaves it: the engine's patch applied (the policy's is the same).
fn as_injected(pod: &Value, plan: &Plan<'_>, view: &PodView<'_>) -> Option<Value> {
    let patch = inject::jsonpatch::render(plan, view).ok()?;
    let mut after = pod.clone();
    json_patch::patch(&mut after, &patch).ok()?;
    Some(after)
}

#[cfg(test)]
mod tests;
