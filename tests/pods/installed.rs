//! Tier `installed`: the injector as users deploy it. `make deploy IMAGE=$E2E_IMAGE`
//! applies `manifests/` as they are (kubectl of these machines against a newer API
//! server); both replicas become Ready through their real probes with the shipped
//! securityContext; the running Pods write the TLS Secret and every `caBundle`; the API
//! server reaches the webhook through the Service, so a Pod created afterwards is injected
//! and its sidecar runs; `/validate` refuses a broken ConfigMap through the real path; and
//! `check`, run from outside, reports the installation healthy.

use std::time::Instant;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "installed",
    run: |suite| Box::pin(run(suite)),
};

const TLS_SECRET: &str = "envoy-injector-tls";
/// The binary's field manager: what it writes is recorded under this name.
const BINARY_MANAGER: &str = "envoy-injector";
/// A misspelt field: the refusal must name it.
const BAD_FIELD: &str = "imagee";

async fn run(suite: &Suite) -> TierResult {
    let node = ready_node(&suite.client).await?;
    let images = Images::from_env();
    step!("node {node} Ready; injector image {}", images.injector);
    let installation = Installation::new(&suite.client);

    let took = installation.deploy(&images.injector).await;
    step!("make deploy IMAGE={}: rolled out in {:.1} s", images.injector, took.as_secs_f64());
    replicas_ready_as_shipped(&installation, &images).await;
    let secret_ca = tls_written_by_the_pods(suite).await;
    ca_bundles_written(suite, &secret_ca).await;

    installation.use_stand_in(suite, &images).await;
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(&suite.client, &scope, "installed", &[NAMESPACE_OPT_IN]).await;
    let to_running = injected_pod_runs(&ns, &images).await;
    validate_refuses_a_broken_template(&installation).await;
    let warnings = check_reports_healthy().await;
    Ok(format!(
        "make deploy {:.1} s, Pod created to Running {:.1} s, check healthy{warnings}",
        took.as_secs_f64(),
        to_running
    ))
}

/// Both replicas Ready, with the image, probes and securityContext of `manifests/`, and
/// never restarted.
async fn replicas_ready_as_shipped(installation: &Installation, images: &Images) {
    let deployment = wait_for(
        "the injector Deployment to be rolled out",
        RUN_PATIENCE,
        async || installation.rolled_out().await,
    )
    .await;
    let want = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let pods = wait_for("every injector Pod of the rollout to be Ready", RUN_PATIENCE, async || {
        let pods = installation.live_pods().await;
        let ready: Vec<&Pod> = pods
            .iter()
            .filter(|p| ready(p).and(running(p, &[INJECTOR_NAME])).is_ok())
            .collect();
        if ready.len() == pods.len() && pods.len() == want as usize {
            Ok(pods)
        } else {
            Err(format!("{} of {} live Pods ready, {want} wanted", ready.len(), pods.len()))
        }
    })
    .await;
    assert_eq!(want, 2, "expected the shipped Deployment to ask for 2 replicas");
    for pod in &pods {
        let name = pod.metadata.name.as_deref().unwrap_or("?");
        let spec = pod.spec.as_ref().expect("a stored Pod has a spec");
        let container = spec
            .containers
            .iter()
            .find(|c| c.name == INJECTOR_NAME)
            .unwrap_or_else(|| panic!("expected container {INJECTOR_NAME} in Pod {name}"));
        assert_eq!(container.image.as_deref(), Some(images.injector.as_str()), "image of Pod {name}");
        let security = container.security_context.clone().unwrap_or_default();
        assert_eq!(security.read_only_root_filesystem, Some(true), "read-only root filesystem in Pod {name}");
        assert_eq!(security.run_as_user, Some(65532), "UID of Pod {name}");
        assert_eq!(security.run_as_group, Some(65532), "GID of Pod {name}");
        assert_eq!(security.allow_privilege_escalation, Some(false), "no privilege escalation in Pod {name}");
        let probes = [
            ("startup", container.startup_probe.is_some()),
            ("liveness", container.liveness_probe.is_some()),
            ("readiness", container.readiness_probe.is_some()),
        ];
        assert!(
            probes.iter().all(|(_, set)| *set),
            "expected every probe of the shipped Deployment in Pod {name}, found {probes:?}"
        );
        let restarts = status_of(pod, INJECTOR_NAME).map(|s| s.restart_count).unwrap_or(-1);
        assert_eq!(
            restarts, 0,
            "expected the injector in Pod {name} never restarted (probes passing, no crash), found {restarts} restarts"
        );
    }
    step!(
        "both replicas Ready through their probes, read-only root, UID/GID 65532, 0 restarts: {:?}",
        pods.iter().filter_map(|p| p.metadata.name.as_deref()).collect::<Vec<_>>()
    );
}

/// The Secret exists with its four keys and was written by the binary (its field manager;
/// no process of this test writes it). Returns its `ca.crt`.
async fn tls_written_by_the_pods(suite: &Suite) -> Vec<u8> {
    let secrets: Api<Secret> = Api::namespaced(suite.client.clone(), INJECTOR_NAMESPACE);
    let secret = wait_for("the TLS Secret written by the running Pods", PATIENCE, async || {
        secrets
            .get_opt(TLS_SECRET)
            .await
            .map_err(|e| api_error(&e))?
            .ok_or_else(|| format!("no Secret {INJECTOR_NAMESPACE}/{TLS_SECRET}"))
    })
    .await;
    let data = secret.data.clone().unwrap_or_default();
    for key in ["tls.crt", "tls.key", "ca.crt", "ca.key"] {
        assert!(
            data.get(key).is_some_and(|v| !v.0.is_empty()),
            "expected key {key} in Secret {TLS_SECRET}, found keys {:?}",
            data.keys().collect::<Vec<_>>()
        );
    }
    let managers: Vec<String> = secret
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m == BINARY_MANAGER),
        "expected the Secret written by the binary (field manager {BINARY_MANAGER}), found managers {managers:?}"
    );
    step!("Secret {TLS_SECRET}: tls.crt, tls.key, ca.crt, ca.key, written by {BINARY_MANAGER}");
    data["ca.crt"].0.clone()
}

/// Every webhook of both shipped configurations carries the Secret's `ca.crt`.
async fn ca_bundles_written(suite: &Suite, ca: &[u8]) {
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(suite.client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(suite.client.clone());
    let bundles = wait_for("both webhook configurations to carry the Secret's CA", PATIENCE, async || {
        let m = mutating.get(INJECTOR_NAME).await.map_err(|e| api_error(&e))?;
        let v = validating.get(INJECTOR_NAME).await.map_err(|e| api_error(&e))?;
        let mut found: Vec<(String, bool)> = Vec::new();
        for hook in m.webhooks.iter().flatten() {
            found.push((hook.name.clone(), hook.client_config.ca_bundle.as_ref().is_some_and(|b| b.0 == ca)));
        }
        for hook in v.webhooks.iter().flatten() {
            found.push((hook.name.clone(), hook.client_config.ca_bundle.as_ref().is_some_and(|b| b.0 == ca)));
        }
        if found.len() >= 3 && found.iter().all(|(_, same)| *same) {
            Ok(found)
        } else {
            Err(format!("webhooks and whether their caBundle is the Secret's ca.crt: {found:?}"))
        }
    })
    .await;
    step!(
        "caBundle = the Secret's ca.crt in {:?}",
        bundles.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>()
    );
}

/// A plain Pod of a labelled namespace: the API server sends it through the Service, it
/// comes back with the stand-in sidecar, and both containers run. Returns the seconds from
/// the create to Running.
async fn injected_pod_runs(ns: &TestNs, images: &Images) -> f64 {
    let started = Instant::now();
    // A replica may not have loaded the stand-in template yet: a Pod injected with the
    // shipped one is deleted and another made.
    let mut attempt = 0;
    let stored = wait_for("the stand-in template to be injected", PATIENCE, async || {
        attempt += 1;
        let stored = ns.create_stored(&app_pod(&format!("after-install-{attempt}"), &[], images)).await;
        match container(&stored, SIDECAR) {
            Some(_) => Ok(stored),
            None => {
                let _ = ns.pods.delete(stored.metadata.name.as_deref().unwrap_or_default(), &Default::default()).await;
                Err(describe_pod(&stored))
            }
        }
    })
    .await;
    assert!(
        annotation(&stored, STATUS).is_some(),
        "expected the status annotation on the injected Pod, found {}",
        describe_pod(&stored)
    );
    let name = stored.metadata.name.clone().unwrap_or_default();
    wait_for("the injected Pod to run with its sidecar", RUN_PATIENCE, async || {
        let p = ns.pods.get(&name).await.map_err(|e| api_error(&e))?;
        running(&p, &["app", SIDECAR])
    })
    .await;
    let took = started.elapsed().as_secs_f64();
    step!("Pod {}/{name} injected through the Service and running with `{SIDECAR}` ({took:.1} s)", ns.name);
    took
}

/// An update of the ConfigMap whose template does not parse is refused by the API server
/// (the ValidatingWebhookConfiguration calls `/validate` of the running Pods), naming the
/// field; the stored ConfigMap is unchanged.
async fn validate_refuses_a_broken_template(installation: &Installation) {
    let before = installation
        .configmaps
        .get(INJECTOR_NAME)
        .await
        .unwrap_or_else(|e| panic!("expected the ConfigMap, found: {}", api_error(&e)));
    let broken = format!("containers:\n- name: broken\n  {BAD_FIELD}: busybox\n");
    let patch = json!({ "data": { "config": broken } });
    let refused = installation
        .configmaps
        .patch(INJECTOR_NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    let message = match refused {
        Err(kube::Error::Api(status)) => status.message,
        Err(other) => panic!("expected the API server to refuse the broken template, found error {other}"),
        Ok(_) => panic!("expected the API server to refuse a template with field `{BAD_FIELD}`, found it stored"),
    };
    assert!(
        message.contains(BAD_FIELD) && message.contains("denied the request"),
        "expected the webhook's refusal naming `{BAD_FIELD}`, found: {message}"
    );
    let after = installation
        .configmaps
        .get(INJECTOR_NAME)
        .await
        .unwrap_or_else(|e| panic!("expected the ConfigMap, found: {}", api_error(&e)));
    assert_eq!(before.data, after.data, "expected the refused update to change nothing");
    step!("/validate refused the broken template: {message}");
}

/// `envoy-injector check` from this machine: exit 0 and `healthy`. Returns its warnings,
/// for the summary.
async fn check_reports_healthy() -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_envoy-injector"));
    command.args(["check", "-o", "json"]);
    let out = run_command(command, None).await;
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("expected a JSON report from check, found {e}: {}", describe_output(&out)));
    assert!(
        out.status.success() && report["healthy"] == json!(true),
        "expected `check` to report the installation healthy, found {}",
        describe_output(&out)
    );
    let warnings: Vec<String> = report["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] != json!("ok"))
        .map(|c| format!("{}: {}", c["check"], c["message"]))
        .collect();
    step!(
        "check: healthy, {} checks, warnings {warnings:?}",
        report["checks"].as_array().map_or(0, Vec::len)
    );
    if warnings.is_empty() {
        String::new()
    } else {
        format!(" with warnings {warnings:?}")
    }
}
