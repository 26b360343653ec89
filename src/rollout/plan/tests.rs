//! The plan on plain data: which workloads are restarted, in which order, and which are
//! left with what to do.

use k8s_openapi::api::apps::v1::{
    DaemonSetSpec, DaemonSetUpdateStrategy, DeploymentSpec, RollingUpdateStatefulSetStrategy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use kube::api::ObjectMeta;

use super::*;

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

fn deployment(namespace: &str, name: &str, paused: bool) -> Object {
    Object::Deployment(Box::new(Deployment {
        metadata: meta(namespace, name),
        spec: Some(DeploymentSpec {
            paused: Some(paused),
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }))
}

fn stateful_set(namespace: &str, name: &str, strategy: &str, partition: Option<i32>) -> Object {
    Object::StatefulSet(Box::new(StatefulSet {
        metadata: meta(namespace, name),
        spec: Some(StatefulSetSpec {
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some(strategy.into()),
                rolling_update: partition.map(|p| RollingUpdateStatefulSetStrategy {
                    partition: Some(p),
                    ..RollingUpdateStatefulSetStrategy::default()
                }),
            }),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }))
}

fn daemon_set(namespace: &str, name: &str, strategy: &str) -> Object {
    Object::DaemonSet(Box::new(DaemonSet {
        metadata: meta(namespace, name),
        spec: Some(DaemonSetSpec {
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some(strategy.into()),
                rolling_update: None,
            }),
            ..DaemonSetSpec::default()
        }),
        ..DaemonSet::default()
    }))
}

fn group(kind: &str, namespace: &str, name: &str) -> StaleGroup {
    StaleGroup {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
        template: "config".into(),
        revisions: vec!["aaaaaaaaaaaa".into()],
        live_revision: Some("bbbbbbbbbbbb".into()),
        pods: vec![format!("{name}-1")],
        fix: format!("the fix of {name}"),
    }
}

fn key(kind: Kind, namespace: &str, name: &str) -> (Kind, String, String) {
    (kind, namespace.into(), name.into())
}

fn scene() -> (Vec<StaleGroup>, Objects) {
    let groups = vec![
        group("StatefulSet", "apps", "db"),
        group("DaemonSet", "apps", "agent"),
        group("Deployment", "other", "web"),
        group("Deployment", "apps", "web"),
        group("Deployment", "apps", "paused"),
        group("StatefulSet", "apps", "legacy"),
        group("StatefulSet", "apps", "part"),
        group("DaemonSet", "apps", "node"),
        group("Pod", "apps", "loose"),
        group("Job", "apps", "batch"),
        group("ReplicaSet", "apps", "bare"),
        group("Deployment", "apps", "gone"),
        group("Deployment", "apps", "unselected"),
    ];
    let objects = Objects::from([
        (
            key(Kind::StatefulSet, "apps", "db"),
            Some(stateful_set("apps", "db", "RollingUpdate", Some(0))),
        ),
        (
            key(Kind::DaemonSet, "apps", "agent"),
            Some(daemon_set("apps", "agent", "RollingUpdate")),
        ),
        (
            key(Kind::Deployment, "other", "web"),
            Some(deployment("other", "web", false)),
        ),
        (
            key(Kind::Deployment, "apps", "web"),
            Some(deployment("apps", "web", false)),
        ),
        (
            key(Kind::Deployment, "apps", "paused"),
            Some(deployment("apps", "paused", true)),
        ),
        (
            key(Kind::StatefulSet, "apps", "legacy"),
            Some(stateful_set("apps", "legacy", "OnDelete", None)),
        ),
        (
            key(Kind::StatefulSet, "apps", "part"),
            Some(stateful_set("apps", "part", "RollingUpdate", Some(2))),
        ),
        (
            key(Kind::DaemonSet, "apps", "node"),
            Some(daemon_set("apps", "node", "OnDelete")),
        ),
        (key(Kind::Deployment, "apps", "gone"), None),
    ]);
    (groups, objects)
}

#[test]
fn workloads_that_roll_are_restarted_by_namespace_then_kind_then_name() {
    let (groups, objects) = scene();
    let plan = plan(&groups, &objects, true);
    let order: Vec<String> = plan.restart.iter().map(|t| t.workload.to_string()).collect();
    assert_eq!(
        order,
        vec![
            "Deployment apps/web",
            "StatefulSet apps/db",
            "DaemonSet apps/agent",
            "Deployment other/web",
        ]
    );
    assert_eq!(plan.restart[0].stale[0].pods, vec!["web-1"]);
}

#[test]
fn every_other_workload_is_left_with_why_and_what_to_do() {
    let (groups, objects) = scene();
    let plan = plan(&groups, &objects, true);
    let left: Vec<(String, &str, &str)> = plan
        .left
        .iter()
        .map(|l| (l.workload.to_string(), l.reason.as_str(), l.fix.as_str()))
        .collect();
    let find = |workload: &str| {
        left.iter()
            .find(|(w, _, _)| w == workload)
            .unwrap_or_else(|| panic!("expected {workload} left, found {left:#?}"))
    };
    let (_, reason, fix) = find("Deployment apps/paused");
    assert!(
        reason.contains("paused") && fix.starts_with("kubectl rollout resume deployment/paused -n apps"),
        "{fix}"
    );
    let (_, reason, fix) = find("StatefulSet apps/legacy");
    assert!(
        reason.contains("OnDelete") && fix.contains("kubectl delete pod -n apps"),
        "{reason} / {fix}"
    );
    let (_, reason, fix) = find("StatefulSet apps/part");
    assert!(
        reason.contains("partition is 2") && fix.contains(r#""partition":0"#),
        "{reason} / {fix}"
    );
    let (_, reason, _) = find("DaemonSet apps/node");
    assert!(reason.contains("OnDelete"), "{reason}");
    let (_, reason, fix) = find("Pod apps/loose");
    assert!(
        reason.contains("bare Pod") && *fix == "the fix of loose",
        "{reason} / {fix}"
    );
    let (_, reason, _) = find("Job apps/batch");
    assert!(reason.contains("run to completion"), "{reason}");
    let (_, reason, _) = find("ReplicaSet apps/bare");
    assert!(reason.contains("without a Deployment"), "{reason}");
    let (_, reason, _) = find("Deployment apps/gone");
    assert!(reason.contains("not found"), "{reason}");
    assert_eq!(left.len(), 8, "{left:#?}");
    assert!(
        !left.iter().any(|(w, _, _)| w.contains("unselected")),
        "a workload the selector does not pick is neither restarted nor listed"
    );
}

#[test]
fn with_a_selector_owners_without_labels_to_select_are_not_listed() {
    let (groups, objects) = scene();
    let plan = plan(&groups, &objects, false);
    let left: Vec<String> = plan.left.iter().map(|l| l.workload.to_string()).collect();
    for kind in ["Pod", "Job", "ReplicaSet"] {
        assert!(!left.iter().any(|w| w.starts_with(kind)), "{left:?}");
    }
    assert_eq!(plan.restart.len(), 4);
}

#[test]
fn two_templates_of_one_workload_are_one_restart() {
    let mut canary = group("Deployment", "apps", "web");
    canary.template = "canary".into();
    let groups = vec![group("Deployment", "apps", "web"), canary];
    let objects = Objects::from([(
        key(Kind::Deployment, "apps", "web"),
        Some(deployment("apps", "web", false)),
    )]);
    let plan = plan(&groups, &objects, true);
    assert_eq!(plan.restart.len(), 1);
    let templates: Vec<&str> = plan.restart[0].stale.iter().map(|s| s.template.as_str()).collect();
    assert_eq!(templates, vec!["config", "canary"]);
}
