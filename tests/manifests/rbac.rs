//! RBAC: no `*` anywhere, and exactly the permissions the process needs.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde_json::Value;

use crate::support::*;

/// (apiGroup, resource, resourceName or "", verb) for every permission a rule grants.
pub(crate) fn grants(rules: &[PolicyRule]) -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in rules {
        let names = rule.resource_names.clone().unwrap_or_default();
        let names = if names.is_empty() { vec![String::new()] } else { names };
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for name in &names {
                    for verb in &rule.verbs {
                        out.insert((group.clone(), resource.clone(), name.clone(), verb.clone()));
                    }
                }
            }
        }
    }
    out
}

pub(crate) fn expected_grants(table: &[(&str, &str, &str, &[&str])]) -> BTreeSet<(String, String, String, String)> {
    table
        .iter()
        .flat_map(|(group, resource, name, verbs)| {
            verbs.iter().map(move |verb| {
                (
                    group.to_string(),
                    resource.to_string(),
                    name.to_string(),
                    verb.to_string(),
                )
            })
        })
        .collect()
}

/// What policy mode does with the compiled admission policies: server-side apply (an
/// apply that creates is authorised as `create` too), read back, delete. No `update`,
/// `watch` or `deletecollection`; `create` and the reads on any name, `patch` and
/// `delete` only on the compiled objects' names.
pub(crate) const POLICY_CREATE_READ: &[&str] = &["get", "list", "create"];
pub(crate) const POLICY_BY_NAME: &[&str] = &["patch", "delete"];

fn strings_in(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings_in(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings_in(v, out)),
        _ => {}
    }
}

pub fn rbac_is_least_privilege_without_wildcards() -> Outcome {
    let docs = rendered()?;
    for doc in docs.iter().filter(|d| d.kind().contains("Role")) {
        let mut strings = Vec::new();
        strings_in(&doc.value["rules"], &mut strings);
        let wild: Vec<&String> = strings.iter().filter(|s| s.contains('*')).collect();
        assert!(
            wild.is_empty(),
            "expected no wildcard in the rules of {}, found {wild:?}",
            doc.label()
        );
    }

    let role: Role = one(docs, "Role").typed();
    let found = grants(role.rules.as_deref().unwrap_or_default());
    let expected = expected_grants(&[
        ("", "configmaps", NAME, &["get", "list", "watch"]),
        ("", "secrets", "", &["create"]),
        ("", "secrets", "envoy-injector-tls", &["get", "list", "watch", "update"]),
        ("coordination.k8s.io", "leases", "", &["create"]),
        (
            "coordination.k8s.io",
            "leases",
            "envoy-injector-controller",
            &["get", "list", "watch", "update", "patch"],
        ),
    ]);
    assert_eq!(found, expected, "the Role's permissions (namespace {NAMESPACE})");

    let cluster_role: ClusterRole = one(docs, "ClusterRole").typed();
    let found = grants(cluster_role.rules.as_deref().unwrap_or_default());
    let expected = expected_grants(&[
        (
            "samplecrd.k8s.io",
            "networks",
            "",
            &["get", "list", "watch", "patch", "update"],
        ),
        ("samplecrd.k8s.io", "networks/status", "", &["get", "patch", "update"]),
        ("samplecrd.k8s.io", "networks/finalizers", "", &["update"]),
        (
            "k8s.cni.cncf.io",
            "network-attachment-definitions",
            "",
            &["get", "list", "watch", "create", "update", "delete"],
        ),
        ("", "pods", "", &["get", "list", "watch"]),
        ("", "namespaces", "", &["get", "list", "watch"]),
        ("events.k8s.io", "events", "", &["create", "patch"]),
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            NAME,
            &["get", "patch"],
        ),
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            NAME,
            &["get", "patch"],
        ),
        // Policy mode: create, read back (bounded by the guard); patch and delete by name.
        (
            "admissionregistration.k8s.io",
            "mutatingadmissionpolicies",
            "",
            POLICY_CREATE_READ,
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingadmissionpolicybindings",
            "",
            POLICY_CREATE_READ,
        ),
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
            "",
            POLICY_CREATE_READ,
        ),
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
            "",
            POLICY_CREATE_READ,
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingadmissionpolicies",
            "envoy-injector-inject",
            POLICY_BY_NAME,
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingadmissionpolicies",
            "envoy-injector-inject-annotated",
            POLICY_BY_NAME,
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingadmissionpolicybindings",
            "envoy-injector-inject-namespace",
            POLICY_BY_NAME,
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingadmissionpolicybindings",
            "envoy-injector-inject-label",
            POLICY_BY_NAME,
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingadmissionpolicybindings",
            "envoy-injector-inject-annotated",
            POLICY_BY_NAME,
        ),
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
            "envoy-injector-refused",
            POLICY_BY_NAME,
        ),
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
            "envoy-injector-refused",
            POLICY_BY_NAME,
        ),
    ]);
    assert_eq!(found, expected, "the ClusterRole's permissions");
    assert!(
        cluster_role.aggregation_rule.is_none(),
        "no aggregation into the ClusterRole"
    );

    // Both bindings give their role to the injector's ServiceAccount, and only to it.
    let account = one(docs, "ServiceAccount");
    assert_eq!(account.name(), NAME);
    let role_binding: RoleBinding = one(docs, "RoleBinding").typed();
    let cluster_binding: ClusterRoleBinding = one(docs, "ClusterRoleBinding").typed();
    for (what, role_ref, subjects) in [
        (
            "RoleBinding",
            &role_binding.role_ref,
            role_binding.subjects.clone().unwrap_or_default(),
        ),
        (
            "ClusterRoleBinding",
            &cluster_binding.role_ref,
            cluster_binding.subjects.clone().unwrap_or_default(),
        ),
    ] {
        let kind = what.trim_end_matches("Binding");
        assert_eq!(
            (role_ref.kind.as_str(), role_ref.name.as_str()),
            (kind, NAME),
            "{what} roleRef"
        );
        let subjects: Vec<(String, String, Option<String>)> =
            subjects.into_iter().map(|s| (s.kind, s.name, s.namespace)).collect();
        assert_eq!(
            subjects,
            vec![(
                "ServiceAccount".to_string(),
                NAME.to_string(),
                Some(NAMESPACE.to_string())
            )],
            "{what} subjects"
        );
    }
    Ok(())
}
