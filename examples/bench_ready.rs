//! `make bench-ready`: what the sidecar adds to a Pod's time to Ready on a real node, native
//! and regular, against the cluster in `KUBECONFIG` (one with a node, the injector deployed
//! in webhook mode with the shipped default template, and the default template's Envoy image
//! on the node: `make deploy` and `make envoy-image-local`, as the `tests/pods` set does).
//!
//! Three routes, one Pod each per round, in an order that rotates every round: `plain` (not
//! opted in: the baseline), `native` (opted in: the default, Envoy as a native sidecar, the
//! app started once Envoy's startupProbe passed) and `regular` (opted in with
//! `native-sidecar: "false"`: Envoy beside the app). The app is busybox `httpd` on port 80,
//! which Envoy forwards to (`override.app-port: "80"`). Timed from the create request until
//! the Pod's Ready condition is True, seen by a watch of the Pod; each Pod is deleted
//! before the next is created, so one runs at a time. Every Pod must come back with the
//! shape its route says (otherwise the run fails: it would not measure what it says).
//! Prints each route's p50, p90, mean, min and max, the added p50 over `plain`, the machine
//! and the command; then deletes its namespace.
//!
//! Environment: `BENCH_PODS` (20 per route), `BENCH_WARMUP` (2 rounds not counted),
//! `E2E_SHELL_IMAGE` (`localhost/busybox:local`), `BENCH_KEEP=1` to leave the namespace.

#[path = "../tests/common/kit.rs"]
mod common;
#[path = "../tests/scale/mod.rs"]
mod scale;

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams, WatchEvent, WatchParams};
use scale::Result;
use serde_json::json;

const INJECT: &str = "sidecar.samplecrd.k8s.io/inject";
const NATIVE: &str = "sidecar.samplecrd.k8s.io/native-sidecar";
const APP_PORT: &str = "sidecar.samplecrd.k8s.io/override.app-port";
const SIDECAR: &str = "envoy";
const PATIENCE_SECONDS: u32 = 120;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Route {
    Plain,
    Native,
    Regular,
}

const ROUTES: [Route; 3] = [Route::Plain, Route::Native, Route::Regular];

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Plain => "plain",
            Route::Native => "native",
            Route::Regular => "regular",
        }
    }

    fn annotations(self) -> serde_json::Value {
        match self {
            Route::Plain => json!({}),
            Route::Native => json!({INJECT: "true", APP_PORT: "80"}),
            Route::Regular => json!({INJECT: "true", APP_PORT: "80", NATIVE: "false"}),
        }
    }

    /// Whether `pod`, as stored, has the shape this route measures.
    fn shaped(self, pod: &Pod) -> Result<()> {
        let spec = pod.spec.as_ref().ok_or("a stored Pod without a spec")?;
        let native = spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == SIDECAR && c.restart_policy.as_deref() == Some("Always"));
        let regular = spec.containers.iter().any(|c| c.name == SIDECAR);
        let found = (native, regular);
        let wanted = match self {
            Route::Plain => (false, false),
            Route::Native => (true, false),
            Route::Regular => (false, true),
        };
        if found == wanted {
            Ok(())
        } else {
            Err(format!(
                "route {}: expected (native sidecar, regular sidecar) = {wanted:?}, found {found:?}: is the injector deployed with the shipped default in webhook mode?",
                self.name()
            ))
        }
    }
}

fn pod(route: Route, index: usize, image: &str) -> Result<Pod> {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("{}-{index}", route.name()), "annotations": route.annotations()},
        "spec": {
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "web",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "mkdir -p /tmp/www && echo ok > /tmp/www/index.html && httpd -f -p 80 -h /tmp/www & trap 'exit 0' TERM; wait"],
                "ports": [{"containerPort": 80}],
            }],
        },
    }))
    .map_err(|e| format!("cannot build the Pod: {e}"))
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Creates `pod` and waits, by a watch, until it is Ready; the time from the create
/// request.
async fn time_to_ready(pods: &Api<Pod>, route: Route, pod: &Pod) -> Result<Duration> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(PATIENCE_SECONDS);
    let mut events = pods
        .watch(&params, "0")
        .await
        .map_err(|e| format!("cannot watch Pod {name}: {e}"))?
        .boxed();
    let started = Instant::now();
    let stored = pods
        .create(&PostParams::default(), pod)
        .await
        .map_err(|e| format!("cannot create Pod {name}: {e}"))?;
    route.shaped(&stored)?;
    while let Some(event) = events.next().await {
        match event {
            Ok(WatchEvent::Added(p) | WatchEvent::Modified(p)) if is_ready(&p) => return Ok(started.elapsed()),
            Ok(WatchEvent::Error(e)) => return Err(format!("watch of Pod {name}: {e}")),
            Err(e) => return Err(format!("watch of Pod {name}: {e}")),
            _ => {}
        }
    }
    Err(format!("Pod {name} not Ready within {PATIENCE_SECONDS} s"))
}

async fn delete_and_wait(pods: &Api<Pod>, name: &str) -> Result<()> {
    pods.delete(name, &DeleteParams::default())
        .await
        .map_err(|e| format!("cannot delete Pod {name}: {e}"))?;
    common::poll::until_true(
        &format!("Pod {name} gone"),
        Duration::from_secs(u64::from(PATIENCE_SECONDS)),
        scale::POLL,
        async || pods.get_opt(name).await.is_ok_and(|p| p.is_none()),
    )
    .await
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn run() -> Result<()> {
    let rounds = scale::env_number("BENCH_PODS", 20)?.max(1);
    let warmup = scale::env_number("BENCH_WARMUP", 2)?;
    let image = std::env::var("E2E_SHELL_IMAGE").unwrap_or_else(|_| "localhost/busybox:local".to_string());
    if std::env::var_os("KUBECONFIG").is_none() {
        return Err("KUBECONFIG is not set: point it at a cluster with a node and the injector deployed".into());
    }
    let client = Client::try_default()
        .await
        .map_err(|e| format!("cannot reach the cluster: {e}"))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    let namespace = format!("bench-ready-{stamp}");
    scale::create_namespace(&client, &namespace).await?;
    scale::default_service_account(&client, &namespace).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let machine = format!(
        "{} CPUs, load average {} at start",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );

    let mut times: Vec<Vec<f64>> = vec![Vec::new(); ROUTES.len()];
    let outcome: Result<()> = async {
        for round in 0..warmup + rounds {
            for offset in 0..ROUTES.len() {
                let slot = (round + offset) % ROUTES.len();
                let route = ROUTES[slot];
                let pod = pod(route, round, &image)?;
                let took = time_to_ready(&pods, route, &pod).await?;
                delete_and_wait(&pods, pod.metadata.name.as_deref().unwrap_or_default()).await?;
                if round >= warmup {
                    times[slot].push(took.as_secs_f64());
                }
            }
        }
        Ok(())
    }
    .await;
    if !scale::bench_keep() {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(&namespace, &DeleteParams::default())
            .await;
    }
    outcome?;

    println!("time to Ready, from the create request (s), {rounds} Pods a route after {warmup} warm-up rounds:");
    println!(
        "{:<8} {:>6} {:>6} {:>6} {:>6} {:>6} {:>12}",
        "route", "p50", "p90", "mean", "min", "max", "added p50"
    );
    let mut baseline = 0.0;
    for (route, samples) in ROUTES.iter().zip(&mut times) {
        samples.sort_by(f64::total_cmp);
        let p50 = percentile(samples, 50.0);
        if *route == Route::Plain {
            baseline = p50;
        }
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        println!(
            "{:<8} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>12}",
            route.name(),
            p50,
            percentile(samples, 90.0),
            mean,
            samples[0],
            samples[samples.len() - 1],
            if *route == Route::Plain {
                String::from("-")
            } else {
                format!("{:+.2}", p50 - baseline)
            }
        );
    }
    println!("machine: {machine}");
    println!("command: make bench-ready BENCH_PODS={rounds}");
    Ok(())
}

fn main() -> std::process::ExitCode {
    scale::run_benchmark("bench-ready", run)
}
