//! A temporary test namespace and what tiers do in it: Pods (one, or a loop of creates),
//! Networks, Events.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Namespace, Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::{
    FIELD_MANAGER, PATIENCE, POLL, Scope, annotation, api_error, container, describe_pod, namespace_object, network,
    network_resource, network_summary, pod, ready_condition, service_account_object, step, unique_suffix, wait_for,
};
use crate::common::poll;

/// Label on the Pods of a [`PodLoop`]: its prefix.
const LOOP_LABEL: &str = "e2e.samplecrd.k8s.io/loop";

/// A namespace `ei-e2e-<tier>-<random>`, deleted by the [`Scope`] it was registered with.
pub struct TestNs {
    pub name: String,
    pub client: Client,
    pub pods: Api<Pod>,
    pub networks: Api<DynamicObject>,
    pub events: Api<Event>,
}

impl TestNs {
    /// Creates the namespace `ei-e2e-<tier>-<random>`: see [`TestNs::create_named`].
    pub async fn create(client: &Client, scope: &Scope, tier: &str, labels: &[(&str, &str)]) -> TestNs {
        TestNs::create_named(client, scope, &format!("ei-e2e-{tier}-{}", unique_suffix()), labels).await
    }

    /// Creates namespace `name` (with `labels`, and [`super::PART_OF`]), registers its
    /// deletion with `scope`, and waits for its `default` ServiceAccount (which Pod
    /// admission needs).
    pub async fn create_named(client: &Client, scope: &Scope, name: &str, labels: &[(&str, &str)]) -> TestNs {
        let name = name.to_string();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(&PostParams::default(), &namespace_object(&name, labels))
            .await
            .unwrap_or_else(|e| panic!("expected to create namespace {name}, found: {}", api_error(&e)));
        scope.namespace(&name);
        step!("namespace {name} created (labels {labels:?})");

        // kube-controller-manager creates `default`; a bare API server has none, so make it
        // after a short wait.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        let exists = poll::until_true("ServiceAccount default", Duration::from_secs(10), POLL, async || {
            matches!(accounts.get_opt("default").await, Ok(Some(_)))
        })
        .await;
        if exists.is_err() {
            match accounts
                .create(&PostParams::default(), &service_account_object("default"))
                .await
            {
                Ok(_) => step!("created ServiceAccount default (no controller-manager made one)"),
                Err(kube::Error::Api(s)) if s.is_already_exists() => {}
                Err(e) => panic!(
                    "expected ServiceAccount {name}/default to exist or be creatable, found: {}",
                    api_error(&e)
                ),
            }
        }
        TestNs {
            pods: Api::namespaced(client.clone(), &name),
            networks: Api::namespaced_with(client.clone(), &name, &network_resource()),
            events: Api::namespaced(client.clone(), &name),
            client: client.clone(),
            name,
        }
    }

    pub async fn create_pod(&self, pod: &Pod, dry_run: bool) -> Result<Pod, kube::Error> {
        let params = PostParams {
            dry_run,
            field_manager: Some(FIELD_MANAGER.to_string()),
        };
        self.pods.create(&params, pod).await
    }

    /// Creates `pod` for real and reads it back: what the API server stored.
    pub async fn create_stored(&self, pod: &Pod) -> Pod {
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.create_pod(pod, false)
            .await
            .unwrap_or_else(|e| panic!("expected Pod {name} to be admitted, found: {}", api_error(&e)));
        self.pods
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("expected to read Pod {name} back, found: {}", api_error(&e)))
    }

    /// Sets (or, with `Value::Null`, removes) a label of the namespace.
    pub async fn set_label(&self, key: &str, value: Value) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let patch = json!({ "metadata": { "labels": { key: value } } });
        namespaces
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("expected to label namespace {}, found: {}", self.name, api_error(&e)));
    }

    pub async fn network(&self, name: &str) -> Result<DynamicObject, String> {
        match self.networks.get_opt(name).await {
            Ok(Some(obj)) => Ok(obj),
            Ok(None) => Err(format!("Network {name} does not exist")),
            Err(e) => Err(api_error(&e)),
        }
    }

    pub async fn create_network(&self, name: &str, cidr: &str, gateway: &str) {
        self.networks
            .create(&PostParams::default(), &network(name, cidr, gateway))
            .await
            .unwrap_or_else(|e| panic!("expected to create Network {name}, found: {}", api_error(&e)));
    }

    /// Waits until Network `name` is Ready=True for its current generation.
    pub async fn network_ready(&self, name: &str, patience: Duration) -> DynamicObject {
        let what = format!("Network {}/{name} Ready=True for its current generation", self.name);
        wait_for(&what, patience, async || {
            let obj = self.network(name).await?;
            let observed = obj.data["status"]["observedGeneration"].as_i64();
            let current = observed.is_some() && observed == obj.metadata.generation;
            if current && ready_condition(&obj).is_some_and(|c| c["status"] == "True") {
                Ok(obj)
            } else {
                Err(network_summary(&obj))
            }
        })
        .await
    }

    /// Waits until Network `name` counts `count` attached Pods.
    pub async fn attached_pods(&self, name: &str, count: i64) {
        let what = format!("status.attachedPods of Network {}/{name} to be {count}", self.name);
        wait_for(&what, PATIENCE, async || {
            let obj = self.network(name).await?;
            if obj.data["status"]["attachedPods"] == json!(count) {
                Ok(())
            } else {
                Err(network_summary(&obj))
            }
        })
        .await;
    }

    pub async fn events_about(&self, kind: &str, name: &str) -> Result<Vec<Event>, String> {
        list_events_about(&self.events, kind, name).await
    }

    /// Waits for an Event about Network `name` and returns the reporting instance of each.
    pub async fn network_reporters(&self, name: &str) -> Vec<String> {
        let what = format!("an Event about Network {}/{name}", self.name);
        wait_for(&what, PATIENCE, async || {
            let events = self.events_about("Network", name).await?;
            let reporters: Vec<String> = events.iter().filter_map(|e| e.reporting_instance.clone()).collect();
            if reporters.is_empty() {
                Err(format!("{} Events, none with a reportingInstance", events.len()))
            } else {
                Ok(reporters)
            }
        })
        .await
    }

    /// Every Pod of loop `prefix`; panics unless each carries one of `sidecars` (one per
    /// template that may have been live) and the status annotation. Returns how many there
    /// are.
    pub async fn loop_pods_injected(&self, prefix: &str, sidecars: &[&str]) -> usize {
        let selector = format!("{LOOP_LABEL}={prefix}");
        let pods = self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap_or_else(|e| panic!("expected to list the Pods of loop {prefix}, found: {}", api_error(&e)))
            .items;
        let uninjected: Vec<String> = pods
            .iter()
            .filter(|p| !sidecars.iter().any(|s| container(p, s).is_some()) || annotation(p, super::STATUS).is_none())
            .map(describe_pod)
            .collect();
        assert!(
            uninjected.is_empty(),
            "expected every stored Pod of loop {prefix} ({} Pods) to carry one of {sidecars:?} and {}, found {} without: {:?}",
            pods.len(),
            super::STATUS,
            uninjected.len(),
            uninjected
        );
        pods.len()
    }
}

pub async fn list_events_about(events: &Api<Event>, kind: &str, name: &str) -> Result<Vec<Event>, String> {
    let selector = format!("involvedObject.kind={kind},involvedObject.name={name}");
    events
        .list(&ListParams::default().fields(&selector))
        .await
        .map(|list| list.items)
        .map_err(|e| api_error(&e))
}

/// What a [`PodLoop`] did.
#[derive(Debug, Default)]
pub struct LoopReport {
    /// Pods stored.
    pub created: usize,
    /// First errors of creates that were retried (and then stored).
    pub retried: Vec<String>,
    /// Creates that failed for good.
    pub failed: Vec<String>,
    /// The longest create call (admission included), retries counted apart.
    pub slowest: Duration,
}

impl LoopReport {
    pub fn summary(&self) -> String {
        format!(
            "{} Pods created, {} retried once, {} failed, slowest create {} ms",
            self.created,
            self.retried.len(),
            self.failed.len(),
            self.slowest.as_millis()
        )
    }
}

/// Opted-in Pods `<prefix>-<n>` created one after another through the API server, until
/// stopped: what a cluster keeps doing while its injector is upgraded or loses a replica.
pub struct PodLoop {
    stop: Arc<AtomicBool>,
    created: Arc<AtomicUsize>,
    task: JoinHandle<LoopReport>,
}

/// Pause between two creates of a loop: about 30 Pods a second, enough to have calls in
/// flight at any moment that matters without filling etcd.
pub const LOOP_PAUSE: Duration = Duration::from_millis(25);

/// A node label no node has: loop Pods prove admission, and are never scheduled, so that a
/// node's capacity neither limits nor slows the loop.
const NO_NODE: (&str, &str) = ("e2e.samplecrd.k8s.io/no-node", "true");

impl PodLoop {
    /// Creates a Pod every `pause` (plus the create's own time). With `retry_once`, a
    /// create that fails is tried once more (and counted in `retried`); without, it counts
    /// as failed at once.
    pub fn start(ns: &TestNs, prefix: &str, image: &str, pause: Duration, retry_once: bool) -> PodLoop {
        let stop = Arc::new(AtomicBool::new(false));
        let created = Arc::new(AtomicUsize::new(0));
        let pods = ns.pods.clone();
        let (prefix, image, flag, count) = (prefix.to_string(), image.to_string(), stop.clone(), created.clone());
        let task = tokio::spawn(async move {
            let mut report = LoopReport::default();
            let params = PostParams {
                dry_run: false,
                field_manager: Some(FIELD_MANAGER.to_string()),
            };
            let mut n = 0usize;
            while !flag.load(Ordering::Acquire) {
                n += 1;
                let mut p = pod(&format!("{prefix}-{n}"), &[(super::INJECT, "true")], &image);
                p.metadata
                    .labels
                    .get_or_insert_default()
                    .insert(LOOP_LABEL.to_string(), prefix.clone());
                if let Some(spec) = p.spec.as_mut() {
                    spec.node_selector = Some([(NO_NODE.0.to_string(), NO_NODE.1.to_string())].into());
                }
                let started = Instant::now();
                let first = pods.create(&params, &p).await;
                report.slowest = report.slowest.max(started.elapsed());
                match first {
                    Ok(_) => report.created += 1,
                    Err(first) if retry_once => {
                        report.retried.push(format!("{prefix}-{n}: {}", api_error(&first)));
                        match pods.create(&params, &p).await {
                            Ok(_) => report.created += 1,
                            // The first attempt was stored after all (its answer was lost).
                            Err(kube::Error::Api(s)) if s.is_already_exists() => report.created += 1,
                            Err(second) => report.failed.push(format!("{prefix}-{n}: {}", api_error(&second))),
                        }
                    }
                    Err(e) => report.failed.push(format!("{prefix}-{n}: {}", api_error(&e))),
                }
                count.store(report.created, Ordering::Release);
                tokio::time::sleep(pause).await;
            }
            report
        });
        PodLoop { stop, created, task }
    }

    /// Pods stored so far.
    #[allow(dead_code)] // tests/pods waits on it; tests/e2e does not
    pub fn created(&self) -> usize {
        self.created.load(Ordering::Acquire)
    }

    pub async fn stop(self) -> LoopReport {
        self.stop.store(true, Ordering::Release);
        self.task.await.expect("the Pod loop task")
    }
}

/// Whether `pod` was injected with `sidecar`, for `wait_for` probes.
pub fn injected_with(p: &Pod, sidecar: &str) -> Result<(), String> {
    match container(p, sidecar) {
        Some(_) => Ok(()),
        None => Err(format!("no container {sidecar}: {}", describe_pod(p))),
    }
}
