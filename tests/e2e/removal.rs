//! Tier `removal`: nothing that acts on Pods outlives the installation. `manifests/` is
//! applied and a replica runs as its Deployment would, in the shipped mode (`auto`, so
//! policy mode on Kubernetes 1.36): it writes the compiled admission policies, each owned by
//! the ValidatingWebhookConfiguration. Then the installation is removed as kubectl removes
//! a kustomization, `kubectl delete -k manifests/`, while that replica still runs: within
//! 60 s no admission policy, binding or webhook configuration of ours is left (the garbage
//! collector of kube-controller-manager removes the policies; the replica writes none back),
//! and an opted-in Pod created afterwards is stored as written.

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::Api;

use crate::support::*;

pub const TIER: Tier = Tier {
    name: "removal",
    run: |suite| Box::pin(run(suite)),
};

/// What the issue promises: gone within this, once the removal command returns.
const GONE_WITHIN: Duration = Duration::from_secs(60);

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

async fn run(suite: &Suite) -> TierResult {
    let install = suite.install().await?;
    require_kubectl()?;
    let client = &suite.client;
    let scope = Scope::new(suite.settings.mode);
    let apps = TestNs::create(client, &scope, "removal", &[]).await;
    let owner: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let owner_uid = owner
        .get(INJECTOR_NAME)
        .await
        .unwrap_or_else(|e| panic!("expected the shipped ValidatingWebhookConfiguration, found: {}", api_error(&e)))
        .metadata
        .uid
        .expect("a stored object has a uid");
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
    let opted = pod("opted-in-before", &[(INJECT, "true")], DEFAULT_IMAGE);
    let before = apps.create_stored(&opted).await;
    injected_with(&before, &install.sidecar).unwrap_or_else(|e| panic!("expected the installation to inject: {e}"));
    step!("installed, policy mode: {written} policies and bindings, each owned by ValidatingWebhookConfiguration {INJECTOR_NAME}; an opted-in Pod injected");

    // As kubectl removes a kustomization. The Deployment was never created here (this
    // process plays its Pod), so its NotFound is ignored.
    let started = Instant::now();
    let out = kubectl(
        &["delete", "-k", &manifest_path("manifests").display().to_string(), "--ignore-not-found", "--timeout=120s"],
        None,
    )
    .await;
    assert!(out.status.success(), "expected `kubectl delete -k manifests/` to succeed, found {}", describe_output(&out));
    let deleted = started.elapsed();
    step!("kubectl delete -k manifests/ returned in {:.1} s; the replica still runs", deleted.as_secs_f64());

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

    let after = pod("opted-in-after", &[(INJECT, "true")], DEFAULT_IMAGE);
    let stored = apps.create_stored(&after).await;
    let names: Vec<&str> = stored.spec.as_ref().map(|s| s.containers.iter().map(|c| c.name.as_str()).collect()).unwrap_or_default();
    assert!(
        names == ["app"]
            && stored.spec.as_ref().and_then(|s| s.init_containers.as_ref()).is_none_or(|c| c.is_empty())
            && annotation(&stored, STATUS).is_none(),
        "expected an opted-in Pod created after the removal stored as written (container app only, no status \
         annotation), found {}",
        describe_pod(&stored)
    );
    drop(injector);
    suite.removed().await;
    step!("after the removal: every policy gone {:.1} s after kubectl returned; an opted-in Pod stored as written", gone.as_secs_f64());
    Ok(format!(
        "kubectl delete -k {:.1} s, policies and webhook configurations gone {:.1} s later",
        deleted.as_secs_f64(),
        gone.as_secs_f64()
    ))
}
