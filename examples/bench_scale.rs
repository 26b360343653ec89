//! `make bench-scale`: the Network controller at scale, against the cluster in
//! `KUBECONFIG` (the shared control plane here), through the API only.
//!
//! Starts the release binary (`serve --leader-elect=false --network-backend multus`, no
//! webhook registered) on loopback ports, applies the Network CRD and Multus' NAD CRD
//! (`tests/fixtures/nad-crd.yaml`), then in one fresh namespace:
//!
//! Every Network takes a /30 (or /31) of 198.18.64.0 to 198.18.204.159 at N = 10,000
//! (`tests/scale`'s plan): inside 198.18.0.0/16, never a private range.
//!
//! 1. creates N Networks in one burst (every tenth overlaps the one before it), and waits
//!    until each has its verdict for its generation (Ready, or Overlaps naming its senior);
//! 2. creates M member Pods (labelled directly), spread over the Ready Networks, and waits
//!    until every `attachedPods` is right;
//! 3. restarts the controller (SIGTERM, start again) and measures its writes and its time
//!    until every Network was reconciled;
//! 4. creates one more Network and measures create → Ready;
//! 5. one change among them all: a newcomer with Network 0's cidr reports `Overlaps`;
//!    Network 0 is deleted, waits for its member Pods (`InUse`), they are deleted, it goes,
//!    and the newcomer turns Ready; the reconciles each change cost (an index lookup and
//!    the Networks it concerns, never a pass over all);
//! 6. restarts once more with `--watch-uninjected=false`: the steady RSS against step 3's
//!    is what the uninjected-Pod watch holds for the M Pods (none injected, so all held).
//!
//! Reconciles and API writes come from the binary's `/metrics`, memory from
//! `/proc/PID/status` (VmRSS steady, VmHWM peak). Environment: `BENCH_NETWORKS` (10000),
//! `BENCH_PODS` (10000), `BENCH_CONCURRENCY` (creates in flight, 32), `BENCH_BIN`
//! (`target/release/envoy-injector`), `BENCH_SERVE_ARGS` (extra `serve` flags, e.g.
//! `--api-qps 200`), `BENCH_KEEP=1` to leave the namespace behind.

#[path = "../tests/common/kit.rs"]
mod common;
#[path = "../tests/scale/mod.rs"]
mod scale;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::poll;
use envoy_injector::inject::join::NETWORK_LABEL;
use envoy_injector::network::crd::IN_USE;
use envoy_injector::network::crd::Network;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use scale::{POLL, Result, Served, Tracker, reconciles, writes};
use serde_json::json;

/// Safety bound for each phase to finish: generous, never the measurement.
const PATIENCE: Duration = Duration::from_secs(900);

struct Settings {
    networks: usize,
    pods: usize,
    concurrency: usize,
    bin: PathBuf,
    serve_args: Vec<String>,
    keep: bool,
}

fn settings() -> Result<Settings> {
    Ok(Settings {
        networks: scale::env_number("BENCH_NETWORKS", 10_000)?,
        pods: scale::env_number("BENCH_PODS", 10_000)?,
        concurrency: scale::env_number("BENCH_CONCURRENCY", 32)?.max(1),
        bin: scale::bench_bin(),
        serve_args: std::env::var("BENCH_SERVE_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect(),
        keep: scale::bench_keep(),
    })
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn writes_line(writes: &BTreeMap<String, u64>) -> String {
    let total: u64 = writes.values().sum();
    let parts: Vec<String> = writes.iter().map(|(r, n)| format!("{r} {n}")).collect();
    if parts.is_empty() {
        "0".into()
    } else {
        format!("{total} ({})", parts.join(", "))
    }
}

fn minus(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(r, n)| (r.clone(), n - before.get(r).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Memory after things settled: a few seconds for the allocator to give back what it can.
async fn steady_memory(served: &Served) -> Result<(u64, u64)> {
    tokio::time::sleep(Duration::from_secs(3)).await;
    served.memory()
}

fn main() -> ExitCode {
    scale::run_benchmark("bench-scale", run)
}

async fn run() -> Result<()> {
    let s = settings()?;
    let (client, stamp) = scale::prepare(&s.bin, "bench-scale-").await?;
    let namespace = format!("bench-scale-{stamp}");
    scale::create_namespace(&client, &namespace).await?;
    let result = measure(&s, &client, &namespace).await;
    if !s.keep {
        scale::cleanup(&client, &namespace, s.concurrency).await;
    }
    result
}

async fn measure(s: &Settings, client: &Client, namespace: &str) -> Result<()> {
    let (n, m) = (s.networks, s.pods);
    let dir = scale::scratch("bench-scale")?;
    scale::certs(&s.bin, &dir)?;
    let configmap: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "envoy-injector"},
        "data": {"config": include_str!("../crates/engine/src/template/default-template.yaml")}
    }))
    .map_err(|e| e.to_string())?;
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &configmap)
        .await
        .map_err(|e| format!("cannot create the ConfigMap: {e}"))?;
    let extra: Vec<&str> = s.serve_args.iter().map(String::as_str).collect();
    let tracker = Tracker::start(client, namespace);

    println!(
        "bench-scale: {n} Networks ({} overlap an older one), then {m} member Pods, in namespace {namespace}",
        n / 10
    );
    println!(
        "serve flags: --leader-elect=false --network-backend multus {}",
        extra.join(" ")
    );
    let served = Served::start(&s.bin, namespace, &dir, &dir.join("serve-1.log"), &extra).await?;
    poll::until_true("/readyz", PATIENCE, POLL, async || served.ready().await).await?;
    let (idle_rss, _) = served.memory()?;
    println!("idle RSS after start: {}", mib(idle_rss));

    // 1. The Network burst.
    let first_create = Instant::now();
    let last_create = scale::create_networks(client, namespace, scale::BENCH_BASE, 0..n, s.concurrency).await?;
    let all_settled = tracker
        .until(PATIENCE, "every Network to have its verdict", |seen| {
            seen.len() >= n && seen.values().filter(|x| x.current).count() >= n
        })
        .await?;
    let wrong = scale::wrong_verdicts(&tracker.snapshot(), namespace, n);
    let metrics = served.metrics().await?;
    let (rss, peak) = steady_memory(&served).await?;
    let burst_reconciles = reconciles(&metrics);
    let burst_writes = writes(&metrics);
    println!("\n1. Network burst");
    println!(
        "   created {n} in {:.1} s ({} in flight)",
        (last_create - first_create).as_secs_f64(),
        s.concurrency
    );
    println!(
        "   last create -> all {n} settled: {:.2} s; verdicts right: {}",
        all_settled.saturating_duration_since(last_create).as_secs_f64(),
        if wrong.is_empty() {
            "all".to_string()
        } else {
            format!("{} WRONG, e.g. {}", wrong.len(), wrong[0])
        }
    );
    println!(
        "   reconciles: {burst_reconciles} ({:.2} per Network)",
        burst_reconciles as f64 / n as f64
    );
    println!("   API writes: {}", writes_line(&burst_writes));
    println!("   RSS: steady {}, peak {}", mib(rss), mib(peak));

    // 2. Member Pods.
    // Pods join Networks that are Ready whichever way their pair was decided.
    let ready: Vec<usize> = (0..n).filter(|i| i % 10 != 8 && i % 10 != 9).collect();
    let mut expected: HashMap<String, i64> = HashMap::new();
    if m > 0 {
        scale::default_service_account(client, namespace).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let first_pod = Instant::now();
        let results: Vec<Result<()>> = futures::stream::iter(0..m)
            .map(|j| {
                let network = scale::planned(scale::BENCH_BASE, ready[j % ready.len()]).0;
                let pods = pods.clone();
                async move {
                    let pod: Pod = serde_json::from_value(json!({
                        "metadata": {"name": format!("pod-{j:05}"), "labels": {envoy_injector::inject::join::NETWORK_LABEL: network}},
                        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
                    }))
                    .map_err(|e| e.to_string())?;
                    pods.create(&PostParams::default(), &pod)
                        .await
                        .map(|_| ())
                        .map_err(|e| format!("cannot create Pod pod-{j:05}: {e}"))
                }
            })
            .buffer_unordered(s.concurrency)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<()>>>()?;
        let last_pod = Instant::now();
        for j in 0..m {
            *expected
                .entry(scale::planned(scale::BENCH_BASE, ready[j % ready.len()]).0)
                .or_insert(0) += 1;
        }
        let counted = tracker
            .until(PATIENCE, "every attachedPods to be right", |seen| {
                expected
                    .iter()
                    .all(|(name, count)| seen.get(name).is_some_and(|x| x.attached == *count))
            })
            .await?;
        let after = served.metrics().await?;
        let (rss, peak) = steady_memory(&served).await?;
        let pod_reconciles = reconciles(&after) - burst_reconciles;
        println!("\n2. {m} member Pods over {} Networks", ready.len().min(m));
        println!(
            "   created in {:.1} s; last create -> every count right: {:.2} s",
            (last_pod - first_pod).as_secs_f64(),
            counted.saturating_duration_since(last_pod).as_secs_f64()
        );
        println!(
            "   reconciles: +{pod_reconciles} ({:.2} per Pod)",
            pod_reconciles as f64 / m as f64
        );
        println!(
            "   API writes: +{}",
            writes_line(&minus(&writes(&after), &burst_writes))
        );
        println!(
            "   RSS: steady {}, peak {} ({} bytes per object over idle, {n} Networks + {m} Pods)",
            mib(rss),
            mib(peak),
            (rss.saturating_sub(idle_rss)) * 1024 / (n + m) as u64
        );
    }

    // 3. Restart.
    let events_before = count_events(client, namespace, "Network").await?;
    served.stop().await?;
    let (network_events, nad_events) = tracker.counts();
    let served = Served::start(&s.bin, namespace, &dir, &dir.join("serve-2.log"), &extra).await?;
    poll::until_true(
        "every Network reconciled after the restart",
        PATIENCE,
        POLL,
        async || served.metrics().await.is_ok_and(|m| reconciles(&m) >= n as u64),
    )
    .await?;
    let reconciled = served.started.elapsed();
    poll::until_true("/readyz after the restart", PATIENCE, POLL, async || {
        served.ready().await
    })
    .await?;
    let readyz = served.started.elapsed();
    // Late writes would show within a few seconds.
    let (rss, peak) = steady_memory(&served).await?;
    let restart_rss = rss;
    let after = served.metrics().await?;
    let (network_events_after, nad_events_after) = tracker.counts();
    let events_after = count_events(client, namespace, "Network").await?;
    println!("\n3. Restart (SIGTERM, start again) with {n} Networks and {m} Pods converged");
    println!(
        "   every Network reconciled {:.2} s after start ({} reconciles; /readyz at {:.2} s)",
        reconciled.as_secs_f64(),
        reconciles(&after),
        readyz.as_secs_f64()
    );
    println!("   API writes: {}", writes_line(&writes(&after)));
    println!(
        "   seen from outside: {} Network watch events, {} NAD watch events, {} new Events about Networks",
        network_events_after - network_events,
        nad_events_after - nad_events,
        events_after.saturating_sub(events_before)
    );
    println!("   RSS: steady {}, peak {}", mib(rss), mib(peak));

    // 4. One more Network.
    let (name, spec, _) = scale::planned(scale::BENCH_BASE, if n % 10 == 9 { n + 1 } else { n });
    let api: Api<Network> = Api::namespaced(client.clone(), namespace);
    let created = Instant::now();
    api.create(&PostParams::default(), &Network::new(&name, spec))
        .await
        .map_err(|e| format!("cannot create Network {name}: {e}"))?;
    tracker
        .until(Duration::from_secs(60), "the new Network to turn Ready", |seen| {
            seen.get(&name)
                .is_some_and(|x| x.current && x.ready.as_deref() == Some("True"))
        })
        .await?;
    let ready_at = tracker.snapshot()[&name].settled_at.unwrap_or_else(Instant::now);
    println!("\n4. A new Network after the restart");
    println!(
        "   create -> Ready: {:.0} ms",
        ready_at.saturating_duration_since(created).as_secs_f64() * 1e3
    );

    // 5. One change among them all.
    let users = expected
        .get(&scale::planned(scale::BENCH_BASE, 0).0)
        .copied()
        .unwrap_or(0);
    one_change(client, namespace, &served, &tracker, n, users).await?;
    served.stop().await?;

    // 6. The same restart without the uninjected-Pod watch.
    let mut without: Vec<&str> = extra.clone();
    without.push("--watch-uninjected=false");
    let served = Served::start(&s.bin, namespace, &dir, &dir.join("serve-3.log"), &without).await?;
    poll::until_true(
        "every Network reconciled (--watch-uninjected=false)",
        PATIENCE,
        POLL,
        async || served.metrics().await.is_ok_and(|m| reconciles(&m) >= n as u64),
    )
    .await?;
    poll::until_true("/readyz (--watch-uninjected=false)", PATIENCE, POLL, async || {
        served.ready().await
    })
    .await?;
    let (unwatched_rss, _) = steady_memory(&served).await?;
    served.stop().await?;
    println!("\n6. The same restart with --watch-uninjected=false");
    println!(
        "   RSS steady {} (with the watch: {}): {} bytes per Pod for the watch of {m} Pods, none injected",
        mib(unwatched_rss),
        mib(restart_rss),
        (restart_rss as i64 - unwatched_rss as i64) * 1024 / m.max(1) as i64
    );
    if !wrong.is_empty() {
        return Err(format!("{} wrong verdicts", wrong.len()));
    }
    Ok(())
}

/// Step 5: one change among `n` Networks costs an index lookup and the reconciles of the
/// Networks it concerns, not a pass over all of them (the overlap index is one trie for
/// every Network of the cluster). A newcomer takes the cidr of Network 0 and must report
/// `Overlaps`; then Network 0 is deleted: it waits for
/// its `users` member Pods (`InUse`), they are deleted, it goes, and the newcomer turns
/// Ready. Reconciles are read from `/metrics` around each change.
async fn one_change(
    client: &Client,
    namespace: &str,
    served: &Served,
    tracker: &Tracker,
    n: usize,
    users: i64,
) -> Result<()> {
    let api: Api<Network> = Api::namespaced(client.clone(), namespace);
    let (senior, spec, _) = scale::planned(scale::BENCH_BASE, 0);
    let newcomer = "late-00000";
    // Let what came before finish (the controller debounces by 50 ms).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = reconciles(&served.metrics().await?);
    let created = Instant::now();
    api.create(&PostParams::default(), &Network::new(newcomer, spec))
        .await
        .map_err(|e| format!("cannot create Network {newcomer}: {e}"))?;
    tracker
        .until(
            Duration::from_secs(60),
            "the overlapping newcomer to report Overlaps",
            |seen| seen.get(newcomer).is_some_and(|x| x.current && x.reason == "Overlaps"),
        )
        .await?;
    let overlapped = created.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_create = reconciles(&served.metrics().await?);

    let deleted = Instant::now();
    api.delete(&senior, &DeleteParams::default())
        .await
        .map_err(|e| format!("cannot delete Network {senior}: {e}"))?;
    let in_use = if users > 0 {
        poll::until_true(&format!("Network {senior} InUse"), PATIENCE, POLL, async || {
            api.get_opt(&senior).await.ok().flatten().is_some_and(|network| {
                network
                    .status
                    .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == IN_USE && c.status == "True"))
            })
        })
        .await?;
        let waited = deleted.elapsed();
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        pods.delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default().labels(&format!("{NETWORK_LABEL}={senior}")),
        )
        .await
        .map_err(|e| format!("cannot delete the Pods of {senior}: {e}"))?;
        Some(waited)
    } else {
        None
    };
    let released = Instant::now();
    poll::until_true(&format!("Network {senior} gone"), PATIENCE, POLL, async || {
        api.get_opt(&senior).await.is_ok_and(|n| n.is_none())
    })
    .await?;
    let gone = released.elapsed();
    tracker
        .until(Duration::from_secs(60), "the newcomer to turn Ready", |seen| {
            seen.get(newcomer)
                .is_some_and(|x| x.current && x.ready.as_deref() == Some("True"))
        })
        .await?;
    let promoted = released.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_delete = reconciles(&served.metrics().await?);
    println!("\n5. One change among {n} Networks: an overlapping newcomer, then its senior deleted");
    println!(
        "   newcomer ({}'s cidr) -> Overlaps: {:.0} ms, reconciles +{}",
        senior,
        overlapped.as_secs_f64() * 1e3,
        after_create - before
    );
    match in_use {
        Some(waited) => println!(
            "   {senior} deleted -> InUse ({users} Pods): {:.0} ms; Pods deleted -> {senior} gone: {:.0} ms, newcomer Ready: {:.0} ms",
            waited.as_secs_f64() * 1e3,
            gone.as_secs_f64() * 1e3,
            promoted.as_secs_f64() * 1e3
        ),
        None => println!(
            "   {senior} deleted -> gone: {:.0} ms, newcomer Ready: {:.0} ms",
            gone.as_secs_f64() * 1e3,
            promoted.as_secs_f64() * 1e3
        ),
    }
    println!(
        "   reconciles for the deletion and the promotion: +{}",
        after_delete - after_create
    );
    Ok(())
}

/// Events in `namespace` about objects of `kind`.
async fn count_events(client: &Client, namespace: &str, kind: &str) -> Result<usize> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), namespace);
    let mut total = 0;
    let mut params = ListParams::default().limit(500);
    loop {
        let page = events
            .list(&params)
            .await
            .map_err(|e| format!("cannot list Events: {e}"))?;
        total += page
            .items
            .iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some(kind))
            .count();
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(total),
        }
    }
}
