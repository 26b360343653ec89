//! The bound on the automatic rollout's rights: the ValidatingAdmissionPolicy
//! [`NAME`] and its binding, shipped with those rights (`manifests/auto-rollout/bound.yaml`,
//! the chart's `autoRollout`). Tools apply and delete unknown kinds in their own order, so
//! the rights may be in place before the bound, or after it is gone: the automatic rollout
//! restarts nothing until it has read both, in place and binding the installation's
//! ServiceAccount. [`judge`] is that reading, pure; [`read`] fetches what it reads.

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::api::Api;

/// The policy's name, and its binding's.
pub const NAME: &str = "envoy-injector-rollout";

/// The installation's ServiceAccount, in the injector's namespace: the one the bound must
/// name as its parameter.
pub const SERVICE_ACCOUNT: &str = crate::NAME;

/// What the bound must hold for the automatic rollout to act: the ServiceAccount it binds
/// (`namespace/name`) and what it refuses.
const RESOURCES: [(&str, &str); 4] = [
    ("", "pods"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
];

/// `Ok` when `policy` and `binding` bound the ServiceAccount `namespace/account`: both
/// present and not being deleted, the policy failing closed, taking a ServiceAccount as its
/// parameter, matching Pods and the three workload kinds, processed by the API server (its
/// status observed this generation); the binding of that policy, denying, not narrowed, its
/// parameter that ServiceAccount. `Err` says what was expected and what was found.
pub fn judge(
    policy: Option<&ValidatingAdmissionPolicy>,
    binding: Option<&ValidatingAdmissionPolicyBinding>,
    namespace: &str,
    account: &str,
) -> Result<(), String> {
    let Some(policy) = policy else {
        return Err(format!("expected ValidatingAdmissionPolicy {NAME}, found none"));
    };
    let Some(binding) = binding else {
        return Err(format!("expected ValidatingAdmissionPolicyBinding {NAME}, found none"));
    };
    if policy.metadata.deletion_timestamp.is_some() {
        return Err(format!("ValidatingAdmissionPolicy {NAME} is being deleted"));
    }
    if binding.metadata.deletion_timestamp.is_some() {
        return Err(format!("ValidatingAdmissionPolicyBinding {NAME} is being deleted"));
    }
    let spec = policy.spec.as_ref();
    let failure = spec.and_then(|s| s.failure_policy.as_deref()).unwrap_or("Fail");
    if failure != "Fail" {
        return Err(format!(
            "expected ValidatingAdmissionPolicy {NAME} with failurePolicy Fail, found {failure}"
        ));
    }
    let param = spec.and_then(|s| s.param_kind.as_ref());
    let param_kind = param.map(|p| (p.api_version.as_deref().unwrap_or(""), p.kind.as_deref().unwrap_or("")));
    if param_kind != Some(("v1", "ServiceAccount")) {
        return Err(format!(
            "expected ValidatingAdmissionPolicy {NAME} to take a v1 ServiceAccount as its parameter, found {param_kind:?}"
        ));
    }
    let rules: Vec<_> = spec
        .and_then(|s| s.match_constraints.as_ref())
        .and_then(|m| m.resource_rules.as_ref())
        .into_iter()
        .flatten()
        .collect();
    for (group, resource) in RESOURCES {
        let matched = rules.iter().any(|r| {
            let has = |list: &Option<Vec<String>>, want: &str| list.iter().flatten().any(|x| x == want || x == "*");
            has(&r.api_groups, group)
                && has(&r.resources, resource)
                && ["CREATE", "UPDATE", "DELETE"].iter().all(|op| has(&r.operations, op))
        });
        if !matched {
            let what = if group.is_empty() {
                resource.to_string()
            } else {
                format!("{resource}.{group}")
            };
            return Err(format!(
                "expected ValidatingAdmissionPolicy {NAME} to match CREATE, UPDATE and DELETE of {what}, found no such rule"
            ));
        }
    }
    if spec.and_then(|s| s.validations.as_ref()).is_none_or(Vec::is_empty) {
        return Err(format!(
            "expected ValidatingAdmissionPolicy {NAME} to hold its validations, found none"
        ));
    }
    let observed = policy.status.as_ref().and_then(|s| s.observed_generation);
    if observed.is_none() || observed != policy.metadata.generation {
        return Err(format!(
            "expected the API server to have processed ValidatingAdmissionPolicy {NAME} (generation {:?}), found status for generation {observed:?}",
            policy.metadata.generation
        ));
    }
    let bspec = Some(&binding.spec);
    let bound_policy = binding.spec.policy_name.as_str();
    if bound_policy != NAME {
        return Err(format!(
            "expected ValidatingAdmissionPolicyBinding {NAME} to bind policy {NAME}, found policy {bound_policy:?}"
        ));
    }
    let actions: Vec<&str> = binding.spec.validation_actions.iter().map(String::as_str).collect();
    if !actions.contains(&"Deny") {
        return Err(format!(
            "expected ValidatingAdmissionPolicyBinding {NAME} to Deny, found validationActions {actions:?}"
        ));
    }
    if bspec.and_then(|s| s.match_resources.as_ref()).is_some() {
        return Err(format!(
            "expected ValidatingAdmissionPolicyBinding {NAME} to bind every request its policy matches, found matchResources narrowing it"
        ));
    }
    let param_ref = bspec.and_then(|s| s.param_ref.as_ref());
    let names = param_ref.map(|p| {
        (
            p.namespace.as_deref().unwrap_or(""),
            p.name.as_deref().unwrap_or(""),
            p.selector.is_some(),
        )
    });
    if names != Some((namespace, account, false)) {
        let found = match names {
            None => "no paramRef".to_string(),
            Some((_, _, true)) => "a paramRef by selector".to_string(),
            Some((ns, name, false)) => format!("ServiceAccount {ns}/{name}"),
        };
        return Err(format!(
            "expected ValidatingAdmissionPolicyBinding {NAME} to bound ServiceAccount {namespace}/{account} (its paramRef), found {found}"
        ));
    }
    Ok(())
}

/// Reads the policy and its binding (`get`, by name) and judges them.
pub async fn read(client: &kube::Client, namespace: &str) -> Result<(), String> {
    let policy = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .get_opt(NAME)
        .await
        .map_err(|e| format!("cannot read ValidatingAdmissionPolicy {NAME}: {e}"))?;
    let binding = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .get_opt(NAME)
        .await
        .map_err(|e| format!("cannot read ValidatingAdmissionPolicyBinding {NAME}: {e}"))?;
    judge(policy.as_ref(), binding.as_ref(), namespace, SERVICE_ACCOUNT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
        let text = include_str!("../../manifests/auto-rollout/bound.yaml");
        let mut docs = text.split("\n---\n");
        let mut policy: ValidatingAdmissionPolicy =
            serde_yaml_ng::from_str(docs.next().expect("the policy")).expect("a ValidatingAdmissionPolicy");
        let binding: ValidatingAdmissionPolicyBinding =
            serde_yaml_ng::from_str(docs.next().expect("the binding")).expect("a binding");
        policy.metadata.generation = Some(1);
        policy.status = Some(
            k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyStatus {
                observed_generation: Some(1),
                ..Default::default()
            },
        );
        (policy, binding)
    }

    #[test]
    fn the_shipped_bound_bounds_the_shipped_service_account() {
        let (policy, binding) = shipped();
        assert_eq!(
            judge(Some(&policy), Some(&binding), "envoy-injector", SERVICE_ACCOUNT),
            Ok(())
        );
    }

    #[test]
    fn another_namespace_s_service_account_is_not_bounded_by_it() {
        let (policy, binding) = shipped();
        let err = judge(Some(&policy), Some(&binding), "platform", SERVICE_ACCOUNT).unwrap_err();
        assert_eq!(
            err,
            "expected ValidatingAdmissionPolicyBinding envoy-injector-rollout to bound ServiceAccount platform/envoy-injector (its paramRef), found ServiceAccount envoy-injector/envoy-injector"
        );
    }

    #[test]
    fn nothing_is_restarted_without_both() {
        let (policy, binding) = shipped();
        assert_eq!(
            judge(None, Some(&binding), "envoy-injector", SERVICE_ACCOUNT).unwrap_err(),
            "expected ValidatingAdmissionPolicy envoy-injector-rollout, found none"
        );
        assert_eq!(
            judge(Some(&policy), None, "envoy-injector", SERVICE_ACCOUNT).unwrap_err(),
            "expected ValidatingAdmissionPolicyBinding envoy-injector-rollout, found none"
        );
    }

    #[test]
    fn a_weakened_bound_is_named() {
        type Weaken = fn(&mut ValidatingAdmissionPolicy, &mut ValidatingAdmissionPolicyBinding);
        let cases: Vec<(&str, Weaken)> = vec![
            ("failurePolicy Fail, found Ignore", |p, _| {
                p.spec.as_mut().unwrap().failure_policy = Some("Ignore".into());
            }),
            ("to Deny, found validationActions [\"Audit\"]", |_, b| {
                b.spec.validation_actions = vec!["Audit".into()];
            }),
            ("found matchResources narrowing it", |_, b| {
                b.spec.match_resources = Some(Default::default());
            }),
            ("found status for generation Some(1)", |p, _| {
                p.metadata.generation = Some(2);
            }),
            ("is being deleted", |_, b| {
                b.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
            }),
            (
                "to match CREATE, UPDATE and DELETE of daemonsets.apps, found no such rule",
                |p, _| {
                    let rules = p
                        .spec
                        .as_mut()
                        .unwrap()
                        .match_constraints
                        .as_mut()
                        .unwrap()
                        .resource_rules
                        .as_mut()
                        .unwrap();
                    rules[1].resources = Some(vec!["deployments".into(), "statefulsets".into()]);
                },
            ),
            ("found a paramRef by selector", |_, b| {
                b.spec.param_ref.as_mut().unwrap().selector = Some(Default::default());
            }),
        ];
        for (expected, weaken) in cases {
            let (mut policy, mut binding) = shipped();
            weaken(&mut policy, &mut binding);
            let err = judge(Some(&policy), Some(&binding), "envoy-injector", SERVICE_ACCOUNT).expect_err(expected);
            assert!(
                err.contains(expected),
                "expected a refusal saying {expected:?}, found {err:?}"
            );
        }
    }
}
