//! Tier `replicas`: two processes as the Deployment's two Pods, both on the Service's
//! ClusterIP:port (with no kube-proxy, one address can have several endpoints only if the
//! processes share the socket: `--reuse-port`). Proves that exactly one holds the Lease and
//! reconciles Networks (the other's reconcile counter stays 0, Events name the holder); that
//! after SIGKILL of the holder the other takes over within lease duration + retry period;
//! and that while Pods are created in a loop meanwhile, every stored opted-in Pod carries
//! the sidecar (creates that failed because a call was in flight at the SIGKILL are retried
//! once and counted).

use std::time::{Duration, Instant};

use crate::support::*;

pub const TIER: Tier = Tier {
    name: "replicas",
    run: |suite| Box::pin(run(suite)),
};

/// How long a follower may take, once the Lease has expired, to hold it: kube-lease-manager
/// wakes at the expiry, releases the stale Lease, waits a random 0.1 to 1 s (so followers do
/// not collide) and takes it, a few API calls in all. client-go's default retry period, 2 s,
/// covers that.
const RETRY_PERIOD: Duration = Duration::from_secs(2);

async fn run(suite: &Suite) -> TierResult {
    let install = suite.install().await?;
    let client = &suite.client;
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(client, &scope, "replicas", &[]).await;
    let a = install.start("envoy-injector-e2e-a", true).await;
    let b = install.start("envoy-injector-e2e-b", true).await;
    a.wait_ready().await;
    b.wait_ready().await;

    let holder = install.wait_leader(client, &[&a, &b]).await;
    let (leader, follower) = if holder == a.name { (&a, &b) } else { (&b, &a) };
    // The holder writes the Lease first and sets its gauge a moment later.
    let roles = wait_for("envoy_injector_leader to be 1 on the Lease holder", PATIENCE, async || {
        let roles = (
            leader.metric("envoy_injector_leader", &[]).await,
            follower.metric("envoy_injector_leader", &[]).await,
        );
        if roles.0 == 1.0 { Ok(roles) } else { Err(format!("(holder, other) = {roles:?}")) }
    })
    .await;
    assert_eq!(roles, (1.0, 0.0), "envoy_injector_leader of (holder, other)");
    only_reconciler(&ns, "e2e-before", "198.18.82.0/24", leader, Some(follower)).await;
    step!("{} holds Lease {} and alone reconciles", leader.name, install.lease);

    let lease_duration = install.lease_duration(client).await;
    let bound = lease_duration + RETRY_PERIOD;
    let loop_ = PodLoop::start(&ns, "kill", DEFAULT_IMAGE, LOOP_PAUSE, true);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let killed = Instant::now();
    leader.signal(libc::SIGKILL);
    step!("SIGKILL {} (pid {})", leader.name, leader.pid());
    let what = format!("{} to take over Lease {}", follower.name, install.lease);
    wait_every(&what, bound + PATIENCE, Duration::from_millis(100), async || {
        match install.lease_holder(client).await? {
            Some(h) if h == follower.name => Ok(()),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
    let takeover = killed.elapsed();
    shout(&format!(
        "e2e replicas: Lease takeover {:.1} s after SIGKILL of the holder (bound: lease duration {} s + retry period {} s)",
        takeover.as_secs_f64(),
        lease_duration.as_secs(),
        RETRY_PERIOD.as_secs()
    ));
    assert!(
        takeover <= bound,
        "expected {} to hold the Lease within {bound:?} of the SIGKILL, took {takeover:?}",
        follower.name
    );
    only_reconciler(&ns, "e2e-after", "198.18.83.0/24", follower, None).await;

    let report = loop_.stop().await;
    let stored = ns.loop_pods_injected("kill", &[&install.sidecar]).await;
    shout(&format!(
        "e2e replicas: Pod loop during the SIGKILL: {}; retried: {:?}",
        report.summary(),
        report.retried
    ));
    assert!(
        report.failed.is_empty(),
        "expected every create to succeed at the latest on its retry, found: {:?}",
        report.failed
    );
    assert_eq!(stored, report.created, "stored Pods of the loop vs creates that succeeded");
    Ok(format!(
        "takeover {:.1} s (bound {:.0} s); {}",
        takeover.as_secs_f64(),
        bound.as_secs_f64(),
        report.summary()
    ))
}

/// A new Network becomes Ready with Events from `reconciler` only, which has reconciled,
/// and `idle` (when still running) has reconciled nothing at all.
async fn only_reconciler(ns: &TestNs, name: &str, cidr: &str, reconciler: &Injector, idle: Option<&Injector>) {
    let gateway = cidr.replace(".0/24", ".1");
    ns.create_network(name, cidr, &gateway).await;
    ns.network_ready(name, PATIENCE).await;
    let reporters = ns.network_reporters(name).await;
    assert!(
        reporters.iter().all(|r| *r == reconciler.name),
        "expected the Events about Network {name} reported by {} only, found {reporters:?}",
        reconciler.name
    );
    const RECONCILES: &str = "envoy_injector_reconciles_total";
    let busy = reconciler.metric(RECONCILES, &[]).await;
    assert!(busy > 0.0, "expected reconciles by {}, found {busy}", reconciler.name);
    if let Some(idle) = idle {
        let none = idle.metric(RECONCILES, &[]).await;
        assert_eq!(none, 0.0, "expected no reconcile by {}, which does not hold the Lease", idle.name);
    }
}
