//! The Network controller against a real API server (the cluster in `KUBECONFIG`; in CI the
//! control plane of `../shared/k8s/`), through the real binary: 300 Networks created in one
//! burst, every tenth overlapping the one before it.
//!
//! * every verdict is right (the senior of each pair Ready, the other `Overlaps` naming
//!   it, all others Ready), each for the Network's current generation;
//! * the burst costs at most 3 reconciles per Network (from `/metrics`);
//! * a restart of the converged controller writes nothing: no request that changes a
//!   Network, its status, a NAD or an Event (from `/metrics`; there is no template
//!   ConfigMap here, so no `TemplatesLoaded` Event either), and a watch from outside sees
//!   no event on the Networks or NADs.
//!
//! Skipped with one `SKIPPED` line on stderr when `KUBECONFIG` is unset. Runs in its own
//! namespace, removed at the end.

#[path = "scale/mod.rs"]
mod scale;

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PostParams};
use scale::{Result, Served, Tracker};

const NETWORKS: usize = 300;
/// A safety bound for each wait, never a timing expectation.
const PATIENCE: Duration = Duration::from_secs(180);

/// One line on the process's real stderr (libtest captures `eprintln!` of passing tests).
fn shout(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[test]
fn burst_verdicts_reconcile_budget_and_a_quiet_restart() {
    if std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty()) {
        shout(
            "SKIPPED controller_cluster: KUBECONFIG is not set; point it at any cluster (a local control plane, or `make kind-up`) to run this test",
        );
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = Client::try_default()
            .await
            .unwrap_or_else(|e| panic!("KUBECONFIG is set but no client can be built from it: {e}"));
        scale::install_crds(&client).await.unwrap();
        scale::remove_leftovers(&client, "controller-cluster-").await;
        let namespace = format!("controller-cluster-{}", std::process::id());
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("cannot create namespace {namespace}: {e}"));
        let outcome = scenario(&client, &namespace).await;
        scale::cleanup(&client, &namespace, 32).await;
        if let Err(e) = outcome {
            panic!("{e}");
        }
    });
}

async fn scenario(client: &Client, namespace: &str) -> Result<()> {
    let bin = Path::new(env!("CARGO_BIN_EXE_envoy-injector"));
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    scale::certs(bin, dir.path())?;
    let tracker = Tracker::start(client, namespace);
    let first = Served::start(bin, namespace, dir.path(), &dir.path().join("serve-1.log"), &[])?;
    scale::wait_for(PATIENCE, "/metrics to answer", || async {
        first.metrics().await.is_ok()
    })
    .await?;

    scale::create_networks(client, namespace, 0..NETWORKS, 32).await?;
    tracker
        .until(PATIENCE, "every Network to have its verdict", |seen| {
            seen.values().filter(|s| s.current).count() >= NETWORKS
        })
        .await?;
    let wrong = scale::wrong_verdicts(&tracker.snapshot(), NETWORKS);
    if !wrong.is_empty() {
        return Err(format!("{} wrong verdicts, e.g. {}", wrong.len(), wrong[0]));
    }
    let reconciles = first.metrics().await?.reconciles();
    if reconciles > 3 * NETWORKS as u64 {
        return Err(format!(
            "expected at most {} reconciles for {NETWORKS} Networks, found {reconciles}",
            3 * NETWORKS
        ));
    }
    // Let the last reconciles finish their Events before stopping.
    scale::wait_for(PATIENCE, "the burst's reconciles to end", || async {
        first.metrics().await.is_ok_and(|m| m.reconciles() >= NETWORKS as u64)
    })
    .await?;
    first.stop().await?;

    let before = tracker.counts();
    let second = Served::start(bin, namespace, dir.path(), &dir.path().join("serve-2.log"), &[])?;
    scale::wait_for(PATIENCE, "every Network reconciled after the restart", || async {
        second.metrics().await.is_ok_and(|m| m.reconciles() >= NETWORKS as u64)
    })
    .await?;
    // A late write would show within this (the controller debounces by 50 ms).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = second.metrics().await?.writes();
    let ours: Vec<_> = writes
        .iter()
        .filter(|(resource, n)| {
            **n > 0
                && matches!(
                    resource.as_str(),
                    "networks" | "networks/status" | "network-attachment-definitions" | "events"
                )
        })
        .collect();
    if !ours.is_empty() {
        return Err(format!(
            "expected a converged restart to write nothing, found writes {ours:?}"
        ));
    }
    let after = tracker.counts();
    if after != before {
        return Err(format!(
            "expected no watch event on Networks or NADs during the restart, found (Networks, NADs) {before:?} -> {after:?}"
        ));
    }
    second.stop().await?;
    Ok(())
}
