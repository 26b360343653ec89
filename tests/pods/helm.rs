//! Tier `helm`: the chart as platform teams run it, with the real Helm v4 engine
//! (`scripts/helm.py`, PyPI's helm-python-sdk) on the cluster with a node. The installation
//! of the other tiers is removed first with `make undeploy`; then:
//!
//! - the chart is packaged, pushed to an OCI registry started on this machine (Debian's
//!   `docker-registry`, plain HTTP on loopback) and installed from there, in policy mode,
//!   with `E2E_IMAGE` and the stand-in template: an opted-in Pod runs with the sidecar;
//! - an upgrade that changes the template: the next Pod gets the new revision through both
//!   paths, the compiled admission policy (the webhook is not called) and the webhook
//!   (the template's MutatingAdmissionPolicyBinding deleted, as when policies are missing);
//! - a rollback to the first revision: the old template again, through both paths;
//! - `helm uninstall`: within 60 s no admission policy, binding or webhook configuration of
//!   ours is left, an opted-in Pod is stored as written, and the CRD stays (Helm keeps it);
//! - installed again with `tls.mode: secret` (a Secret of ours, made by `envoy-injector
//!   certs`, and its CA): the webhook is reached with that CA, and the injector wrote into
//!   neither webhook configuration (no field of theirs is its) nor the Secret.
//!
//! Without `docker-registry` the chart is installed from its directory and the OCI part is
//! skipped, loudly (under CI it fails: `.ci/run` installs it).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envoy_injector::inject::{REVISION_LABEL, revision_label_value};
use envoy_injector::template::TemplateSet;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::common::helm::{self, Engine, chart_dir};
use crate::common::kubectl::in_ci;
use crate::common::metrics::metric_sum;
use crate::common::process::{Admin, Process};
use crate::node::*;
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "helm",
    run: |suite| Box::pin(run(suite)),
};

const RELEASE: &str = "envoy-injector";
/// The compiled policy an annotated Pod meets (one for every template), and its binding.
const ANNOTATED: &str = "envoy-injector-inject-annotated";
/// The annotation of a mutating policy: the templates it holds, with their revisions.
const TEMPLATES: &str = "sidecar.samplecrd.k8s.io/templates";
const ADMIN_PORT: u16 = 9090;
/// What the issue promises after `helm uninstall`.
const GONE_WITHIN: Duration = Duration::from_secs(60);
/// The env var the upgraded template adds to the sidecar.
const GENERATION_ENV: &str = "TEMPLATE_GENERATION";

async fn run(suite: &Suite) -> TierResult {
    ready_node(&suite.client).await?;
    let images = Images::from_env();
    let helm = helm::engine("tier helm")?;
    require_kubectl()?;
    let client = &suite.client;

    // The other tiers' installation goes first, in make undeploy's order.
    let _ = helm.run(&["uninstall", RELEASE, "-n", INJECTOR_NAMESPACE, "--wait", "60"]);
    let out = make(&["undeploy"]).await;
    assert!(out.status.success(), "expected `make undeploy` to remove the manifests/ installation, found {}", describe_output(&out));
    namespace_gone(client).await;
    create_release_namespace(client).await;
    step!("make undeploy: the manifests/ installation removed; namespace {INJECTOR_NAMESPACE} created with its labels");

    let (repository, tag) = images.injector.rsplit_once(':').expect("E2E_IMAGE has a tag");
    let v1 = stand_in_template(&images.shell);
    let v2 = v1.replacen(
        "  imagePullPolicy: IfNotPresent\n",
        &format!("  imagePullPolicy: IfNotPresent\n  env:\n  - name: {GENERATION_ENV}\n    value: \"2\"\n"),
        1,
    );
    assert_ne!(v1, v2, "the upgraded template differs");
    let values = |template: &str| {
        json!({"image": {"repository": repository, "tag": tag}, "injection": "policy", "templates": {"config": template}})
            .to_string()
    };
    let registry = Registry::start();
    let chart = ChartSource::publish(&helm, registry.as_ref());
    let scope = Scope::new(suite.settings.mode);
    let apps = TestNs::create(client, &scope, "helm", &[]).await;

    // Install.
    let started = Instant::now();
    let mut install = vec!["install", chart.reference.as_str(), RELEASE, "-n", INJECTOR_NAMESPACE, "--wait", "180"];
    install.extend(chart.flags());
    let with_v1 = values(&v1);
    install.extend(["--set-json", &with_v1]);
    let release = helm.run(&install).unwrap_or_else(|e| panic!("expected `helm install` to succeed, found: {e}"));
    assert_eq!((&release["revision"], &release["status"]), (&json!(1), &json!("deployed")), "{release}");
    let installed = started.elapsed();
    let r1 = revision_of(&v1);
    in_step(client, &r1).await;
    let first = through_the_policy(&apps, &images, "installed", &r1, false).await;
    let name = first.metadata.name.clone().unwrap_or_default();
    wait_for("the opted-in Pod to run with the sidecar", RUN_PATIENCE, async || {
        running(&apps.pods.get(&name).await.map_err(|e| api_error(&e))?, &["app", SIDECAR])
    })
    .await;
    step!("helm install from {}: rolled out in {:.1} s; Pod {name} runs with `{SIDECAR}` at revision {r1}", chart.shown, installed.as_secs_f64());

    // Upgrade to a changed template: the next Pod gets it through both paths.
    let mut upgrade = vec!["upgrade", chart.reference.as_str(), RELEASE, "-n", INJECTOR_NAMESPACE, "--wait", "180"];
    upgrade.extend(chart.flags());
    let with_v2 = values(&v2);
    upgrade.extend(["--set-json", &with_v2]);
    let release = helm.run(&upgrade).unwrap_or_else(|e| panic!("expected `helm upgrade` to succeed, found: {e}"));
    assert_eq!(release["revision"], 2, "{release}");
    let r2 = revision_of(&v2);
    in_step(client, &r2).await;
    through_the_policy(&apps, &images, "upgraded-policy", &r2, true).await;
    through_the_webhook(&apps, &images, "upgraded-webhook", &r2, true).await;
    step!("helm upgrade: revision {r2} injected by the admission policy and by the webhook");

    // Rollback: the first revision's template again, through both paths.
    let rollback = helm
        .run(&["rollback", RELEASE, "-n", INJECTOR_NAMESPACE, "--revision", "1", "--wait", "180"])
        .unwrap_or_else(|e| panic!("expected `helm rollback` to succeed, found: {e}"));
    assert_eq!(rollback["revision"], 3, "a rollback is a new revision: {rollback}");
    in_step(client, &r1).await;
    through_the_policy(&apps, &images, "rolled-back-policy", &r1, false).await;
    through_the_webhook(&apps, &images, "rolled-back-webhook", &r1, false).await;
    step!("helm rollback to 1: revision {r1} injected by the admission policy and by the webhook again");

    // Uninstall: nothing that acts on Pods is left.
    let started = Instant::now();
    helm.run(&["uninstall", RELEASE, "-n", INJECTOR_NAMESPACE, "--wait", "120"])
        .unwrap_or_else(|e| panic!("expected `helm uninstall` to succeed, found: {e}"));
    let uninstalled = started.elapsed();
    let gone = nothing_left(client).await;
    let after = apps.create_stored(&app_pod("after-uninstall", &[(INJECT, "true")], &images)).await;
    let containers: Vec<&str> = after.spec.iter().flat_map(|s| s.containers.iter().map(|c| c.name.as_str())).collect();
    assert!(
        containers == ["app"] && annotation(&after, STATUS).is_none() && label(&after, REVISION_LABEL).is_none(),
        "expected an opted-in Pod created after `helm uninstall` stored as written, found {}",
        describe_pod(&after)
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(
        crds.get_opt("networks.samplecrd.k8s.io").await.ok().flatten().is_some(),
        "Helm keeps the CRDs it installed from crds/"
    );
    step!(
        "helm uninstall ({:.1} s): no policy, binding or webhook configuration {:.1} s later; an opted-in Pod stored as written; the CRD kept",
        uninstalled.as_secs_f64(),
        gone.as_secs_f64()
    );

    existing_secret_writes_nothing(&helm, &chart, &apps, &images, &values(&v1), &r1).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(INJECTOR_NAMESPACE, &DeleteParams::default()).await;
    namespace_gone(client).await;
    Ok(format!(
        "install {:.1} s from {}, uninstall {:.1} s, all gone {:.1} s later",
        installed.as_secs_f64(),
        chart.shown,
        uninstalled.as_secs_f64(),
        gone.as_secs_f64()
    ))
}

/// The revision label a Pod injected with `template` as `config` carries.
fn revision_of(template: &str) -> String {
    let data = std::collections::BTreeMap::from([("config".to_string(), template.to_string())]);
    let set = TemplateSet::from_data("tier helm", &data, envoy_injector::template::KubeVersion::NEWEST).expect("the tier's template parses");
    let template = set.get("config").expect("config");
    revision_label_value(&template.revision).expect("a revision label").to_string()
}

async fn namespace_gone(client: &kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait_for(&format!("namespace {INJECTOR_NAMESPACE} to be gone"), RUN_PATIENCE, async || {
        match namespaces.get_opt(INJECTOR_NAMESPACE).await.map_err(|e| api_error(&e))? {
            Some(_) => Err("still there".to_string()),
            None => Ok(()),
        }
    })
    .await;
}

/// The release namespace with the labels docs/install.md gives it by hand (Helm does not
/// own it).
async fn create_release_namespace(client: &kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = namespace_object(
        INJECTOR_NAMESPACE,
        &[
            ("sidecar.samplecrd.k8s.io/inject", "disabled"),
            ("pod-security.kubernetes.io/enforce", "restricted"),
            ("pod-security.kubernetes.io/enforce-version", "latest"),
        ],
    );
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("expected to create namespace {INJECTOR_NAMESPACE}, found: {}", api_error(&e)));
}

/// Waits until the Lease holder has compiled template `config` at `revision` into the
/// policy an annotated Pod meets, its binding in place, owned by the
/// ValidatingWebhookConfiguration.
async fn in_step(client: &kube::Client, revision: &str) {
    let policies: Api<MutatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<MutatingAdmissionPolicyBinding> = Api::all(client.clone());
    let owners: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    wait_for(&format!("the admission policy of `config` at revision {revision}"), RUN_PATIENCE, async || {
        let owner = owners.get(INJECTOR_NAME).await.map_err(|e| api_error(&e))?.metadata.uid;
        let policy = policies.get_opt(ANNOTATED).await.map_err(|e| api_error(&e))?.ok_or("no policy yet")?;
        let held: std::collections::BTreeMap<String, String> = policy
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TEMPLATES))
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default();
        let found = held.get("config").and_then(|r| revision_label_value(r)).map(str::to_string);
        let owned = policy.metadata.owner_references.iter().flatten().any(|o| Some(&o.uid) == owner.as_ref());
        let bound = bindings.get_opt(ANNOTATED).await.map_err(|e| api_error(&e))?.is_some();
        if found.as_deref() == Some(revision) && owned && bound {
            Ok(())
        } else {
            Err(format!("revision {found:?}, owned {owned}, bound {bound}"))
        }
    })
    .await;
}

/// `envoy_injector_injections_total` summed over the injector's live Pods (their admin port
/// on the node's Pod network).
async fn webhook_injections(client: &kube::Client) -> Result<f64, String> {
    let mut total = 0.0;
    for pod in Installation::new(client).live_pods().await {
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).ok_or("an injector Pod without an IP")?;
        let addr: SocketAddr = format!("{ip}:{ADMIN_PORT}").parse().map_err(|e| format!("{ip}: {e}"))?;
        total += metric_sum(&Admin::new(addr, PATIENCE).metrics().await?, "envoy_injector_injections_total", &[]);
    }
    Ok(total)
}

/// Checks that `pod` carries the sidecar at `revision`, with the upgraded template's env
/// exactly when `upgraded`.
fn injected_at(pod: &Pod, revision: &str, upgraded: bool) -> Result<(), String> {
    let sidecar = container(pod, SIDECAR).ok_or_else(|| format!("no `{SIDECAR}`: {}", describe_pod(pod)))?;
    let found = label(pod, REVISION_LABEL);
    let has_env = env_value(sidecar, GENERATION_ENV).is_some();
    if found == Some(revision) && has_env == upgraded {
        Ok(())
    } else {
        Err(format!("revision {found:?} (want {revision}), {GENERATION_ENV} set: {has_env}"))
    }
}

/// An opted-in Pod injected by the compiled policy: at `revision`, the webhook not called.
/// The API server takes a moment to run a policy it has just stored: a Pod injected with
/// the one before is deleted and another made.
async fn through_the_policy(apps: &TestNs, images: &Images, name: &str, revision: &str, upgraded: bool) -> Pod {
    let mut attempt = 0;
    let stored = wait_for(&format!("Pod {name} injected by the policy at {revision}"), PATIENCE, async || {
        attempt += 1;
        let before = webhook_injections(&apps.client).await?;
        let pod = app_pod(&format!("{name}-{attempt}"), &[(INJECT, "true")], images);
        let stored = apps.create_pod(&pod, false).await.map_err(|e| api_error(&e))?;
        let by_webhook = webhook_injections(&apps.client).await? != before;
        match injected_at(&stored, revision, upgraded) {
            Ok(()) if !by_webhook => Ok(stored),
            outcome => {
                let _ = apps.pods.delete(pod.metadata.name.as_deref().unwrap_or_default(), &DeleteParams::default()).await;
                Err(format!("by the webhook: {by_webhook}, {outcome:?}"))
            }
        }
    })
    .await;
    step!(
        "Pod {}: revision {revision} from the admission policy (attempt {attempt}), the webhook not called",
        stored.metadata.name.as_deref().unwrap_or_default()
    );
    stored
}

/// An opted-in Pod injected by the webhook: the template's MutatingAdmissionPolicyBinding
/// deleted first (as when the policies are missing); at `revision`, the webhook's count up.
/// The Lease holder puts the binding back at its next pass.
async fn through_the_webhook(apps: &TestNs, images: &Images, name: &str, revision: &str, upgraded: bool) {
    let bindings: Api<MutatingAdmissionPolicyBinding> = Api::all(apps.client.clone());
    bindings
        .delete(ANNOTATED, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("expected to delete MutatingAdmissionPolicyBinding {ANNOTATED}, found: {}", api_error(&e)));
    let before = webhook_injections(&apps.client).await.unwrap_or_else(|e| panic!("{e}"));
    let mut attempt = 0;
    // The API server may take a moment to drop the binding, and a replica to reload: a Pod
    // the policy still injected, or with the older template, is deleted and made again.
    wait_for(&format!("Pod {name} injected by the webhook at {revision}"), PATIENCE, async || {
        attempt += 1;
        let pod = app_pod(&format!("{name}-{attempt}"), &[(INJECT, "true")], images);
        let stored = apps.create_pod(&pod, false).await.map_err(|e| api_error(&e))?;
        let injected = webhook_injections(&apps.client).await? > before;
        match (injected, injected_at(&stored, revision, upgraded)) {
            (true, Ok(())) => {
                step!("Pod {name}-{attempt}: revision {revision} from the webhook (its injection count up)");
                Ok(())
            }
            (by_webhook, outcome) => {
                let _ = apps.pods.delete(pod.metadata.name.as_deref().unwrap_or_default(), &DeleteParams::default()).await;
                Err(format!("by the webhook: {by_webhook}, {outcome:?}"))
            }
        }
    })
    .await;
}

/// `tls.mode: secret`: installed with a Secret of ours (`envoy-injector certs`) and its CA,
/// in webhook mode: an opted-in Pod is injected through the webhook (the API server trusts
/// the given CA), and no field of either webhook configuration, nor of the Secret, is the
/// injector's (field manager `envoy-injector`): it writes into no object GitOps would own.
async fn existing_secret_writes_nothing(helm: &Engine, chart: &ChartSource, apps: &TestNs, images: &Images, values: &str, revision: &str) {
    const SECRET: &str = "my-webhook-tls";
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_envoy-injector"))
        .args(["certs", "--service", INJECTOR_NAME, "--namespace", INJECTOR_NAMESPACE, "--out-dir"])
        .arg(dir.path())
        .output()
        .expect("envoy-injector certs runs");
    assert!(out.status.success(), "expected `envoy-injector certs` to write the certificates, found {}", describe_output(&out));
    let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(apps.client.clone(), INJECTOR_NAMESPACE);
    let secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": SECRET, "namespace": INJECTOR_NAMESPACE},
        "data": {"tls.crt": base64(&read("tls.crt")), "tls.key": base64(&read("tls.key"))},
    }))
    .expect("a Secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("expected to create Secret {SECRET}, found: {}", api_error(&e)));
    let ca = base64(&read("ca.crt"));
    let mut values: serde_json::Value = serde_json::from_str(values).expect("the tier's values");
    values["injection"] = json!("webhook");
    values["tls"] = json!({"mode": "secret", "secret": {"name": SECRET, "caBundle": ca}});
    let values = values.to_string();
    let mut install = vec!["install", chart.reference.as_str(), RELEASE, "-n", INJECTOR_NAMESPACE, "--wait", "180"];
    install.extend(chart.flags());
    install.extend(["--set-json", &values]);
    helm.run(&install)
        .unwrap_or_else(|e| panic!("expected `helm install` with tls.mode secret to succeed, found: {e}"));

    let mut attempt = 0;
    // Until the node's proxy has the endpoints, a create fails calling the webhook.
    wait_for("an opted-in Pod injected through the webhook, which serves the given certificate", RUN_PATIENCE, async || {
        attempt += 1;
        let pod = app_pod(&format!("secret-mode-{attempt}"), &[(INJECT, "true")], images);
        let stored = apps.create_pod(&pod, false).await.map_err(|e| api_error(&e))?;
        injected_at(&stored, revision, false)
    })
    .await;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(apps.client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(apps.client.clone());
    let mutating = mutating.get(INJECTOR_NAME).await.unwrap_or_else(|e| panic!("{}", api_error(&e)));
    let validating = validating.get(INJECTOR_NAME).await.unwrap_or_else(|e| panic!("{}", api_error(&e)));
    let bundles: Vec<Option<String>> = mutating
        .webhooks
        .iter()
        .flatten()
        .map(|w| w.client_config.ca_bundle.as_ref().map(|b| base64(&b.0)))
        .chain(validating.webhooks.iter().flatten().map(|w| w.client_config.ca_bundle.as_ref().map(|b| base64(&b.0))))
        .collect();
    let expected = mutating.webhooks.as_ref().map_or(0, Vec::len) + validating.webhooks.as_ref().map_or(0, Vec::len);
    assert!(
        expected >= 2 && bundles.len() == expected && bundles.iter().all(|b| b.as_deref() == Some(ca.as_str())),
        "expected every webhook of both configurations to trust the given CA, found caBundles {bundles:?}"
    );
    let stored_secret = secrets.get(SECRET).await.unwrap_or_else(|e| panic!("{}", api_error(&e)));
    for (what, meta) in [
        ("MutatingWebhookConfiguration", &mutating.metadata),
        ("ValidatingWebhookConfiguration", &validating.metadata),
        ("Secret", &stored_secret.metadata),
    ] {
        let managers: Vec<&str> = meta.managed_fields.iter().flatten().filter_map(|m| m.manager.as_deref()).collect();
        assert!(
            !managers.contains(&INJECTOR_NAME),
            "expected the injector to write nothing into {what} {} with tls.mode secret, found field managers {managers:?}",
            meta.name.as_deref().unwrap_or_default()
        );
    }
    helm.run(&["uninstall", RELEASE, "-n", INJECTOR_NAMESPACE, "--wait", "120"])
        .unwrap_or_else(|e| panic!("expected `helm uninstall` to succeed, found: {e}"));
    step!("tls.mode secret: a Pod injected through the webhook with the given CA (attempt {attempt}); the injector wrote into neither webhook configuration nor the Secret");
}

/// Waits until no admission policy, binding or webhook configuration of ours is left;
/// returns how long that took.
async fn nothing_left(client: &kube::Client) -> Duration {
    let started = Instant::now();
    wait_for("no admission policy, binding or webhook configuration of ours left", GONE_WITHIN, async || {
        let left = acting_on_pods(client, INJECTOR_NAME).await?;
        if left.is_empty() { Ok(()) } else { Err(format!("left: {left:?}")) }
    })
    .await;
    started.elapsed()
}

/// An OCI registry on loopback: Debian's `docker-registry`, storing into a temporary
/// directory, stopped with the tier.
struct Registry {
    addr: SocketAddr,
    _process: Process,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// `None` (said loudly) where `docker-registry` is not installed; under CI that fails.
    fn start() -> Option<Registry> {
        let Some(bin) = find_on_path("docker-registry") else {
            assert!(!in_ci(), "tier helm pushes the chart to an OCI registry: `apt-get install docker-registry` (.ci/run does)");
            shout("SKIPPED tier helm's OCI part: docker-registry is not installed (`apt-get install docker-registry`); the chart is installed from its directory");
            return None;
        };
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()).expect("a free port").port();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            ),
        )
        .expect("the registry's configuration");
        let process = Process::spawn(&bin, &["serve".into(), config.into()], &[], &dir.path().join("registry.log"))
            .unwrap_or_else(|e| panic!("expected docker-registry to start: {e}"));
        let deadline = Instant::now() + PATIENCE;
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "expected docker-registry to listen on {addr}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(Registry {
            addr,
            _process: process,
            _dir: dir,
        })
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Where the release installs from: the OCI reference the chart was pushed to, or its
/// directory.
struct ChartSource {
    reference: String,
    version: Option<String>,
    shown: String,
}

impl ChartSource {
    /// Packages the chart (as `make chart` does), pushes it to `registry` and pulls it back
    /// to check it is there; without a registry, the chart's directory.
    fn publish(helm: &Engine, registry: Option<&Registry>) -> ChartSource {
        let Some(registry) = registry else {
            let dir = chart_dir().display().to_string();
            return ChartSource { shown: dir.clone(), reference: dir, version: None };
        };
        let out = tempfile::tempdir().expect("a temporary directory");
        let packaged = helm
            .run(&["package", &chart_dir().display().to_string(), &out.path().display().to_string()])
            .unwrap_or_else(|e| panic!("expected the chart to package, found: {e}"));
        let archive = packaged["archive"].as_str().expect("the archive's path").to_string();
        let version = archive_version(Path::new(&archive));
        let remote = format!("oci://{}/charts", registry.addr);
        helm.run(&["push", &archive, &remote, "--plain-http"])
            .unwrap_or_else(|e| panic!("expected `helm push {archive} {remote}` to succeed, found: {e}"));
        let reference = format!("{remote}/envoy-injector");
        let pulled = out.path().join("pulled");
        helm.run(&["pull", &reference, "--version", &version, &pulled.display().to_string(), "--plain-http"])
            .unwrap_or_else(|e| panic!("expected `helm pull {reference}` to succeed, found: {e}"));
        assert!(
            pulled.join(format!("envoy-injector-{version}.tgz")).is_file(),
            "expected the pulled archive in {}",
            pulled.display()
        );
        step!("chart packaged, pushed to {reference}:{version} and pulled back");
        ChartSource { shown: format!("{reference}:{version}"), reference, version: Some(version) }
    }

    /// The flags an install or upgrade from this source needs.
    fn flags(&self) -> Vec<&str> {
        match &self.version {
            Some(version) => vec!["--version", version, "--plain-http"],
            None => Vec::new(),
        }
    }
}

/// `1.2.3` of `.../envoy-injector-1.2.3.tgz`.
fn archive_version(archive: &Path) -> String {
    let name = archive.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.strip_prefix("envoy-injector-")
        .and_then(|n| n.strip_suffix(".tgz"))
        .unwrap_or_else(|| panic!("expected envoy-injector-VERSION.tgz, found {name}"))
        .to_string()
}
