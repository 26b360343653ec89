//! Tier `sidecars`: injected sidecars as a kubelet runs them. A Deployment of 2 opted-in
//! replicas with `native-sidecar: "true"` becomes Available with the stand-in proxy running
//! in each; the proxy's startupProbe holds the app back until the proxy has started (read
//! from the containers' `startedAt`); the app sees the volume the template shares; a proxy
//! that exits is restarted by the kubelet while the app keeps running; deleting a Pod stops
//! both containers well within its grace period (they exit on SIGTERM, nothing waits for
//! the SIGKILL).

use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};

use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "sidecars",
    run: |suite| Box::pin(run(suite)),
};

const NATIVE: &str = "sidecar.samplecrd.k8s.io/native-sidecar";
const APP: &str = "web";

async fn run(suite: &Suite) -> TierResult {
    let (_installation, images) = installation(suite).await?;
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(&suite.client, &scope, "sidecars", &[]).await;
    let deployments: Api<Deployment> = Api::namespaced(suite.client.clone(), &ns.name);

    let mut web = deployment(APP, 2, &[(INJECT, "true"), (NATIVE, "true")], &images.shell);
    let spec = web.spec.as_mut().and_then(|s| s.template.spec.as_mut()).expect("the builder makes a Pod spec");
    spec.containers[0].command = Some(APP_COMMAND.iter().map(|s| s.to_string()).collect());
    spec.termination_grace_period_seconds = Some(GRACE_SECONDS);
    let started = Instant::now();
    deployments
        .create(&PostParams::default(), &web)
        .await
        .unwrap_or_else(|e| panic!("expected to create Deployment {APP}, found: {}", api_error(&e)));
    wait_for("Deployment web to be Available with 2 replicas", RUN_PATIENCE, async || {
        let d = deployments.get(APP).await.map_err(|e| api_error(&e))?;
        rolled_out(&d)
    })
    .await;
    let available = started.elapsed().as_secs_f64();
    let pods = app_pods(&ns).await;
    assert_eq!(pods.len(), 2, "expected 2 Pods of Deployment {APP}, found {}", pods.len());
    for pod in &pods {
        running(pod, &["app", SIDECAR]).unwrap_or_else(|e| panic!("expected both containers running: {e}"));
        started_after_the_sidecar(pod);
    }
    step!("Deployment {APP}: 2 replicas Available in {available:.1} s, `{SIDECAR}` running in each, the app started after it");

    let first = pods[0].metadata.name.clone().unwrap_or_default();
    let shared = exec(&ns.name, &first, "app", &["test", "-f", STARTED_FILE]).await;
    assert!(
        shared.status.success(),
        "expected the app of Pod {first} to see {STARTED_FILE} written by `{SIDECAR}` in the shared volume, found {}",
        describe_output(&shared)
    );
    step!("the app of {first} sees {STARTED_FILE}, written by the sidecar in the shared volume");

    let restart = sidecar_restarted_alone(&ns, &first).await;
    let stop = deletion_is_graceful(&ns, &pods[1]).await;
    Ok(format!(
        "Available in {available:.1} s, sidecar restarted in {restart:.1} s, Pod deleted in {stop:.1} s of its {GRACE_SECONDS} s grace"
    ))
}

async fn app_pods(ns: &TestNs) -> Vec<Pod> {
    ns.pods
        .list(&ListParams::default().labels(&format!("app={APP}")))
        .await
        .unwrap_or_else(|e| panic!("expected to list the Pods of {APP}, found: {}", api_error(&e)))
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// A native sidecar, started (its startupProbe passed), and the app started at least
/// [`STARTUP_SECONDS`] after the sidecar: the kubelet waited for the probe. (`startedAt`
/// has whole seconds; truncating both keeps the inequality.)
fn started_after_the_sidecar(pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let spec = pod.spec.as_ref().expect("a stored Pod has a spec");
    let native = spec
        .init_containers
        .iter()
        .flatten()
        .any(|c| c.name == SIDECAR && c.restart_policy.as_deref() == Some("Always"));
    assert!(native, "expected `{SIDECAR}` as a native sidecar in Pod {name}, found {}", describe_pod(pod));
    let started_at = |container: &str| {
        status_of(pod, container)
            .and_then(|s| s.state.as_ref())
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.as_ref())
            .map(|t| t.0)
            .unwrap_or_else(|| panic!("expected container {container} of Pod {name} running with a startedAt"))
    };
    let sidecar = status_of(pod, SIDECAR).expect("the sidecar has a status");
    assert_eq!(sidecar.started, Some(true), "expected `{SIDECAR}` started in Pod {name}");
    let (proxy, app) = (started_at(SIDECAR), started_at("app"));
    let gap = app.as_second() - proxy.as_second();
    assert!(
        gap >= STARTUP_SECONDS,
        "expected the app of Pod {name} to start at least {STARTUP_SECONDS} s after `{SIDECAR}` (its startupProbe), \
         found {gap} s (sidecar {proxy}, app {app})"
    );
}

/// The proxy exits (SIGTERM to its PID 1); the kubelet starts it again, the app keeps
/// running, untouched. Returns the seconds until the proxy ran again.
async fn sidecar_restarted_alone(ns: &TestNs, name: &str) -> f64 {
    let before = ns.pods.get(name).await.unwrap_or_else(|e| panic!("Pod {name}: {}", api_error(&e)));
    let app_before = status_of(&before, "app").cloned().expect("the app has a status");
    let restarts_before = status_of(&before, SIDECAR).map_or(0, |s| s.restart_count);
    let started = Instant::now();
    let killed = exec(&ns.name, name, SIDECAR, &["kill", "1"]).await;
    assert!(killed.status.success(), "expected `kill 1` in `{SIDECAR}` to succeed, found {}", describe_output(&killed));
    let after = wait_for("the kubelet to restart the sidecar", RUN_PATIENCE, async || {
        let p = ns.pods.get(name).await.map_err(|e| api_error(&e))?;
        let restarts = status_of(&p, SIDECAR).map_or(0, |s| s.restart_count);
        if restarts > restarts_before {
            running(&p, &["app", SIDECAR]).map(|()| p)
        } else {
            Err(format!("`{SIDECAR}` restarts {restarts}"))
        }
    })
    .await;
    let took = started.elapsed().as_secs_f64();
    let app_after = status_of(&after, "app").cloned().expect("the app has a status");
    assert_eq!(
        (app_after.restart_count, app_after.container_id.clone()),
        (app_before.restart_count, app_before.container_id.clone()),
        "expected the app of Pod {name} untouched while `{SIDECAR}` restarted"
    );
    step!("`{SIDECAR}` of {name} exited and was restarted in {took:.1} s; the app kept running (same container)");
    took
}

