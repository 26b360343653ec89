//! The automatic rollout's component (`manifests/auto-rollout/`): rendered through the
//! overlay of `manifests/` the docs give, it grants the ServiceAccount exactly what
//! `serve --auto-rollout` uses and turns the flag on; `manifests/` alone grants none of it.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};

use crate::common::kubectl;
use crate::rbac::{expected_grants, grants};
use crate::support::*;

const ROLLOUT: &str = "envoy-injector-rollout";
const FLAG: &str = "--auto-rollout=true";

/// The overlay docs/operations.md gives, exactly as written there, rendered by kustomize
/// against `manifests/` (laid out as the page has it: beside a checkout `envoy-injector/`).
fn with_component() -> Result<Vec<Doc>, Skip> {
    kubectl::required("the auto-rollout component (`kubectl kustomize` of the documented overlay)")?;
    let page = std::fs::read_to_string(repo("docs/operations.md")).expect("docs/operations.md");
    let section = &page[page.find("## Rolling a template change out").expect("its section")..];
    let overlay: String = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|block| block.split("```").next())
        .expect("a kustomization in the section")
        .lines()
        .map(|line| line.trim_start_matches("   ").to_string() + "\n")
        .collect();
    assert!(
        overlay.contains("  - ../envoy-injector/manifests/auto-rollout\n"),
        "the overlay names the component as ../envoy-injector/manifests/auto-rollout:\n{overlay}"
    );
    Ok(render_overlay(
        &overlay,
        "the documented overlay with the auto-rollout component",
    ))
}

fn named<'d>(docs: &'d [Doc], kind: &str, name: &str) -> Option<&'d Doc> {
    docs.iter().find(|d| d.kind() == kind && d.name() == name)
}

fn args(docs: &[Doc]) -> Vec<String> {
    let deployment: Deployment = one(docs, "Deployment").typed();
    let spec = deployment.spec.and_then(|s| s.template.spec).expect("a Pod template");
    let container = spec
        .containers
        .iter()
        .find(|c| c.name == NAME)
        .expect("the container envoy-injector");
    container.args.clone().unwrap_or_default()
}

pub fn the_component_grants_what_the_automatic_rollout_uses_and_turns_it_on() -> Outcome {
    let docs = with_component()?;
    let cluster_role: ClusterRole = named(&docs, "ClusterRole", ROLLOUT).expect("its ClusterRole").typed();
    assert_eq!(
        grants(cluster_role.rules.as_deref().unwrap_or_default()),
        expected_grants(&[
            ("apps", "deployments", "", &["get", "patch"]),
            ("apps", "statefulsets", "", &["get", "patch"]),
            ("apps", "daemonsets", "", &["get", "patch"]),
            ("apps", "replicasets", "", &["get", "list"]),
            ("", "pods", "", &["create"]),
            (
                "admissionregistration.k8s.io",
                "validatingadmissionpolicies",
                ROLLOUT,
                &["get"]
            ),
            (
                "admissionregistration.k8s.io",
                "validatingadmissionpolicybindings",
                ROLLOUT,
                &["get"]
            ),
        ]),
        "the ClusterRole {ROLLOUT}"
    );
    let role: Role = named(&docs, "Role", ROLLOUT).expect("its Role").typed();
    assert_eq!(role.metadata.namespace.as_deref(), Some(NAMESPACE));
    assert_eq!(
        grants(role.rules.as_deref().unwrap_or_default()),
        expected_grants(&[("", "pods/proxy", "", &["get"])]),
        "the Role {ROLLOUT}: the replicas' /metrics, in the injector's namespace only"
    );
    let binding: ClusterRoleBinding = named(&docs, "ClusterRoleBinding", ROLLOUT)
        .expect("its binding")
        .typed();
    let role_binding: RoleBinding = named(&docs, "RoleBinding", ROLLOUT).expect("its binding").typed();
    for (what, role_ref, subjects) in [
        (
            "ClusterRoleBinding",
            binding.role_ref,
            binding.subjects.unwrap_or_default(),
        ),
        (
            "RoleBinding",
            role_binding.role_ref,
            role_binding.subjects.unwrap_or_default(),
        ),
    ] {
        assert_eq!(role_ref.name, ROLLOUT, "{what}");
        let subjects: Vec<(String, String, Option<String>)> =
            subjects.into_iter().map(|s| (s.kind, s.name, s.namespace)).collect();
        assert_eq!(
            subjects,
            vec![("ServiceAccount".into(), NAME.into(), Some(NAMESPACE.into()))],
            "{what} subjects"
        );
    }
    assert_eq!(
        args(&docs),
        vec!["serve", "--log-format", "json", FLAG],
        "the component turns the automatic rollout on"
    );
    for doc in &docs {
        let text = doc.value["rules"].to_string();
        assert!(!text.contains('*'), "{}: a wildcard", doc.label());
    }
    Ok(())
}

pub fn the_default_manifests_neither_grant_it_nor_turn_it_on() -> Outcome {
    let docs = rendered()?;
    assert!(
        !args(docs).iter().any(|a| a.starts_with("--auto-rollout")),
        "{:?}",
        args(docs)
    );
    for doc in docs.iter().filter(|d| d.kind().ends_with("Role")) {
        let rules = doc.value["rules"].as_array().cloned().unwrap_or_default();
        for rule in rules {
            let groups = rule["apiGroups"].to_string();
            let verbs = rule["verbs"].to_string();
            assert!(
                !(groups.contains("\"apps\"") && verbs.contains("patch")),
                "{}: the default RBAC must not patch workloads, found {rule}",
                doc.label()
            );
        }
        assert!(named(docs, doc.kind(), ROLLOUT).is_none());
    }
    Ok(())
}
