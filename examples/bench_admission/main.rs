//! `make bench-admission`: what a Pod create costs on each injection path, against the
//! cluster in `KUBECONFIG` (the real control plane here), timed from the client.
//!
//! Every route is a namespace of its own, and one Pod shape created there:
//!
//! - Pods that did not opt in: `none` (nothing bound: the baseline); `one-condition` (a
//!   hand-written policy whose only match condition reads the opt-in annotation: what any
//!   CEL costs a Pod); `selector-miss` (that policy bound by an `objectSelector` the Pods do
//!   not match); our compiled policies with annotation opt-in on (`ours-N-on`) and off
//!   (`ours-N-off`) for ConfigMaps of 1, 3 and 10 templates;
//! - injections: `minimal` (a hand-written policy adding the same containers and volumes:
//!   the floor for this patch), our policies for a Pod opted in by label, by annotation and
//!   by its namespace, our webhook (`serve`, the shipped configuration, a labelled
//!   namespace) and `stand-in` (a TLS webhook returning the fixed patch a classic Go injector
//!   returns); where the difference between the two comes from: the stand-in returning the
//!   patch our webhook returns (`stand-in-our-patch`), and that under our webhook entry's
//!   match condition (`stand-in-our-entry`);
//! - the same with a huge Pod (50 containers, 1,500 env vars): `none-huge`,
//!   `one-condition-huge`, `ours-1-on-huge`, `ours-1-off-huge`, `minimal-huge`,
//!   `ours-label-huge`.
//!
//! One request in flight; each round creates one Pod on every route, starting with the next
//! one (`BENCH_WARMUP` rounds not counted, then `BENCH_PODS`). Every Pod of an injecting route
//! must come back with the sidecar and no other with it (otherwise the run fails: it would not
//! measure what it says). Prints each route's p50, p90, p99, mean, min and max, its added p50
//! over its baseline, the ratios the policies are held to, where the API server spent the time
//! (its own admission metrics), the machine and its load, and the command; then deletes what
//! it made.
//!
//! Environment: `BENCH_PODS` (200), `BENCH_WARMUP` (10), `BENCH_BIN`
//! (`target/release/envoy-injector`), `BENCH_KEEP=1` to leave everything behind.

#[path = "../../tests/common/kit.rs"]
mod common;
#[path = "../../tests/scale/mod.rs"]
mod scale;

mod apiserver;
mod objects;
mod standin;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::poll;
use envoy_injector::inject::AnnotationOptIn;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use scale::{POLL, Result, Served};
use serde_json::{Value, json};

use objects::{FIELD_MANAGER, INJECT, PREFIX, SIDECAR, Shape};

const WEBHOOK_CONFIG: &str = "bench-adm-webhook";
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

/// One route: a namespace, the Pod created there, and what should happen to it.
struct Route {
    name: &'static str,
    namespace: String,
    shape: Shape,
    huge: bool,
    injects: bool,
    latencies: Vec<Duration>,
}

/// (name, shape, huge, injects): every route, in the order they are printed.
const ROUTES: &[(&str, Shape, bool, bool)] = &[
    ("none", Shape::Plain, false, false),
    ("one-condition", Shape::Plain, false, false),
    ("selector-miss", Shape::Plain, false, false),
    ("ours-1-on", Shape::Plain, false, false),
    ("ours-3-on", Shape::Plain, false, false),
    ("ours-10-on", Shape::Plain, false, false),
    ("ours-1-off", Shape::Plain, false, false),
    ("ours-3-off", Shape::Plain, false, false),
    ("ours-10-off", Shape::Plain, false, false),
    ("minimal", Shape::Annotation, false, true),
    ("ours-label", Shape::Label, false, true),
    ("ours-annotation", Shape::Annotation, false, true),
    ("ours-namespace", Shape::Namespace, false, true),
    ("webhook", Shape::Namespace, false, true),
    ("stand-in", Shape::Namespace, false, true),
    ("stand-in-our-patch", Shape::Namespace, false, true),
    ("stand-in-our-entry", Shape::Namespace, false, true),
    ("none-huge", Shape::Plain, true, false),
    ("one-condition-huge", Shape::Plain, true, false),
    ("ours-1-on-huge", Shape::Plain, true, false),
    ("ours-1-off-huge", Shape::Plain, true, false),
    ("minimal-huge", Shape::Plain, true, true),
    ("ours-label-huge", Shape::Label, true, true),
];

fn main() -> ExitCode {
    scale::run_benchmark("bench-admission", run)
}

async fn run() -> Result<()> {
    let s = settings()?;
    let (client, stamp) = scale::prepare(&s.bin, PREFIX).await?;
    remove_policies(&client).await;
    let mut routes: Vec<Route> = ROUTES
        .iter()
        .map(|&(name, shape, huge, injects)| Route {
            name,
            namespace: format!("{PREFIX}{stamp}-{name}"),
            shape,
            huge,
            injects,
            latencies: Vec::new(),
        })
        .collect();
    let injector = format!("{PREFIX}{stamp}-injector");
    let result = measure(&s, &client, &injector, &mut routes).await;
    if !s.keep {
        remove(&client, &injector, &routes).await;
    }
    result
}

fn namespace_of<'r>(routes: &'r [Route], name: &str) -> &'r str {
    &routes
        .iter()
        .find(|r| r.name == name)
        .expect("a route of that name")
        .namespace
}

/// Every object the routes need: the compiled variants, the hand-written floors, the two
/// webhook configurations.
async fn install(s: &Settings, client: &Client, injector: &str, routes: &[Route]) -> Result<Served> {
    let ns = |name: &str| namespace_of(routes, name).to_string();
    let mut objects = Vec::new();
    let on = AnnotationOptIn::On;
    let off = AnnotationOptIn::Off;
    // The huge Pods have variants of their own, so that the API server's metrics (by policy
    // name) tell their cost apart.
    let variants: [(&str, usize, AnnotationOptIn, Vec<String>); 8] = [
        (
            "v1on",
            1,
            on,
            ["ours-1-on", "ours-label", "ours-annotation", "ours-namespace"]
                .map(ns)
                .into(),
        ),
        ("v1off", 1, off, vec![ns("ours-1-off")]),
        ("h1on", 1, on, ["ours-1-on-huge", "ours-label-huge"].map(ns).into()),
        ("h1off", 1, off, vec![ns("ours-1-off-huge")]),
        ("v3on", 3, on, vec![ns("ours-3-on")]),
        ("v3off", 3, off, vec![ns("ours-3-off")]),
        ("v10on", 10, on, vec![ns("ours-10-on")]),
        ("v10off", 10, off, vec![ns("ours-10-off")]),
    ];
    for (variant, count, annotations, namespaces) in &variants {
        objects.extend(objects::compiled(
            &objects::templates(*count),
            *annotations,
            variant,
            namespaces,
        )?);
    }
    let condition = objects::annotation_condition();
    objects.extend(objects::hand_written(
        &format!("{PREFIX}minimal"),
        None,
        &ns("minimal"),
        None,
    ));
    objects.extend(objects::hand_written(
        &format!("{PREFIX}minimal-huge"),
        None,
        &ns("minimal-huge"),
        None,
    ));
    objects.extend(objects::hand_written(
        &format!("{PREFIX}one-condition"),
        Some(&condition),
        &ns("one-condition"),
        None,
    ));
    objects.extend(objects::hand_written(
        &format!("{PREFIX}one-condition-huge"),
        Some(&condition),
        &ns("one-condition-huge"),
        None,
    ));
    objects.extend(objects::hand_written(
        &format!("{PREFIX}selector-miss"),
        Some(&condition),
        &ns("selector-miss"),
        Some(json!({"matchLabels": {INJECT: "true"}})),
    ));
    for object in &objects {
        apply(client, object, &common::policies::resource_of(object)).await?;
    }

    // Our webhook: `serve` in webhook mode, the shipped configuration sent to it.
    let dir = scale::scratch("bench-admission")?;
    scale::certs(&s.bin, &dir)?;
    let configmap = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "envoy-injector"},
        "data": {"config": envoy_injector::template::EMBEDDED_DEFAULT},
    });
    let typed: ConfigMap = serde_json::from_value(configmap).map_err(|e| e.to_string())?;
    Api::<ConfigMap>::namespaced(client.clone(), injector)
        .create(&PostParams::default(), &typed)
        .await
        .map_err(|e| format!("cannot create the ConfigMap: {e}"))?;
    let served = Served::start(&s.bin, injector, &dir, &dir.join("serve.log"), &[]).await?;
    poll::until_true("/readyz", PATIENCE, POLL, async || served.ready().await).await?;
    let ca = std::fs::read(dir.join("ca.crt")).map_err(|e| format!("cannot read ca.crt: {e}"))?;
    let shipped: Value = serde_yaml_ng::from_str(include_str!("../../manifests/webhook.yaml"))
        .map_err(|e| format!("manifests/webhook.yaml: {e}"))?;
    let webhooks = common::webhooks::local_webhooks(
        shipped.clone(),
        json!({"name": WEBHOOK_CONFIG, "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}}),
        &format!("https://{}/mutate", served.webhook),
        &ca,
        &[namespace_of(routes, "webhook")],
    );
    let webhook_resource = kube::core::ApiResource::erase::<MutatingWebhookConfiguration>(&());
    apply(client, &webhooks, &webhook_resource).await?;

    // The stand-ins: the classic injector's patch (the same sidecar container, one volume,
    // one annotation); our webhook's patch; that under our namespace entry's condition.
    let (containers, _) = objects::sidecar();
    let volume = json!({"name": "bench-scratch", "emptyDir": {}});
    let ours = objects::our_patch(&objects::pod("bench", Shape::Namespace, false))?;
    let shipped_entry = &shipped["webhooks"][0];
    let entries: [(&str, Value, Option<&Value>); 3] = [
        ("stand-in", standin::patch(&containers[0], &volume), None),
        ("stand-in-our-patch", ours.clone(), None),
        ("stand-in-our-entry", ours, Some(&shipped_entry["matchConditions"])),
    ];
    for (route, patch, conditions) in entries {
        let standin = standin::start(&dir, &patch).await?;
        let mut webhook = json!({
            "name": format!("{route}.bench.envoy-injector"),
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "clientConfig": {"url": format!("https://{}/mutate", standin.addr), "caBundle": common::webhooks::base64(&ca)},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace_of(routes, route)}},
        });
        if let Some(conditions) = conditions {
            webhook["matchConditions"] = conditions.clone();
        }
        let config = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": format!("{PREFIX}{route}"), "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}},
            "webhooks": [webhook],
        });
        apply(client, &config, &webhook_resource).await?;
    }
    Ok(served)
}

async fn measure(s: &Settings, client: &Client, injector: &str, routes: &mut [Route]) -> Result<()> {
    scale::create_namespace(client, injector).await?;
    for route in routes.iter() {
        scale::create_namespace(client, &route.namespace).await?;
        if route.shape == Shape::Namespace {
            label_namespace(client, &route.namespace).await?;
        }
    }
    let served = install(s, client, injector, routes).await?;
    for route in routes.iter() {
        scale::default_service_account(client, &route.namespace).await?;
    }
    for route in routes.iter().filter(|r| r.injects) {
        wait_until_injecting(client, route).await?;
    }

    println!(
        "bench-admission: Pod create latency by route, {} Pods each, interleaved, one request in flight ({} rounds before, not counted)",
        s.pods, s.warmup
    );
    println!("machine: {}", machine());
    println!("API server: {}", api_server(client).await);
    println!("command: {}", command_line(s));

    let mut before = None;
    let rounds = s.warmup + s.pods;
    for round in 0..rounds {
        if round == s.warmup {
            before = Some(apiserver::scrape(client).await?);
        }
        for turn in 0..routes.len() {
            let at = (round + turn) % routes.len();
            let route = &mut routes[at];
            let pod = objects::pod(&format!("bench-{round:05}"), route.shape, route.huge);
            let api: Api<Pod> = Api::namespaced(client.clone(), &route.namespace);
            let started = Instant::now();
            let stored = api
                .create(&PostParams::default(), &pod)
                .await
                .map_err(|e| format!("route {}: cannot create a Pod: {e}", route.name))?;
            let took = started.elapsed();
            if injected(&stored) != route.injects {
                return Err(format!(
                    "route {}: Pod bench-{round:05} came back {}injected",
                    route.name,
                    if route.injects { "not " } else { "" }
                ));
            }
            if round >= s.warmup {
                route.latencies.push(took);
            }
        }
    }
    let after = apiserver::scrape(client).await?;
    served.stop().await?;
    println!("load average at the end: {}", load());

    report(routes);
    if let Some(before) = before {
        apiserver::report(&before, &after, s.pods);
    }
    Ok(())
}

fn injected(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .is_some_and(|s| s.containers.iter().any(|c| c.name == SIDECAR))
}

/// The route's added p50 over its baseline (`none`, or `none-huge` for a huge Pod).
fn added(routes: &[Route], name: &str) -> f64 {
    let route = routes.iter().find(|r| r.name == name).expect("a route of that name");
    let baseline = if route.huge { "none-huge" } else { "none" };
    let base = routes.iter().find(|r| r.name == baseline).expect("the baseline");
    ms(percentile(&route.latencies, 0.50)) - ms(percentile(&base.latencies, 0.50))
}

fn report(routes: &[Route]) {
    println!();
    println!(
        "{:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "route", "p50 ms", "p90 ms", "p99 ms", "mean ms", "min ms", "max ms", "added p50"
    );
    for route in routes {
        let l = &route.latencies;
        println!(
            "{:<20} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>10}",
            route.name,
            ms(percentile(l, 0.50)),
            ms(percentile(l, 0.90)),
            ms(percentile(l, 0.99)),
            ms(l.iter().sum::<Duration>() / l.len().max(1) as u32),
            ms(*l.iter().min().unwrap_or(&Duration::ZERO)),
            ms(*l.iter().max().unwrap_or(&Duration::ZERO)),
            if route.name.starts_with("none") {
                String::from("-")
            } else {
                format!("{:+.2} ms", added(routes, route.name))
            }
        );
    }
    let ratio = |a: &str, b: &str| added(routes, a) / added(routes, b);
    let minimal = added(routes, "minimal");
    println!();
    println!("ratios of added p50 (goal in brackets):");
    for n in [1, 3, 10] {
        println!(
            "  not opted in, annotation opt-in off, {n:>2} template(s) / minimal injection: {:.2} [<= 0.10]",
            added(routes, &format!("ours-{n}-off")) / minimal
        );
    }
    for n in [1, 3, 10] {
        println!(
            "  not opted in, annotation opt-in on,  {n:>2} template(s) / one-condition:     {:.2} [<= 1.10]",
            ratio(&format!("ours-{n}-on"), "one-condition")
        );
    }
    println!(
        "  selector-miss / minimal injection: {:.2}; one-condition / minimal injection: {:.2}",
        added(routes, "selector-miss") / minimal,
        added(routes, "one-condition") / minimal
    );
    for how in ["label", "annotation", "namespace"] {
        let route = format!("ours-{how}");
        println!(
            "  injection by {how:<10} / minimal: {:.2} [<= 1.15]; / our webhook: {:.2} [<= 0.85]",
            ratio(&route, "minimal"),
            ratio(&route, "webhook")
        );
    }
    println!(
        "  our webhook / stand-in webhook: {:.2} [within noise of 1]",
        ratio("webhook", "stand-in")
    );
    println!(
        "  huge Pod: not opted in, on / one-condition: {:.2}, off / minimal injection: {:.2}; injection by label / minimal: {:.2}",
        ratio("ours-1-on-huge", "one-condition-huge"),
        ratio("ours-1-off-huge", "minimal-huge"),
        ratio("ours-label-huge", "minimal-huge")
    );
}

/// Opts every Pod of the namespace in (`sidecar.samplecrd.k8s.io/inject=enabled`).
async fn label_namespace(client: &Client, name: &str) -> Result<()> {
    let patch = json!({"metadata": {"labels": {INJECT: "enabled"}}});
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| format!("cannot label namespace {name}: {e}"))
}

async fn apply(client: &Client, object: &Value, resource: &kube::core::ApiResource) -> Result<()> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    Api::<DynamicObject>::all_with(client.clone(), resource)
        .patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(object))
        .await
        .map(|_| ())
        .map_err(|e| format!("cannot apply {} {name}: {e}", resource.kind))
}

/// Until a dry-run Pod of the route comes back injected (the API server picks up
/// policies and webhook configurations a moment after they are written).
async fn wait_until_injecting(client: &Client, route: &Route) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &route.namespace);
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    poll::until_true(&format!("route {} to inject", route.name), PATIENCE, POLL, async || {
        api.create(&params, &objects::pod("bench-probe", route.shape, route.huge))
            .await
            .is_ok_and(|p| injected(&p))
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

fn load() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
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
    format!(
        "{cpu}, {cpus} CPUs, Linux {}, load average {} at start",
        kernel.trim(),
        load()
    )
}

async fn api_server(client: &Client) -> String {
    match client.apiserver_version().await {
        Ok(v) => v.git_version,
        Err(e) => format!("version unknown ({e})"),
    }
}

/// Every admission policy and webhook configuration labelled the benchmark's (an
/// earlier run's, or this one's).
async fn remove_policies(client: &Client) {
    let selector = ListParams::default().labels(&format!("app.kubernetes.io/managed-by={FIELD_MANAGER}"));
    let mut resources: Vec<kube::core::ApiResource> = [
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "ValidatingAdmissionPolicy",
    ]
    .iter()
    .map(|kind| common::policies::resource_of(&json!({"kind": kind})))
    .collect();
    resources.push(kube::core::ApiResource::erase::<MutatingWebhookConfiguration>(&()));
    for resource in resources {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        if let Err(e) = api.delete_collection(&DeleteParams::default(), &selector).await {
            eprintln!("could not delete the benchmark's {}s: {e}", resource.kind);
        }
    }
}

/// The Pods, the policies, the webhook configurations and the namespaces.
async fn remove(client: &Client, injector: &str, routes: &[Route]) {
    remove_policies(client).await;
    for namespace in std::iter::once(injector).chain(routes.iter().map(|r| r.namespace.as_str())) {
        scale::cleanup(client, namespace, 8).await;
    }
}
