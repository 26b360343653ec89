//! Tier `rollouts`: nothing is lost while the injector itself changes. Opted-in Pods are
//! created one every ~50 ms (never scheduled: they prove admission) while, in turn,
//! - `kubectl rollout restart` replaces both injector replicas,
//! - one injector Pod is deleted, as a node drain or an eviction would,
//! - `make deploy IMAGE=$E2E_IMAGE_NEXT` rolls the injector to another image tag (and, as
//!   it always does, puts the shipped template back: Pods of that phase may get either).
//!
//! Each phase lasts until the Deployment is rolled out again and at least [`AT_LEAST`]
//! Pods were created; each must end with 0 failed creates (no retry) and every Pod
//! carrying the sidecar. The slowest create of each phase is printed.

use std::time::{Duration, Instant};

use kube::api::DeleteParams;

use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "rollouts",
    run: |suite| Box::pin(run(suite)),
};

/// The container of the shipped template, which `make deploy` makes live again.
const SHIPPED_SIDECAR: &str = "envoy";
/// Pods each phase creates at least.
const AT_LEAST: usize = 150;
const PAUSE: Duration = Duration::from_millis(50);

async fn run(suite: &Suite) -> TierResult {
    let (installation, images) = installation(suite).await?;
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(&suite.client, &scope, "rollouts", &[]).await;
    let mut figures = Vec::new();

    let report = phase(&ns, &installation, "restart", async || {
        let out = kubectl(&["-n", INJECTOR_NAMESPACE, "rollout", "restart", &format!("deployment/{INJECTOR_NAME}")], None).await;
        assert!(out.status.success(), "expected `kubectl rollout restart` to succeed, found {}", describe_output(&out));
    })
    .await;
    figures.push(format!("rollout restart: {report}"));

    let report = phase(&ns, &installation, "delete", async || {
        let victim = installation.live_pods().await.into_iter().next().expect("an injector Pod to delete");
        let name = victim.metadata.name.clone().unwrap_or_default();
        installation
            .pods
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("expected to delete injector Pod {name}, found: {}", api_error(&e)));
        step!("deleted injector Pod {name}");
        // Rolled out again only once its replacement is Ready and it is gone.
        wait_for("the deleted injector Pod to be gone", RUN_PATIENCE, async || {
            let found = installation.pods.get_opt(&name).await.map_err(|e| api_error(&e))?;
            match found {
                Some(p) if p.metadata.uid == victim.metadata.uid => Err(format!("{name} still terminating")),
                _ => Ok(()),
            }
        })
        .await;
    })
    .await;
    figures.push(format!("delete one: {report}"));

    match &images.injector_next {
        Some(next) => {
            // To whichever of the two tags is not running now, so that the image changes.
            let running = installation.image().await;
            let to = if running.as_deref() == Some(next.as_str()) { &images.injector } else { next };
            let report = phase(&ns, &installation, "update", async || {
                installation.deploy(to).await;
            })
            .await;
            let now = installation.image().await;
            assert_eq!(now.as_deref(), Some(to.as_str()), "expected the injector rolled to {to} (from {running:?})");
            installation.use_stand_in(suite, &images).await;
            figures.push(format!("update {} -> {to}: {report}", running.unwrap_or_default()));
        }
        None => {
            skipped(
                "pods tier rollouts' rolling update to a new tag",
                "E2E_IMAGE_NEXT is not set: load a second tag of the injector image on the node and name it \
                 (`make e2e-node` and `make e2e` do)",
            );
            figures.push("update SKIPPED (no E2E_IMAGE_NEXT)".to_string());
        }
    }
    Ok(figures.join("; "))
}

/// Runs a Pod loop around `change`, until the injector is rolled out again and
/// [`AT_LEAST`] Pods were made; asserts none failed and all were injected. Returns its
/// figures.
async fn phase(ns: &TestNs, installation: &Installation, name: &str, change: impl AsyncFnOnce()) -> String {
    step!("phase {name}: Pods created every {} ms meanwhile", PAUSE.as_millis());
    let started = Instant::now();
    let pods = PodLoop::start(ns, name, DEFAULT_IMAGE, PAUSE, false);
    change().await;
    wait_for("the injector to be rolled out again", RUN_PATIENCE, async || installation.rolled_out().await).await;
    let changed = started.elapsed();
    wait_for(&format!("the loop to create {AT_LEAST} Pods"), RUN_PATIENCE, async || {
        match pods.created() {
            n if n >= AT_LEAST => Ok(()),
            n => Err(format!("{n} created")),
        }
    })
    .await;
    let report = pods.stop().await;
    assert!(
        report.failed.is_empty(),
        "expected no failed create during phase {name}, found {}: {:?}",
        report.failed.len(),
        report.failed
    );
    let stored = ns.loop_pods_injected(name, &[SIDECAR, SHIPPED_SIDECAR]).await;
    assert_eq!(stored, report.created, "expected every Pod the loop created of phase {name} to be stored");
    let summary = format!("rolled out again in {:.1} s; {}", changed.as_secs_f64(), report.summary());
    step!("phase {name}: {summary}");
    summary
}
