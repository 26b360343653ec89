//! The `admission-policies` line: the policies found in the cluster against what the live
//! ConfigMap compiles to, judged by the path `serve` sets up. Pure.

use super::{MUTATING, Object, Policies, Served, labelled};
use crate::cluster::health::{Check, Status};
use crate::policies;
use crate::policies::Path;

const CHECK: &str = "admission-policies";

/// The command that applies the compiled policies by hand, as the Lease holder does.
pub fn apply_command(namespace: &str) -> String {
    format!(
        "kubectl get configmap {name} -n {namespace} -o yaml | {name} policies -f /dev/stdin --namespace {namespace} | kubectl apply --server-side --field-manager={name} -f -",
        name = crate::NAME
    )
}

/// The command that removes every compiled object.
pub fn delete_command() -> String {
    format!(
        "kubectl delete mutatingadmissionpolicy,mutatingadmissionpolicybinding,validatingadmissionpolicy,validatingadmissionpolicybinding -l {}",
        labelled()
    )
}

fn names(objects: &[&Object]) -> String {
    objects.iter().map(|o| o.label()).collect::<Vec<_>>().join(", ")
}

/// The `admission-policies` line.
pub fn admission_policies(policies: &Policies) -> Check {
    let expected = policies.expectation.expected;
    let found = match &policies.found {
        Ok(found) => found,
        Err(err) => {
            let status = if expected == Some(Path::Policy) {
                Status::Fail
            } else {
                Status::Warn
            };
            return Check::new(CHECK, status, err.as_str());
        }
    };
    match expected {
        Some(Path::Webhook) if found.is_empty() => {
            return Check::new(
                CHECK,
                Status::Ok,
                format!("none labelled {}, as the webhook path wants", labelled()),
            );
        }
        Some(Path::Webhook) => {
            let out_of_step = compare(policies, found).out_of_step;
            let note = if out_of_step.is_empty() {
                String::new()
            } else {
                format!(
                    " (and out of step with ConfigMap {}: {})",
                    policies.configmap,
                    out_of_step.join("; ")
                )
            };
            return Check::new(
                CHECK,
                Status::Warn,
                format!(
                    "the webhook path is configured, but {} object(s) labelled {} remain: {}{note}. The API server still runs them: a Pod they match is injected or denied by them, not by the webhook, and nothing keeps them in step with the ConfigMap. Remove them (`{}`) unless they are applied on purpose from `{} policies`",
                    found.len(),
                    labelled(),
                    names(&found.iter().collect::<Vec<_>>()),
                    delete_command(),
                    crate::NAME
                ),
            );
        }
        // Whether the webhook injects instead is the `mutating-webhook` line's to say.
        None if found.is_empty() => {
            return Check::new(
                CHECK,
                Status::Ok,
                format!(
                    "none labelled {}: no admission policy of the injector acts on Pods",
                    labelled()
                ),
            );
        }
        Some(Path::Policy) | None => {}
    }
    if expected == Some(Path::Policy) && policies.served == Served::No {
        return Check::new(
            CHECK,
            Status::Fail,
            "the API server does not serve MutatingAdmissionPolicy v1: none can be applied (see `injection`)",
        );
    }
    let compiled = match &policies.compiled {
        Ok(compiled) => compiled,
        Err(why) => {
            return Check::new(
                CHECK,
                Status::Warn,
                format!(
                    "{} object(s) labelled {} found; cannot tell whether they are in step: {why}",
                    found.len(),
                    labelled()
                ),
            );
        }
    };
    let Comparison {
        missing,
        out_of_step,
        leftovers,
    } = compare(policies, found);
    let problems = [missing, out_of_step].concat();
    let left = if policies.left_to_webhook.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = policies
            .left_to_webhook
            .iter()
            .map(|(template, why)| format!("`{template}` ({why})"))
            .collect();
        format!("; left to the webhook: {}", list.join(", "))
    };
    let leftover = if leftovers.is_empty() {
        String::new()
    } else {
        format!(
            "; left over (their template is gone from the ConfigMap, or left to the webhook): {}; the API server still runs them: remove them",
            names(&leftovers)
        )
    };
    if !problems.is_empty() {
        return Check::new(
            CHECK,
            Status::Fail,
            format!(
                "not in step with ConfigMap {}: {}{leftover}. Until they are in step, a Pod of such a template is injected by the webhook (if it is sent it) or with the revision the policy holds. The Lease holder applies them within a second of a ConfigMap change: wait for it (see `lease`), or apply them: `{}`",
                policies.configmap,
                problems.join("; "),
                apply_command(&policies.injector_namespace)
            ),
        );
    }
    let held = compiled
        .iter()
        .find(|o| o.kind == MUTATING)
        .and_then(|o| o.templates.clone())
        .unwrap_or_default();
    let templates: Vec<String> = held
        .iter()
        .filter(|(name, _)| !policies.left_to_webhook.contains_key(*name))
        .map(|(name, revision)| format!("`{name}` revision {revision}"))
        .collect();
    Check::new(
        CHECK,
        if leftovers.is_empty() { Status::Ok } else { Status::Warn },
        format!(
            "in step with ConfigMap {}: {} ({} object(s): the MutatingAdmissionPolicy holding every template, its bindings by namespace label, Pod label{}, and the ValidatingAdmissionPolicy {} with its binding){left}{leftover}",
            policies.configmap,
            if templates.is_empty() {
                String::from("no template compiled")
            } else {
                format!("template(s) {}", templates.join(", "))
            },
            compiled.len(),
            if policies.annotation_opt_in == crate::inject::AnnotationOptIn::On {
                " and (its copy for) annotation"
            } else {
                ""
            },
            policies::names::REFUSED,
        ),
    )
}

/// Why a Pod created now would not get the live templates from the compiled policies
/// that act on it: those expected are missing or out of step (the `admission-policies`
/// line fails), or, with the webhook path configured, some left over act with an older
/// revision. `None` when they are in step (or none act). `rollout` waits on it.
pub fn lagging(policies: &Policies) -> Option<String> {
    let line = admission_policies(policies);
    if line.status == Status::Fail {
        return Some(line.message);
    }
    let found = policies.found.as_deref().ok()?;
    let out_of_step = compare(policies, found).out_of_step;
    (policies.expectation.expected == Some(Path::Webhook) && !out_of_step.is_empty()).then(|| {
        format!(
            "left over admission policies still act, out of step with ConfigMap {}: {}",
            policies.configmap,
            out_of_step.join("; ")
        )
    })
}

/// What differs between the objects found and those compiled.
struct Comparison<'a> {
    /// Each compiled object not found, worded.
    missing: Vec<String>,
    /// Each one found that is not as compiled (revision label, binding, template list).
    out_of_step: Vec<String>,
    /// Objects found that nothing compiles to now.
    leftovers: Vec<&'a Object>,
}

fn compare<'a>(policies: &Policies, found: &'a [Object]) -> Comparison<'a> {
    let compiled: &[Object] = policies.compiled.as_deref().unwrap_or_default();
    let mut missing = Vec::new();
    let mut out_of_step = Vec::new();
    for want in compiled {
        let Some(have) = found.iter().find(|o| o.kind == want.kind && o.name == want.name) else {
            missing.push(format!("{}: expected it, found none", want.label()));
            continue;
        };
        if let Some(wanted) = &want.templates {
            out_of_step.extend(templates_differ(have, wanted, &policies.configmap));
        }
        if have.policy_name != want.policy_name {
            out_of_step.push(format!(
                "{}: binds `{}`, expected `{}`",
                have.label(),
                have.policy_name.as_deref().unwrap_or_default(),
                want.policy_name.as_deref().unwrap_or_default()
            ));
        }
    }
    let leftovers = found
        .iter()
        .filter(|have| {
            !compiled
                .iter()
                .any(|want| want.kind == have.kind && want.name == have.name)
        })
        .collect();
    Comparison {
        missing,
        out_of_step,
        leftovers,
    }
}

/// How the templates a mutating policy found holds differ from `wanted`, those the live
/// ConfigMap compiles to, each worded.
fn templates_differ(
    have: &Object,
    wanted: &std::collections::BTreeMap<String, String>,
    configmap: &str,
) -> Vec<String> {
    let held = have.templates.clone().unwrap_or_default();
    let mut out = Vec::new();
    for (name, revision) in wanted {
        match held.get(name) {
            Some(found) if found == revision => {}
            Some(found) => out.push(format!(
                "{}: holds template `{name}` at revision {found}, expected {revision} (ConfigMap {configmap})",
                have.label()
            )),
            None => out.push(format!(
                "{}: does not hold template `{name}` of ConfigMap {configmap} (it refuses a Pod choosing it)",
                have.label()
            )),
        }
    }
    for name in held.keys().filter(|name| !wanted.contains_key(*name)) {
        out.push(format!(
            "{}: holds template `{name}`, which ConfigMap {configmap} no longer has",
            have.label()
        ));
    }
    out
}
