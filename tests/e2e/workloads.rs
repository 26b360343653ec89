//! Tier `workloads`: what users do, against the as-deployed installation (one process).
//! Proves that a Deployment's Pods (made by kube-controller-manager's ReplicaSet, with
//! `generateName` only) are injected; that a namespace label opts every Pod in and the
//! opt-out annotation still wins (the webhook is not even called); that `dryRun=All`
//! creates leave no trace (no Pod, no ReplicaSet, no member counted by the Network); and
//! that a template ConfigMap edit reaches the next Pod, with the latency measured.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

pub const TIER: Tier = Tier {
    name: "workloads",
    run: |suite| Box::pin(run(suite)),
};

/// Template edits whose latency is measured.
const EDITS: usize = 3;

async fn run(suite: &Suite) -> TierResult {
    let install = suite.install().await?;
    let scope = Scope::new(suite.settings.mode);
    let plain = TestNs::create(&suite.client, &scope, "workloads", &[]).await;
    let labelled = TestNs::create(&suite.client, &scope, "workloads-label", &[NAMESPACE_OPT_IN]).await;
    let injector = install.start("envoy-injector-e2e-w", false).await;
    injector.wait_ready().await;

    deployment_pods_injected(&plain, &install.sidecar, &[(INJECT, "true")]).await;
    deployment_pods_injected(&labelled, &install.sidecar, &[]).await;
    opt_out_wins(&labelled, &injector, &install.sidecar).await;
    dry_run_leaves_no_trace(&plain, &injector, &install.sidecar).await;
    let latencies = template_edit_reaches_next_pod(suite, &install, &plain).await;
    let shown: Vec<String> = latencies.iter().map(|d| format!("{} ms", ms(*d))).collect();
    shout(&format!(
        "e2e workloads: template ConfigMap edit -> next Pod injected with it: {} ({EDITS} edits)",
        shown.join(", ")
    ));
    Ok(format!("template edit to next Pod: {}", shown.join(", ")))
}

/// A Deployment of 3 whose Pod template carries `annotations`: kube-controller-manager
/// makes a ReplicaSet and its Pods, and each stored Pod carries the sidecar.
async fn deployment_pods_injected(ns: &TestNs, sidecar: &str, annotations: &[(&str, &str)]) {
    let name = "e2e-web";
    let deployments: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
    deployments
        .create(&PostParams::default(), &deployment(name, 3, annotations, DEFAULT_IMAGE))
        .await
        .unwrap_or_else(|e| panic!("expected to create Deployment {name}, found: {}", api_error(&e)));
    let what = format!("3 Pods of Deployment {}/{name}, made by its ReplicaSet", ns.name);
    let pods = wait_for(&what, PATIENCE, async || {
        let pods = ns
            .pods
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await
            .map_err(|e| api_error(&e))?
            .items;
        if pods.len() == 3 {
            Ok(pods)
        } else {
            Err(format!("{} Pods", pods.len()))
        }
    })
    .await;
    for p in &pods {
        let by_replicaset = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "ReplicaSet" && o.name.starts_with(&format!("{name}-")));
        assert!(
            by_replicaset && container(p, sidecar).is_some() && annotation(p, STATUS).is_some(),
            "expected each Pod made by the ReplicaSet of {name} injected with {sidecar} and {STATUS}, found: {}",
            describe_pod(p)
        );
    }
    step!(
        "Deployment {}/{name} (template annotations {annotations:?}): Pods {:?} injected",
        ns.name,
        pods.iter().filter_map(|p| p.metadata.name.clone()).collect::<Vec<_>>()
    );
}

/// In a labelled namespace, `inject: "false"` keeps a Pod out: it is stored untouched and
/// the webhook is not called for it.
async fn opt_out_wins(ns: &TestNs, injector: &Injector, sidecar: &str) {
    let before = injector.admissions().await;
    let stored = ns
        .create_stored(&pod("e2e-opted-out", &[(INJECT, "false")], DEFAULT_IMAGE))
        .await;
    let calls = injector.admissions().await - before;
    assert!(
        container(&stored, sidecar).is_none() && calls == 0.0,
        "expected the opted-out Pod untouched and the webhook not called, found {calls} calls: {}",
        describe_pod(&stored)
    );
    step!("opt-out annotation wins over the namespace label (webhook not called)");
}

/// A dry-run create is answered injected, joined to a Network, and leaves nothing behind.
async fn dry_run_leaves_no_trace(ns: &TestNs, injector: &Injector, sidecar: &str) {
    let network = "e2e-dry";
    ns.create_network(network, "198.18.80.0/24", "198.18.80.1").await;
    ns.network_ready(network, PATIENCE).await;
    let before = injector
        .metric("envoy_injector_admission_requests_total", &[("dry_run", "true")])
        .await;
    let name = "e2e-dry-run";
    let answer = ns
        .create_pod(&pod(name, &[(INJECT, "true"), (NETWORK, network)], DEFAULT_IMAGE), true)
        .await
        .unwrap_or_else(|e| panic!("expected the dry-run create admitted, found: {}", api_error(&e)));
    let joined = container(&answer, sidecar).and_then(|c| env_value(c, "NETWORK_CIDR"));
    assert_eq!(
        joined,
        Some("198.18.80.0/24"),
        "expected the dry-run answer injected and joined: {}",
        describe_pod(&answer)
    );
    let after = injector
        .metric("envoy_injector_admission_requests_total", &[("dry_run", "true")])
        .await;
    assert_eq!(after - before, 1.0, "dry-run admissions counted");

    let deployments: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
    let dry_run = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.to_string()),
    };
    deployments
        .create(&dry_run, &deployment("e2e-dry-web", 2, &[(INJECT, "true")], DEFAULT_IMAGE))
        .await
        .unwrap_or_else(|e| panic!("expected the dry-run Deployment admitted, found: {}", api_error(&e)));
    // What would show a trace needs a moment: the controllers and the member watch.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        ns.pods.get_opt(name).await.expect("read the Pod").is_none(),
        "expected no Pod {name} after a dry-run create"
    );
    assert!(
        deployments.get_opt("e2e-dry-web").await.expect("read the Deployment").is_none(),
        "expected no Deployment after a dry-run create"
    );
    let replicasets: Api<ReplicaSet> = Api::namespaced(ns.client.clone(), &ns.name);
    let made = replicasets
        .list(&ListParams::default().labels("app=e2e-dry-web"))
        .await
        .expect("list ReplicaSets")
        .items;
    assert!(made.is_empty(), "expected no ReplicaSet from a dry run, found {}", made.len());
    let obj = ns.network(network).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        obj.data["status"]["attachedPods"],
        json!(0),
        "expected the dry-run member not counted: {}",
        network_summary(&obj)
    );
    step!("dryRun=All: answered injected and joined, nothing stored, Network {network} counts 0 Pods");
}

/// Edits the template `EDITS` times; each time, dry-run creates back to back until one is
/// injected with the new sidecar. Returns the latencies, from the edit's request to that
/// answer. Then a real Pod must carry the last one.
async fn template_edit_reaches_next_pod(suite: &Suite, install: &Install, ns: &TestNs) -> Vec<Duration> {
    let configmaps: Api<ConfigMap> = Api::namespaced(suite.client.clone(), &install.namespace);
    let mut latencies = Vec::new();
    let probe = pod("e2e-edit", &[(INJECT, "true")], DEFAULT_IMAGE);
    let mut sidecar = String::new();
    for edit in 1..=EDITS {
        sidecar = format!("e2e-edit-{edit}");
        let patch = json!({ "data": { "config": template(&sidecar, DEFAULT_IMAGE) } });
        let start = Instant::now();
        configmaps
            .patch(&install.configmap, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("expected to edit ConfigMap {}, found: {}", install.configmap, api_error(&e)));
        let what = format!("the next Pod to carry {sidecar} after the template edit");
        wait_every(&what, PATIENCE, Duration::from_millis(5), async || {
            let answer = ns.create_pod(&probe, true).await.map_err(|e| api_error(&e))?;
            injected_with(&answer, &sidecar)
        })
        .await;
        latencies.push(start.elapsed());
    }
    let stored = ns.create_stored(&pod("e2e-edited", &[(INJECT, "true")], DEFAULT_IMAGE)).await;
    injected_with(&stored, &sidecar).unwrap_or_else(|e| panic!("expected the stored Pod to carry {sidecar}: {e}"));
    latencies
}
