//! What counts as done, on workloads and Pods as their controllers and the kubelet report
//! them during a rolling update.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetStatus, Deployment, DeploymentCondition, DeploymentSpec, DeploymentStatus, StatefulSet,
    StatefulSetSpec, StatefulSetStatus,
};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, PodCondition, PodStatus,
};
use kube::api::ObjectMeta;

use super::*;
use crate::inject::{REVISION_LABEL, STATUS_ANNOTATION};

fn live() -> TemplateSet {
    TemplateSet::from_data(
        "t",
        &BTreeMap::from([(
            "config".to_string(),
            "containers:\n- name: envoy\n  image: e:2\n".to_string(),
        )]),
        crate::template::KubeVersion::NEWEST,
    )
    .unwrap()
}

fn deployment(generation: i64, status: DeploymentStatus) -> Object {
    Object::Deployment(Box::new(Deployment {
        metadata: ObjectMeta {
            generation: Some(generation),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(2),
            ..DeploymentSpec::default()
        }),
        status: Some(status),
    }))
}

fn rolled(observed: i64, updated: i32, total: i32, available: i32) -> DeploymentStatus {
    DeploymentStatus {
        observed_generation: Some(observed),
        updated_replicas: Some(updated),
        replicas: Some(total),
        available_replicas: Some(available),
        ready_replicas: Some(available),
        ..DeploymentStatus::default()
    }
}

fn pod(name: &str, revision: &str, ready: bool) -> Pod {
    let status = format!(
        r#"{{"template":"config","revision":"{revision}","containers":["envoy"],"initContainers":[],"volumes":[],"imagePullSecrets":[],"nativeSidecar":false}}"#
    );
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(REVISION_LABEL.to_string(), revision.to_string())])),
            annotations: Some(BTreeMap::from([(STATUS_ANNOTATION.to_string(), status)])),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                ready,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

fn waiting(progress: Progress) -> String {
    match progress {
        Progress::Waiting(why) => why,
        other => panic!("expected to wait, found {other:?}"),
    }
}

#[test]
fn a_deployment_is_done_when_rolled_and_every_pod_ready_at_the_live_revision() {
    let live = live();
    let current = live.get("config").unwrap().revision.clone();
    let fine = [pod("web-a", &current, true), pod("web-b", &current, true)];
    assert!(waiting(progress(&deployment(3, rolled(2, 2, 2, 2)), 3, &fine, &live)).contains("not seen the restart"));
    // The controller's word first, then the new Pod that holds it up.
    let surging = [pod("web-old", "aaaaaaaaaaaa", false), pod("web-new", &current, false)];
    assert_eq!(
        waiting(progress(&deployment(3, rolled(3, 1, 2, 0)), 3, &surging, &live)),
        "1 of 2 Pod(s) updated; Pod web-new is not Ready: container(s) app running but not Ready (their readiness probe fails, or a startup probe has not passed yet)"
    );
    assert_eq!(
        waiting(progress(&deployment(3, rolled(3, 1, 3, 2)), 3, &fine, &live)),
        "1 of 2 Pod(s) updated"
    );
    assert_eq!(
        waiting(progress(&deployment(3, rolled(3, 2, 3, 2)), 3, &fine, &live)),
        "1 old Pod(s) still to go"
    );
    assert_eq!(
        waiting(progress(&deployment(3, rolled(3, 2, 2, 1)), 3, &fine, &live)),
        "1 of 2 updated Pod(s) available"
    );
    let done = deployment(3, rolled(3, 2, 2, 2));
    assert_eq!(progress(&done, 3, &fine, &live), Progress::Done);

    let unready = [pod("web-a", &current, true), pod("web-b", &current, false)];
    let why = waiting(progress(&done, 3, &unready, &live));
    assert!(
        why.starts_with("Pod web-b is not Ready: container(s) app running but not Ready"),
        "{why}"
    );
    let stale = [pod("web-a", &current, true), pod("web-b", "aaaaaaaaaaaa", true)];
    assert_eq!(
        waiting(progress(&done, 3, &stale, &live)),
        format!("Pod web-b carries template `config` revision aaaaaaaaaaaa, live {current}")
    );
}

#[test]
fn a_deployment_past_its_progress_deadline_failed() {
    let mut status = rolled(3, 1, 3, 2);
    status.conditions = Some(vec![DeploymentCondition {
        type_: "Progressing".into(),
        status: "False".into(),
        reason: Some("ProgressDeadlineExceeded".into()),
        message: Some("ReplicaSet \"web-7d\" has timed out progressing.".into()),
        ..DeploymentCondition::default()
    }]);
    let Progress::Failed(why) = progress(&deployment(3, status), 3, &[], &live()) else {
        panic!("expected a failure")
    };
    assert!(why.contains("has timed out progressing"), "{why}");
}

#[test]
fn a_stateful_set_and_a_daemon_set_are_done_when_every_pod_is_updated_and_ready() {
    let live = live();
    let set = |current: &str, updated: i32, ready: i32| {
        Object::StatefulSet(Box::new(StatefulSet {
            metadata: ObjectMeta {
                generation: Some(2),
                ..ObjectMeta::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(2),
                ..StatefulSetSpec::default()
            }),
            status: Some(StatefulSetStatus {
                observed_generation: Some(2),
                current_revision: Some(current.into()),
                update_revision: Some("db-2".into()),
                updated_replicas: Some(updated),
                ready_replicas: Some(ready),
                replicas: 2,
                ..StatefulSetStatus::default()
            }),
        }))
    };
    assert_eq!(
        waiting(progress(&set("db-1", 1, 2), 2, &[], &live)),
        "1 of 2 Pod(s) updated"
    );
    assert_eq!(
        waiting(progress(&set("db-1", 2, 2), 2, &[], &live)),
        "2 of 2 Pod(s) updated"
    );
    assert_eq!(
        waiting(progress(&set("db-2", 2, 1), 2, &[], &live)),
        "1 of 2 Pod(s) Ready"
    );
    assert_eq!(progress(&set("db-2", 2, 2), 2, &[], &live), Progress::Done);

    let daemons = |updated: i32, available: i32| {
        Object::DaemonSet(Box::new(DaemonSet {
            metadata: ObjectMeta {
                generation: Some(4),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(DaemonSetStatus {
                observed_generation: Some(4),
                desired_number_scheduled: 1,
                updated_number_scheduled: Some(updated),
                number_available: Some(available),
                ..DaemonSetStatus::default()
            }),
        }))
    };
    assert_eq!(
        waiting(progress(&daemons(0, 1), 4, &[], &live)),
        "0 of 1 Pod(s) updated"
    );
    assert_eq!(
        waiting(progress(&daemons(1, 0), 4, &[], &live)),
        "0 of 1 updated Pod(s) available"
    );
    assert_eq!(progress(&daemons(1, 1), 4, &[], &live), Progress::Done);
}

#[test]
fn why_a_pod_is_not_ready_is_read_from_its_status() {
    let mut crashing = pod("web-a", "x", false);
    let status = crashing.status.as_mut().unwrap();
    status.container_statuses.as_mut().unwrap()[0].state = Some(ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some("CrashLoopBackOff".into()),
            message: Some("back-off 10s restarting failed container".into()),
        }),
        ..ContainerState::default()
    });
    assert_eq!(
        not_ready(&crashing).as_deref(),
        Some("container app CrashLoopBackOff: back-off 10s restarting failed container")
    );
    let mut pending = pod("web-b", "x", false);
    let status = pending.status.as_mut().unwrap();
    status.container_statuses = None;
    status.conditions = Some(vec![PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        message: Some("0/1 nodes are available".into()),
        ..PodCondition::default()
    }]);
    assert_eq!(
        not_ready(&pending).as_deref(),
        Some("not scheduled: 0/1 nodes are available")
    );
    assert_eq!(not_ready(&pod("web-c", "x", true)), None);
}
