//! Tier `outage` (last: it takes the API server away from everyone): `$CONTROLPLANE_SH
//! restart-apiserver` with `DOWN_S=15` while an as-deployed process serves. Proves that the
//! process stays alive, `/healthz` and `/readyz` stay 200 as docs/operations.md says (its caches
//! synced once; admission needs no API call), the webhook keeps answering reviews from its
//! cache meanwhile, and once the API server is back its watches resume: a ConfigMap edit and
//! a Network created after the outage are both picked up.

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::*;

pub const TIER: Tier = Tier {
    name: "outage",
    run: |suite| Box::pin(run(suite)),
};

/// How long the API server stays down (`DOWN_S`).
const DOWN_S: u64 = 15;
/// The captured review posted straight to the webhook while the API server is down.
const REVIEW: &str = "tests/fixtures/admission/seed-initializer-annotation.json";

async fn run(suite: &Suite) -> TierResult {
    let Some(script) = suite.settings.controlplane_sh.clone() else {
        return Err(Skip(
            "CONTROLPLANE_SH is not set: it names the script whose `restart-apiserver` takes the API server \
             away (CI sets it; with a control plane of your own, export it with that plane's settings)"
                .into(),
        ));
    };
    let install = suite.install().await?;
    let client = &suite.client;
    let scope = Scope::new(suite.settings.mode);
    let ns = TestNs::create(client, &scope, "outage", &[]).await;
    let injector = install.start("envoy-injector-e2e-o", false).await;
    injector.wait_ready().await;
    let first = ns.create_stored(&pod("e2e-before", &[(INJECT, "true")], DEFAULT_IMAGE)).await;
    injected_with(&first, &install.sidecar).unwrap_or_else(|e| panic!("before the outage: {e}"));
    let webhook = DirectClient::new(&install, &install.ca_pem(client).await);
    webhook.injects(&install.sidecar).await.unwrap_or_else(|e| panic!("before the outage: {e}"));

    step!("{} restart-apiserver with DOWN_S={DOWN_S}", script.display());
    let restart = std::thread::spawn(move || {
        Command::new(&script)
            .arg("restart-apiserver")
            .env("DOWN_S", DOWN_S.to_string())
            .output()
    });
    wait_for("the API server to stop answering", PATIENCE, async || {
        match client.apiserver_version().await {
            Err(_) => Ok(()),
            Ok(_) => Err("it still answers".to_string()),
        }
    })
    .await;
    let down = Instant::now();
    let mut samples = 0;
    while down.elapsed() < Duration::from_secs(DOWN_S - 3) {
        check_processes().unwrap_or_else(|e| panic!("during the outage: {e}"));
        for path in ["/healthz", "/readyz"] {
            let status = injector.admin_status(path).await;
            assert_eq!(status, Ok(200), "{path} during the API server outage");
        }
        webhook
            .injects(&install.sidecar)
            .await
            .unwrap_or_else(|e| panic!("expected the webhook to answer from its cache during the outage: {e}"));
        samples += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let output = tokio::task::spawn_blocking(move || restart.join())
        .await
        .expect("join")
        .expect("the restart thread")
        .expect("run restart-apiserver");
    assert!(
        output.status.success(),
        "expected restart-apiserver to succeed, found {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let outage = down.elapsed();
    step!(
        "API server back after {:.1} s; {samples} samples while down: alive, /healthz and /readyz 200, reviews answered",
        outage.as_secs_f64()
    );

    // Watches resume: an edit and a new object, both made after the outage.
    let sidecar = "e2e-after-outage";
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &install.namespace);
    let patch = json!({ "data": { "config": template(sidecar, DEFAULT_IMAGE) } });
    configmaps
        .patch(&install.configmap, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("expected to edit ConfigMap {}, found: {}", install.configmap, api_error(&e)));
    let edited = Instant::now();
    let probe = pod("e2e-after", &[(INJECT, "true")], DEFAULT_IMAGE);
    wait_for(
        "the template edited after the outage to reach the next Pod",
        PATIENCE * 2,
        async || {
            let answer = ns.create_pod(&probe, true).await.map_err(|e| api_error(&e))?;
            injected_with(&answer, sidecar)
        },
    )
    .await;
    let edit_latency = edited.elapsed();
    let created = Instant::now();
    ns.create_network("e2e-after-outage", "198.18.81.0/24", "198.18.81.1").await;
    ns.network_ready("e2e-after-outage", PATIENCE * 2).await;
    let reconcile_latency = created.elapsed();
    let figures = format!(
        "down {:.1} s, {samples} samples served; after it: template edit live in {} ms, new Network Ready in {} ms",
        outage.as_secs_f64(),
        ms(edit_latency),
        ms(reconcile_latency)
    );
    shout(&format!("e2e outage: {figures}"));
    Ok(figures)
}

/// A TLS client that calls the webhook as the API server does, on the Service's ClusterIP,
/// trusting only the CA of the self-managed Secret.
struct DirectClient {
    http: reqwest::Client,
    url: String,
    review: Vec<u8>,
}

impl DirectClient {
    fn new(install: &Install, ca_pem: &[u8]) -> DirectClient {
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(ca_pem).expect("the Secret's CA is PEM"))
            .resolve(&install.service_host, install.webhook_addr())
            .timeout(Duration::from_secs(5))
            .build()
            .expect("TLS client");
        let path = manifest_path(REVIEW);
        DirectClient {
            http,
            url: format!("https://{}:{}/mutate?timeout=5s", install.service_host, install.service_port),
            review: std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display())),
        }
    }

    /// `Ok` when the review is answered allowed, with a patch that adds `sidecar`.
    async fn injects(&self, sidecar: &str) -> Result<(), String> {
        use base64::Engine;
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(self.review.clone())
            .send()
            .await
            .map_err(|e| format!("{}: {e}", self.url))?;
        let answer: Value = response.json().await.map_err(|e| format!("not JSON: {e}"))?;
        let patch = answer["response"]["patch"]
            .as_str()
            .and_then(|p| base64::engine::general_purpose::STANDARD.decode(p).ok())
            .map(|p| String::from_utf8_lossy(&p).into_owned())
            .unwrap_or_default();
        if answer["response"]["allowed"] == true && patch.contains(&format!("\"name\":\"{sidecar}\"")) {
            Ok(())
        } else {
            Err(format!("answer without a patch adding {sidecar}: {answer}"))
        }
    }
}
