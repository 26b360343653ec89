//! Tier `removal`: nothing that acts on Pods outlives the installation, whatever removes
//! it. Twice, `manifests/` is applied and a replica runs as its Deployment would, in the
//! shipped mode (`auto`, so policy mode on Kubernetes 1.36): it writes the compiled
//! admission policies, each owned by the ValidatingWebhookConfiguration. Then, while that
//! replica still runs:
//!
//! 1. the installation is removed as kubectl removes a kustomization, `kubectl delete -k
//!    manifests/`;
//! 2. the installation is taken over by a Helm release, as docs/install.md says (`helm
//!    install --take-ownership --force-conflicts`, the real Helm v4 engine): every object
//!    keeps its uid and the policies their owner; then `helm uninstall`.
//!
//! Each time, within 60 s no admission policy, binding or webhook configuration of ours is
//! left (the garbage collector of kube-controller-manager removes the policies; the replica
//! writes none back), and an opted-in Pod created afterwards is stored as written. Without
//! the Helm engine the second part is skipped, loudly (under CI it fails).

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::api::{Api, DeleteParams};

use crate::common::helm::{self, chart_dir};
use crate::common::kubectl::skipped;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "removal",
    run: |suite| Box::pin(run(suite)),
};

/// What the issue promises: gone within this, once the removal command returns.
const GONE_WITHIN: Duration = Duration::from_secs(60);
const RELEASE: &str = "envoy-injector";

/// How the installation goes.
#[derive(Clone, Copy, PartialEq)]
enum Removal {
    /// `kubectl delete -k manifests/`.
    Kustomization,
    /// Taken over by a Helm release, then `helm uninstall`.
    HelmRelease,
}

async fn run(suite: &Suite) -> TierResult {
    suite.install().await?;
    require_kubectl()?;
    let by_kubectl = removed(suite, Removal::Kustomization).await;
    let by_helm = match helm::engine("tier removal's helm uninstall") {
        Ok(_) => removed(suite, Removal::HelmRelease).await,
        Err(Skip(why)) => {
            // The rest of the tier ran: this part alone goes to the summary.
            skipped("e2e tier removal's `helm uninstall` part", &why);
            "helm uninstall SKIPPED (no Helm engine: `make helm-sdk`)".to_string()
        }
    };
    Ok(format!("{by_kubectl}; {by_helm}"))
}

/// Every admission policy and binding labelled ours: (kind, name, owner uids).
async fn policies_left(client: &kube::Client) -> Result<Vec<(String, String, Vec<String>)>, String> {
    Ok(compiled_objects(client)
        .await?
        .into_iter()
        .map(|(kind, meta)| {
            let owners = meta.owner_references.unwrap_or_default();
            (kind, meta.name.unwrap_or_default(), owners.into_iter().map(|o| o.uid).collect())
        })
        .collect())
}

/// The uid of every object a Helm release must adopt rather than recreate: the webhook
/// configurations (the admission policies' owner among them), the ConfigMap, the Service.
async fn uids(client: &kube::Client) -> Vec<Option<String>> {
    let namespace = INJECTOR_NAMESPACE;
    let metas = [
        Api::<ValidatingWebhookConfiguration>::all(client.clone()).get_metadata(INJECTOR_NAME).await.map(|o| o.metadata),
        Api::<MutatingWebhookConfiguration>::all(client.clone()).get_metadata(INJECTOR_NAME).await.map(|o| o.metadata),
        Api::<ConfigMap>::namespaced(client.clone(), namespace).get_metadata(INJECTOR_NAME).await.map(|o| o.metadata),
        Api::<Service>::namespaced(client.clone(), namespace).get_metadata(INJECTOR_NAME).await.map(|o| o.metadata),
    ];
    metas.into_iter().map(|m| m.ok().and_then(|m| m.uid)).collect()
}

/// One installation, a replica in policy mode, its removal by `how`; returns its figures.
async fn removed(suite: &Suite, how: Removal) -> String {
    let install = suite.install().await.unwrap_or_else(|Skip(why)| panic!("installed once already, now: {why}"));
    let client = &suite.client;
    let scope = Scope::new(suite.settings.mode);
    let apps = TestNs::create(client, &scope, "removal", &[]).await;
    let owner_uid = uids(client).await[0].clone().expect("the shipped ValidatingWebhookConfiguration");
    // The shipped args (`--injection` `auto`): policy mode where the API server serves
    // MutatingAdmissionPolicy v1.
    let injector = install.start_with("envoy-injector-e2e-removal", false, &["--injection", "auto"]).await;
    injector.wait_ready().await;
    let written = wait_for("the Lease holder to write the compiled policies, owned", PATIENCE, async || {
        let left = policies_left(client).await?;
        let owned = left.iter().filter(|(_, _, owners)| owners == std::slice::from_ref(&owner_uid)).count();
        if owned >= 6 && owned == left.len() {
            Ok(owned)
        } else {
            Err(format!("{owned} of {} owned by uid {owner_uid}: {left:?}", left.len()))
        }
    })
    .await;
    let before = apps.create_stored(&pod("opted-in-before", &[(INJECT, "true")], DEFAULT_IMAGE)).await;
    injected_with(&before, &install.sidecar).unwrap_or_else(|e| panic!("expected the installation to inject: {e}"));
    step!("installed, policy mode: {written} policies and bindings, each owned by ValidatingWebhookConfiguration {INJECTOR_NAME}; an opted-in Pod injected");

    let started = Instant::now();
    let command = match how {
        Removal::Kustomization => {
            // The Deployment was never created here (this process plays its Pod), so its
            // NotFound is ignored.
            let manifests = manifest_path("manifests").display().to_string();
            let out = kubectl(&["delete", "-k", &manifests, "--ignore-not-found", "--timeout=120s"], None).await;
            assert!(out.status.success(), "expected `kubectl delete -k manifests/` to succeed, found {}", describe_output(&out));
            "kubectl delete -k manifests/"
        }
        Removal::HelmRelease => {
            adopted_by_a_release(client).await;
            let helm = helm::engine("tier removal's helm uninstall").unwrap_or_else(|Skip(why)| panic!("checked by the caller: {why}"));
            helm.run(&["uninstall", RELEASE, "-n", INJECTOR_NAMESPACE, "--wait", "120"])
                .unwrap_or_else(|e| panic!("expected `helm uninstall` to succeed, found: {e}"));
            "helm uninstall"
        }
    };
    let took = started.elapsed();
    step!("{command} returned in {:.1} s; the replica still runs", took.as_secs_f64());
    let removed = Instant::now();
    wait_for("no admission policy, binding or webhook configuration of ours left", GONE_WITHIN, async || {
        let left = acting_on_pods(client, INJECTOR_NAME).await?;
        if left.is_empty() { Ok(()) } else { Err(format!("left: {left:?}")) }
    })
    .await;
    let gone = removed.elapsed();
    // The replica, still running, put nothing back.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let back = policies_left(client).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(back.is_empty(), "expected the running replica to write nothing without its owner, found {back:?}");

    let stored = apps.create_stored(&pod("opted-in-after", &[(INJECT, "true")], DEFAULT_IMAGE)).await;
    let names: Vec<&str> = stored.spec.iter().flat_map(|s| s.containers.iter().map(|c| c.name.as_str())).collect();
    assert!(
        names == ["app"]
            && stored.spec.as_ref().and_then(|s| s.init_containers.as_ref()).is_none_or(|c| c.is_empty())
            && annotation(&stored, STATUS).is_none(),
        "expected an opted-in Pod created after `{command}` stored as written (container app only, no status \
         annotation), found {}",
        describe_pod(&stored)
    );
    drop(injector);
    if how == Removal::HelmRelease {
        // The release namespace is not the release's: it stays, and goes here.
        let _ = Api::<Namespace>::all(client.clone()).delete(INJECTOR_NAMESPACE, &DeleteParams::default()).await;
    }
    suite.removed().await;
    step!("after {command}: every policy gone {:.1} s after it returned; an opted-in Pod stored as written", gone.as_secs_f64());
    format!("{command} {:.1} s, all gone {:.1} s later", took.as_secs_f64(), gone.as_secs_f64())
}

/// `helm install --take-ownership --force-conflicts` over the installation `manifests/`
/// made (docs/install.md): every object keeps its uid, so the policies keep their owner.
async fn adopted_by_a_release(client: &kube::Client) {
    let helm = helm::engine("tier removal's helm install").unwrap_or_else(|Skip(why)| panic!("checked by the caller: {why}"));
    let before = uids(client).await;
    let chart = chart_dir().display().to_string();
    // With the default values, which render manifests/ (docs/install.md: values come with
    // a later upgrade). No node here: the Deployment is the one object new (this process
    // played its Pod; the release's stay Pending).
    helm.run(&["install", &chart, RELEASE, "-n", INJECTOR_NAMESPACE, "--take-ownership", "--force-conflicts"])
    .unwrap_or_else(|e| panic!("expected the release to take the installation over, found: {e}"));
    assert_eq!(uids(client).await, before, "expected every object adopted, none recreated");
    let labels = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_metadata(INJECTOR_NAME)
        .await
        .unwrap_or_else(|e| panic!("{}", api_error(&e)))
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(
        labels.get("app.kubernetes.io/managed-by").map(String::as_str),
        Some("Helm"),
        "the release owns the configuration now: {labels:?}"
    );
    let owner = before[0].clone().unwrap_or_default();
    let left = policies_left(client).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !left.is_empty() && left.iter().all(|(_, _, owners)| owners == std::slice::from_ref(&owner)),
        "expected the policies kept and still owned by uid {owner}: {left:?}"
    );
    step!("helm install --take-ownership --force-conflicts: every object adopted (uids unchanged), the policies kept");
}
