//! What the API server does with one deployed mutating webhook for a Pod's CREATE: its
//! rules, `namespaceSelector`, `objectSelector` and CEL `matchConditions`, as the API
//! server applies them. Pure: the cluster comes in as data.

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, RuleWithOperations};
use serde_json::Value;

use crate::check::cel;
use crate::check::report::{Call, WebhookMatch};
use crate::cluster::selector;
use crate::cluster::snapshot::{Snapshot, Subject};

fn covers_pod_create(rules: &[RuleWithOperations]) -> bool {
    let has = |list: &Option<Vec<String>>, wanted: &[&str]| {
        list.iter().flatten().any(|v| v == "*" || wanted.contains(&v.as_str()))
    };
    rules.iter().any(|rule| {
        has(&rule.operations, &["CREATE"])
            && has(&rule.api_groups, &[""])
            && has(&rule.api_versions, &["v1"])
            && has(&rule.resources, &["pods", "*/*"])
            && rule.scope.as_deref().is_none_or(|s| s == "*" || s == "Namespaced")
    })
}

/// What the API server does with `hook` (its matchConditions compiled as `conditions`)
/// for this Pod's CREATE.
pub fn match_webhook(
    hook: &MutatingWebhook,
    conditions: &cel::Compiled,
    subject: &Subject,
    cluster: &Snapshot,
) -> WebhookMatch {
    let fail_closed = hook.failure_policy.as_deref().is_none_or(|p| p == "Fail");
    let answer = |call, reason: String| WebhookMatch {
        name: hook.name.clone(),
        call,
        reason,
        fail_closed,
    };
    if !covers_pod_create(hook.rules.as_deref().unwrap_or_default()) {
        return answer(Call::NotCalled, String::from("its rules do not cover Pod CREATE"));
    }
    let namespace_labels = cluster.namespace_labels(&subject.namespace);
    if let Some(selector) = &hook.namespace_selector {
        match selector::unmet(selector, &namespace_labels) {
            Ok(None) => {}
            Ok(Some(unmet)) => {
                return answer(
                    Call::NotCalled,
                    format!(
                        "namespaceSelector wants `{}`: namespace `{}` {}",
                        unmet.wanted, subject.namespace, unmet.found
                    ),
                );
            }
            Err(err) => return answer(Call::Error, format!("namespaceSelector: {err}")),
        }
    }
    if let Some(selector) = &hook.object_selector {
        match selector::unmet(selector, &subject.labels()) {
            Ok(None) => {}
            Ok(Some(unmet)) => {
                return answer(
                    Call::NotCalled,
                    format!("objectSelector wants `{}`: the Pod {}", unmet.wanted, unmet.found),
                );
            }
            Err(err) => return answer(Call::Error, format!("objectSelector: {err}")),
        }
    }
    let name = subject
        .pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let results = conditions.evaluate(&subject.pod, &cel::pod_create_request(&subject.namespace, name));
    if let Some(false_one) = results.iter().find(|r| r.value == Ok(false)) {
        return answer(Call::NotCalled, format!("matchCondition `{}` is false", false_one.name));
    }
    if let Some(broken) = results.iter().find(|r| r.value.is_err()) {
        let why = broken.value.as_ref().err().cloned().unwrap_or_default();
        return answer(
            Call::Error,
            format!("matchCondition `{}` cannot be evaluated ({why})", broken.name),
        );
    }
    let held: Vec<String> = results.iter().map(|r| format!("`{}`", r.name)).collect();
    answer(
        Call::Called,
        if held.is_empty() {
            String::from("selectors match")
        } else {
            format!("selectors match and matchConditions {} hold", held.join(", "))
        },
    )
}
