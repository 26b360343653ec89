//! `make bench-admission`: what a Pod create costs on each injection path, against the
//! cluster in `KUBECONFIG` (the real control plane here), timed from the client.
//!
//! Starts the release binary (`serve`, in webhook mode where it has `--injection`, its
//! ConfigMap holding the shipped default template) on loopback ports, then uses three fresh
//! namespaces:
//!
//! - `none`: nothing selects it, no injection;
//! - `policies`: the admission policies `envoy-injector policies` compiles from that
//!   ConfigMap, their bindings narrowed to this namespace;
//! - `webhook`: the shipped MutatingWebhookConfiguration, its webhooks sent to the local
//!   `serve` (`url:`) and narrowed to this namespace.
//!
//! The same opted-in Pod is created in each namespace in turn (each round starting with
//! the next path), one request in flight, `BENCH_PODS` times each after `BENCH_WARMUP`
//! rounds not counted; each create's round trip is timed. Every Pod of the two injecting
//! paths must come back injected and none of `none`'s (otherwise the run fails: it would
//! not measure what it says). Prints p50, p90, p99, mean, min and max per path with the
//! machine and the command, then deletes the Pods, the policies, the webhook configuration
//! and the namespaces.
//!
//! Environment: `BENCH_PODS` (200), `BENCH_WARMUP` (10), `BENCH_BIN`
//! (`target/release/envoy-injector`), `BENCH_KEEP=1` to leave everything behind.

#[path = "../tests/common/kit.rs"]
mod common;
#[path = "../tests/scale/mod.rs"]
mod scale;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::policies;
use common::poll;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use scale::{POLL, Result, Served};
use serde_json::{Value, json};

/// Namespaces of this benchmark start so (earlier runs' leftovers are removed).
const PREFIX: &str = "bench-adm-";
/// Name of the webhook configuration it registers.
const WEBHOOK_CONFIG: &str = "bench-admission";
const FIELD_MANAGER: &str = "envoy-injector-bench";
/// The annotation that opts a Pod in, and the one the injection writes.
const INJECT: &str = "sidecar.samplecrd.k8s.io/inject";
const STATUS: &str = "sidecar.samplecrd.k8s.io/status";
/// The first container of the shipped default template.
const SIDECAR: &str = "envoy";
const PATIENCE: Duration = Duration::from_secs(60);

struct Settings {
    pods: usize,
    warmup: usize,
    bin: PathBuf,
    keep: bool,
}

fn settings() -> Result<Settings> {
    Ok(Settings {
        pods: scale::env_number("BENCH_PODS", 200)?.max(1),
        warmup: scale::env_number("BENCH_WARMUP", 10)?,
        bin: scale::bench_bin(),
        keep: scale::bench_keep(),
    })
}

/// One injection path and the namespace it acts in.
struct Route {
    name: &'static str,
    namespace: String,
    injects: bool,
    latencies: Vec<Duration>,
}

fn main() -> ExitCode {
    scale::run_benchmark("bench-admission", run)
}

async fn run() -> Result<()> {
    let s = settings()?;
    let (client, stamp) = scale::prepare(&s.bin, PREFIX).await?;
    let name = |what: &str| format!("{PREFIX}{stamp}-{what}");
    let (injector, none, with_policies, with_webhook) =
        (name("injector"), name("none"), name("policies"), name("webhook"));
    for namespace in [&injector, &none, &with_policies, &with_webhook] {
        scale::create_namespace(&client, namespace).await?;
    }
    let mut paths = vec![
        Route {
            name: "none",
            namespace: none,
            injects: false,
            latencies: Vec::new(),
        },
        Route {
            name: "policies",
            namespace: with_policies,
            injects: true,
            latencies: Vec::new(),
        },
        Route {
            name: "webhook",
            namespace: with_webhook,
            injects: true,
            latencies: Vec::new(),
        },
    ];
    let mut compiled = Vec::new();
    let result = measure(&s, &client, &injector, &mut paths, &mut compiled).await;
    if !s.keep {
        remove(&client, &injector, &paths, &compiled).await;
    }
    result
}

async fn measure(
    s: &Settings,
    client: &Client,
    injector: &str,
    paths: &mut [Route],
    compiled: &mut Vec<Value>,
) -> Result<()> {
    let dir = scale::scratch("bench-admission")?;
    scale::certs(&s.bin, &dir)?;
    let configmap = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "envoy-injector"},
        "data": {"config": include_str!("../src/template/default-template.yaml")},
    });
    let typed: ConfigMap = serde_json::from_value(configmap.clone()).map_err(|e| e.to_string())?;
    Api::<ConfigMap>::namespaced(client.clone(), injector)
        .create(&PostParams::default(), &typed)
        .await
        .map_err(|e| format!("cannot create the ConfigMap: {e}"))?;

    // The webhook: `serve` here, never writing a policy of its own.
    let webhook_mode = serve_has_injection_flag(&s.bin)?;
    let extra: &[&str] = if webhook_mode { &["--injection=webhook"] } else { &[] };
    let served = Served::start(&s.bin, injector, &dir, &dir.join("serve.log"), extra).await?;
    poll::until_true("/readyz", PATIENCE, POLL, async || served.ready().await).await?;
    let ca = std::fs::read(dir.join("ca.crt")).map_err(|e| format!("cannot read ca.crt: {e}"))?;
    let shipped: Value = serde_yaml_ng::from_str(include_str!("../manifests/webhook.yaml"))
        .map_err(|e| format!("manifests/webhook.yaml: {e}"))?;
    let webhooks = common::webhooks::local_webhooks(
        shipped,
        json!({"name": WEBHOOK_CONFIG}),
        &format!("https://{}/mutate", served.webhook),
        &ca,
        &[paths[2].namespace.as_str()],
    );
    apply(
        client,
        &webhooks,
        &kube::core::ApiResource::erase::<MutatingWebhookConfiguration>(&()),
    )
    .await?;

    // The policies, compiled by the binary from the same ConfigMap. Renamed and relabelled
    // (nothing that changes what they do), so that no `serve` takes them for its own.
    *compiled = policies::narrow(
        &policies::compile(&s.bin, &configmap, injector)?,
        &[paths[1].namespace.clone()],
    )
    .into_iter()
    .map(as_benchmarks)
    .collect();
    for object in compiled.iter() {
        apply(client, object, &policies::resource_of(object)).await?;
    }
    for path in paths.iter() {
        scale::default_service_account(client, &path.namespace).await?;
    }
    for path in paths.iter().filter(|p| p.injects) {
        wait_until_injecting(client, &path.namespace, path.name).await?;
    }
    let pods_api = |namespace: &str| -> Api<Pod> { Api::namespaced(client.clone(), namespace) };

    let command = command_line(s);
    println!(
        "bench-admission: Pod create latency by injection path, {} Pods each, interleaved, one request in flight \
         ({} rounds before, not counted)",
        s.pods, s.warmup
    );
    println!("machine: {}", machine());
    println!("API server: {}", api_server(client).await);
    println!(
        "serve: {}",
        if webhook_mode {
            "--injection=webhook"
        } else {
            "(no --injection flag)"
        }
    );
    println!("command: {command}");

    let rounds = s.warmup + s.pods;
    for round in 0..rounds {
        for turn in 0..paths.len() {
            let path = &mut paths[(round + turn) % 3];
            let pod = opted_in_pod(&format!("bench-{round:05}"));
            let api = pods_api(&path.namespace);
            let started = Instant::now();
            let stored = api
                .create(&PostParams::default(), &pod)
                .await
                .map_err(|e| format!("path {}: cannot create a Pod: {e}", path.name))?;
            let took = started.elapsed();
            let injected = stored
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(STATUS))
                && stored
                    .spec
                    .as_ref()
                    .is_some_and(|s| s.containers.iter().any(|c| c.name == SIDECAR));
            if injected != path.injects {
                return Err(format!(
                    "path {}: Pod bench-{round:05} came back {}injected",
                    path.name,
                    if injected { "" } else { "not " }
                ));
            }
            if round >= s.warmup {
                path.latencies.push(took);
            }
        }
    }
    served.stop().await?;

    println!();
    println!(
        "{:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>12}",
        "path", "p50 ms", "p90 ms", "p99 ms", "mean ms", "min ms", "max ms", "p50 vs none"
    );
    let baseline = percentile(&paths[0].latencies, 0.50);
    for path in paths.iter() {
        let l = &path.latencies;
        let p50 = percentile(l, 0.50);
        println!(
            "{:<10} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>12}",
            path.name,
            ms(p50),
            ms(percentile(l, 0.90)),
            ms(percentile(l, 0.99)),
            ms(l.iter().sum::<Duration>() / l.len() as u32),
            ms(*l.iter().min().unwrap_or(&Duration::ZERO)),
            ms(*l.iter().max().unwrap_or(&Duration::ZERO)),
            if path.name == "none" {
                "-".to_string()
            } else {
                format!("{:+.2} ms", ms(p50) - ms(baseline))
            }
        );
    }
    Ok(())
}

/// `--injection` exists in this binary's `serve`.
fn serve_has_injection_flag(bin: &std::path::Path) -> Result<bool> {
    let help = std::process::Command::new(bin)
        .args(["serve", "--help"])
        .output()
        .map_err(|e| format!("cannot run {} serve --help: {e}", bin.display()))?;
    Ok(String::from_utf8_lossy(&help.stdout).contains("--injection"))
}

/// A compiled object under the benchmark's name and label: `envoy-injector-…` becomes
/// `bench-admission-…` (the binding's `policyName` too), `managed-by` names the benchmark.
fn as_benchmarks(mut object: Value) -> Value {
    let rename = |name: &str| name.replacen("envoy-injector-", "bench-admission-", 1);
    let name = object["metadata"]["name"].as_str().map(rename).unwrap_or_default();
    object["metadata"]["name"] = json!(name);
    object["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!(FIELD_MANAGER);
    if let Some(policy) = object["spec"]["policyName"].as_str().map(rename) {
        object["spec"]["policyName"] = json!(policy);
    }
    object
}

async fn apply(client: &Client, object: &Value, resource: &kube::core::ApiResource) -> Result<()> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    Api::<DynamicObject>::all_with(client.clone(), resource)
        .patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(object))
        .await
        .map(|_| ())
        .map_err(|e| format!("cannot apply {} {name}: {e}", resource.kind))
}

fn opted_in_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {INJECT: "true"}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    }))
    .expect("a Pod")
}

/// Until a dry-run opted-in Pod comes back injected (the API server picks up policies and
/// webhook configurations a moment after they are written).
async fn wait_until_injecting(client: &Client, namespace: &str, path: &str) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    poll::until_true(&format!("the {path} path to inject"), PATIENCE, POLL, async || {
        api.create(&params, &opted_in_pod("bench-probe"))
            .await
            .is_ok_and(|p| p.metadata.annotations.is_some_and(|a| a.contains_key(STATUS)))
    })
    .await
}

/// Nearest-rank percentile of `samples`.
fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn command_line(s: &Settings) -> String {
    let mut settings = vec![format!("BENCH_PODS={}", s.pods)];
    if s.warmup != 10 {
        settings.push(format!("BENCH_WARMUP={}", s.warmup));
    }
    format!("make bench-admission {}", settings.join(" "))
}

/// CPU model and count, kernel, load: the benchmark shares the machine it runs on.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!(
        "{cpu}, {cpus} CPUs, Linux {}, load average {} at start",
        kernel.trim(),
        load.join(" ")
    )
}

async fn api_server(client: &Client) -> String {
    match client.apiserver_version().await {
        Ok(v) => v.git_version,
        Err(e) => format!("version unknown ({e})"),
    }
}

/// The Pods, the policies, the webhook configuration and the namespaces.
async fn remove(client: &Client, injector: &str, paths: &[Route], compiled: &[Value]) {
    for path in paths {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &path.namespace);
        if let Err(e) = pods
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
        {
            eprintln!("could not delete the Pods of {}: {e}", path.namespace);
        }
    }
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    if let Err(e) = configs.delete(WEBHOOK_CONFIG, &DeleteParams::default()).await {
        eprintln!("could not delete MutatingWebhookConfiguration {WEBHOOK_CONFIG}: {e}");
    }
    for object in compiled.iter().rev() {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &policies::resource_of(object));
        if let Err(e) = api.delete(name, &DeleteParams::default()).await {
            eprintln!("could not delete {} {name}: {e}", object["kind"]);
        }
    }
    for namespace in std::iter::once(injector).chain(paths.iter().map(|p| p.namespace.as_str())) {
        scale::cleanup(client, namespace, 8).await;
    }
}
