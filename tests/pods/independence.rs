//! Tier `independence`: injection with no injector running, on the node. The injector is
//! deployed from `manifests/` in policy mode (`make deploy INJECTION=policy`): its Lease
//! holder writes the compiled admission policies. Then its Deployment is deleted, no
//! replica is left, and at least [`AT_LEAST`] opted-in Pods are created one every ~50 ms:
//! every create must succeed, every Pod carry the sidecar and reach Running (each is
//! deleted once seen Running, so the node's Pod limit is never reached). A ConfigMap edit
//! made meanwhile changes nothing until a replica is back; then the policies catch up and
//! the next Pod gets the edit. Last, the same loop with the injector in webhook mode and
//! no replica, to show the contrast (printed, not asserted); the injector is left
//! installed in webhook mode, as the other tiers expect.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "independence",
    run: |suite| Box::pin(run(suite)),
};

/// Pods each loop creates at least.
const AT_LEAST: usize = 150;
const PAUSE: Duration = Duration::from_millis(50);
const LOOP_LABEL: &str = "e2e.samplecrd.k8s.io/independence";
/// Deletes the injector's Deployment and waits until none of its Pods is left. Returns
/// the Deployment as it was, to bring the injector back without `make deploy` (which would
/// put the shipped ConfigMap back too).
async fn no_replica(installation: &Installation) -> Deployment {
    let mut kept = installation
        .deployments
        .get(INJECTOR_NAME)
        .await
        .unwrap_or_else(|e| panic!("expected the injector's Deployment, found: {}", api_error(&e)));
    kept.metadata = ObjectMeta {
        name: kept.metadata.name.clone(),
        namespace: kept.metadata.namespace.clone(),
        labels: kept.metadata.labels.clone(),
        annotations: kept.metadata.annotations.clone(),
        ..ObjectMeta::default()
    };
    kept.status = None;
    installation
        .deployments
        .delete(INJECTOR_NAME, &DeleteParams::foreground())
        .await
        .unwrap_or_else(|e| panic!("expected to delete the injector's Deployment, found: {}", api_error(&e)));
    wait_for("no injector Pod left", RUN_PATIENCE, async || {
        let left = installation
            .pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=envoy-injector"))
            .await
            .map_err(|e| api_error(&e))?
            .items;
        if left.is_empty() { Ok(()) } else { Err(format!("{} injector Pods", left.len())) }
    })
    .await;
    step!("injector Deployment deleted: no replica left");
    kept
}

/// Creates the Deployment `no_replica` kept and waits for it to roll out.
async fn replica_back(installation: &Installation, deployment: &Deployment) {
    installation
        .deployments
        .create(&PostParams::default(), deployment)
        .await
        .unwrap_or_else(|e| panic!("expected to create the injector's Deployment again, found: {}", api_error(&e)));
    wait_for("the injector rolled out again", RUN_PATIENCE, async || installation.rolled_out().await.map(|_| ())).await;
    step!("the injector's Deployment created again: replicas back");
}

/// What one loop saw.
#[derive(Debug, Default)]
struct Outcome {
    created: usize,
    failed: Vec<String>,
    bare: Vec<String>,
    running: usize,
}

impl Outcome {
    fn summary(&self) -> String {
        format!(
            "{} created, {} failed creates{}, {} without the sidecar, {} seen Running",
            self.created,
            self.failed.len(),
            self.failed.first().map(|f| format!(" (first: {f})")).unwrap_or_default(),
            self.bare.len(),
            self.running
        )
    }
}

/// Creates [`AT_LEAST`] opted-in Pods one every [`PAUSE`]; with `until_running`, then
/// waits for each to be Running with both containers, deleting each once seen so.
async fn pod_loop(ns: &TestNs, images: &Images, prefix: &str, until_running: bool) -> Outcome {
    let mut outcome = Outcome::default();
    for n in 0..AT_LEAST {
        let mut p = app_pod(&format!("{prefix}-{n}"), &[(INJECT, "true")], images);
        p.metadata
            .labels
            .get_or_insert_default()
            .insert(LOOP_LABEL.to_string(), prefix.to_string());
        match ns.pods.create(&PostParams::default(), &p).await {
            Ok(stored) => {
                outcome.created += 1;
                if container(&stored, SIDECAR).is_none() || annotation(&stored, STATUS).is_none() {
                    outcome.bare.push(describe_pod(&stored));
                }
            }
            Err(e) => outcome.failed.push(api_error(&e)),
        }
        tokio::time::sleep(PAUSE).await;
    }
    if !until_running || outcome.created == 0 {
        return outcome;
    }
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let wanted = outcome.created;
    let selector = format!("{LOOP_LABEL}={prefix}");
    // One node starts the Pods about one a second on a small machine, so the bound is on
    // progress (a Pod that never starts), not on how long all of them take.
    wait_while_advancing(&format!("{wanted} Pods of loop {prefix} Running"), RUN_PATIENCE, Duration::from_secs(1), async || {
        let pods: Vec<Pod> = ns
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| (seen.len(), api_error(&e)))?
            .items;
        let mut waiting: BTreeMap<String, usize> = BTreeMap::new();
        for p in &pods {
            let name = p.metadata.name.clone().unwrap_or_default();
            if seen.contains(&name) || p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if running(p, &[SIDECAR, "app"]).is_ok() {
                seen.insert(name.clone());
                let _ = ns.pods.delete(&name, &DeleteParams::default().grace_period(1)).await;
            } else {
                *waiting.entry(not_yet_running(p)).or_default() += 1;
            }
        }
        if seen.len() >= wanted {
            Ok(())
        } else {
            Err((seen.len(), format!("{} of {wanted} seen Running; the others: {waiting:?}", seen.len())))
        }
    })
    .await;
    outcome.running = seen.len();
    outcome
}

/// What a Pod not yet Running is waiting for, in few words (its phase, the reason it is not
/// scheduled, or its containers' waiting reasons), to count the Pods of a loop by it.
fn not_yet_running(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let unscheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.reason.clone());
    let waiting: BTreeSet<String> = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
        .collect();
    let phase = status.phase.unwrap_or_else(|| "no phase".to_string());
    match (unscheduled, waiting.is_empty()) {
        (Some(reason), _) => format!("{phase} ({reason})"),
        (None, false) => format!("{phase} ({})", waiting.into_iter().collect::<Vec<_>>().join(", ")),
        (None, true) => phase,
    }
}

async fn run(suite: &Suite) -> TierResult {
    let (installation, images) = installation(suite).await?;
    let client = &suite.client;
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(client, &scope, "independence", &[]).await;

    // Policy mode, as deployed: the Lease holder writes the compiled policies (`make deploy`
    // puts the shipped template back: the stand-in again).
    installation.deploy_with(&images.injector, "policy").await;
    installation.use_stand_in(suite, &images).await;
    let revision = config_revision(&installation).await;
    wait_for("the compiled policies of the stand-in template", RUN_PATIENCE, async || {
        match policy_revision(client).await {
            Some(r) if r == revision => Ok(()),
            other => Err(format!("policy {ANNOTATED_POLICY} at revision {other:?}, ConfigMap at {revision}")),
        }
    })
    .await;
    step!("policy mode: {ANNOTATED_POLICY} at the template's revision {revision}");

    // No replica, and an edit of the template meanwhile.
    let deployment = no_replica(&installation).await;
    let edited = stand_in_template(&images.shell).replace("  volumeMounts:\n", "  env:\n  - {name: EDITED, value: \"yes\"}\n  volumeMounts:\n");
    installation
        .configmaps
        .patch(INJECTOR_NAME, &PatchParams::default(), &Patch::Merge(&json!({"data": {"config": edited}})))
        .await
        .unwrap_or_else(|e| panic!("expected to edit the template, found: {}", api_error(&e)));
    let started = Instant::now();
    let outcome = pod_loop(&ns, &images, "policy", true).await;
    let took = started.elapsed();
    assert!(
        outcome.failed.is_empty() && outcome.bare.is_empty() && outcome.running == AT_LEAST,
        "expected, with no injector replica, {AT_LEAST} opted-in Pods created, each with the sidecar and Running; found: {}; bare: {:?}",
        outcome.summary(),
        outcome.bare.first()
    );
    step!("no replica, policy mode: {} in {:.1} s", outcome.summary(), took.as_secs_f64());
    assert_eq!(
        policy_revision(client).await.as_deref(),
        Some(revision.as_str()),
        "with no replica, the template edit changes nothing"
    );
    let probe = ns
        .create_pod(&app_pod("probe-old", &[(INJECT, "true")], &images), true)
        .await
        .unwrap_or_else(|e| panic!("expected a Pod with no replica, found: {}", api_error(&e)));
    assert!(
        container(&probe, SIDECAR).is_some_and(|c| env_value(c, "EDITED").is_none()),
        "with no replica Pods keep the last compiled template: {}",
        describe_pod(&probe)
    );
    step!("the template edit made with no replica changed nothing");

    // A replica back: the edit is caught up.
    replica_back(&installation, &deployment).await;
    let edited_revision = envoy_injector::template::template_revision(&edited);
    wait_for("the policies to catch up with the edit", RUN_PATIENCE, async || {
        match policy_revision(client).await {
            Some(r) if r == edited_revision => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    wait_for("a Pod with the edited template", RUN_PATIENCE, async || {
        let p = ns
            .create_pod(&app_pod("probe-new", &[(INJECT, "true")], &images), true)
            .await
            .map_err(|e| api_error(&e))?;
        match container(&p, SIDECAR).and_then(|c| env_value(c, "EDITED")) {
            Some("yes") => Ok(()),
            _ => Err(describe_pod(&p)),
        }
    })
    .await;
    step!("a replica back: the policies caught up (revision {edited_revision}), the next Pod has the edit");

    // The contrast: webhook mode, no replica.
    installation.deploy_with(&images.injector, WEBHOOK).await;
    installation.use_stand_in(suite, &images).await;
    wait_for("webhook mode to remove the compiled policies", RUN_PATIENCE, async || {
        match policy_revision(client).await {
            None => Ok(()),
            Some(r) => Err(format!("{ANNOTATED_POLICY} still there at {r}")),
        }
    })
    .await;
    let _ = no_replica(&installation).await;
    let contrast = pod_loop(&ns, &images, "webhook", false).await;
    shout(&format!(
        "NOTE pods tier independence: the same loop in webhook mode with no replica: {}",
        contrast.summary()
    ));
    installation.deploy(&images.injector).await;
    Ok(format!(
        "no replica: policy mode {} in {:.1} s; webhook mode {}",
        outcome.summary(),
        took.as_secs_f64(),
        contrast.summary()
    ))
}
