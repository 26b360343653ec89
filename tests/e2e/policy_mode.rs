//! Tier `policy_mode`: `serve --injection=policy` keeps the compiled admission policies in
//! step with the ConfigMap, on the real API server, with the shipped
//! MutatingWebhookConfiguration sent by `url:` to the same process for one namespace. The
//! policies appear (objects labelled ours, each template's revision); an opted-in Pod is
//! injected by them and the webhook is not called; a template edit reaches the next Pod
//! (the latency is printed) while a Pod loop through the edit sees no denial and no Pod
//! without a sidecar; a bad edit keeps the last good objects; a deleted template's objects
//! go and a Pod naming it is denied; a restart over converged state writes nothing; with
//! no replica running, Pods are still injected and an edit changes nothing until a replica
//! is back, which catches up; `--injection=webhook` removes every object it wrote. Every
//! object is owned by the ValidatingWebhookConfiguration `--policy-owner` names (one
//! without webhooks, created by the tier). First, the objects of the previous layout,
//! applied by hand, are replaced while Pods are created: none refused, none without the
//! sidecar.

use std::time::{Duration, Instant};

use envoy_injector::tls;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::common::metrics::metric_value;
use crate::common::policies::narrow;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "policy_mode",
    run: |suite| Box::pin(run(suite)),
};

/// What `policies -f` printed for this tier's templates before the present layout.
const PREVIOUS_LAYOUT: &str = "tests/fixtures/policies/previous-layout.yaml";
const TEMPLATE_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/template";
/// The annotation of a mutating policy: the templates it holds, with their revisions.
const TEMPLATES: &str = "sidecar.samplecrd.k8s.io/templates";
/// The compiled objects' names, sorted by kind then name as [`ours`] lists them (with
/// annotation opt-in on, `serve`'s default).
const LAYOUT: [&str; 7] = [
    "envoy-injector-inject",
    "envoy-injector-inject-annotated",
    "envoy-injector-inject-annotated",
    "envoy-injector-inject-label",
    "envoy-injector-inject-namespace",
    "envoy-injector-refused",
    "envoy-injector-refused",
];

/// Every compiled object in the cluster: (kind, name, templates it holds, resourceVersion).
async fn ours(client: &kube::Client) -> Vec<(String, String, String, String)> {
    let mut out: Vec<_> = compiled_objects(client)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|(kind, meta)| {
            (
                kind,
                meta.name.unwrap_or_default(),
                meta.annotations.and_then(|a| a.get(TEMPLATES).cloned()).unwrap_or_default(),
                meta.resource_version.unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Waits until the compiled objects are those of the layout, the mutating policies
/// holding `templates`, each at its revision.
async fn in_step(client: &kube::Client, templates: &[(&str, String)]) -> Vec<(String, String, String, String)> {
    let want: std::collections::BTreeMap<&str, String> = templates
        .iter()
        .map(|(name, text)| (*name, envoy_injector::template::template_revision(text)))
        .collect();
    wait_for("the compiled policies to follow the ConfigMap", PATIENCE, async || {
        let found = ours(client).await;
        let names: Vec<&str> = found.iter().map(|(_, n, _, _)| n.as_str()).collect();
        let held = found
            .iter()
            .filter(|(kind, _, _, _)| kind == "MutatingAdmissionPolicy")
            .all(|(_, _, held, _)| {
                serde_json::from_str::<std::collections::BTreeMap<&str, String>>(held).is_ok_and(|h| h == want)
            });
        if names == LAYOUT && held { Ok(found) } else { Err(format!("{found:?}")) }
    })
    .await
}

fn template(image_tag: &str) -> String {
    format!("containers:\n- name: envoy\n  image: docker.io/envoyproxy/envoy:{image_tag}\n")
}

async fn set_templates(configmaps: &Api<ConfigMap>, data: serde_json::Value) {
    let patch = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": INJECTOR_NAME}, "data": data});
    configmaps
        .patch(INJECTOR_NAME, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .unwrap_or_else(|e| panic!("expected to write the ConfigMap, found: {}", api_error(&e)));
}

async fn run(suite: &Suite) -> TierResult {
    suite.loopback_webhooks()?;
    require_kubectl()?;
    let client = &suite.client;
    let scope = Scope::new(suite.settings.mode);
    let injector = TestNs::create(client, &scope, "policy-mode-injector", &[]).await;
    let apps = TestNs::create(client, &scope, "policy-mode", &[]).await;
    suite.install_network_crd().await;
    // Whatever the run leaves, the cluster-wide objects go with the tier.
    for kind in policy_kinds() {
        for name in LAYOUT.iter().chain(&["envoy-injector-template-config", "envoy-injector-template-canary", "envoy-injector-known-templates"]) {
            scope.delete_later(kind.clone(), None, name);
        }
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &injector.name);
    let (v1, v2, v3) = (template("v1.31.0"), template("v1.32.0"), template("v1.33.0"));
    let canary = String::from("containers:\n- name: envoy-canary\n  image: docker.io/library/busybox:1.36\n");
    set_templates(&configmaps, json!({"config": v1, "canary": canary})).await;

    // The previous layout, applied by hand from an earlier `policies -f` (bound to this
    // tier's namespace), injects until the Lease holder replaces it; a Pod loop runs
    // through the replacement.
    let text = std::fs::read_to_string(manifest_path(PREVIOUS_LAYOUT)).expect("the previous layout's fixture");
    let previous: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a YAML object"))
        .collect();
    kubectl_apply(&narrow(&previous, std::slice::from_ref(&apps.name))).await;
    let opted = pod("e2e-by-policy", &[(INJECT, "true")], DEFAULT_IMAGE);
    wait_for("a Pod injected by the previous layout", PATIENCE, async || {
        let p = apps.create_pod(&opted, true).await.map_err(|e| api_error(&e))?;
        container(&p, "envoy").map(|_| ()).ok_or_else(|| describe_pod(&p))
    })
    .await;
    let migrating = PodLoop::start(&apps, "e2e-migrate", DEFAULT_IMAGE, LOOP_PAUSE, false);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let owner = format!("envoy-injector-{}", injector.name);
    let owner_uid = create_policy_owner(client, &scope, &owner).await;
    let certs = tls::generate(INJECTOR_NAME, &injector.name, &["127.0.0.1".to_string()], 1).expect("test certificates");
    let args = ["--namespace", &injector.name, "--network-backend", "none", "--identity", "policy-mode-a", "--injection", "policy", "--policy-owner", &owner];
    let (serve, webhook) = serve_on_loopback("policy-mode", &certs, &args).await;
    serve.wait_ready().await;
    register_shipped_webhooks(
        &scope,
        &format!("envoy-injector-{}", apps.name),
        &format!("https://{webhook}/mutate"),
        certs.ca.cert_pem.as_bytes(),
        &[&apps.name],
    )
    .await;
    wait_for("the injection mode metric", PATIENCE, async || {
        let metrics = serve.metrics().await;
        match metric_value(&metrics, "envoy_injector_injection_mode{mode=\"policy\"}") {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        !serve.log_lines_with("injection mode").is_empty(),
        "a log line says the injection mode"
    );
    let converged = in_step(client, &[("canary", canary.clone()), ("config", v1.clone())]).await;
    owned_by(client, &owner_uid).await;
    step!(
        "policy mode: {} compiled objects applied, labelled ours, at each template's revision, owned by {owner}",
        converged.len()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = migrating.stop().await;
    assert!(
        report.failed.is_empty() && report.created > 0,
        "expected every Pod created while the previous layout was replaced, found: {}: {:?}",
        report.summary(),
        report.failed
    );
    apps.loop_pods_injected("e2e-migrate", &["envoy"]).await;
    step!(
        "the previous layout ({} objects applied by hand) replaced and removed by the Lease holder; Pod loop through it: {}",
        previous.len(),
        report.summary()
    );

    // Injected by the policy, the webhook not called.
    wait_for("a Pod injected by the policy", PATIENCE, async || {
        let before = serve.admissions().await;
        let p = apps.create_pod(&opted, true).await.map_err(|e| api_error(&e))?;
        let called = serve.admissions().await - before;
        match (container(&p, "envoy"), annotation(&p, STATUS)) {
            (Some(_), Some(_)) if called == 0.0 => Ok(()),
            _ => Err(format!("webhook reviews: {called}; {}", describe_pod(&p))),
        }
    })
    .await;
    step!("an opted-in Pod is injected by the policy; the webhook answered no review for it");

    // A template edit under a Pod loop: the next Pod gets it, no Pod is refused or bare.
    let looping = PodLoop::start(&apps, "e2e-edit", DEFAULT_IMAGE, LOOP_PAUSE, false);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let edited = Instant::now();
    set_templates(&configmaps, json!({"config": v2, "canary": canary})).await;
    let latency = wait_every("a Pod with the edited template", PATIENCE, Duration::from_millis(20), async || {
        let p = apps.create_pod(&opted, true).await.map_err(|e| api_error(&e))?;
        let image = container(&p, "envoy").and_then(|c| c.image.clone()).unwrap_or_default();
        if image.ends_with("v1.32.0") { Ok(edited.elapsed()) } else { Err(image) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = looping.stop().await;
    assert!(
        report.failed.is_empty(),
        "expected every Pod of the loop through the edit created, found: {}: {:?}",
        report.summary(),
        report.failed
    );
    apps.loop_pods_injected("e2e-edit", &["envoy"]).await;
    in_step(client, &[("canary", canary.clone()), ("config", v2.clone())]).await;
    step!(
        "template edit → next Pod with it: {} ms; Pod loop through the edit: {}",
        ms(latency),
        report.summary()
    );

    // A bad edit keeps the last good objects.
    let good = ours(client).await;
    set_templates(&configmaps, json!({"config": "containers: [{name: envoy, imagePullPolicyy: Always}]\n", "canary": canary})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(ours(client).await, good, "a ConfigMap that does not parse leaves the policies as they were");
    step!("a bad edit left the {} objects untouched", good.len());

    // A deleted template's objects go; a Pod naming it is denied as unknown.
    set_templates(&configmaps, json!({"config": v2})).await;
    in_step(client, &[("config", v2.clone())]).await;
    let names_canary = pod("e2e-canary", &[(INJECT, "true"), (TEMPLATE_ANNOTATION, "canary")], DEFAULT_IMAGE);
    let message = wait_for("a Pod naming the deleted template to be denied", PATIENCE, async || {
        match apps.create_pod(&names_canary, true).await {
            Ok(p) => Err(format!("admitted: {}", describe_pod(&p))),
            Err(e) => Ok(api_error(&e)),
        }
    })
    .await;
    assert!(message.contains("template `canary`") && message.contains("does not exist"), "{message}");
    step!("template canary deleted: its objects are gone, a Pod naming it is denied: {message}");

    // A restart over converged state writes nothing.
    let settled = ours(client).await;
    drop(serve);
    let args_b = ["--namespace", &injector.name, "--network-backend", "none", "--identity", "policy-mode-b", "--policy-owner", &owner, "--injection", "policy"];
    let (serve, _) = serve_on_loopback("policy-mode-b", &certs, &args_b).await;
    serve.wait_ready().await;
    wait_for("the restarted replica to find the policies in step", PATIENCE, async || {
        match metric_value(&serve.metrics().await, "envoy_injector_policies_in_step") {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let writes = metric_sum(&serve.metrics().await, "envoy_injector_policy_writes_total", &[]);
    assert_eq!(writes, 0.0, "a restart over converged state writes nothing");
    assert_eq!(ours(client).await, settled, "no object changed (resourceVersions equal)");
    step!("a replica restarted over converged state wrote nothing");

    // No replica: Pods are still injected; an edit waits for a replica, then is caught up.
    drop(serve);
    let outage = PodLoop::start(&apps, "e2e-outage", DEFAULT_IMAGE, LOOP_PAUSE, false);
    set_templates(&configmaps, json!({"config": v3})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let report = outage.stop().await;
    assert!(
        report.failed.is_empty() && report.created > 0,
        "expected every Pod created with no replica running to be created, found: {}: {:?}",
        report.summary(),
        report.failed
    );
    apps.loop_pods_injected("e2e-outage", &["envoy"]).await;
    assert_eq!(ours(client).await, settled, "with no replica the edit changes nothing");
    let p = apps
        .create_pod(&opted, true)
        .await
        .unwrap_or_else(|e| panic!("expected a Pod created with no replica, found: {}", api_error(&e)));
    assert!(
        container(&p, "envoy").and_then(|c| c.image.as_deref()).is_some_and(|i| i.ends_with("v1.32.0")),
        "with no replica Pods keep the last compiled template: {}",
        describe_pod(&p)
    );
    step!("no replica running: {}; the edit waits", report.summary());
    let args_c = ["--namespace", &injector.name, "--network-backend", "none", "--identity", "policy-mode-c", "--policy-owner", &owner, "--injection", "policy"];
    let (serve, _) = serve_on_loopback("policy-mode-c", &certs, &args_c).await;
    serve.wait_ready().await;
    in_step(client, &[("config", v3.clone())]).await;
    step!("a replica back: the edit made while none ran is caught up");

    // Webhook mode removes every object it wrote.
    drop(serve);
    let args_d = ["--namespace", &injector.name, "--network-backend", "none", "--identity", "policy-mode-d", "--policy-owner", &owner, "--injection", "webhook"];
    let (serve, _) = serve_on_loopback("policy-mode-d", &certs, &args_d).await;
    serve.wait_ready().await;
    wait_for("webhook mode to remove the compiled policies", PATIENCE, async || {
        let left = ours(client).await;
        if left.is_empty() { Ok(()) } else { Err(format!("{left:?}")) }
    })
    .await;
    let metrics = serve.metrics().await;
    assert_eq!(metric_value(&metrics, "envoy_injector_injection_mode{mode=\"webhook\"}"), Some(1.0));
    step!("--injection=webhook: every compiled object removed");
    drop(serve);
    Ok(format!("template edit → next Pod {} ms", ms(latency)))
}

/// Every compiled object is owned by the owner at `uid`, without `blockOwnerDeletion`.
async fn owned_by(client: &kube::Client, uid: &str) {
    for (kind, meta) in compiled_objects(client).await.unwrap_or_else(|e| panic!("{e}")) {
        let owners = meta.owner_references.unwrap_or_default();
        assert!(
            owners.len() == 1 && owners[0].uid == uid && owners[0].block_owner_deletion.is_none(),
            "expected {kind} {:?} owned by the ValidatingWebhookConfiguration at uid {uid} alone, without \
             blockOwnerDeletion, found {owners:?}",
            meta.name
        );
    }
}
