//! The Network controller at scale: a plan of Networks with known overlaps, their creation
//! in a burst, a watch that follows their verdicts and the check of each verdict (shared by
//! the `controller` tier of `tests/e2e/` and the scale benchmark `examples/bench_scale.rs`);
//! and for the benchmarks alone (`bench_scale`, `bench_admission`): the release binary
//! started with `serve` on loopback ports, its `/metrics` and `/proc` memory, the CRDs, and
//! the removal of their namespaces. The
//! process, polling, metrics and CRD plumbing is `tests/common`'s (`crate::common`: both
//! includers have it).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_injector::network::crd::{Network, NetworkSpec};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;

use crate::common::crd;
use crate::common::metrics::Samples;
use crate::common::poll;
use crate::common::process::{ANY_LOOPBACK_PORT, Admin, Listeners, Process, listen_args, memory_kib};

pub type Result<T> = std::result::Result<T, String>;

/// How often the benchmark's waits look again.
pub const POLL: Duration = Duration::from_millis(50);

/// `key` from the environment as a number, `default` when unset.
pub fn env_number(key: &str, default: usize) -> Result<usize> {
    match std::env::var(key) {
        Ok(v) => v.parse().map_err(|e| format!("{key}={v:?}: expected a number: {e}")),
        Err(_) => Ok(default),
    }
}

/// The binary a benchmark runs: `BENCH_BIN`, else the release build.
pub fn bench_bin() -> PathBuf {
    std::env::var_os("BENCH_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/envoy-injector"),
        PathBuf::from,
    )
}

/// `BENCH_KEEP=1`: leave what the run created behind.
pub fn bench_keep() -> bool {
    std::env::var("BENCH_KEEP").is_ok_and(|v| v == "1")
}

/// A benchmark's `main`: `run` on a multi-threaded runtime, its error printed after
/// `name: ` and the exit code failing.
pub fn run_benchmark<F: Future<Output = Result<()>>>(name: &str, run: impl FnOnce() -> F) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{name}: cannot start a runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The cluster of `KUBECONFIG`, ready for a benchmark: `bin` is there, the CRDs are
/// served, the namespaces an earlier run left (named `prefix…`) are gone. Also the run's
/// stamp (seconds since the epoch), for its namespaces' names.
pub async fn prepare(bin: &Path, prefix: &str) -> Result<(Client, u64)> {
    if std::env::var_os("KUBECONFIG").is_none() {
        return Err("KUBECONFIG is not set: start ../shared/k8s/controlplane.sh and export what it prints".into());
    }
    if !bin.exists() {
        return Err(format!("{} is missing: cargo build --release first", bin.display()));
    }
    let client = Client::try_default()
        .await
        .map_err(|e| format!("cannot reach the cluster: {e}"))?;
    install_crds(&client).await?;
    remove_leftovers(&client, prefix).await;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    Ok((client, stamp))
}

pub async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).map_err(|e| e.to_string())?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .map(|_| ())
        .map_err(|e| format!("cannot create namespace {name}: {e}"))
}

/// Serves Network CRD (from the Rust type) and the NAD CRD, and waits until both are
/// established.
pub async fn install_crds(client: &Client) -> Result<()> {
    let nad: CustomResourceDefinition =
        serde_yaml_ng::from_str(crd::NAD_CRD_YAML).map_err(|e| format!("{}: {e}", crd::NAD_CRD_FILE))?;
    for definition in [Network::crd(), nad] {
        let name = definition.name_any();
        crd::apply(client, &name, &definition, "envoy-injector-tests").await?;
        crd::wait_established(client, &name, Duration::from_secs(30)).await?;
    }
    Ok(())
}

/// `envoy-injector certs` into `dir`: the serving pair `serve` needs, valid for
/// 127.0.0.1 too (a `url:` webhook on loopback), and the CA that signed it (`ca.crt`).
pub fn certs(bin: &Path, dir: &Path) -> Result<()> {
    let status = Command::new(bin)
        .args([
            "certs",
            "--service",
            "scale",
            "--namespace",
            "scale",
            "--san",
            "127.0.0.1",
            "--out-dir",
        ])
        .arg(dir)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| format!("{} certs failed: {status}", bin.display()))
}

/// A running `envoy-injector serve`.
pub struct Served {
    process: Process,
    pub admin: Admin,
    /// Where it serves `/mutate` (TLS).
    pub webhook: std::net::SocketAddr,
    pub started: Instant,
}

impl Served {
    /// `serve --leader-elect=false --injection webhook` with the Multus backend, its ConfigMap in `namespace`,
    /// `certs` from [`certs`], logs (warn and up, and the listeners' addresses) to `log`.
    pub async fn start(bin: &Path, namespace: &str, certs: &Path, log: &Path, extra: &[&str]) -> Result<Served> {
        let mut args: Vec<OsString> = [
            "--log-level",
            "warn,envoy_injector::server=info",
            "serve",
            "--leader-elect=false",
            "--network-backend",
            "multus",
            // The controller is measured: no admission policies written beside it.
            "--injection",
            "webhook",
            "--namespace",
            namespace,
        ]
        .map(OsString::from)
        .into();
        args.extend(listen_args(
            ANY_LOOPBACK_PORT,
            ANY_LOOPBACK_PORT,
            &certs.join("tls.crt"),
            &certs.join("tls.key"),
        ));
        args.extend(extra.iter().map(OsString::from));
        let started = Instant::now();
        let process = Process::spawn(bin, &args, &[], log)?;
        let Listeners { admin, webhook } = process.listeners(Duration::from_secs(30)).await?;
        Ok(Served {
            process,
            admin: Admin::new(admin, Duration::from_secs(30)),
            webhook,
            started,
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The parsed `/metrics`.
    pub async fn metrics(&self) -> Result<Samples> {
        Ok(Samples::parse(&self.admin.metrics().await?))
    }

    /// `/readyz` answers 200.
    pub async fn ready(&self) -> bool {
        self.admin.readyz().await.is_ok()
    }

    /// (VmRSS, VmHWM) in KiB, from `/proc/PID/status`.
    pub fn memory(&self) -> Result<(u64, u64)> {
        memory_kib(self.pid())
    }

    /// SIGTERM, then waits for the exit (SIGKILL after 30 s).
    pub async fn stop(self) -> Result<()> {
        self.process.signal(libc::SIGTERM)?;
        let status = self.process.exited(Duration::from_secs(30)).await?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("serve exited with {status} after SIGTERM"))
    }
}

/// Reconciles counted by `/metrics`.
pub fn reconciles(samples: &Samples) -> u64 {
    samples.sum("envoy_injector_reconciles_total", &[]) as u64
}

/// Writes the API server received (create, update, patch, delete), by resource.
pub fn writes(samples: &Samples) -> BTreeMap<String, u64> {
    let mut by_resource = BTreeMap::new();
    for sample in samples
        .0
        .iter()
        .filter(|s| s.name == "envoy_injector_api_requests_total")
    {
        let write = sample.labels.get("verb").is_some_and(|v| {
            matches!(
                v.as_str(),
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
        });
        if write {
            *by_resource.entry(sample.labels["resource"].clone()).or_insert(0) += sample.value as u64;
        }
    }
    by_resource
}

/// Where the `controller` tier's plan takes its addresses (300 Networks: 198.18.96.0 to
/// 198.18.100.55, apart from every other tier's Networks).
pub const TIER_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 96, 0);
/// Where `make bench-scale`'s plan takes its addresses (10,000 Networks: 198.18.64.0 to
/// 198.18.204.159).
pub const BENCH_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 64, 0);
/// The last address a plan may use: every Network stays inside 198.18.0.0/16, the range a
/// test node accepts for Networks (and never a private range).
const PLAN_END: Ipv4Addr = Ipv4Addr::new(198, 18, 255, 255);

/// Network `i` of a plan whose addresses start at `base`: every tenth Network (i % 10 ==
/// 9) takes the upper half (a /31) of the /30 of the one before it, so the two overlap;
/// all others hold a /30 of their own and must turn Ready. Returns the other Network of the
/// pair, if any. Which of a pair is the senior depends on their creationTimestamps
/// (created concurrently, either may come first within a second): see [`wrong_verdicts`].
pub fn planned(base: Ipv4Addr, i: usize) -> (String, NetworkSpec, Option<String>) {
    // The /30 of Network `i`: one per Network that is not the junior of a pair.
    let slot = |i: usize| u32::from(base) + 4 * (i - i / 10) as u32;
    let name = format!("net-{i:05}");
    if i % 10 == 9 {
        let upper = Ipv4Addr::from(slot(i - 1) + 2);
        let spec = NetworkSpec {
            cidr: format!("{upper}/31"),
            gateway: upper.to_string(),
        };
        (name, spec, Some(format!("net-{:05}", i - 1)))
    } else {
        let network = Ipv4Addr::from(slot(i));
        let spec = NetworkSpec {
            cidr: format!("{network}/30"),
            gateway: Ipv4Addr::from(slot(i) + 1).to_string(),
        };
        (name, spec, None)
    }
}

/// `Err` when a plan of `n` Networks from `base` would leave 198.18.0.0/16.
pub fn plan_fits(base: Ipv4Addr, n: usize) -> Result<()> {
    let Some(last) = n.checked_sub(1) else {
        return Ok(());
    };
    let highest = u64::from(u32::from(base)) + 4 * (last - last / 10) as u64 + 3;
    if highest > u64::from(u32::from(PLAN_END)) {
        return Err(format!(
            "a plan of {n} Networks from {base} would go past {PLAN_END}, out of the range Networks may use here"
        ));
    }
    Ok(())
}

/// Creates Networks `range` of the plan from `base` with `concurrency` creates in flight;
/// returns when the last create was answered.
pub async fn create_networks(
    client: &Client,
    namespace: &str,
    base: Ipv4Addr,
    range: std::ops::Range<usize>,
    concurrency: usize,
) -> Result<Instant> {
    plan_fits(base, range.end)?;
    let api: Api<Network> = Api::namespaced(client.clone(), namespace);
    let results: Vec<Result<()>> = futures::stream::iter(range)
        .map(|i| {
            let api = api.clone();
            async move {
                let (name, spec, _) = planned(base, i);
                api.create(&PostParams::default(), &Network::new(&name, spec))
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("cannot create Network {name}: {e}"))
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(Instant::now())
}

/// What the watch last saw of one Network.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub current: bool,
    pub ready: Option<String>,
    pub reason: String,
    pub message: String,
    pub attached: i64,
    /// When it first had a current verdict.
    pub settled_at: Option<Instant>,
    /// `creationTimestamp`, in seconds.
    pub created: i64,
}

/// Follows the Networks and NADs of one namespace from outside, as a user would, until the
/// last clone of it is dropped.
#[derive(Clone)]
pub struct Tracker {
    pub networks: Arc<Mutex<HashMap<String, Seen>>>,
    /// Watch events on Networks and NADs (after the initial list).
    pub network_events: Arc<Mutex<u64>>,
    pub nad_events: Arc<Mutex<u64>>,
    changed: Arc<Notify>,
    _watches: Arc<Watches>,
}

/// The watch tasks of a [`Tracker`], stopped when it goes.
struct Watches(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Tracker {
    pub fn start(client: &Client, namespace: &str) -> Tracker {
        let networks: Arc<Mutex<HashMap<String, Seen>>> = Arc::default();
        let network_events: Arc<Mutex<u64>> = Arc::default();
        let nad_events: Arc<Mutex<u64>> = Arc::default();
        let changed: Arc<Notify> = Arc::default();
        let api: Api<Network> = Api::namespaced(client.clone(), namespace);
        let (store, counter, notify) = (networks.clone(), network_events.clone(), changed.clone());
        let network_watch = tokio::spawn(async move {
            let events = watcher(api, watcher::Config::default());
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let (watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = &event else {
                    continue;
                };
                if matches!(event, watcher::Event::Apply(_)) {
                    *counter.lock().unwrap() += 1;
                }
                let ready = n.ready_condition();
                let status = n.status.clone().unwrap_or_default();
                let current = ready.is_some() && status.observed_generation == n.metadata.generation;
                let mut networks = store.lock().unwrap();
                let seen = networks.entry(n.name_any()).or_default();
                seen.current = current;
                seen.ready = ready.map(|c| c.status.clone());
                seen.reason = ready.map(|c| c.reason.clone()).unwrap_or_default();
                seen.message = ready.map(|c| c.message.clone()).unwrap_or_default();
                seen.attached = status.attached_pods;
                seen.created = n.creation_timestamp().map_or(0, |t| t.0.as_second());
                if current && seen.settled_at.is_none() {
                    seen.settled_at = Some(Instant::now());
                }
                drop(networks);
                notify.notify_waiters();
            }
        });
        let nads: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &envoy_injector::network::backend::nad_resource(),
        );
        let counter = nad_events.clone();
        let nad_watch = tokio::spawn(async move {
            let events = watcher(nads, watcher::Config::default());
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                if matches!(event, Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) {
                    *counter.lock().unwrap() += 1;
                }
            }
        });
        Tracker {
            networks,
            network_events,
            nad_events,
            changed,
            _watches: Arc::new(Watches(vec![network_watch, nad_watch])),
        }
    }

    pub fn snapshot(&self) -> HashMap<String, Seen> {
        self.networks.lock().unwrap().clone()
    }

    pub fn counts(&self) -> (u64, u64) {
        (*self.network_events.lock().unwrap(), *self.nad_events.lock().unwrap())
    }

    /// Waits until `done` holds for the Networks seen (checked on every watch event).
    pub async fn until(
        &self,
        patience: Duration,
        what: &str,
        done: impl Fn(&HashMap<String, Seen>) -> bool,
    ) -> Result<Instant> {
        let deadline = Instant::now() + patience;
        loop {
            let changed = self.changed.notified();
            futures::pin_mut!(changed);
            changed.as_mut().enable();
            if done(&self.networks.lock().unwrap()) {
                return Ok(Instant::now());
            }
            if tokio::time::timeout_at(deadline.into(), changed).await.is_err() {
                return Err(format!("expected {what} within {patience:?}"));
            }
        }
    }
}

/// Wrong verdicts among Networks `0..n` of the plan (all in `namespace`), empty when all
/// are right. Each must be current for its generation; of an overlapping pair the senior
/// (earlier creationTimestamp, then smaller name) must be Ready and the other report
/// `Overlaps` naming it; every other Network must be Ready.
pub fn wrong_verdicts(seen: &HashMap<String, Seen>, namespace: &str, n: usize) -> Vec<String> {
    // Names do not depend on where the plan's addresses start.
    let name_of = |i: usize| format!("net-{i:05}");
    (0..n)
        .filter_map(|i| {
            let name = name_of(i);
            let pair = if i % 10 == 9 {
                Some(name_of(i - 1))
            } else {
                (i + 1 < n && i % 10 == 8).then(|| name_of(i + 1))
            };
            let Some(s) = seen.get(&name) else {
                return Some(format!("{name}: never seen"));
            };
            let senior = pair.filter(|other| {
                seen.get(other)
                    .is_some_and(|o| (o.created, other.as_str()) < (s.created, name.as_str()))
            });
            let right = s.current
                && match &senior {
                    None => s.ready.as_deref() == Some("True"),
                    Some(senior) => {
                        s.ready.as_deref() == Some("False")
                            && s.reason == "Overlaps"
                            && s.message.contains(&format!("Network {namespace}/{senior},"))
                    }
                };
            let expected = senior.map_or("Ready".into(), |s| format!("Overlaps {s}"));
            (!right).then(|| format!("{name}: {s:?}, expected {expected}"))
        })
        .collect()
}

/// Drops our finalizer from every Network (the controller is stopped) and deletes the
/// namespace.
pub async fn cleanup(client: &Client, namespace: &str, concurrency: usize) {
    let api: Api<Network> = Api::namespaced(client.clone(), namespace);
    if let Ok(list) = api.list(&ListParams::default()).await {
        let patch = json!({"metadata": {"finalizers": null}});
        futures::stream::iter(list.items)
            .map(|network| {
                let (api, patch) = (api.clone(), patch.clone());
                async move {
                    let _ = api
                        .patch(&network.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
            })
            .buffer_unordered(concurrency)
            .collect::<Vec<()>>()
            .await;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Err(e) = namespaces.delete(namespace, &DeleteParams::default()).await {
        eprintln!("could not delete namespace {namespace}: {e}");
        return;
    }
    // Gone before anything else starts: every `serve` watches all namespaces, and would
    // take these Networks on (their finalizer is stripped) while they are deleted.
    let gone = poll::until_true(
        &format!("namespace {namespace} deleted"),
        Duration::from_secs(300),
        POLL,
        async || namespaces.get_opt(namespace).await.is_ok_and(|n| n.is_none()),
    )
    .await;
    if let Err(e) = gone {
        eprintln!("{e}");
    }
}

/// Until `namespace` has its `default` ServiceAccount (a Pod created before is refused).
pub async fn default_service_account(client: &Client, namespace: &str) -> Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    poll::until_true(
        &format!("the default ServiceAccount of {namespace}"),
        Duration::from_secs(60),
        POLL,
        async || accounts.get_opt("default").await.is_ok_and(|a| a.is_some()),
    )
    .await
}

/// Removes what earlier runs left behind: namespaces starting with `prefix`.
pub async fn remove_leftovers(client: &Client, prefix: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let Ok(list) = namespaces.list(&ListParams::default()).await else {
        return;
    };
    for namespace in list
        .items
        .iter()
        .map(|n| n.name_any())
        .filter(|n| n.starts_with(prefix))
    {
        eprintln!("removing namespace {namespace}, left by an earlier run");
        cleanup(client, &namespace, 32).await;
    }
}

/// A scratch directory under `target/` (removed by the caller when it wants).
pub fn scratch(name: &str) -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join(name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}
