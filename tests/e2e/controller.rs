//! Tier `controller`: the Network controller at scale, through the real binary (`serve
//! --leader-elect=false --network-backend multus` on loopback, no webhook registered) and
//! the real API server: 300 Networks created in one burst (32 creates in flight), every
//! tenth overlapping the one before it (the plan of `tests/scale/`, shared with `make
//! bench-scale`).
//!
//! * every verdict is right (the senior of each pair Ready, the other `Overlaps` naming
//!   it, all others Ready), each for the Network's current generation, as a watch from
//!   outside sees them;
//! * the burst costs at most 3 reconciles per Network (from `/metrics`, when every verdict
//!   is seen and again once the last reconcile ended);
//! * a restart of the converged controller writes nothing: no request that changes a
//!   Network, its status, a NAD or an Event (from `/metrics`; there is no template
//!   ConfigMap here, so no `TemplatesLoaded` Event either), and the watch sees no event on
//!   the Networks or NADs.
//!
//! The controller reconciles every Network of the cluster, so a namespace of this tier left
//! by a run killed half-way is removed first: its Networks would count in the reconciles.

use std::time::{Duration, Instant};

use envoy_injector::tls;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::scale::{self, Tracker};
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "controller",
    run: |suite| Box::pin(run(suite)),
};

const NETWORKS: usize = 300;
const CREATES_IN_FLIGHT: usize = 32;
/// Bound for the burst and the restart to settle: a safety limit, never a timing expectation.
const SETTLE: Duration = Duration::from_secs(180);
/// The prefix of this tier's namespaces (`TestNs::create`).
const NAMESPACE_PREFIX: &str = "ei-e2e-controller-";
const RECONCILES: &str = "envoy_injector_reconciles_total";
const API_REQUESTS: &str = "envoy_injector_api_requests_total";
/// What a converged restart must not write to, by any verb that writes.
const QUIET_RESOURCES: [&str; 4] = ["networks", "networks/status", "network-attachment-definitions", "events"];
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

async fn run(suite: &Suite) -> TierResult {
    if suite.settings.mode == Mode::InCluster {
        return Err(Skip(
            "E2E_MODE=in-cluster checks the copy `make deploy` installed (tier local); this tier runs a controller \
             of its own, which would fight that copy's"
                .into(),
        ));
    }
    let client = &suite.client;
    suite.install_network_crd().await;
    suite.install_nad_crd().await;
    remove_leftovers(suite).await;
    // Declared first, so it is dropped last: after the processes have stopped.
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(client, &scope, "controller", &[]).await;
    let certs = tls::generate(INJECTOR_NAME, &ns.name, &[], 1).expect("test certificates");
    let tracker = Tracker::start(client, &ns.name);
    let args = [
        "--leader-elect=false",
        "--network-backend",
        "multus",
        "--namespace",
        &ns.name,
    ];
    let (first, _) = serve_on_loopback("controller-1", &certs, &args).await;
    wait_for("/metrics of controller-1 to answer", PATIENCE, async || {
        first.try_metrics().await.map(drop)
    })
    .await;

    let burst = Instant::now();
    scale::create_networks(client, &ns.name, scale::TIER_BASE, 0..NETWORKS, CREATES_IN_FLIGHT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tracker
        .until(SETTLE, "every Network to have its verdict", |seen| {
            seen.values().filter(|s| s.current).count() >= NETWORKS
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let settled = burst.elapsed();
    let wrong = scale::wrong_verdicts(&tracker.snapshot(), &ns.name, NETWORKS);
    assert!(
        wrong.is_empty(),
        "{} wrong verdicts, e.g. {}",
        wrong.len(),
        wrong[0]
    );
    let reconciles = first.metric(RECONCILES, &[]).await;
    assert!(
        reconciles <= (3 * NETWORKS) as f64,
        "expected at most {} reconciles for {NETWORKS} Networks, found {reconciles}",
        3 * NETWORKS
    );
    step!("{NETWORKS} Networks: every verdict right after {settled:.1?}, {reconciles} reconciles");
    // Let the last reconciles finish their Events before stopping.
    reconciled_all(&first, "the burst's reconciles to end").await;
    let reconciles = first.metric(RECONCILES, &[]).await;
    assert!(
        reconciles <= (3 * NETWORKS) as f64,
        "expected at most {} reconciles for {NETWORKS} Networks once the burst ended, found {reconciles}",
        3 * NETWORKS
    );
    let status = first.terminate().await;
    assert!(status.success(), "expected controller-1 to exit cleanly on SIGTERM, found {status}");

    let before = tracker.counts();
    let (second, _) = serve_on_loopback("controller-2", &certs, &args).await;
    let restart = Instant::now();
    reconciled_all(&second, "every Network reconciled after the restart").await;
    let resynced = restart.elapsed();
    // A late write would show within this (the controller debounces by 50 ms).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let metrics = second.metrics().await;
    let writes: Vec<String> = QUIET_RESOURCES
        .iter()
        .flat_map(|resource| WRITE_VERBS.iter().map(move |verb| (*resource, *verb)))
        .filter_map(|(resource, verb)| {
            let n = metric_sum(&metrics, API_REQUESTS, &[("verb", verb), ("resource", resource)]);
            (n > 0.0).then(|| format!("{verb} {resource}: {n}"))
        })
        .collect();
    assert!(
        writes.is_empty(),
        "expected a converged restart to write nothing, found writes {writes:?}"
    );
    let after = tracker.counts();
    assert_eq!(
        after, before,
        "expected no watch event on Networks or NADs during the restart, found (Networks, NADs) {before:?} -> {after:?}"
    );
    let status = second.terminate().await;
    assert!(status.success(), "expected controller-2 to exit cleanly on SIGTERM, found {status}");
    Ok(format!(
        "{NETWORKS} Networks settled in {:.1} s, {reconciles} reconciles in all; restart: all reconciled in {:.1} s, 0 writes",
        settled.as_secs_f64(),
        resynced.as_secs_f64()
    ))
}

/// Waits until `process` has reconciled at least every Network of the plan once.
async fn reconciled_all(process: &Injector, what: &str) {
    wait_for(what, SETTLE, async || {
        let reconciles = metric_sum(&process.try_metrics().await?, RECONCILES, &[]);
        if reconciles >= NETWORKS as f64 {
            Ok(())
        } else {
            Err(format!("{reconciles} reconciles"))
        }
    })
    .await;
}

/// Removes the namespaces of this tier that an earlier run left behind (their Networks'
/// finalizers stripped first: no controller of theirs runs).
async fn remove_leftovers(suite: &Suite) {
    let namespaces: Api<Namespace> = Api::all(suite.client.clone());
    let selector = format!("{}={}", PART_OF.0, PART_OF.1);
    let list = namespaces
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap_or_else(|e| panic!("expected to list the suite's namespaces, found: {}", api_error(&e)));
    let leftovers = Scope::new(suite.settings.mode);
    for name in list.items.iter().map(|n| n.name_any()) {
        if name.starts_with(NAMESPACE_PREFIX) {
            step!("removing namespace {name}, left by an earlier run");
            leftovers.namespace(&name);
        }
    }
}
