//! Self-managed TLS (`tls::secret`) against a mocked API server (tower-test): every
//! request's method, path and (where it matters) body is asserted and answered in order;
//! once the bootstrap and its client are gone, no further request may have been made.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use envoy_injector::metrics::{LoadLabels, LoadResult, Metrics};
use envoy_injector::shutdown::CancellationToken;
use envoy_injector::tls::secret::{
    BootstrapConfig, CA_CRT, CA_KEY, DEFAULT_CA_OVERLAP, NEXT_CA_KEY, SECRET_TYPE, TLS_CRT, TLS_KEY, TlsBootstrap,
    TlsMaterial,
};
use envoy_injector::tls::{self, CertPair, CertStore};
use http::Method;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::core::ObjectMeta;
use prometheus_client::registry::Registry;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio::time::timeout;

mod mock_api;
use mock_api::{ApiServer, Call, PATIENCE, WebhookConfig, secret, secrets};

const NS: &str = "mesh";
const SERVICE: &str = "injector";
const SECRET: &str = "injector-tls";
const WEBHOOK_CONFIG: &str = "injector";
const VALIDATING_CONFIG: &str = "injector-templates";
const MUTATING: WebhookConfig<'static> = WebhookConfig::Mutating(WEBHOOK_CONFIG);
const VALIDATING: WebhookConfig<'static> = WebhookConfig::Validating(VALIDATING_CONFIG);
const NAMES: [&str; 4] = [
    "injector",
    "injector.mesh",
    "injector.mesh.svc",
    "injector.mesh.svc.cluster.local",
];

// ---------------------------------------------------------------- fixtures

fn config() -> BootstrapConfig {
    BootstrapConfig {
        namespace: NS.into(),
        secret_name: SECRET.into(),
        webhook_config: Some(WEBHOOK_CONFIG.into()),
        // Most scenarios manage the mutating configuration only; the validating one has
        // its own scenarios below.
        validating_webhook_config: None,
        service: SERVICE.into(),
        validity_days: 365,
        renew_before_days: 30,
        // Long: tests that do not run the loop see no background request.
        poll_interval: Duration::from_secs(3600),
        check_interval: Duration::from_secs(3600),
        ca_overlap: DEFAULT_CA_OVERLAP,
    }
}

fn metrics() -> Metrics {
    Metrics::register(&mut Registry::default())
}

fn reloads(metrics: &Metrics, result: LoadResult) -> u64 {
    metrics.tls_reloads.get_or_create(&LoadLabels { result }).get()
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

fn ca_issued(at: OffsetDateTime) -> CertPair {
    tls::generate_ca(SERVICE, NS, 3650, at).unwrap()
}

fn leaf_issued(ca: &CertPair, at: OffsetDateTime, days: i64) -> CertPair {
    tls::sign_serving_cert(ca, SERVICE, NS, at, at + time::Duration::days(days)).unwrap()
}

fn secret_json(material: &TlsMaterial, resource_version: &str) -> Value {
    let mut data = BTreeMap::new();
    material.apply_to(&mut data);
    data.insert("extra".into(), ByteString(b"kept".to_vec()));
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(SECRET.into()),
            namespace: Some(NS.into()),
            resource_version: Some(resource_version.into()),
            uid: Some("uid-secret".into()),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(data),
        ..Secret::default()
    };
    serde_json::to_value(secret).unwrap()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The MutatingWebhookConfiguration with two webhooks and the given caBundles.
fn webhook_config(bundles: [Option<&Vec<u8>>; 2], resource_version: &str) -> Value {
    let webhook = |name: &str, bundle: Option<&Vec<u8>>| {
        let mut client_config = json!({ "service": { "name": SERVICE, "namespace": NS, "path": "/mutate" } });
        if let Some(bundle) = bundle {
            client_config["caBundle"] = json!(b64(bundle));
        }
        json!({
            "name": name,
            "clientConfig": client_config,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
        })
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": { "name": WEBHOOK_CONFIG, "resourceVersion": resource_version },
        "webhooks": [
            webhook("namespaces.sidecar.samplecrd.k8s.io", bundles[0]),
            webhook("pods.sidecar.samplecrd.k8s.io", bundles[1]),
        ],
    })
}

/// The ValidatingWebhookConfiguration (`--validating-webhook-config`) with one webhook.
fn validating_config(bundle: Option<&Vec<u8>>, resource_version: &str) -> Value {
    let mut client_config = json!({ "service": { "name": SERVICE, "namespace": NS, "path": "/validate" } });
    if let Some(bundle) = bundle {
        client_config["caBundle"] = json!(b64(bundle));
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": VALIDATING_CONFIG, "resourceVersion": resource_version },
        "webhooks": [{
            "name": "templates.sidecar.samplecrd.k8s.io",
            "clientConfig": client_config,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
        }],
    })
}

fn config_with_validating() -> BootstrapConfig {
    BootstrapConfig {
        validating_webhook_config: Some(VALIDATING_CONFIG.into()),
        ..config()
    }
}

/// A key of a Secret in a request body, decoded.
fn data(body: &Value, key: &str) -> Vec<u8> {
    let encoded = body["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("expected data.{key} in {body}"));
    base64::engine::general_purpose::STANDARD.decode(encoded).unwrap()
}

fn leaf_der(pem: &[u8]) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem).unwrap().to_vec()
}

fn served(store: &CertStore) -> Vec<u8> {
    store.current().cert[0].to_vec()
}

/// The certificate verifies for `name` against the CAs in `ca_pem` (a bundle) now.
fn verify(ca_pem: &[u8], cert_pem: &[u8], name: &str) -> Result<(), rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .unwrap();
    let leaf = CertificateDer::from_pem_slice(cert_pem).unwrap();
    let name = ServerName::try_from(name.to_string()).unwrap();
    verifier
        .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
        .map(|_| ())
}

fn assert_serves_service(ca_pem: &[u8], cert_pem: &[u8]) {
    for name in NAMES {
        verify(ca_pem, cert_pem, name).unwrap_or_else(|e| panic!("expected the certificate to verify for {name}: {e}"));
    }
    assert!(verify(ca_pem, cert_pem, "other.mesh.svc").is_err());
    let info = tls::inspect_cert(&leaf_der(cert_pem)).unwrap();
    assert_eq!(info.dns_names, NAMES);
}

type Bootstrapped = (TlsBootstrap, Arc<CertStore>);

type Bootstrapping = tokio::task::JoinHandle<Bootstrapped>;

/// Runs `bootstrap()` in a task against a scripted API server, which the test drives.
fn bootstrapping(config: BootstrapConfig, metrics: Metrics) -> (Bootstrapping, ApiServer) {
    let (client, api) = mock_api::mock_client("default");
    let task = tokio::spawn(async move {
        let mut bootstrap = TlsBootstrap::new(client, config, metrics).unwrap();
        let store = bootstrap.bootstrap().await.expect("bootstrap should succeed");
        (bootstrap, store)
    });
    (task, api)
}

async fn finished<T>(task: tokio::task::JoinHandle<T>) -> T {
    timeout(PATIENCE, task)
        .await
        .expect("expected the bootstrap to finish within the safety bound")
        .unwrap()
}

/// A CA and a serving certificate issued now, the certificate valid for a year.
fn current_material() -> TlsMaterial {
    let t = now();
    let ca = ca_issued(t);
    TlsMaterial::issued_by(&ca, &leaf_issued(&ca, t, 365))
}

// ---------------------------------------------------------------- scripted steps

/// The Secret read, answered with `material` stored at `resource_version`.
async fn secret_holds(api: &mut ApiServer, material: &TlsMaterial, resource_version: &str) {
    api.expect_secret_get(NS, SECRET)
        .await
        .reply(200, &secret_json(material, resource_version));
}

/// The mutating configuration read, answered with both webhooks already publishing
/// `bundle`: nothing to patch.
async fn mutating_publishes(api: &mut ApiServer, bundle: &Vec<u8>, resource_version: &str) {
    api.expect_webhook_config_get(MUTATING)
        .await
        .reply(200, &webhook_config([Some(bundle), Some(bundle)], resource_version));
}

/// The bootstrap finishes serving `tls_crt`; once it is gone, it has made no other request.
async fn assert_serves_then_rests(task: Bootstrapping, api: ApiServer, tls_crt: &[u8]) -> Arc<CertStore> {
    let (bootstrap, store) = finished(task).await;
    assert_eq!(served(&store), leaf_der(tls_crt), "serves the certificate it stored");
    drop(bootstrap);
    api.assert_no_more_requests().await;
    store
}

// ---------------------------------------------------------------- scenarios

/// (a) No Secret: a CA and certificate are generated and POSTed, then every webhook's
/// caBundle is PATCHed to the new ca.crt.
#[tokio::test]
async fn no_secret_generates_posts_and_publishes_the_ca_bundle() {
    let metrics = metrics();
    let (task, mut api) = bootstrapping(config(), metrics.clone());

    api.expect_secret_get(NS, SECRET).await.reply_not_found();

    let post = api.expect_secret_create(NS).await;
    assert_eq!(post.body["type"], SECRET_TYPE);
    assert_eq!(post.body["metadata"]["name"], SECRET);
    assert_eq!(post.body["metadata"]["namespace"], NS);
    let (tls_crt, ca_crt) = (data(&post.body, TLS_CRT), data(&post.body, CA_CRT));
    assert_serves_service(&ca_crt, &tls_crt);
    let ca_key = String::from_utf8(data(&post.body, CA_KEY)).unwrap();
    let ca_info = tls::inspect_cert(&leaf_der(&ca_crt)).unwrap();
    assert!(ca_info.is_ca);
    assert_eq!(
        tls::public_key_of(&ca_key).unwrap(),
        ca_info.public_key,
        "ca.key is the CA's key"
    );
    let tls_key = data(&post.body, TLS_KEY);
    tls::load_pem(&tls_crt, &tls_key, "tls.crt", "tls.key").expect("tls.key matches tls.crt");
    post.echo_at(201, "1");

    api.expect_webhook_config_get(MUTATING)
        .await
        .reply(200, &webhook_config([None, Some(&b"stale".to_vec())], "7"));
    let patch = api.expect_webhook_config_patch(MUTATING).await;
    assert_eq!(
        patch.body["metadata"]["resourceVersion"], "7",
        "guarded by resourceVersion"
    );
    let webhooks = patch.body["webhooks"].as_array().unwrap();
    let names: Vec<&str> = webhooks.iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["namespaces.sidecar.samplecrd.k8s.io", "pods.sidecar.samplecrd.k8s.io"]
    );
    for webhook in webhooks {
        assert_eq!(webhook["clientConfig"]["caBundle"], b64(&ca_crt), "{webhook}");
    }
    patch.reply(200, &webhook_config([Some(&ca_crt), Some(&ca_crt)], "8"));

    assert_serves_then_rests(task, api, &tls_crt).await;
    assert_eq!(reloads(&metrics, LoadResult::Error), 0);
}

/// (b) Two replicas start together: this one's POST loses (409 AlreadyExists), it
/// re-reads and serves the winner's certificate, byte for byte.
#[tokio::test]
async fn losing_the_create_race_serves_the_winners_certificate() {
    let winner = current_material();
    let (task, mut api) = bootstrapping(config(), metrics());

    api.expect_secret_get(NS, SECRET).await.reply_not_found();
    let post = api.expect_secret_create(NS).await;
    let ours = data(&post.body, TLS_CRT);
    assert_ne!(ours, winner.tls_crt);
    post.reply_already_exists();
    secret_holds(&mut api, &winner, "3").await;
    // The winner already published its CA: nothing to patch.
    mutating_publishes(&mut api, &winner.ca_crt, "9").await;

    let store = assert_serves_then_rests(task, api, &winner.tls_crt).await;
    assert_ne!(served(&store), leaf_der(&ours));
}

/// (c) A valid Secret and an up-to-date caBundle: two reads, no write.
#[tokio::test]
async fn valid_secret_and_current_ca_bundle_only_read() {
    let current = current_material();
    let metrics = metrics();
    let (task, mut api) = bootstrapping(config(), metrics.clone());

    secret_holds(&mut api, &current, "11").await;
    mutating_publishes(&mut api, &current.ca_crt, "4").await;

    assert_serves_then_rests(task, api, &current.tls_crt).await;
    assert_eq!(
        reloads(&metrics, LoadResult::Success) + reloads(&metrics, LoadResult::Error),
        0
    );
}

/// (d) A certificate within the renewal period is renewed with the same CA (the new one
/// verifies against the old ca.crt) and PUT with the read resourceVersion; other keys
/// survive.
#[tokio::test]
async fn near_expiry_is_renewed_with_the_same_ca_under_optimistic_concurrency() {
    let issued = now() - time::Duration::days(340);
    let ca = ca_issued(issued);
    let old = TlsMaterial::issued_by(&ca, &leaf_issued(&ca, issued, 365));
    let (task, mut api) = bootstrapping(config(), metrics());

    secret_holds(&mut api, &old, "42").await;
    let put = api.expect_secret_replace(NS, SECRET).await;
    assert_eq!(put.body["metadata"]["resourceVersion"], "42");
    assert_eq!(put.body["type"], SECRET_TYPE);
    assert_eq!(data(&put.body, "extra"), b"kept", "unrelated keys are kept");
    assert_eq!(data(&put.body, CA_CRT), old.ca_crt, "same CA");
    assert_eq!(Some(data(&put.body, CA_KEY)), old.ca_key, "same CA key");
    let renewed = data(&put.body, TLS_CRT);
    assert_ne!(renewed, old.tls_crt);
    assert_serves_service(&old.ca_crt, &renewed);
    let old_expiry = tls::inspect_cert(&leaf_der(&old.tls_crt)).unwrap().not_after;
    let new_expiry = tls::inspect_cert(&leaf_der(&renewed)).unwrap().not_after;
    assert!(
        new_expiry > old_expiry + time::Duration::days(300),
        "{new_expiry} vs {old_expiry}"
    );
    put.echo_at(200, "43");
    // Same CA: the caBundle is checked, not patched.
    mutating_publishes(&mut api, &old.ca_crt, "5").await;

    assert_serves_then_rests(task, api, &renewed).await;
}

/// (d, continued) The renewal PUT loses to another replica (409 Conflict): re-read, and
/// the other replica's renewal is used as is.
#[tokio::test]
async fn renewal_conflict_rereads_and_uses_the_other_replicas_renewal() {
    let issued = now() - time::Duration::days(340);
    let ca = ca_issued(issued);
    let old = TlsMaterial::issued_by(&ca, &leaf_issued(&ca, issued, 365));
    let theirs = TlsMaterial::issued_by(&ca, &leaf_issued(&ca, now(), 365));
    let (task, mut api) = bootstrapping(config(), metrics());

    secret_holds(&mut api, &old, "42").await;
    let put = api.expect_secret_replace(NS, SECRET).await;
    assert_eq!(put.body["metadata"]["resourceVersion"], "42");
    put.reply_status(409, "Conflict", "the object has been modified");
    secret_holds(&mut api, &theirs, "44").await;
    mutating_publishes(&mut api, &theirs.ca_crt, "5").await;

    assert_serves_then_rests(task, api, &theirs.tls_crt).await;
}

/// A missing MutatingWebhookConfiguration is not fatal: the bootstrap serves, and the
/// sync is retried later.
#[tokio::test]
async fn missing_webhook_configuration_does_not_fail_the_bootstrap() {
    let current = current_material();
    let (task, mut api) = bootstrapping(config(), metrics());

    secret_holds(&mut api, &current, "11").await;
    api.expect_webhook_config_get(MUTATING).await.reply_not_found();

    assert_serves_then_rests(task, api, &current.tls_crt).await;
}

/// With `--validating-webhook-config`, the ValidatingWebhookConfiguration's caBundle is
/// published too: after the mutating one, PATCHed only where it differs, guarded by its
/// resourceVersion.
#[tokio::test]
async fn the_validating_configuration_gets_the_ca_bundle_too() {
    let current = current_material();
    let (task, mut api) = bootstrapping(config_with_validating(), metrics());

    secret_holds(&mut api, &current, "11").await;
    mutating_publishes(&mut api, &current.ca_crt, "4").await;
    api.expect_webhook_config_get(VALIDATING)
        .await
        .reply(200, &validating_config(None, "6"));
    let patch = api.expect_webhook_config_patch(VALIDATING).await;
    assert_eq!(
        patch.body["metadata"]["resourceVersion"], "6",
        "guarded by resourceVersion"
    );
    let webhooks = patch.body["webhooks"].as_array().unwrap();
    assert_eq!(webhooks.len(), 1, "{}", patch.body);
    assert_eq!(webhooks[0]["name"], "templates.sidecar.samplecrd.k8s.io");
    assert_eq!(webhooks[0]["clientConfig"]["caBundle"], b64(&current.ca_crt));
    patch.reply(200, &validating_config(Some(&current.ca_crt), "7"));

    assert_serves_then_rests(task, api, &current.tls_crt).await;
}

/// A missing ValidatingWebhookConfiguration (an install without it) is not fatal either:
/// the mutating one is still synced and the bootstrap serves.
#[tokio::test]
async fn missing_validating_configuration_does_not_fail_the_bootstrap() {
    let current = current_material();
    let (task, mut api) = bootstrapping(config_with_validating(), metrics());

    secret_holds(&mut api, &current, "11").await;
    api.expect_webhook_config_get(MUTATING)
        .await
        .reply(200, &webhook_config([None, Some(&current.ca_crt)], "4"));
    let patch = api.expect_webhook_config_patch(MUTATING).await;
    assert_eq!(patch.body["webhooks"].as_array().unwrap().len(), 1, "{}", patch.body);
    patch.reply(
        200,
        &webhook_config([Some(&current.ca_crt), Some(&current.ca_crt)], "5"),
    );
    api.expect_webhook_config_get(VALIDATING).await.reply_not_found();

    assert_serves_then_rests(task, api, &current.tls_crt).await;
}

/// (e) The reload loop: a Secret renewed by another replica is served without restart;
/// a garbage Secret keeps the current certificate (and counts an error), then gets
/// repaired with the same CA and the repair is served.
#[tokio::test]
async fn reload_loop_serves_changed_secrets_and_keeps_the_old_one_on_garbage() {
    let t = now();
    let ca = ca_issued(t);
    let first = TlsMaterial::issued_by(&ca, &leaf_issued(&ca, t, 365));
    let second = TlsMaterial::issued_by(&ca, &leaf_issued(&ca, t, 365));
    let garbage = TlsMaterial {
        tls_crt: b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n".to_vec(),
        ..second.clone()
    };
    let bundle = first.ca_crt.clone();
    let metrics = metrics();
    let mut config = config();
    // Poll quickly; full checks stay an hour away.
    config.poll_interval = Duration::from_millis(20);
    let (task, mut api) = bootstrapping(config, metrics.clone());
    secret_holds(&mut api, &first, "1").await;
    mutating_publishes(&mut api, &bundle, "5").await;
    let (bootstrap, store) = finished(task).await;
    assert_eq!(served(&store), leaf_der(&first.tls_crt));

    let stop = CancellationToken::new();
    let running = tokio::spawn(bootstrap.run(store.clone(), stop.clone()));

    // Another replica renewed the certificate.
    secret_holds(&mut api, &second, "2").await;
    // The next poll means the previous answer has been handled.
    let poll = api.expect_secret_get(NS, SECRET).await;
    assert_eq!(served(&store), leaf_der(&second.tls_crt), "reloaded without restart");
    assert_eq!(reloads(&metrics, LoadResult::Success), 1);
    assert_eq!(reloads(&metrics, LoadResult::Error), 0);

    // Garbage: the store keeps the current certificate, the error is counted, and the
    // Secret is repaired from the same CA (PUT at the garbage's resourceVersion).
    poll.reply(200, &secret_json(&garbage, "3"));
    let put = api.expect_secret_replace(NS, SECRET).await;
    assert_eq!(
        served(&store),
        leaf_der(&second.tls_crt),
        "a bad Secret keeps the old certificate"
    );
    assert_eq!(reloads(&metrics, LoadResult::Error), 1);
    assert_eq!(put.body["metadata"]["resourceVersion"], "3");
    assert_eq!(data(&put.body, CA_CRT), bundle, "repaired with the same CA");
    let repaired = data(&put.body, TLS_CRT);
    assert_serves_service(&bundle, &repaired);
    let written = {
        let mut body = put.body.clone();
        body["metadata"]["resourceVersion"] = json!("4");
        body
    };
    put.echo_at(200, "4");

    // The repair is served (its caBundle did not change: no webhook call).
    let poll = api.expect_secret_get(NS, SECRET).await;
    assert_eq!(served(&store), leaf_der(&repaired));
    assert_eq!(reloads(&metrics, LoadResult::Success), 2);
    assert_eq!(reloads(&metrics, LoadResult::Error), 1);

    // Cancelled with a read under way: the loop ends without waiting for its answer.
    stop.cancel();
    finished(running).await;
    poll.reply(200, &written);
    api.assert_no_more_requests().await;
}

/// The webhook configurations as the API server holds them (the mutating one's two
/// webhooks and the validating one's): answers their reads and applies their PATCHes,
/// failing the test on any PATCH that would set a `caBundle` to an empty value.
struct WebhookConfigs {
    mutating: [Vec<u8>; 2],
    validating: Vec<u8>,
    version: u32,
}

impl WebhookConfigs {
    fn publishing(bundle: &[u8]) -> WebhookConfigs {
        WebhookConfigs {
            mutating: [bundle.to_vec(), bundle.to_vec()],
            validating: bundle.to_vec(),
            version: 1,
        }
    }

    fn bundles(&self) -> [&Vec<u8>; 3] {
        [&self.mutating[0], &self.mutating[1], &self.validating]
    }

    fn current(&self, path: &str) -> Value {
        let version = self.version.to_string();
        if path == MUTATING.path() {
            webhook_config([Some(&self.mutating[0]), Some(&self.mutating[1])], &version)
        } else {
            validating_config(Some(&self.validating), &version)
        }
    }

    /// Answers `call` when it reads or patches a managed webhook configuration; hands any
    /// other request back.
    fn answer(&mut self, call: Call) -> Option<Call> {
        if call.path != MUTATING.path() && call.path != VALIDATING.path() {
            return Some(call);
        }
        if call.method == Method::PATCH {
            for webhook in call.body["webhooks"].as_array().unwrap() {
                let encoded = webhook["clientConfig"]["caBundle"].as_str().unwrap_or_default();
                let bundle = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
                assert!(
                    !bundle.is_empty(),
                    "expected no webhook's caBundle to be set to an empty value, found PATCH {} setting {}",
                    call.path,
                    webhook
                );
                let slot = match webhook["name"].as_str().unwrap() {
                    "namespaces.sidecar.samplecrd.k8s.io" => &mut self.mutating[0],
                    "pods.sidecar.samplecrd.k8s.io" => &mut self.mutating[1],
                    "templates.sidecar.samplecrd.k8s.io" => &mut self.validating,
                    other => panic!("expected a managed webhook, found {other}"),
                };
                *slot = bundle;
            }
            self.version += 1;
        } else {
            assert_eq!(call.method, Method::GET, "{} {}", call.method, call.path);
        }
        let current = self.current(&call.path);
        call.reply(200, &current);
        None
    }

    /// Answers webhook configuration calls until another request comes, and returns it.
    async fn until_other(&mut self, api: &mut ApiServer) -> Call {
        loop {
            if let Some(other) = self.answer(api.next().await) {
                return other;
            }
        }
    }
}

/// Regression (ecd42a8): a CA switch falls due while the Secret is deleted. The Secret is
/// recreated from the last good contents with a certificate from the new CA, and no
/// webhook configuration's caBundle is emptied on the way (it used to be PATCHed to ""
/// before the Secret was recreated): it keeps the published ca.crt, which trusts the
/// certificate served afterwards.
#[tokio::test]
async fn ca_switch_due_while_the_secret_is_deleted_never_empties_the_ca_bundle() {
    // 350 of the CA's 3650 days left, under the 425 that start a rotation: the bootstrap
    // introduces the next CA (phase 1).
    let ca = ca_issued(now() - time::Duration::days(3300));
    let old = TlsMaterial::issued_by(&ca, &leaf_issued(&ca, now(), 300));
    let metrics = metrics();
    let overlap = Duration::from_secs(2);
    let mut config = config_with_validating();
    config.poll_interval = Duration::from_millis(20);
    config.ca_overlap = overlap;
    let (task, mut api) = bootstrapping(config, metrics.clone());
    let mut configs = WebhookConfigs::publishing(&old.ca_crt);

    secret_holds(&mut api, &old, "1").await;
    let put = api.expect_secret_replace(NS, SECRET).await;
    assert_eq!(data(&put.body, TLS_CRT), old.tls_crt, "phase 1 keeps the certificate");
    let published = data(&put.body, CA_CRT);
    let next_ca_key = String::from_utf8(data(&put.body, NEXT_CA_KEY)).unwrap();
    let next_ca = CertificateDer::pem_slice_iter(&published)
        .map(|der| tls::inspect_cert(&der.unwrap()).unwrap())
        .find(|ca| ca.public_key == tls::public_key_of(&next_ca_key).unwrap())
        .expect("ca.crt carries the next CA");
    let switch_at = next_ca.not_before + tls::CLOCK_SKEW + overlap;
    put.echo_at(200, "2");
    // Both configurations are read and patched to the two-CA bundle.
    for _ in 0..4 {
        if let Some(other) = configs.answer(api.next().await) {
            panic!(
                "expected a webhook configuration call, found {} {}",
                other.method, other.path
            );
        }
    }
    let (bootstrap, store) = finished(task).await;
    assert_eq!(configs.bundles(), [&published; 3], "phase 1 is published");
    assert_eq!(served(&store), leaf_der(&old.tls_crt));

    let stop = CancellationToken::new();
    let running = tokio::spawn(bootstrap.run(store.clone(), stop.clone()));
    let poll = api.expect_secret_get(NS, SECRET).await;
    // Waiting, not a timing assertion: the loop decides after this read is answered.
    while now() < switch_at {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The Secret was deleted just as the switch fell due.
    poll.reply_not_found();
    let post = configs.until_other(&mut api).await;
    assert_eq!(
        (&post.method, post.path.as_str()),
        (&Method::POST, secrets(NS).as_str()),
        "{}",
        post.body
    );
    assert_eq!(data(&post.body, CA_CRT), published, "the caBundle stays what it is");
    assert_eq!(
        tls::public_key_of(&String::from_utf8(data(&post.body, CA_KEY)).unwrap()).unwrap(),
        next_ca.public_key,
        "the next CA signs now"
    );
    let switched = data(&post.body, TLS_CRT);
    assert_ne!(switched, old.tls_crt, "switched to a certificate from the next CA");
    post.echo_at(201, "3");

    // The next poll: the recreated Secret's certificate is served, trusted by every caBundle.
    let poll = configs.until_other(&mut api).await;
    assert_eq!(
        (&poll.method, poll.path.as_str()),
        (&Method::GET, secret(NS, SECRET).as_str())
    );
    assert_eq!(served(&store), leaf_der(&switched));
    for bundle in configs.bundles() {
        assert_serves_service(bundle, &switched);
    }
    assert_eq!(reloads(&metrics, LoadResult::Error), 0);

    stop.cancel();
    finished(running).await;
    poll.reply_not_found();
    api.assert_no_more_requests().await;
}

/// A cluster nobody listens on: `serve` checks its self-managed TLS flags before it
/// makes any request, so it never dials this.
const KUBECONFIG_NOWHERE: &str = "apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: nowhere
  context:
    cluster: nowhere
    user: nobody
current-context: nowhere
users:
- name: nobody
  user: {}
";

/// The binary maps the `serve` flags onto the bootstrap configuration and refuses a bad
/// one, naming the flag (the mapping itself is unit-tested next to it, in `serve`).
#[test]
fn serve_refuses_a_bad_renewal_period_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, KUBECONFIG_NOWHERE).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_envoy-injector"))
        .args(["serve", "--namespace", "ns", "--cert-renew-before-days", "400"])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run envoy-injector serve");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{err}");
    assert!(
        err.contains("--cert-renew-before-days") && err.contains("found 400"),
        "{err}"
    );
}
