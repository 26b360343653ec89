//! The automatic rollout, a task of the Lease holder (`serve --auto-rollout`): after a
//! template change (and every [`RESCAN`]), in each namespace labelled
//! [`AUTO_LABEL`](super::label::AUTO_LABEL)`=auto`, the workloads whose Pods run a stale sidecar
//! are restarted as the `rollout` command restarts them — once the live templates are in
//! step where they are served, one workload at a time per namespace, at least
//! `interval` between two restarts in a namespace. The first failure stops it for that
//! template revision, everywhere, until the template changes again. Each restart and its
//! end is an Event on the workload and counted in `envoy_injector_rollouts_total{result}`;
//! `envoy_injector_rollouts_in_progress` says how many it waits for now.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Pod};
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use tracing::{info, warn};

use super::cluster;
use super::error::RolloutError;
use super::label::{AUTO_LABEL, AUTO_VALUE};
use super::plan::{self, Target};
use super::report::Outcome;
use super::run::roll;
use crate::cluster::workload::controller;
use crate::events::{self, EventSink};
use crate::live::LiveTemplates;
use crate::metrics::{Metrics, RolloutLabels};
use crate::shutdown::CancellationToken;
use crate::template::TemplateSet;

/// How often the labelled namespaces are looked at again without a template change (a
/// namespace labelled, a Pod created from an old manifest, a failed step to retry).
pub const RESCAN: Duration = Duration::from_secs(30);

/// How often a restarted workload's progress is read.
const POLL: Duration = Duration::from_secs(2);

/// The events' `action`.
const ACTION: &str = "Rollout";

/// What the task needs besides the cluster.
#[derive(Debug, Clone)]
pub struct AutoSettings {
    /// The injector's namespace (its ConfigMap, its Deployment).
    pub injector_namespace: String,
    /// This replica's Pod (`POD_NAME`), from which the injector's Deployment is found, whose
    /// replicas must have reloaded; `None` (not in a Pod): replicas not checked.
    pub pod_name: Option<String>,
    /// The least time between two restarts in one namespace.
    pub interval: Duration,
    /// How long one workload may take to roll out.
    pub timeout: Duration,
}

/// (template, live revision): what a failure stops.
type Stopped = BTreeSet<(String, String)>;

fn stops(target: &Target) -> Vec<(String, String)> {
    target
        .stale
        .iter()
        .map(|s| (s.template.clone(), s.live_revision.clone().unwrap_or_default()))
        .collect()
}

/// Runs until `stop` (the end of leadership, or shutdown).
pub async fn run(
    client: kube::Client,
    templates: Arc<LiveTemplates>,
    events: Arc<dyn EventSink>,
    metrics: Metrics,
    settings: AutoSettings,
    stop: CancellationToken,
) {
    let mut changes = templates.changes();
    let stopped: Mutex<Stopped> = Mutex::new(Stopped::new());
    let last_restart: Mutex<BTreeMap<String, Instant>> = Mutex::new(BTreeMap::new());
    let mut deployment: Option<String> = None;
    loop {
        if let Some(live) = templates.current() {
            if deployment.is_none() {
                deployment = own_deployment(&client, &settings).await;
            }
            let pass = Pass {
                client: &client,
                live: &live,
                events: events.as_ref(),
                metrics: &metrics,
                settings: &settings,
                deployment: deployment.as_deref(),
                stopped: &stopped,
                last_restart: &last_restart,
                stop: &stop,
            };
            if let Err(err) = pass.run().await {
                warn!(error = %err, "automatic rollout: this pass failed; trying again later");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            _ = changes.changed() => {}
            () = tokio::time::sleep(RESCAN) => {}
        }
    }
}

/// The injector's Deployment, found from this replica's Pod through its ReplicaSet.
async fn own_deployment(client: &kube::Client, settings: &AutoSettings) -> Option<String> {
    let pod_name = settings.pod_name.as_deref()?;
    let namespace = settings.injector_namespace.as_str();
    let pod = Api::<PartialObjectMeta<Pod>>::namespaced(client.clone(), namespace)
        .get_opt(pod_name)
        .await
        .ok()
        .flatten()?;
    let set = controller(pod.metadata.owner_references.as_ref()).filter(|o| o.kind == "ReplicaSet")?;
    let set = Api::<PartialObjectMeta<ReplicaSet>>::namespaced(client.clone(), namespace)
        .get_opt(&set.name)
        .await
        .inspect_err(|err| warn!(error = %err, "automatic rollout: cannot read this replica's ReplicaSet; its sibling replicas are not checked"))
        .ok()
        .flatten()?;
    let deployment = controller(set.metadata.owner_references.as_ref()).filter(|o| o.kind == "Deployment")?;
    Some(deployment.name.clone())
}

struct Pass<'a> {
    client: &'a kube::Client,
    live: &'a TemplateSet,
    events: &'a dyn EventSink,
    metrics: &'a Metrics,
    settings: &'a AutoSettings,
    deployment: Option<&'a str>,
    stopped: &'a Mutex<Stopped>,
    last_restart: &'a Mutex<BTreeMap<String, Instant>>,
    stop: &'a CancellationToken,
}

impl Pass<'_> {
    async fn run(&self) -> Result<(), RolloutError> {
        // Its rights may be in place before their bound (tools apply unknown kinds in their
        // own order): nothing is done, not even a dry run, until the bound is read in place.
        if let Err(why) = super::bound::read(self.client, &self.settings.injector_namespace).await {
            warn!(
                because = %why,
                "automatic rollout: its bound (manifests/auto-rollout/bound.yaml) is not in place; restarting nothing until it is"
            );
            return Ok(());
        }
        let labelled = Api::<PartialObjectMeta<Namespace>>::all(self.client.clone())
            .list(&ListParams::default().labels(&format!("{AUTO_LABEL}={AUTO_VALUE}")))
            .await
            .map_err(|err| RolloutError::Api {
                action: format!("list the Namespaces labelled {AUTO_LABEL}={AUTO_VALUE}"),
                message: err.to_string(),
            })?;
        let mut plans = Vec::new();
        for namespace in labelled.items.into_iter().filter_map(|ns| ns.metadata.name) {
            let groups = crate::cluster::stale_groups(self.client, Some(&namespace), self.live).await?;
            let objects = cluster::objects(self.client, &groups, Some(&namespace), None).await?;
            let stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let restart: Vec<Target> = plan::plan(&groups, &objects, true)
                .restart
                .into_iter()
                .filter(|t| !stops(t).iter().any(|s| stopped.contains(s)))
                .collect();
            if !restart.is_empty() {
                plans.push((namespace, restart));
            }
        }
        if plans.is_empty() {
            return Ok(());
        }
        let targets: Vec<Target> = plans.iter().flat_map(|(_, targets)| targets.iter().cloned()).collect();
        // The policies and replicas follow an edit within a second or two: wait for them,
        // at most as long as a rollout may take.
        let waiting = Instant::now();
        loop {
            let verdict = cluster::in_step(
                self.client,
                &self.settings.injector_namespace,
                self.deployment,
                self.live,
                &targets,
            )
            .await;
            if verdict.ready {
                break;
            }
            if waiting.elapsed() >= self.settings.timeout {
                info!(
                    because = %verdict.because.join("; "),
                    "automatic rollout: the live templates are not in step; restarting nothing until the next pass"
                );
                return Ok(());
            }
            tokio::select! {
                () = self.stop.cancelled() => return Ok(()),
                () = tokio::time::sleep(POLL) => {}
            }
        }
        futures::future::join_all(
            plans
                .iter()
                .map(|(namespace, targets)| self.namespace(namespace, targets)),
        )
        .await;
        Ok(())
    }

    /// The targets of one namespace, one at a time, spaced by the interval.
    async fn namespace(&self, namespace: &str, targets: &[Target]) {
        for target in targets {
            if stops(target)
                .iter()
                .any(|s| self.stopped.lock().unwrap_or_else(|e| e.into_inner()).contains(s))
            {
                continue;
            }
            let since = self
                .last_restart
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(namespace)
                .copied();
            if let Some(wait) = since.map(|at| self.settings.interval.saturating_sub(at.elapsed())) {
                tokio::select! {
                    () = self.stop.cancelled() => return,
                    () = tokio::time::sleep(wait) => {}
                }
            }
            self.last_restart
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(namespace.to_string(), Instant::now());
            let Some(outcome) = self.one(target).await else { return };
            if outcome.failed() {
                let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
                stopped.extend(stops(target));
                return;
            }
        }
    }

    /// One workload restarted and waited for, with its Events and metrics; `None` when
    /// leadership ended meanwhile.
    async fn one(&self, target: &Target) -> Option<Outcome> {
        let regarding = reference(target);
        info!(workload = %target.workload, "automatic rollout: restarting");
        let note = format!(
            "restarting it for the live template: {}",
            super::report::stale_line(&target.stale)
        );
        self.events
            .publish(regarding.clone(), events::event(false, "RolloutStarted", ACTION, note))
            .await;
        self.metrics.rollouts_in_progress.inc();
        let outcome = tokio::select! {
            () = self.stop.cancelled() => None,
            outcome = roll(self.client, target, self.live, self.settings.timeout, POLL) => Some(outcome),
        };
        self.metrics.rollouts_in_progress.dec();
        let outcome = outcome?;
        let seconds = outcome.seconds.unwrap_or_default();
        let (result, event) = if outcome.failed() {
            let why = outcome.reason.clone().unwrap_or_default();
            let templates: Vec<String> = stops(target)
                .iter()
                .map(|(t, r)| format!("`{t}` revision {r}"))
                .collect();
            warn!(workload = %target.workload, reason = %why, "automatic rollout failed; stopped for this template revision");
            let note = format!(
                "rollout did not complete in {seconds:.1} s: {why}; automatic rollout stopped for template {} until it changes",
                templates.join(", ")
            );
            ("failed", events::event(true, "RolloutFailed", ACTION, note))
        } else {
            info!(workload = %target.workload, seconds, "automatic rollout: done");
            let note = format!("every Pod Ready with the live template, in {seconds:.1} s");
            ("completed", events::event(false, "RolloutCompleted", ACTION, note))
        };
        self.metrics.rollouts.get_or_create(&RolloutLabels { result }).inc();
        self.events.publish(regarding, event).await;
        Some(outcome)
    }
}

fn reference(target: &Target) -> ObjectReference {
    let meta = target.object.metadata();
    ObjectReference {
        api_version: Some(String::from("apps/v1")),
        kind: Some(target.kind.name().to_string()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        ..ObjectReference::default()
    }
}
