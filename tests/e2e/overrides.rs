//! Tier `overrides`: per-workload overrides and a template per namespace through the real
//! API server. `serve` runs here in cluster mode (it needs the Namespace cache) behind the
//! shipped MutatingWebhookConfiguration sent by `url:` to it. A namespace labelled
//! `sidecar.samplecrd.k8s.io/template=canary` gets `canary` on every Pod; a Deployment
//! whose Pod template asks `override.memory-limit: 256Mi` gets it on each Pod its
//! ReplicaSet makes, recorded in the status annotation; `override.cpu-request: "8"` is
//! denied with the message naming annotation, value, bound and template; a label naming no
//! template denies, naming the templates that exist.

use envoy_injector::tls;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use crate::support::*;

pub const TIER: Tier = Tier {
    name: "overrides",
    run: |suite| Box::pin(run(suite)),
};

const OVERRIDE: &str = "sidecar.samplecrd.k8s.io/override.";
const TEMPLATE_LABEL: &str = "sidecar.samplecrd.k8s.io/template";

/// A template whose sidecar `name` allows the issue's overrides.
fn template_with_overrides(name: &str) -> String {
    format!(
        "containers:\n- name: {name}\n  image: {DEFAULT_IMAGE}\n  resources:\n    requests: {{cpu: 100m, memory: 64Mi}}\n    limits: {{memory: 128Mi}}\noverrides:\n  cpu-request: {{container: {name}, field: resources.requests.cpu, max: \"2\"}}\n  memory-limit: {{container: {name}, field: resources.limits.memory, min: 64Mi, max: 1Gi}}\n"
    )
}

async fn run(suite: &Suite) -> TierResult {
    suite.loopback_webhooks()?;
    require_kubectl()?;
    let client = &suite.client;
    // Declared first, so it is dropped last: after the process has stopped.
    let scope = Scope::new(suite.settings.mode);
    let injector = TestNs::create(client, &scope, "overrides-injector", &[]).await;
    let apps = TestNs::create(client, &scope, "overrides", &[NAMESPACE_OPT_IN, (TEMPLATE_LABEL, "canary")]).await;
    // `serve` in cluster mode watches Networks: the CRD must be served.
    suite.install_network_crd().await;

    let mut configmap = in_namespace(&configmap_object(INJECTOR_NAME, &template_with_overrides("envoy")), &injector.name);
    configmap["data"]["canary"] = json!(template_with_overrides("envoy-canary"));
    kubectl_apply(&[configmap]).await;
    let certs = tls::generate(INJECTOR_NAME, &injector.name, &["127.0.0.1".to_string()], 1).expect("test certificates");
    let (serve, webhook) = serve_on_loopback(
        "overrides",
        &certs,
        &[
            "--namespace",
            &injector.name,
            "--network-backend",
            "none",
            "--identity",
            "overrides-test-replica",
        ],
    ).await;
    serve.wait_ready().await;
    let webhook_config = format!("envoy-injector-{}", apps.name);
    register_shipped_webhooks(
        &scope,
        &webhook_config,
        &format!("https://{webhook}/mutate"),
        certs.ca.cert_pem.as_bytes(),
        &[&apps.name],
    )
    .await;

    // The namespace's template, once the API server calls the webhook.
    let probe = pod("e2e-probe", &[], DEFAULT_IMAGE);
    let answer = wait_for("the webhook to inject the namespace's template (dry run)", PATIENCE * 2, async || {
        let answer = apps.create_pod(&probe, true).await.map_err(|e| api_error(&e))?;
        container(&answer, "envoy-canary")
            .map(|_| answer.clone())
            .ok_or_else(|| format!("not injected with envoy-canary: {}", describe_pod(&answer)))
    })
    .await;
    assert!(container(&answer, "envoy").is_none(), "{}", describe_pod(&answer));
    step!("namespace {} labelled {TEMPLATE_LABEL}=canary: its Pods get template `canary`", apps.name);

    // A Deployment asking for a memory limit: every Pod its ReplicaSet makes gets it.
    let name = "e2e-overridden";
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &apps.name);
    let memory = format!("{OVERRIDE}memory-limit");
    // A Burstable app (a cpu request of its own): a BestEffort Pod's sidecar goes in without
    // cpu and memory, its overrides of them included, to keep the Pod BestEffort.
    let mut burstable = deployment(name, 2, &[(&memory, "256Mi")], DEFAULT_IMAGE);
    if let Some(spec) = burstable.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.containers[0].resources = Some(
            serde_json::from_value(json!({"requests": {"cpu": "10m"}})).expect("resource requirements"),
        );
    }
    deployments
        .create(&PostParams::default(), &burstable)
        .await
        .unwrap_or_else(|e| panic!("expected to create Deployment {name}, found: {}", api_error(&e)));
    let pods = wait_for(&format!("2 Pods of Deployment {name}"), PATIENCE, async || {
        let pods = apps
            .pods
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await
            .map_err(|e| api_error(&e))?
            .items;
        if pods.len() == 2 { Ok(pods) } else { Err(format!("{} Pods", pods.len())) }
    })
    .await;
    for p in &pods {
        let limit = container(p, "envoy-canary")
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("memory"))
            .map(|q| q.0.as_str());
        let status: Value = annotation(p, STATUS)
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        assert!(
            limit == Some("256Mi")
                && status["overrides"] == json!({"memory-limit": "256Mi"})
                && status["template"] == "canary",
            "expected each Pod of {name} with envoy-canary's memory limit 256Mi, recorded in {STATUS}, found: {}",
            describe_pod(p)
        );
    }
    step!(
        "Deployment {name} with {memory}: 256Mi: Pods {:?} each got it",
        pods.iter().filter_map(|p| p.metadata.name.clone()).collect::<Vec<_>>()
    );

    // Out of bounds: denied through the API server with the words of the issue.
    let cpu = format!("{OVERRIDE}cpu-request");
    for (template, annotations) in [
        ("config", vec![(cpu.as_str(), "8"), ("sidecar.samplecrd.k8s.io/template", "config")]),
        ("canary", vec![(cpu.as_str(), "8")]),
    ] {
        let expected = format!(r#"override.cpu-request: "8" exceeds max "2" of template "{template}""#);
        let refused = apps
            .create_pod(&pod("e2e-too-big", &annotations, DEFAULT_IMAGE), false)
            .await
            .map(|p| describe_pod(&p))
            .expect_err("a Pod asking for 8 CPUs is denied");
        let message = api_error(&refused);
        assert!(
            message.contains("denied the request") && message.contains(&expected),
            "expected the API server's refusal to carry `{expected}`, found: {message}"
        );
        step!("denied through the API server: {expected}");
    }

    // A label naming no template denies, naming those that exist.
    apps.set_label(TEMPLATE_LABEL, json!("missing")).await;
    let expected = format!(
        "template `missing` named by label `{TEMPLATE_LABEL}` of namespace `{}` does not exist; the injector has: `canary`, `config`",
        apps.name
    );
    let message = wait_for("the relabelled namespace to reach the cache", PATIENCE, async || {
        match apps.create_pod(&probe, true).await {
            Ok(p) => Err(format!("admitted: {}", describe_pod(&p))),
            Err(e) => Ok(api_error(&e)),
        }
    })
    .await;
    assert!(message.contains(&expected), "expected `{expected}`, found: {message}");
    step!("a namespace label naming no template denies: {expected}");
    serve.terminate().await;
    Ok(String::new())
}
