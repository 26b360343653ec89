//! Tier `upgrade`: a rolling upgrade as the shipped Deployment does it (`maxUnavailable: 0`,
//! `maxSurge: 1`), with processes for Pods: start one new process (`--reuse-port`, on the
//! same ClusterIP:port), wait until it is ready, SIGTERM one old one, until every replica
//! is new; meanwhile Pods are created in a loop through the API server. Proves 0 failed
//! creates and 0 stored opted-in Pods without the sidecar, and that a new replica holds the
//! Lease at the end. Measures each controller handover: from the SIGTERM of the Lease
//! holder until a live replica holds the Lease (no replica reconciles meanwhile).

use std::time::{Duration, Instant};

use crate::support::*;

pub const TIER: Tier = Tier {
    name: "upgrade",
    run: |suite| Box::pin(run(suite)),
};

/// Longest accepted time from the SIGTERM of the Lease holder to a new holder: its
/// shutdown (controller stop, release) and one acquisition, with room for a loaded machine.
const HANDOVER_BOUND: Duration = Duration::from_secs(5);

async fn run(suite: &Suite) -> TierResult {
    let install = suite.install().await?;
    let client = &suite.client;
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(client, &scope, "upgrade", &[]).await;
    let replicas = install.replicas;
    let mut old: Vec<Injector> = Vec::new();
    for i in 0..replicas {
        old.push(install.start(&format!("envoy-injector-e2e-old-{i}"), true).await);
    }
    for process in &old {
        process.wait_ready().await;
    }
    install.wait_leader(client, &old.iter().collect::<Vec<_>>()).await;

    let loop_ = PodLoop::start(&ns, "upgrade", DEFAULT_IMAGE, LOOP_PAUSE, false);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let mut new: Vec<Injector> = Vec::new();
    let mut handovers = Vec::new();
    for i in 0..replicas {
        let process = install.start(&format!("envoy-injector-e2e-new-{i}"), true).await;
        process.wait_ready().await;
        new.push(process);
        // Old and new serve side by side for a moment, as while the Deployment's
        // terminating Pod waits out its preStop sleep.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let retired = old.remove(0);
        let held = install.lease_holder(client).await.ok().flatten() == Some(retired.name.clone());
        let sigterm = Instant::now();
        let status = retired.terminate().await;
        assert!(
            status.success(),
            "expected {} to shut down cleanly on SIGTERM, found {status}; the end of its log:\n{}",
            retired.name,
            retired.log_tail(40)
        );
        step!("{} ready, {} stopped ({status})", new[i].name, retired.name);
        if held {
            let live: Vec<&Injector> = old.iter().chain(&new).collect();
            let names: Vec<&str> = live.iter().map(|p| p.name.as_str()).collect();
            let what = format!("one of {names:?} to take Lease {} from {}", install.lease, retired.name);
            let taker = wait_every(&what, PATIENCE * 2, Duration::from_millis(50), async || {
                match install.lease_holder(client).await? {
                    Some(h) if names.contains(&h.as_str()) => Ok(h),
                    other => Err(format!("holder {other:?}")),
                }
            })
            .await;
            let handover = sigterm.elapsed();
            step!("{taker} holds the Lease {:.2} s after the SIGTERM of {}", handover.as_secs_f64(), retired.name);
            // A standby sees the release through its Lease watch; before that it waited
            // for the expiry it last read, up to the lease duration (15 s).
            assert!(
                handover < HANDOVER_BOUND,
                "expected a live replica to hold the Lease within {HANDOVER_BOUND:?} of the SIGTERM of {}, took {handover:?}",
                retired.name
            );
            handovers.push(handover);
        }
    }
    let rollout = started.elapsed();
    // Pods keep coming while the last old process is gone.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = loop_.stop().await;
    let stored = ns.loop_pods_injected("upgrade", &[&install.sidecar]).await;
    shout(&format!(
        "e2e upgrade: rolling upgrade of {replicas} replicas in {:.1} s under a Pod loop: {}",
        rollout.as_secs_f64(),
        report.summary()
    ));
    assert!(
        report.failed.is_empty(),
        "expected no failed create during the upgrade, found {}: {:?}",
        report.failed.len(),
        report.failed
    );
    assert_eq!(stored, report.created, "stored Pods of the loop vs creates that succeeded");
    let holder = install.wait_leader(client, &new.iter().collect::<Vec<_>>()).await;
    let handovers: Vec<String> = handovers.iter().map(|h| format!("{:.2} s", h.as_secs_f64())).collect();
    shout(&format!(
        "e2e upgrade: controller handovers (SIGTERM of the Lease holder to a live holder): {}",
        handovers.join(", ")
    ));
    Ok(format!(
        "rollout {:.1} s; {}; handovers {}; Lease held by {holder}",
        rollout.as_secs_f64(),
        report.summary(),
        handovers.join(", ")
    ))
}
