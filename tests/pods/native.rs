//! Tier `native`: the sidecar every Pod gets by default, as the kubelet runs it, through
//! both injection paths (the webhook, then the compiled admission policies). A Pod opted in
//! with nothing else said, holding an init container of its own and an app that takes
//! [`APP_STOP_SECONDS`] to drain on SIGTERM, gets the stand-in proxy as a native sidecar
//! first among its init containers. From the kubelet's container statuses: the Pod's own
//! init container and the app start only after the proxy's startupProbe passed; on delete
//! the proxy exits after the app (it kept running while the app drained). A Pod with
//! `native-sidecar: "false"` is the contrast: its proxy, a regular container, exits at once
//! on SIGTERM while the app still drains.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{DeleteParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "native",
    run: |suite| Box::pin(run(suite)),
};

const NATIVE: &str = "sidecar.samplecrd.k8s.io/native-sidecar";
/// The Pod's own init container.
const INIT: &str = "setup";
/// How long the app takes to drain on SIGTERM.
const APP_STOP_SECONDS: i64 = 3;

async fn run(suite: &Suite) -> TierResult {
    let (installation, images) = installation(suite).await?;
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(&suite.client, &scope, "native", &[]).await;

    let webhook = proven(&ns, "webhook", "by-webhook", &images).await;
    let regular = regular_contrast(&ns, &images).await;

    installation.deploy_with(&images.injector, "policy").await;
    installation.use_stand_in(suite, &images).await;
    let revision = config_revision(&installation).await;
    wait_for("the compiled policies of the stand-in template", RUN_PATIENCE, async || {
        match policy_revision(&suite.client).await {
            Some(r) if r == revision => Ok(()),
            other => Err(format!("policy {ANNOTATED_POLICY} at revision {other:?}, ConfigMap at {revision}")),
        }
    })
    .await;
    let policy = proven(&ns, "the compiled policies", "by-policy", &images).await;
    // Back to the set's installation: the webhook path.
    installation.deploy_with(&images.injector, WEBHOOK).await;
    installation.use_stand_in(suite, &images).await;
    Ok(format!("webhook: {webhook}; policies: {policy}; regular: {regular}"))
}

/// An opted-in Pod with its own init container and a draining app: created, Ready, checked
/// for start order, deleted and checked for stop order. Returns the summary.
async fn proven(ns: &TestNs, path: &str, name: &str, images: &Images) -> String {
    let pod = ns.create_stored(&draining_pod(name, &[(INJECT, "true")], images)).await;
    let spec = pod.spec.as_ref().expect("a stored Pod has a spec");
    let inits: Vec<(&str, Option<&str>)> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.restart_policy.as_deref()))
        .collect();
    assert_eq!(
        inits,
        [(SIDECAR, Some("Always")), (INIT, None)],
        "expected, through {path}, `{SIDECAR}` as a native sidecar before the Pod's own init container, found {}",
        describe_pod(&pod)
    );
    let running = wait_for(&format!("Pod {name} to be Ready"), RUN_PATIENCE, async || {
        let p = ns.pods.get(name).await.map_err(|e| api_error(&e))?;
        ready(&p).map(|()| p)
    })
    .await;
    let proxy = started_at(&running, SIDECAR);
    let (init, app) = (started_at(&running, INIT), started_at(&running, "app"));
    for (what, at) in [("the Pod's own init container", init), ("the app", app)] {
        assert!(
            at - proxy >= STARTUP_SECONDS,
            "expected, through {path}, {what} of Pod {name} to start at least {STARTUP_SECONDS} s after `{SIDECAR}` \
             (its startupProbe), found {} s: {}",
            at - proxy,
            describe_pod(&running)
        );
    }
    step!(
        "through {path}: `{SIDECAR}` native, first; the Pod's init container started {} s and the app {} s after it",
        init - proxy,
        app - proxy
    );

    let stopped = deleted(ns, name).await;
    let (app_end, proxy_end) = (finished_at(&stopped, "app"), finished_at(&stopped, SIDECAR));
    assert!(
        proxy_end >= app_end,
        "expected, through {path}, `{SIDECAR}` of Pod {name} to exit after the app (a native sidecar is stopped last), \
         found the app at {app_end}, `{SIDECAR}` at {proxy_end}: {}",
        describe_pod(&stopped)
    );
    step!("through {path}: on delete the app drained for {APP_STOP_SECONDS} s, `{SIDECAR}` exited after it");
    format!(
        "init +{} s, app +{} s after the proxy; proxy exited {} s after the app",
        init - proxy,
        app - proxy,
        proxy_end - app_end
    )
}

/// The contrast that shows the stop order is the native sidecar's doing: as a regular
/// container the proxy gets SIGTERM with the app and exits while the app still drains.
async fn regular_contrast(ns: &TestNs, images: &Images) -> String {
    let name = "regular";
    let pod = ns
        .create_stored(&draining_pod(name, &[(INJECT, "true"), (NATIVE, "false")], images))
        .await;
    assert!(
        container(&pod, SIDECAR).is_some(),
        "expected `{SIDECAR}` as a regular container with `{NATIVE}: \"false\"`, found {}",
        describe_pod(&pod)
    );
    wait_for(&format!("Pod {name} to be Ready"), RUN_PATIENCE, async || {
        let p = ns.pods.get(name).await.map_err(|e| api_error(&e))?;
        ready(&p)
    })
    .await;
    let stopped = deleted(ns, name).await;
    let (app_end, proxy_end) = (finished_at(&stopped, "app"), finished_at(&stopped, SIDECAR));
    assert!(
        app_end - proxy_end >= APP_STOP_SECONDS - 1,
        "expected the regular `{SIDECAR}` of Pod {name} to exit with SIGTERM, {APP_STOP_SECONDS} s before the app, \
         found the app at {app_end}, `{SIDECAR}` at {proxy_end}"
    );
    step!(
        "contrast, `{NATIVE}: \"false\"`: the regular `{SIDECAR}` exited {} s before the draining app",
        app_end - proxy_end
    );
    format!("proxy exited {} s before the app", app_end - proxy_end)
}

/// An opted-in Pod like [`app_pod`], with an init container of its own and an app that
/// drains for [`APP_STOP_SECONDS`] on SIGTERM.
fn draining_pod(name: &str, annotations: &[(&str, &str)], images: &Images) -> Pod {
    let mut pod = app_pod(name, annotations, images);
    let spec = pod.spec.as_mut().expect("the builder makes a spec");
    spec.termination_grace_period_seconds = Some(GRACE_SECONDS);
    spec.containers[0].command = Some(
        [
            "sh",
            "-c",
            &format!("trap 'sleep {APP_STOP_SECONDS}; exit 0' TERM; while true; do sleep 1; done"),
        ]
        .map(String::from)
        .to_vec(),
    );
    spec.init_containers = Some(vec![
        serde_json::from_value(json!({
            "name": INIT, "image": images.shell, "imagePullPolicy": "IfNotPresent", "command": ["true"],
        }))
        .expect("a container"),
    ]);
    pod
}

/// Deletes Pod `name` and follows it until it is gone: the last state the kubelet wrote
/// (every container terminated, with its `finishedAt`).
async fn deleted(ns: &TestNs, name: &str) -> Pod {
    let current = ns.pods.get(name).await.unwrap_or_else(|e| panic!("Pod {name}: {}", api_error(&e)));
    let version = current.metadata.resource_version.clone().unwrap_or_default();
    let params = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(120);
    let mut events = ns
        .pods
        .watch(&params, &version)
        .await
        .unwrap_or_else(|e| panic!("expected to watch Pod {name}, found: {}", api_error(&e)))
        .boxed();
    ns.pods
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("expected to delete Pod {name}, found: {}", api_error(&e)));
    let mut last = current;
    while let Some(event) = events.next().await {
        match event {
            Ok(WatchEvent::Modified(pod)) => last = pod,
            Ok(WatchEvent::Deleted(pod)) => return pod,
            Ok(_) => {}
            Err(e) => panic!("expected the watch of Pod {name} to run until it is gone, found: {e}"),
        }
    }
    panic!("expected Pod {name} gone within 120 s of its delete, last seen: {}", describe_pod(&last))
}

fn status<'p>(pod: &'p Pod, container: &str) -> &'p ContainerStatus {
    status_of(pod, container).unwrap_or_else(|| {
        panic!(
            "expected a status of container {container} in Pod {}, found {}",
            pod.metadata.name.as_deref().unwrap_or("?"),
            describe_pod(pod)
        )
    })
}

/// When `container` started, in whole seconds: running, or (an init container) done.
fn started_at(pod: &Pod, container: &str) -> i64 {
    let state = status(pod, container).state.as_ref();
    let running = state.and_then(|s| s.running.as_ref()).and_then(|r| r.started_at.as_ref());
    let done = state.and_then(|s| s.terminated.as_ref()).and_then(|t| t.started_at.as_ref());
    running
        .or(done)
        .map(|t| t.0.as_second())
        .unwrap_or_else(|| panic!("expected container {container} started, found {}", describe_pod(pod)))
}

/// When `container` exited, in whole seconds.
fn finished_at(pod: &Pod, container: &str) -> i64 {
    status(pod, container)
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .and_then(|t| t.finished_at.as_ref())
        .map(|t| t.0.as_second())
        .unwrap_or_else(|| panic!("expected container {container} terminated, found {}", describe_pod(pod)))
}
