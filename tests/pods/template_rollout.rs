//! Tier `template_rollout`: a template edit brought to running Pods, on the node. The
//! injector is deployed with the automatic rollout's component (`make deploy
//! AUTO_ROLLOUT=1`) and a stand-in template that writes its version into the shared volume.
//!
//! - Two Deployments, a StatefulSet and a DaemonSet injected at version 1; the template
//!   edited to version 2; `rollout --dry-run` plans the four and changes nothing; `rollout`
//!   brings every Pod to the new revision, Ready, while a sampler reads every workload's
//!   Pods every 200 ms: never more unavailable than its update strategy allows.
//! - A Deployment whose app is Ready only beside a version-1 sidecar: its new Pods fail
//!   readiness, its progress deadline passes, the run stops there and says so (exit 1); the
//!   Deployment after it keeps its Pods on the old revision, untouched.
//! - The automatic mode, in a namespace labelled `sidecar.samplecrd.k8s.io/rollout=auto`:
//!   both its Deployments restarted one at a time, at least the interval apart, Events
//!   `RolloutStarted`/`RolloutCompleted`, `envoy_injector_rollouts_total{result="completed"}`
//!   2 on the Lease holder; nothing restarted in the other namespaces meanwhile.
//! - Drift: a Pod created from `inject`'s output with the app's mount of the sidecar's
//!   volume removed is named by `check --drift`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use crate::common::metrics::metric_value;
use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "template_rollout",
    run: |suite| Box::pin(run(suite)),
};

const REVISION: &str = "sidecar.samplecrd.k8s.io/revision";
const AUTO: (&str, &str) = ("sidecar.samplecrd.k8s.io/rollout", "auto");
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// `serve --auto-rollout-interval`'s default, which the component keeps.
const AUTO_INTERVAL: Duration = Duration::from_secs(30);

/// The stand-in template, writing `version` into the shared volume before it says it started.
fn versioned(shell: &str, version: u32) -> String {
    stand_in_template(shell).replace(
        &format!("touch {STARTED_FILE};"),
        &format!("echo {version} > {SHARED_MOUNT}/version; touch {STARTED_FILE};"),
    )
}

fn revision_of(text: &str) -> String {
    envoy_injector::template::template_revision(text)
}

/// The Pod template of every workload here: the app, Ready once `ready_when` (a shell test)
/// holds, if given.
fn pod_template(name: &str, shell: &str, ready_when: Option<&str>) -> Value {
    let mut app = json!({
        "name": "app",
        "image": shell,
        "imagePullPolicy": "IfNotPresent",
        "command": APP_COMMAND,
    });
    if let Some(test) = ready_when {
        app["readinessProbe"] = json!({"exec": {"command": ["sh", "-c", test]}, "periodSeconds": 1});
    }
    json!({
        "metadata": {"labels": {"app": name}},
        "spec": {
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": GRACE_SECONDS,
            "containers": [app],
        },
    })
}

fn workload(kind: &str, name: &str, spec: Value, template: Value) -> Value {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": name}});
    spec["template"] = template;
    json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec})
}

async fn create<K>(client: &kube::Client, namespace: &str, object: Value) -> K
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(object).expect("a workload");
    Api::<K>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &typed)
        .await
        .unwrap_or_else(|e| panic!("expected to create a {}, found: {}", K::kind(&()), api_error(&e)))
}

/// One workload the sampler watches: its Pods (`app=name`), how many it wants, how many
/// its update strategy lets be unavailable.
#[derive(Debug, Clone)]
struct Watched {
    name: &'static str,
    want: usize,
    allowed: usize,
}

/// Every `app=NAME` Pod of `ns` Ready, not being deleted, at `revision`: how many.
async fn ready_at(ns: &TestNs, name: &str, revision: Option<&str>) -> Result<usize, String> {
    let pods = ns
        .pods
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .map_err(|e| api_error(&e))?
        .items;
    Ok(pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && ready(p).is_ok())
        .filter(|p| revision.is_none_or(|r| label(p, REVISION) == Some(r)))
        .count())
}

async fn all_ready_at(ns: &TestNs, workloads: &[Watched], revision: &str) {
    for w in workloads {
        wait_for(&format!("{} Pod(s) of {} Ready at {revision}", w.want, w.name), RUN_PATIENCE, async || {
            match ready_at(ns, w.name, Some(revision)).await? {
                n if n == w.want => Ok(()),
                n => Err(format!("{n} Ready at it")),
            }
        })
        .await;
    }
}

/// Whether each workload of `namespace` has been restarted (its Pod template carries
/// `restartedAt`), with its resourceVersion.
async fn restarted(client: &kube::Client, namespace: &str) -> BTreeMap<String, (bool, String)> {
    let mut out = BTreeMap::new();
    let mut note = |kind: &str, meta: &kube::api::ObjectMeta, template: Option<&kube::api::ObjectMeta>| {
        let marked = template.and_then(|m| m.annotations.as_ref()).is_some_and(|a| a.contains_key(RESTARTED_AT));
        out.insert(
            format!("{kind} {}", meta.name.clone().unwrap_or_default()),
            (marked, meta.resource_version.clone().unwrap_or_default()),
        );
    };
    for d in Api::<Deployment>::namespaced(client.clone(), namespace).list(&ListParams::default()).await.expect("Deployments").items {
        note("Deployment", &d.metadata, d.spec.as_ref().and_then(|s| s.template.metadata.as_ref()));
    }
    for s in Api::<StatefulSet>::namespaced(client.clone(), namespace).list(&ListParams::default()).await.expect("StatefulSets").items {
        note("StatefulSet", &s.metadata, s.spec.as_ref().and_then(|s| s.template.metadata.as_ref()));
    }
    for d in Api::<DaemonSet>::namespaced(client.clone(), namespace).list(&ListParams::default()).await.expect("DaemonSets").items {
        note("DaemonSet", &d.metadata, d.spec.as_ref().and_then(|s| s.template.metadata.as_ref()));
    }
    out
}

async fn event_time(ns: &TestNs, name: &str, reason: &str) -> Result<Event, String> {
    let events = ns.events_about("Deployment", name).await?;
    events
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(reason))
        .ok_or_else(|| format!("no {reason} Event on Deployment {name} yet"))
}

fn seconds_of(event: &Event) -> f64 {
    let time = event
        .event_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
        .expect("an Event with a time");
    time.as_millisecond() as f64 / 1000.0
}

async fn run(suite: &Suite) -> TierResult {
    let (installation, images) = installation(suite).await?;
    let client = &suite.client;
    let deployed = make(&[
        "deploy",
        &format!("IMAGE={}", images.injector),
        &format!("INJECTION={WEBHOOK}"),
        "AUTO_ROLLOUT=1",
    ])
    .await;
    assert!(deployed.status.success(), "expected `make deploy AUTO_ROLLOUT=1` to roll the injector out, found {}", describe_output(&deployed));
    let (v1, v2) = (versioned(&images.shell, 1), versioned(&images.shell, 2));
    installation.use_config(suite, "the stand-in template, version 1", &v1).await;
    let scope = Scope::new(suite.settings.mode);
    let apps = TestNs::create(client, &scope, "tr-apps", &[NAMESPACE_OPT_IN]).await;
    let broken = TestNs::create(client, &scope, "tr-broken", &[NAMESPACE_OPT_IN]).await;
    let auto = TestNs::create(client, &scope, "tr-auto", &[NAMESPACE_OPT_IN, AUTO]).await;
    let shell = images.shell.as_str();

    // The workloads, each with its strategy's bound on unavailable Pods.
    let rolling = |surge: i32, unavailable: i32| json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}});
    let _: Deployment = create(client, &apps.name, workload("Deployment", "a-front", json!({"replicas": 2, "strategy": rolling(1, 0)}), pod_template("a-front", shell, None))).await;
    let _: Deployment = create(client, &apps.name, workload("Deployment", "b-back", json!({"replicas": 3, "strategy": rolling(0, 1)}), pod_template("b-back", shell, None))).await;
    let _: StatefulSet = create(client, &apps.name, workload("StatefulSet", "c-store", json!({"replicas": 2, "serviceName": "c-store", "updateStrategy": {"type": "RollingUpdate"}}), pod_template("c-store", shell, None))).await;
    let _: DaemonSet = create(client, &apps.name, workload("DaemonSet", "d-agent", json!({"updateStrategy": rolling(1, 0)}), pod_template("d-agent", shell, None))).await;
    let watched = [
        Watched { name: "a-front", want: 2, allowed: 0 },
        Watched { name: "b-back", want: 3, allowed: 1 },
        Watched { name: "c-store", want: 2, allowed: 1 },
        Watched { name: "d-agent", want: 1, allowed: 0 },
    ];
    // Ready only beside a version-1 sidecar; its progress deadline is short.
    let picky = format!("grep -qx 1 {SHARED_MOUNT}/version");
    let _: Deployment = create(client, &broken.name, workload("Deployment", "a-picky", json!({"replicas": 2, "progressDeadlineSeconds": 15, "strategy": rolling(1, 0)}), pod_template("a-picky", shell, Some(&picky)))).await;
    let _: Deployment = create(client, &broken.name, workload("Deployment", "b-after", json!({"replicas": 1}), pod_template("b-after", shell, None))).await;
    let broken_watched = [Watched { name: "a-picky", want: 2, allowed: 0 }, Watched { name: "b-after", want: 1, allowed: 0 }];
    for name in ["x-one", "y-two"] {
        let _: Deployment = create(client, &auto.name, workload("Deployment", name, json!({"replicas": 1}), pod_template(name, shell, None))).await;
    }
    let auto_watched = [Watched { name: "x-one", want: 1, allowed: 0 }, Watched { name: "y-two", want: 1, allowed: 0 }];
    let started = Instant::now();
    all_ready_at(&apps, &watched, &revision_of(&v1)).await;
    all_ready_at(&broken, &broken_watched, &revision_of(&v1)).await;
    all_ready_at(&auto, &auto_watched, &revision_of(&v1)).await;
    step!("2 Deployments, a StatefulSet, a DaemonSet; a picky Deployment and one after it; 2 Deployments in the auto namespace: all Ready at version 1 in {:.1} s", started.elapsed().as_secs_f64());

    // The edit. The automatic rollout starts in the labelled namespace, nowhere else.
    installation.use_config(suite, "the stand-in template, version 2", &v2).await;
    let edited = Instant::now();
    wait_for("the automatic rollout to start on x-one", RUN_PATIENCE, async || event_time(&auto, "x-one", "RolloutStarted").await).await;
    for ns in [&apps, &broken] {
        let state = restarted(client, &ns.name).await;
        assert!(state.values().all(|(marked, _)| !marked), "nothing restarted in {} by the automatic rollout: {state:?}", ns.name);
    }

    // The command: the plan first, which changes nothing.
    let before = restarted(client, &apps.name).await;
    let dry = envoy_injector("rollout", &["-n", &apps.name, "--dry-run", "-o", "json"]).await;
    assert_eq!(dry.code, 0, "{}{}", dry.stdout, dry.stderr);
    let plan: Value = serde_json::from_str(&dry.stdout).expect("-o json prints JSON");
    let planned: Vec<String> = plan["workloads"].as_array().unwrap().iter().map(|w| format!("{} {}", w["kind"].as_str().unwrap(), w["name"].as_str().unwrap())).collect();
    assert_eq!(planned, vec!["Deployment a-front", "Deployment b-back", "StatefulSet c-store", "DaemonSet d-agent"], "{plan:#}");
    assert_eq!(restarted(client, &apps.name).await, before, "--dry-run changes nothing");
    step!("rollout --dry-run: {planned:?}, nothing changed; in step: {}", plan["inStep"]["because"]);

    // The run, sampled.
    let worst: Arc<Mutex<BTreeMap<&'static str, usize>>> = Arc::default();
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (worst, sampling, apps_pods, watched) = (worst.clone(), sampling.clone(), apps.pods.clone(), watched.clone());
        tokio::spawn(async move {
            let mut samples = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                let pods = apps_pods.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
                for w in &watched {
                    let up = pods
                        .iter()
                        .filter(|p| label(p, "app") == Some(w.name) && p.metadata.deletion_timestamp.is_none() && ready(p).is_ok())
                        .count();
                    let down = w.want.saturating_sub(up);
                    let mut worst = worst.lock().unwrap();
                    let entry = worst.entry(w.name).or_default();
                    *entry = (*entry).max(down);
                }
                samples += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            samples
        })
    };
    let ran = envoy_injector("rollout", &["-n", &apps.name, "-o", "json", "--timeout", "3m"]).await;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.await.expect("the sampler");
    assert_eq!(ran.code, 0, "every workload rolls out:\n{}{}", ran.stdout, ran.stderr);
    let report: Value = serde_json::from_str(&ran.stdout).expect("-o json prints JSON");
    let took: Vec<String> = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            assert_eq!(w["result"], "completed", "{report:#}");
            format!("{} {:.1} s", w["name"].as_str().unwrap(), w["seconds"].as_f64().unwrap_or_default())
        })
        .collect();
    all_ready_at(&apps, &watched, &revision_of(&v2)).await;
    let worst = worst.lock().unwrap().clone();
    for w in &watched {
        assert!(
            worst[w.name] <= w.allowed,
            "{}: at most {} of {} Pods unavailable by its strategy, found {} in a sample",
            w.name, w.allowed, w.want, worst[w.name]
        );
    }
    step!("rollout: every Pod Ready at version 2 ({}); most unavailable at once over {samples} samples: {worst:?}", took.join(", "));

    // The picky Deployment fails, and the one after it is not touched.
    let before = restarted(client, &broken.name).await;
    let ran = envoy_injector("rollout", &["-n", &broken.name, "-o", "json", "--timeout", "90s"]).await;
    assert_eq!(ran.code, 1, "a failed rollout fails the run:\n{}{}", ran.stdout, ran.stderr);
    let report: Value = serde_json::from_str(&ran.stdout).expect("-o json prints JSON");
    let first = &report["workloads"][0];
    assert_eq!((first["name"].as_str(), first["result"].as_str()), (Some("a-picky"), Some("failed")), "{report:#}");
    assert!(first["reason"].as_str().unwrap_or_default().contains("progress deadline"), "{report:#}");
    assert_eq!(report["workloads"][1]["result"], "not-started", "{report:#}");
    let after = restarted(client, &broken.name).await;
    assert_eq!(after["Deployment b-after"], before["Deployment b-after"], "b-after untouched");
    assert_eq!(ready_at(&broken, "b-after", Some(&revision_of(&v1))).await, Ok(1), "b-after still on version 1");
    assert_eq!(ready_at(&broken, "a-picky", Some(&revision_of(&v1))).await, Ok(2), "a-picky's old Pods still serve (maxUnavailable 0)");
    let text = ran.stderr.lines().filter(|l| l.contains("a-picky")).collect::<Vec<_>>().join(" / ");
    step!("a-picky: {}; b-after not started, on version 1; stderr: {text}", first["reason"]);

    // The automatic rollout: both, one at a time, the interval apart.
    let completed = |name: &'static str| {
        let auto = &auto;
        async move { wait_for(&format!("RolloutCompleted on {name}"), RUN_PATIENCE * 2, async || event_time(auto, name, "RolloutCompleted").await).await }
    };
    let (x_done, y_done) = (completed("x-one").await, completed("y-two").await);
    let x_started = event_time(&auto, "x-one", "RolloutStarted").await.expect("x-one's start");
    let y_started = event_time(&auto, "y-two", "RolloutStarted").await.expect("y-two's start");
    assert!(seconds_of(&y_started) >= seconds_of(&x_done), "one at a time: y-two started after x-one completed");
    assert!(
        seconds_of(&y_started) - seconds_of(&x_started) >= AUTO_INTERVAL.as_secs_f64() - 1.0,
        "restarts at least {AUTO_INTERVAL:?} apart: {} s",
        seconds_of(&y_started) - seconds_of(&x_started)
    );
    all_ready_at(&auto, &auto_watched, &revision_of(&v2)).await;
    let mut leader_metrics = None;
    for pod in installation.live_pods().await {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let out = kubectl(&["get", "--raw", &format!("/api/v1/namespaces/{INJECTOR_NAMESPACE}/pods/{name}:9090/proxy/metrics")], None).await;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if metric_value(&text, "envoy_injector_leader") == Some(1.0) {
            leader_metrics = Some(text);
        }
    }
    let metrics = leader_metrics.expect("a replica holding the Lease");
    assert_eq!(metric_value(&metrics, "envoy_injector_rollouts_total{result=\"completed\"}"), Some(2.0));
    assert_eq!(metric_value(&metrics, "envoy_injector_rollouts_total{result=\"failed\"}"), Some(0.0));
    let auto_took = seconds_of(&y_done) - seconds_of(&x_started);
    step!(
        "automatic rollout: x-one then y-two {:.1} s apart, both Ready at version 2, {:.1} s after the edit; rollouts_total completed 2",
        seconds_of(&y_started) - seconds_of(&x_started),
        edited.elapsed().as_secs_f64()
    );

    // Drift: a Pod whose app lost the mount of the sidecar's volume after injection.
    let dir = temp_dir("envoy-injector-pods-drift");
    let cm = dir.path().join("configmap.json");
    std::fs::write(&cm, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": INJECTOR_NAME}, "data": {"config": v2}}).to_string()).expect("write");
    let app = dir.path().join("pod.json");
    let mut plain = serde_json::to_value(app_pod("h-drift", &[], &images)).expect("a Pod is JSON");
    plain["metadata"]["namespace"] = json!(apps.name);
    std::fs::write(&app, plain.to_string()).expect("write");
    let out = envoy_injector("inject", &["-f", app.to_str().unwrap(), "--config", cm.to_str().unwrap(), "-o", "json"]).await;
    let mut tampered: Value = serde_json::from_str(&out.stdout).expect("inject -o json prints JSON");
    tampered["spec"]["containers"][0]["volumeMounts"] = json!([]);
    let tampered: Pod = serde_json::from_value(tampered).expect("a Pod");
    apps.pods.create(&PostParams::default(), &tampered).await.expect("create the tampered Pod");
    let drift = envoy_injector("check", &["-n", &apps.name, "--drift"]).await;
    assert_eq!(drift.code, 1, "{}", drift.stdout);
    let line = format!("containers[app].volumeMounts[{SHARED_MOUNT}]: expected");
    // A bare Pod is named alone: nothing owns it.
    let named = format!("Pod {}/h-drift: template `config`", apps.name);
    assert!(
        drift.stdout.contains(&named) && !drift.stdout.contains(" of Pod ") && drift.stdout.contains(&line),
        "expected `{named}` and `{line}` in:\n{}",
        drift.stdout
    );
    apps.pods.delete("h-drift", &DeleteParams::default()).await.expect("delete h-drift");
    step!("check --drift: h-drift named ({line} ...), exit 1");
    Ok(format!(
        "rollout {}; worst unavailable {worst:?} (allowed 0/1/1/0); a-picky failed, b-after untouched; auto x-one → y-two in {auto_took:.1} s",
        took.join(", ")
    ))
}
