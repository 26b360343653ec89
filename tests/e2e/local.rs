//! Tier `local`: `serve` on this machine behind a `url:` webhook registered for the test
//! namespace only (`--network-backend none`, no leader election), checked through the
//! Kubernetes API: the Network controller (seed example, CEL refusals, overlap, finalizer),
//! admission (opt-in, plain Pod untouched, network join and its denials, namespace label,
//! opt-out, hot reload, an invalid template edit), and with `E2E_RUN_PODS=1` Pods that run.
//!
//! With `E2E_MODE=in-cluster` (`make e2e`) the same steps check the copy `make deploy`
//! installed instead, through its Service and the shipped webhook configuration: nothing is
//! started or registered; the Deployment must be Available and its webhook configuration's
//! `caBundle` filled in by the binary; the deployed ConfigMap's `config` is replaced by a
//! test template and put back at the end, also when a step fails. The controller steps
//! expect what the deployed backend can do: with `--network-backend multus` and no
//! NetworkAttachmentDefinition CRD, Networks must report `BackendUnavailable` and the steps
//! that need a Ready Network are skipped loudly (`make e2e E2E_MULTUS=1` installs Multus on
//! kind first). Two replicas follow the same watches a moment apart, so admission checks
//! after a change must pass several times in a row.
//!
//! `E2E_WEBHOOK_HOST` is where the API server reaches this machine: 127.0.0.1 (the default
//! when the API server is on loopback itself), or for kind on Linux the gateway of the
//! `kind` docker network (`make e2e-local` looks it up). The webhook listens on that address
//! when it is an IP, on all addresses otherwise.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::common::crd::{self, NAD_CRD};
use crate::common::process::{ANY_LOOPBACK_PORT, listen_args};
use crate::support::*;

pub const TIER: Tier = Tier {
    name: "local",
    run: |suite| Box::pin(run(suite)),
};

const CONFIGMAP: &str = "envoy-injector";
const SEED_NETWORK: &str = "example-network";
const SEED_CIDR: &str = "192.168.0.0/16";
const SEED_GATEWAY: &str = "192.168.0.1";
const MULTUS: &str = "k8s.v1.cni.cncf.io/networks";
const SIDECAR_V1: &str = "e2e-sidecar";
const SIDECAR_V2: &str = "e2e-sidecar-v2";
/// The name in the rejected template: it must never reach a Pod.
const SIDECAR_BAD: &str = "e2e-sidecar-bad";
/// The misspelt field of the rejected template; the Event on the ConfigMap must name it.
const BAD_FIELD: &str = "imagee";
/// Two Networks that overlap: the later one must report `Overlaps`.
const OVERLAP_A: (&str, &str, &str) = ("e2e-net-a", "10.50.0.0/16", "10.50.0.1");
const OVERLAP_B: (&str, &str, &str) = ("e2e-net-b", "10.50.1.0/24", "10.50.1.1");
/// Networks the suite never creates.
const MISSING_NETWORK: &str = "e2e-missing-net";
/// What Multus writes on a Pod: its interfaces and their IPs.
const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
/// Pod-template annotation that makes the test Deployment roll out again.
const ROLLOUT: &str = "e2e.samplecrd.k8s.io/rollout";
/// Bound for Pods to start (images may need pulling): a safety limit, not an expectation.
const RUN_PATIENCE: Duration = Duration::from_secs(180);

/// The value of `--network-backend` in a container's args (`multus`, the default, if absent).
fn network_backend_arg(args: &[String]) -> String {
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if let Some(value) = arg.strip_prefix("--network-backend=") {
            return value.to_string();
        }
        if arg == "--network-backend" {
            return iter.next().cloned().unwrap_or_default();
        }
    }
    "multus".to_string()
}

/// What changes when an Event is recorded again: its object, count and times.
fn event_fingerprint(event: &Event) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {:?}",
        event.metadata.name,
        event.count,
        event.last_timestamp.as_ref().map(|t| t.0.to_string()),
        event.event_time.as_ref().map(|t| t.0.to_string()),
        event
            .series
            .as_ref()
            .map(|s| (s.count, s.last_observed_time.as_ref().map(|t| t.0.to_string()))),
    )
}

/// Runs everywhere, no cluster needed: what the cluster steps send is well-formed for the
/// API types, the repository manifests are the ones the steps expect, and the test
/// templates are accepted (or, the bad one, refused naming its field) by the real parser
/// through `envoy-injector inject`. A cluster run then fails only on the cluster's answers.
#[test]
fn cluster_inputs_are_well_formed() {
    let url = format!("https://{}/mutate", host_port("172.18.0.1", 8443));
    let config = webhook_configuration("envoy-injector-e2e-x", "ei-e2e-x", &url, b"PEM BYTES");
    let hooks = config.webhooks.as_deref().unwrap_or_default();
    assert_eq!(hooks.len(), 1, "{config:?}");
    let hook = &hooks[0];
    assert_eq!(
        hook.client_config.url.as_deref(),
        Some("https://172.18.0.1:8443/mutate")
    );
    assert_eq!(
        hook.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()),
        Some(&b"PEM BYTES"[..])
    );
    assert_eq!(
        (
            hook.failure_policy.as_deref(),
            hook.side_effects.as_str(),
            hook.reinvocation_policy.as_deref()
        ),
        (Some("Fail"), "None", Some("IfNeeded"))
    );
    assert_eq!(
        (hook.timeout_seconds, hook.admission_review_versions.as_slice()),
        (Some(5), &["v1".to_string()][..])
    );
    let selector = hook.namespace_selector.as_ref().and_then(|s| s.match_labels.as_ref());
    assert_eq!(
        selector
            .and_then(|l| l.get("kubernetes.io/metadata.name"))
            .map(String::as_str),
        Some("ei-e2e-x")
    );
    let rule = &hook.rules.as_deref().unwrap_or_default()[0];
    assert_eq!(
        (rule.operations.as_deref(), rule.resources.as_deref()),
        (Some(&["CREATE".to_string()][..]), Some(&["pods".to_string()][..]))
    );
    assert_eq!(host_port("fd00::1", 8443), "[fd00::1]:8443");

    assert_eq!(namespace_object("ei-e2e-x", &[]).metadata.name.as_deref(), Some("ei-e2e-x"));
    assert_eq!(
        service_account_object("default").metadata.name.as_deref(),
        Some("default")
    );
    let cm = configmap_object(CONFIGMAP, "containers: []\n");
    assert_eq!(
        cm.data.unwrap_or_default().get("config").map(String::as_str),
        Some("containers: []\n")
    );
    let net = network(OVERLAP_A.0, OVERLAP_A.1, OVERLAP_A.2);
    assert_eq!(net.data["spec"], json!({ "cidr": OVERLAP_A.1, "gateway": OVERLAP_A.2 }));
    assert_eq!(
        read_manifest("manifests/crd.yaml")["metadata"]["name"],
        "networks.samplecrd.k8s.io"
    );
    let seed = read_manifest("manifests/examples/example-network.yaml");
    assert_eq!(seed["metadata"]["name"], SEED_NETWORK);
    assert_eq!(seed["spec"], json!({ "cidr": SEED_CIDR, "gateway": SEED_GATEWAY }));

    let dir = tempfile::tempdir().expect("temporary directory");
    let pod_file = dir.path().join("pod.json");
    let opted_in = pod("e2e-offline", &[(INJECT, "true")], DEFAULT_IMAGE);
    std::fs::write(&pod_file, serde_json::to_vec(&opted_in).expect("Pod JSON")).expect("write the Pod");
    let inject = |template_text: &str| {
        let template_file = dir.path().join("template.yaml");
        std::fs::write(&template_file, template_text).expect("write the template");
        std::process::Command::new(env!("CARGO_BIN_EXE_envoy-injector"))
            .args(["inject", "-o", "json", "-f"])
            .arg(&pod_file)
            .arg("--config")
            .arg(&template_file)
            .output()
            .expect("run envoy-injector inject")
    };
    for sidecar in [SIDECAR_V1, SIDECAR_V2] {
        let output = inject(&template(sidecar, DEFAULT_IMAGE));
        assert!(
            output.status.success(),
            "expected the test template ({sidecar}) to be accepted, found {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let injected: Pod = serde_json::from_slice(&output.stdout).expect("inject -o json prints the Pod");
        let found = container(&injected, sidecar).and_then(|c| c.image.as_deref());
        assert_eq!(found, Some(DEFAULT_IMAGE), "{}", describe_pod(&injected));
    }
    let output = inject(&bad_template(DEFAULT_IMAGE));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains(BAD_FIELD),
        "expected the bad test template to be refused naming `{BAD_FIELD}`, found {}: {stderr}",
        output.status
    );
}

/// Runs everywhere: the in-cluster mode's inputs and parsers.
#[test]
fn in_cluster_inputs_are_well_formed() {
    assert_eq!(Mode::parse(None), Ok(Mode::Local));
    assert_eq!(Mode::parse(Some("local")), Ok(Mode::Local));
    assert_eq!(Mode::parse(Some(" in-cluster ")), Ok(Mode::InCluster));
    assert!(Mode::parse(Some("incluster")).unwrap_err().contains("in-cluster"));

    let args = |list: &[&str]| list.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    assert_eq!(network_backend_arg(&args(&["serve", "--log-format", "json"])), "multus");
    assert_eq!(
        network_backend_arg(&args(&["serve", "--network-backend", "none"])),
        "none"
    );
    assert_eq!(network_backend_arg(&args(&["serve", "--network-backend=none"])), "none");

    // The shipped Deployment is what the in-cluster mode reads its backend from.
    let shipped = read_manifest("manifests/deployment.yaml");
    assert_eq!(shipped["metadata"]["name"], INJECTOR_NAME);
    assert_eq!(shipped["metadata"]["namespace"], INJECTOR_NAMESPACE);
    let shipped: Deployment = serde_json::from_value(shipped).expect("manifests/deployment.yaml is a Deployment");
    let shipped_args = shipped
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].args.clone().unwrap_or_default());
    assert_eq!(network_backend_arg(&shipped_args.unwrap_or_default()), "multus");

    assert_eq!(ip_in_cidr("192.168.3.4", SEED_CIDR), Some(true));
    assert_eq!(ip_in_cidr("192.168.3.4/16", SEED_CIDR), Some(true));
    assert_eq!(ip_in_cidr("10.244.0.5", SEED_CIDR), Some(false));
    assert_eq!(ip_in_cidr("192.169.0.1", SEED_CIDR), Some(false));
    assert_eq!(ip_in_cidr("0.0.0.1", "0.0.0.0/0"), Some(true));
    assert_eq!(ip_in_cidr("fd00::5", "fd00::/64"), Some(true));
    assert_eq!(ip_in_cidr("fd01::5", "fd00::/64"), Some(false));
    assert_eq!(ip_in_cidr("fd00::5", SEED_CIDR), Some(false));
    assert_eq!(ip_in_cidr("nonsense", SEED_CIDR), None);

    // As Multus writes it: the cluster network first, then one entry per attachment.
    let status = r#"[
        {"name": "kindnet", "interface": "eth0", "ips": ["10.244.0.7"], "mac": "aa:bb:cc:dd:ee:01", "default": true, "dns": {}},
        {"name": "ei-e2e-x/example-network", "interface": "net1", "ips": ["192.168.0.2"], "mac": "aa:bb:cc:dd:ee:02", "dns": {}}
    ]"#;
    assert_eq!(
        attachment_ips(status, "ei-e2e-x", SEED_NETWORK),
        Ok(vec!["192.168.0.2".to_string()])
    );
    assert!(
        attachment_ips(status, "other", "net-x")
            .unwrap_err()
            .contains("other/net-x")
    );
    assert!(attachment_ips("not json", "ns", SEED_NETWORK).is_err());

    let web = deployment("e2e-web", 2, &[(INJECT, "true")], DEFAULT_IMAGE);
    let spec = web.spec.expect("a Deployment spec");
    assert_eq!(spec.replicas, Some(2));
    let template_meta = spec.template.metadata.expect("template metadata");
    assert_eq!(
        template_meta
            .annotations
            .unwrap_or_default()
            .get(INJECT)
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        spec.selector.match_labels, template_meta.labels,
        "the test Deployment's selector matches its template"
    );

    let pod_json = |phase: &str, running_names: &[&str]| -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": "p" },
            "status": {
                "phase": phase,
                "containerStatuses": running_names.iter().map(|n| json!({
                    "name": n, "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                    "state": { "running": {} },
                })).collect::<Vec<_>>(),
            },
        }))
        .expect("a Pod status")
    };
    assert_eq!(
        running(&pod_json("Running", &["app", SIDECAR_V2]), &["app", SIDECAR_V2]),
        Ok(())
    );
    assert!(running(&pod_json("Running", &["app"]), &["app", SIDECAR_V2]).is_err());
    assert!(
        running(&pod_json("Pending", &[]), &["app"])
            .unwrap_err()
            .contains("Pending")
    );

    let event = |count: i32| -> Event {
        serde_json::from_value(json!({
            "metadata": { "name": "envoy-injector.1" },
            "involvedObject": { "kind": "ConfigMap", "name": CONFIGMAP },
            "count": count,
        }))
        .expect("an Event")
    };
    assert_eq!(event_fingerprint(&event(1)), event_fingerprint(&event(1)));
    assert_ne!(event_fingerprint(&event(1)), event_fingerprint(&event(2)));
}

/// The rejected template: a misspelt container field.
fn bad_template(image: &str) -> String {
    format!("containers:\n- name: {SIDECAR_BAD}\n  {BAD_FIELD}: {image}\n")
}

async fn run(suite: &Suite) -> TierResult {
    let settings = &suite.settings;
    if settings.mode == Mode::Local {
        warn_if_deployed(&suite.client).await;
    }
    // Declared first, so it is dropped last: after the process has stopped.
    let scope = Scope::new(settings.mode);
    let space = TestNs::create(&suite.client, &scope, "local", &[]).await;
    let ns = space.name.clone();
    let mut ctx = Ctx::new(suite, space, &scope);
    let webhook = match settings.mode {
        Mode::Local => {
            ctx.install_crd().await;
            ctx.create_configmap(&template(SIDECAR_V1, &settings.sidecar_image))
                .await;
            let host = settings.webhook_host.as_deref().unwrap_or("127.0.0.1");
            Some(ctx.start_server(host).await)
        }
        Mode::InCluster => {
            ctx.deployed_copy_is_ready().await;
            ctx.take_over_template(&template(SIDECAR_V1, &settings.sidecar_image))
                .await;
            None
        }
    };

    ctx.seed_network_reconciled().await;
    ctx.invalid_specs_are_refused().await;
    ctx.overlap_is_reported().await;

    let mut done = vec!["controller"];
    let admission = match (settings.mode, &settings.webhook_host, &webhook) {
        (Mode::InCluster, _, _) => {
            ctx.deployed_webhook_injects().await;
            true
        }
        (Mode::Local, Some(host), Some(webhook)) => {
            ctx.register_webhook(host, webhook).await;
            true
        }
        (Mode::Local, _, _) => {
            shout(&format!(
                "SKIPPED e2e admission steps: E2E_WEBHOOK_HOST is not set, so the API server cannot reach the \
                 webhook. Set it to this machine's address as seen from the API server (kind on Linux: the \
                 `kind` docker network gateway; a local API server: 127.0.0.1, the default then). \
                 Controller steps still run in namespace {ns}."
            ));
            false
        }
    };
    let mut joined = false;
    if admission {
        ctx.opted_in_and_plain_pods().await;
        joined = ctx.network_join().await;
        ctx.namespace_label_opt_in().await;
        ctx.hot_reload().await;
        done.push("admission");
    }
    let live_sidecar = admission.then_some(SIDECAR_V2);
    ctx.invalid_template_edit(live_sidecar).await;
    if ctx.running_tier_enabled(admission).await
        && let Some(sidecar) = live_sidecar
    {
        ctx.injected_pod_runs(sidecar).await;
        ctx.deployment_rollout_is_injected(sidecar).await;
        done.push("running pods");
        if ctx.multus_tier_enabled().await {
            ctx.network_pod_gets_an_interface().await;
            joined = true;
            done.push("multus interface");
        }
    }
    ctx.networks_deleted_through_finalizer(joined).await;
    drop(ctx);
    Ok(done.join(", "))
}

/// Loud warning when the product is also deployed in the cluster (see the module docs).
async fn warn_if_deployed(client: &Client) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), INJECTOR_NAMESPACE);
    if let Ok(Some(_)) = deployments.get_opt(INJECTOR_NAME).await {
        shout(
            "WARNING e2e: Deployment envoy-injector/envoy-injector exists in this cluster; its controller and \
             webhook also act on the test namespace and may make these checks fail. Run `make undeploy` first, \
             or check the deployed copy with `make e2e-incluster` (E2E_MODE=in-cluster).",
        );
    }
}

/// What the Network controller under test can do with a valid Network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// `none`, or `multus` with the NetworkAttachmentDefinition CRD installed: Ready=True.
    Ready { multus: bool },
    /// `multus` without the NAD CRD: Ready=False, reason BackendUnavailable.
    Unavailable,
}

struct Webhook {
    port: u16,
    ca_pem: Vec<u8>,
}

struct Ctx<'a> {
    suite: &'a Suite,
    client: Client,
    /// The test namespace: Pods, Networks, the local mode's ConfigMap.
    space: TestNs,
    ns: String,
    /// Where the `envoy-injector` ConfigMap is: `ns` (local) or the deployed copy's namespace.
    config_ns: String,
    settings: &'a Settings,
    scope: &'a Scope,
    configmaps: Api<ConfigMap>,
    /// Events in `config_ns` (about the ConfigMap).
    config_events: Api<Event>,
    /// Local mode: the `serve` process. Dropped (stopped) with the context, before the scope.
    server: Option<Injector>,
    /// What a valid Network turns into (in-cluster: read from the Deployment and the cluster).
    backend: Backend,
    /// How many dry runs in a row must pass after a change: with several replicas the API
    /// server may ask any of them, and each follows the watch on its own.
    in_a_row: usize,
}

impl<'a> Ctx<'a> {
    fn new(suite: &'a Suite, space: TestNs, scope: &'a Scope) -> Ctx<'a> {
        let settings = &suite.settings;
        let config_ns = match settings.mode {
            Mode::Local => space.name.clone(),
            Mode::InCluster => settings.injector_namespace.clone(),
        };
        let client = suite.client.clone();
        Ctx {
            configmaps: Api::namespaced(client.clone(), &config_ns),
            config_events: Api::namespaced(client.clone(), &config_ns),
            client,
            ns: space.name.clone(),
            space,
            config_ns,
            suite,
            settings,
            scope,
            server: None,
            // Local mode runs `serve --network-backend none`.
            backend: Backend::Ready { multus: false },
            in_a_row: match settings.mode {
                Mode::Local => 1,
                Mode::InCluster => 4,
            },
        }
    }

    /// [`wait_for`]: bounded, and failing at once when `serve` died.
    async fn eventually<T>(&self, what: &str, patience: Duration, probe: impl AsyncFnMut() -> Result<T, String>) -> T {
        wait_for(what, patience, probe).await
    }

    // ---- set-up -------------------------------------------------------------------------

    /// Step: the CRD from `manifests/crd.yaml` applies (server-side) and is served.
    async fn install_crd(&self) {
        self.suite.install_network_crd().await;
    }

    async fn create_configmap(&self, config: &str) {
        let cm = configmap_object(CONFIGMAP, config);
        self.configmaps
            .create(&PostParams::default(), &cm)
            .await
            .unwrap_or_else(|e| panic!("expected to create ConfigMap {CONFIGMAP}, found: {}", api_error(&e)));
    }

    async fn set_template(&self, config: &str) {
        let patch = json!({ "data": { "config": config } });
        self.configmaps
            .patch(CONFIGMAP, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("expected to update ConfigMap {CONFIGMAP}, found: {}", api_error(&e)));
    }

    /// Step: `envoy-injector certs` for `host`, then `serve` in cluster mode on `host` (all
    /// addresses when it is a name, or not one of this machine's) at a free port; it turns
    /// ready (caches synced, template loaded).
    async fn start_server(&mut self, host: &str) -> Webhook {
        let bin = env!("CARGO_BIN_EXE_envoy-injector");
        let dir = temp_dir("envoy-injector-e2e");
        let certs = dir.path().join("certs");
        let output = std::process::Command::new(bin)
            .args(["certs", "--service", "envoy-injector", "--namespace", &self.ns, "--out-dir"])
            .arg(&certs)
            .args(["--san", host])
            .output()
            .expect("run envoy-injector certs");
        assert!(
            output.status.success(),
            "expected `envoy-injector certs --san {host}` to succeed, found {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let ca_pem = std::fs::read(certs.join("ca.crt")).expect("certs wrote ca.crt");
        let listen = match std::net::TcpListener::bind((host, 0)) {
            Ok(_) => host,
            Err(_) => "0.0.0.0",
        };
        let mut args: Vec<std::ffi::OsString> = [
            "serve",
            "--namespace",
            &self.ns,
            "--network-backend",
            "none",
            "--leader-elect",
            "false",
            "--log-format",
            "json",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.extend(listen_args(
            &host_port(listen, 0),
            ANY_LOOPBACK_PORT,
            &certs.join("tls.crt"),
            &certs.join("tls.key"),
        ));
        let server = Injector::spawn("serve", args, Vec::new(), dir).await;
        let port = server.webhook.port();
        server.wait_ready().await;
        self.server = Some(server);
        Webhook { port, ca_pem }
    }

    /// Local: `/readyz` of the `serve` child. In-cluster: every replica of the Deployment
    /// Ready (their readiness probe is `/readyz`).
    async fn readyz(&self) -> Result<(), String> {
        match &self.server {
            Some(server) => server.readyz().await,
            None => self.deployment_ready().await.map(drop),
        }
    }

    // ---- in-cluster set-up --------------------------------------------------------------

    fn injector_deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.settings.injector_namespace)
    }

    /// `Ok(Deployment)` when the deployed copy is rolled out: current generation observed,
    /// every replica updated, Ready and Available; `Err` says what is missing.
    async fn deployment_ready(&self) -> Result<Deployment, String> {
        let ns = &self.settings.injector_namespace;
        let deployment = self
            .injector_deployments()
            .get_opt(INJECTOR_NAME)
            .await
            .map_err(|e| api_error(&e))?
            .ok_or_else(|| format!("no Deployment {ns}/{INJECTOR_NAME}: run `make deploy` first"))?;
        let wanted = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let status = deployment.status.clone().unwrap_or_default();
        let available = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Available" && c.status == "True");
        let observed =
            status.observed_generation.is_some() && status.observed_generation == deployment.metadata.generation;
        let counts = (
            status.replicas.unwrap_or(0),
            status.updated_replicas.unwrap_or(0),
            status.ready_replicas.unwrap_or(0),
            status.available_replicas.unwrap_or(0),
        );
        if available && observed && counts == (wanted, wanted, wanted, wanted) {
            Ok(deployment)
        } else {
            Err(format!(
                "Deployment {ns}/{INJECTOR_NAME}: want {wanted} replicas; (replicas, updated, ready, available) = \
                 {counts:?}, Available={available}, generation observed={observed}, conditions {:?}",
                status
                    .conditions
                    .iter()
                    .flatten()
                    .map(|c| format!("{}={} {}", c.type_, c.status, c.message.as_deref().unwrap_or("")))
                    .collect::<Vec<_>>()
            ))
        }
    }

    /// Step (in-cluster): the Deployment is rolled out, its webhook configuration carries the
    /// CA the binary wrote, the CRD is served; and what the deployed backend can do.
    async fn deployed_copy_is_ready(&mut self) {
        let ns = self.settings.injector_namespace.clone();
        let deployment = self
            .eventually(
                &format!("Deployment {ns}/{INJECTOR_NAME} to be Available with every replica Ready (make deploy)"),
                Duration::from_secs(180),
                async || self.deployment_ready().await,
            )
            .await;
        step!("Deployment {ns}/{INJECTOR_NAME} Available");

        let configs: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let what = format!(
            "MutatingWebhookConfiguration {INJECTOR_NAME} with a caBundle in every webhook (written by the binary)"
        );
        let hooks = self
            .eventually(&what, Duration::from_secs(90), async || {
                let config = configs
                    .get_opt(INJECTOR_NAME)
                    .await
                    .map_err(|e| api_error(&e))?
                    .ok_or_else(|| {
                        format!("no MutatingWebhookConfiguration {INJECTOR_NAME}: run `make deploy` first")
                    })?;
                let hooks = config.webhooks.unwrap_or_default();
                let empty: Vec<&str> = hooks
                    .iter()
                    .filter(|h| h.client_config.ca_bundle.as_ref().is_none_or(|b| b.0.is_empty()))
                    .map(|h| h.name.as_str())
                    .collect();
                if hooks.is_empty() || !empty.is_empty() {
                    return Err(format!("webhooks without a caBundle: {empty:?} (of {})", hooks.len()));
                }
                Ok(hooks.iter().map(|h| h.name.clone()).collect::<Vec<_>>())
            })
            .await;
        step!("webhooks {hooks:?} carry a caBundle");

        self.suite.network_crd_served("networks.samplecrd.k8s.io").await;

        let args = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.args.clone())
            .unwrap_or_default();
        let backend = network_backend_arg(&args);
        self.backend = if backend == "none" {
            Backend::Ready { multus: false }
        } else {
            match crd::installed(&self.client, NAD_CRD).await {
                Ok(true) => Backend::Ready { multus: true },
                Ok(false) => Backend::Unavailable,
                Err(e) => panic!("{e}"),
            }
        };
        step!(
            "deployed network backend `{backend}`: Networks expected {:?}",
            self.backend
        );
        if self.backend == Backend::Unavailable {
            shout(&format!(
                "NOTE e2e: CRD {NAD_CRD} is not installed, so the deployed multus backend cannot realise \
                 Networks: they must report BackendUnavailable, and the steps that need a Ready Network are \
                 SKIPPED. Install Multus (`make e2e E2E_MULTUS=1` on kind) to run them."
            ));
        }
    }

    /// Step (in-cluster): the deployed ConfigMap's `config` becomes the test template; the
    /// original is put back by the cleanup, whatever happens.
    async fn take_over_template(&self, config: &str) {
        let ns = &self.config_ns;
        let current = self
            .configmaps
            .get_opt(CONFIGMAP)
            .await
            .unwrap_or_else(|e| panic!("expected to read ConfigMap {ns}/{CONFIGMAP}, found: {}", api_error(&e)))
            .unwrap_or_else(|| {
                panic!("expected ConfigMap {ns}/{CONFIGMAP} of the deployed copy: run `make deploy` first")
            });
        let original = current.data.unwrap_or_default().get("config").cloned();
        self.scope.restore_template(ns, CONFIGMAP, original);
        self.set_template(config).await;
        step!("ConfigMap {ns}/{CONFIGMAP}: `config` replaced by the test template (restored at the end)");
    }

    /// Step (in-cluster): the API server calls the deployed webhook through its Service and
    /// the shipped configuration, and the test template is live on every replica asked.
    async fn deployed_webhook_injects(&self) {
        let probe = pod("e2e-probe", &[(INJECT, "true")], &self.settings.app_image);
        let what = format!(
            "the deployed webhook (Service {}/{INJECTOR_NAME}) to inject `{SIDECAR_V1}` into an opted-in Pod",
            self.settings.injector_namespace
        );
        self.eventually_admitted(&what, &probe, |p| {
            container(p, SIDECAR_V1)
                .map(drop)
                .ok_or(format!("no container {SIDECAR_V1}"))
        })
        .await;
        step!("the deployed webhook injects the test template");
    }

    // ---- controller ---------------------------------------------------------------------

    async fn network(&self, name: &str) -> Result<DynamicObject, String> {
        self.space.network(name).await
    }

    async fn events_about(&self, kind: &str, name: &str) -> Result<Vec<Event>, String> {
        self.space.events_about(kind, name).await
    }

    /// Events about the `envoy-injector` ConfigMap (in `config_ns`).
    async fn configmap_events(&self) -> Result<Vec<Event>, String> {
        list_events_about(&self.config_events, "ConfigMap", CONFIGMAP).await
    }

    /// Whether a reconciled Network has the Ready condition the backend calls for:
    /// Ready=True, or (multus without the NAD CRD) Ready=False reason BackendUnavailable.
    fn reconciled_as_expected(&self, obj: &DynamicObject) -> bool {
        let observed = obj.data["status"]["observedGeneration"].as_i64();
        let current = observed.is_some() && observed == obj.metadata.generation;
        current
            && ready_condition(obj).is_some_and(|c| match self.backend {
                Backend::Ready { .. } => c["status"] == "True",
                Backend::Unavailable => c["status"] == "False" && c["reason"] == "BackendUnavailable",
            })
    }

    /// Step: the seed example applies unchanged; Ready=True for the current generation,
    /// finalizer in place, no Pods attached, and an Event about it. (Multus backend without
    /// the NAD CRD: Ready=False BackendUnavailable for the current generation instead.)
    async fn seed_network_reconciled(&self) {
        let seed = read_manifest("manifests/examples/example-network.yaml");
        assert_eq!(seed["metadata"]["name"], SEED_NETWORK, "the seed example's name");
        assert_eq!(
            seed["spec"],
            json!({ "cidr": SEED_CIDR, "gateway": SEED_GATEWAY }),
            "the seed example's spec"
        );
        self.space.networks
            .patch(SEED_NETWORK, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&seed))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "expected manifests/examples/example-network.yaml to apply unchanged, found: {}",
                    api_error(&e)
                )
            });
        let expected = match self.backend {
            Backend::Ready { .. } => "Ready=True",
            Backend::Unavailable => "Ready=False reason BackendUnavailable",
        };
        let what = format!("Network {SEED_NETWORK} {expected} with status.observedGeneration == metadata.generation");
        let obj = self
            .eventually(&what, PATIENCE, async || {
                let obj = self.network(SEED_NETWORK).await?;
                if self.reconciled_as_expected(&obj) {
                    Ok(obj)
                } else {
                    Err(network_summary(&obj))
                }
            })
            .await;
        assert!(
            obj.finalizers().iter().any(|f| f == FINALIZER),
            "expected finalizer {FINALIZER} on a reconciled Network, found: {}",
            network_summary(&obj)
        );
        if self.backend == Backend::Unavailable {
            let message = ready_condition(&obj)
                .map(|c| c["message"].to_string())
                .unwrap_or_default();
            step!("Network {SEED_NETWORK} reports BackendUnavailable: {message}");
            return;
        }
        let ready = ready_condition(&obj).expect("checked above");
        assert_eq!(
            ready["reason"],
            "Ready",
            "expected Ready=True to have reason Ready, found: {}",
            network_summary(&obj)
        );
        assert_eq!(
            obj.data["status"]["attachedPods"],
            json!(0),
            "expected status.attachedPods 0 before any Pod joined, found: {}",
            network_summary(&obj)
        );
        let events = self
            .eventually(
                &format!("an Event about Network {SEED_NETWORK}"),
                PATIENCE,
                async || {
                    let events = self.events_about("Network", SEED_NETWORK).await?;
                    if events.is_empty() {
                        Err("no Events about it".to_string())
                    } else {
                        Ok(events)
                    }
                },
            )
            .await;
        let reasons: Vec<&str> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
        step!(
            "Network {SEED_NETWORK} Ready (generation {:?}), Events {reasons:?}",
            obj.metadata.generation
        );
    }

    /// Step: CEL in the CRD refuses a gateway outside the cidr and a malformed cidr at create.
    async fn invalid_specs_are_refused(&self) {
        let cases = [
            ("e2e-bad-gateway", "10.10.0.0/16", "10.20.0.1", "gateway"),
            ("e2e-bad-cidr", "10.10.0.0/33", "10.10.0.1", "cidr"),
        ];
        for (name, cidr, gateway, field) in cases {
            match self
                .space
                .networks
                .create(&PostParams::default(), &network(name, cidr, gateway))
                .await
            {
                Ok(_) => panic!(
                    "expected the API server to refuse Network {name} (cidr {cidr}, gateway {gateway}), but it was created"
                ),
                Err(kube::Error::Api(status)) => {
                    assert!(
                        status.is_invalid() && status.message.contains(field),
                        "expected 422 Invalid naming `{field}` for Network {name} (cidr {cidr}, gateway {gateway}), \
                         found HTTP {} {}: {}",
                        status.code,
                        status.reason,
                        status.message
                    );
                    step!("refused {name}: {}", status.message);
                }
                Err(e) => panic!("expected a 422 for Network {name}, found: {}", api_error(&e)),
            }
        }
    }

    /// Step: two overlapping Networks in one namespace: the later reports Ready=False Overlaps.
    async fn overlap_is_reported(&self) {
        for (name, cidr, gateway) in [OVERLAP_A, OVERLAP_B] {
            self.space.networks
                .create(&PostParams::default(), &network(name, cidr, gateway))
                .await
                .unwrap_or_else(|e| panic!("expected to create Network {name}, found: {}", api_error(&e)));
            if name == OVERLAP_A.0 {
                // Reconciled first, so B is unambiguously the newcomer.
                self.eventually(
                    &format!("Network {name} reconciled ({:?})", self.backend),
                    PATIENCE,
                    async || {
                        let obj = self.network(name).await?;
                        if self.reconciled_as_expected(&obj) {
                            Ok(())
                        } else {
                            Err(network_summary(&obj))
                        }
                    },
                )
                .await;
            }
        }
        let (b, b_cidr, _) = OVERLAP_B;
        let what = format!(
            "Network {b} ({b_cidr}, inside {}) Ready=False reason Overlaps",
            OVERLAP_A.1
        );
        let message = self
            .eventually(&what, PATIENCE, async || {
                let obj = self.network(b).await?;
                match ready_condition(&obj) {
                    Some(c) if c["status"] == "False" && c["reason"] == "Overlaps" => {
                        Ok(c["message"].as_str().unwrap_or_default().to_string())
                    }
                    _ => Err(network_summary(&obj)),
                }
            })
            .await;
        step!("Network {b} reports Overlaps: {message}");
    }

    /// Step: when every Network is deleted, each one disappears: the controller removed its
    /// finalizer. Member Pods go first, and the count drops back to 0.
    async fn networks_deleted_through_finalizer(&self, joined: bool) {
        self.space.pods
            .delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("expected to delete the test Pods, found: {}", api_error(&e)));
        if joined {
            // Back to 0 once its Pod is deleted.
            self.space.attached_pods(SEED_NETWORK, 0).await;
        }
        let names = [SEED_NETWORK, OVERLAP_A.0, OVERLAP_B.0];
        for name in names {
            let obj = self
                .network(name)
                .await
                .unwrap_or_else(|found| panic!("expected Network {name} before deleting it, found: {found}"));
            assert!(
                obj.finalizers().iter().any(|f| f == FINALIZER),
                "expected finalizer {FINALIZER} on Network {name} before deletion, found: {}",
                network_summary(&obj)
            );
            self.space.networks
                .delete(name, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("expected to delete Network {name}, found: {}", api_error(&e)));
        }
        self.eventually(
            "every deleted Network to disappear (finalizer removed by the controller)",
            PATIENCE,
            async || {
                let mut left = Vec::new();
                for name in names {
                    match self.space.networks.get_opt(name).await {
                        Ok(None) => {}
                        Ok(Some(obj)) => left.push(network_summary(&obj)),
                        Err(e) => left.push(format!("{name}: {}", api_error(&e))),
                    }
                }
                if left.is_empty() { Ok(()) } else { Err(left.join("; ")) }
            },
        )
        .await;
        step!("Networks {names:?} deleted through the finalizer");
    }

    // ---- admission ----------------------------------------------------------------------

    /// Registers the webhook for Pod CREATE in the test namespace only, then waits until the
    /// API server actually calls it (dry-run creates, which persist nothing).
    async fn register_webhook(&self, host: &str, webhook: &Webhook) {
        let name = format!("envoy-injector-e2e-{}", self.ns.trim_start_matches("ei-e2e-"));
        let url = format!("https://{}/mutate", host_port(host, webhook.port));
        let config = webhook_configuration(&name, &self.ns, &url, &webhook.ca_pem);
        let configs: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        configs
            .create(&PostParams::default(), &config)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "expected to create MutatingWebhookConfiguration {name}, found: {}",
                    api_error(&e)
                )
            });
        self.scope
            .delete_later(ApiResource::erase::<MutatingWebhookConfiguration>(&()), None, &name);
        step!("registered MutatingWebhookConfiguration {name} -> {url}");

        let probe = pod("e2e-probe", &[(INJECT, "true")], &self.settings.app_image);
        let what = format!(
            "the API server to call {url} and inject `{SIDECAR_V1}` (if this times out with a connection error, \
             E2E_WEBHOOK_HOST={host} is not reachable from the API server: check the address and the host firewall)"
        );
        self.eventually(&what, Duration::from_secs(60), async || {
            let admitted = self.space.create_pod(&probe, true).await.map_err(|e| api_error(&e))?;
            if container(&admitted, SIDECAR_V1).is_some() {
                Ok(())
            } else {
                Err(describe_pod(&admitted))
            }
        })
        .await;
    }

    /// Dry-run creates of `pod` until `check` passes `self.in_a_row` times in a row (caches
    /// and reloads are eventually consistent, on every replica), bounded.
    async fn eventually_admitted(&self, what: &str, pod: &Pod, check: impl Fn(&Pod) -> Result<(), String>) {
        let streak = std::cell::Cell::new(0usize);
        self.eventually(what, PATIENCE, async || {
            let outcome = match self.space.create_pod(pod, true).await {
                Ok(admitted) => check(&admitted).map_err(|e| format!("{e}; {}", describe_pod(&admitted))),
                Err(e) => Err(format!("create refused: {}", api_error(&e))),
            };
            match outcome {
                Ok(()) => {
                    streak.set(streak.get() + 1);
                    if streak.get() >= self.in_a_row {
                        Ok(())
                    } else {
                        Err(format!("passed {} of {} times in a row", streak.get(), self.in_a_row))
                    }
                }
                Err(e) => {
                    streak.set(0);
                    Err(e)
                }
            }
        })
        .await;
    }

    /// A create the webhook must deny with a message naming `needle`.
    async fn expect_denied(&self, pod: &Pod, needle: &str) -> String {
        let name = pod.metadata.name.clone().unwrap_or_default();
        match self.space.create_pod(pod, false).await {
            Ok(admitted) => {
                let _ = self.space.pods.delete(&name, &DeleteParams::default().grace_period(0)).await;
                panic!(
                    "expected Pod {name} to be denied with a message naming `{needle}`, but it was admitted: {}",
                    describe_pod(&admitted)
                )
            }
            Err(kube::Error::Api(status)) => {
                assert!(
                    status.message.contains(needle),
                    "expected the denial of Pod {name} to name `{needle}`, found HTTP {} {}: {}",
                    status.code,
                    status.reason,
                    status.message
                );
                status.message
            }
            Err(e) => panic!(
                "expected Pod {name} to be denied by the webhook, found: {}",
                api_error(&e)
            ),
        }
    }

    /// Step: an opted-in Pod is stored with the sidecar and the status annotation; a plain
    /// Pod (no annotations at all) is stored untouched although the webhook is called.
    async fn opted_in_and_plain_pods(&self) {
        let image = &self.settings.app_image;
        let stored = self
            .space
            .create_stored(&pod("e2e-opted-in", &[(INJECT, "true")], image))
            .await;
        let sidecar = container(&stored, SIDECAR_V1).unwrap_or_else(|| {
            panic!(
                "expected container {SIDECAR_V1} in the stored Pod, found: {}",
                describe_pod(&stored)
            )
        });
        assert_eq!(
            sidecar.image.as_deref(),
            Some(self.settings.sidecar_image.as_str()),
            "expected the template's image on {SIDECAR_V1}, found: {}",
            describe_pod(&stored)
        );
        let status = annotation(&stored, STATUS).unwrap_or_else(|| {
            panic!(
                "expected annotation {STATUS} on the stored Pod, found: {}",
                describe_pod(&stored)
            )
        });
        let parsed: Value = serde_json::from_str(status)
            .unwrap_or_else(|e| panic!("expected annotation {STATUS} to be JSON, found {status:?}: {e}"));
        assert!(
            parsed.is_object() && status.contains(SIDECAR_V1),
            "expected annotation {STATUS} to be a JSON object naming {SIDECAR_V1}, found {status}"
        );
        let app_count = stored
            .spec
            .as_ref()
            .map_or(0, |s| s.containers.iter().filter(|c| c.name == "app").count());
        assert_eq!(
            app_count,
            1,
            "expected the app container once, found: {}",
            describe_pod(&stored)
        );
        step!("opted-in Pod stored with {SIDECAR_V1} and {STATUS}: {status}");

        let stored = self.space.create_stored(&pod("e2e-plain", &[], image)).await;
        let spec = stored.spec.as_ref().expect("a stored Pod has a spec");
        let untouched = spec.containers.iter().map(|c| c.name.as_str()).eq(["app"])
            && spec.init_containers.as_ref().is_none_or(Vec::is_empty)
            && spec.volumes.as_ref().is_none_or(Vec::is_empty)
            && stored.metadata.annotations.as_ref().is_none_or(BTreeMap::is_empty)
            && stored.metadata.labels
                == Some(BTreeMap::from([(
                    "app.kubernetes.io/name".to_string(),
                    "e2e".to_string(),
                )]));
        assert!(
            untouched,
            "expected the plain Pod stored exactly as sent (container app, no annotations, label app.kubernetes.io/name=e2e), \
             found: {}",
            describe_pod(&stored)
        );
        step!("plain Pod stored untouched");
    }

    /// Step: a Pod joining the Ready seed Network gets the Multus annotation, the label and
    /// the env; the Network counts it; missing and not-Ready Networks are denied by name.
    /// Returns whether a Pod joined (not when the backend leaves every Network not Ready).
    async fn network_join(&self) -> bool {
        let image = &self.settings.app_image;
        let joined = match self.backend {
            Backend::Ready { .. } => {
                self.join_seed_network().await;
                true
            }
            Backend::Unavailable => {
                shout(&format!(
                    "SKIPPED e2e step: a Pod joining {SEED_NETWORK} (the deployed backend cannot make it Ready: \
                     {NAD_CRD} is not installed); a Pod naming it must be denied instead"
                ));
                let denied = pod(
                    "e2e-join-unavailable",
                    &[(INJECT, "true"), (NETWORK, SEED_NETWORK)],
                    image,
                );
                let message = self.expect_denied(&denied, SEED_NETWORK).await;
                step!("Pod naming the BackendUnavailable Network denied: {message}");
                false
            }
        };
        self.denials_by_network_name().await;
        joined
    }

    async fn join_seed_network(&self) {
        let image = &self.settings.app_image;
        let joining = pod("e2e-join", &[(INJECT, "true"), (NETWORK, SEED_NETWORK)], image);
        let joined = |p: &Pod| -> Result<(), String> {
            let sidecar = container(p, SIDECAR_V1).ok_or(format!("no container {SIDECAR_V1}"))?;
            let cidr = env_value(sidecar, "NETWORK_CIDR");
            let gateway = env_value(sidecar, "NETWORK_GATEWAY");
            if cidr != Some(SEED_CIDR) || gateway != Some(SEED_GATEWAY) {
                return Err(format!(
                    "expected NETWORK_CIDR={SEED_CIDR} NETWORK_GATEWAY={SEED_GATEWAY} in {SIDECAR_V1}, found {cidr:?} {gateway:?}"
                ));
            }
            if !annotation(p, MULTUS).is_some_and(|v| v.contains(SEED_NETWORK)) {
                return Err(format!("expected annotation {MULTUS} containing {SEED_NETWORK}"));
            }
            if label(p, NETWORK) != Some(SEED_NETWORK) {
                return Err(format!("expected label {NETWORK}={SEED_NETWORK}"));
            }
            Ok(())
        };
        // The webhook's cache follows the Network's status by watch: let it catch up.
        self.eventually_admitted(
            &format!("a Pod joining {SEED_NETWORK} to be admitted joined"),
            &joining,
            joined,
        )
        .await;
        let stored = self.space.create_stored(&joining).await;
        if let Err(e) = joined(&stored) {
            panic!("stored Pod e2e-join: {e}; {}", describe_pod(&stored));
        }
        step!(
            "Pod joined {SEED_NETWORK}: {MULTUS}={:?}",
            annotation(&stored, MULTUS).unwrap_or_default()
        );
        self.space.attached_pods(SEED_NETWORK, 1).await;
    }

    async fn denials_by_network_name(&self) {
        let image = &self.settings.app_image;
        let missing = pod(
            "e2e-join-missing",
            &[(INJECT, "true"), (NETWORK, MISSING_NETWORK)],
            image,
        );
        let message = self.expect_denied(&missing, MISSING_NETWORK).await;
        step!("Pod naming a missing Network denied: {message}");
        let not_ready = pod("e2e-join-not-ready", &[(INJECT, "true"), (NETWORK, OVERLAP_B.0)], image);
        let message = self.expect_denied(&not_ready, OVERLAP_B.0).await;
        step!("Pod naming a not-Ready Network denied: {message}");
    }

    /// Step: the namespace label opts every Pod in; `inject: "false"` still opts out.
    async fn namespace_label_opt_in(&self) {
        let image = &self.settings.app_image;
        let bare = pod("e2e-ns-label", &[], image);
        self.space.set_label(NAMESPACE_OPT_IN.0, json!(NAMESPACE_OPT_IN.1)).await;
        let what = format!("a Pod without annotations to be injected once the namespace has {INJECT}=enabled");
        self.eventually_admitted(&what, &bare, |p| {
            container(p, SIDECAR_V1)
                .map(drop)
                .ok_or(format!("no container {SIDECAR_V1}"))
        })
        .await;
        let opted_out = self
            .space
            .create_pod(&pod("e2e-opt-out", &[(INJECT, "false")], image), true)
            .await
            .unwrap_or_else(|e| panic!("expected an opted-out Pod to be admitted, found: {}", api_error(&e)));
        assert!(
            container(&opted_out, SIDECAR_V1).is_none() && annotation(&opted_out, STATUS).is_none(),
            "expected `{INJECT}: \"false\"` to win over the namespace label, found: {}",
            describe_pod(&opted_out)
        );
        self.space.set_label(NAMESPACE_OPT_IN.0, Value::Null).await;
        let what = "a Pod without annotations to be left alone once the namespace label is removed";
        self.eventually_admitted(what, &bare, |p| match container(p, SIDECAR_V1) {
            None => Ok(()),
            Some(_) => Err(format!("container {SIDECAR_V1} was injected")),
        })
        .await;
        step!("namespace label opts in; the Pod annotation opts out");
    }

    /// Step: a ConfigMap edit is live for the next admission (bounded wait; time printed).
    async fn hot_reload(&self) {
        let start = Instant::now();
        self.set_template(&template(SIDECAR_V2, &self.settings.sidecar_image))
            .await;
        let opted_in = pod("e2e-reload", &[(INJECT, "true")], &self.settings.app_image);
        let what = format!("the edited template (container {SIDECAR_V2}) to be injected");
        self.eventually_admitted(&what, &opted_in, |p| {
            match (container(p, SIDECAR_V2).is_some(), container(p, SIDECAR_V1).is_some()) {
                (true, false) => Ok(()),
                _ => Err(format!("expected {SIDECAR_V2} and not {SIDECAR_V1}")),
            }
        })
        .await;
        let elapsed = start.elapsed();
        let stored = self.space.create_stored(&opted_in).await;
        assert!(
            container(&stored, SIDECAR_V2).is_some() && container(&stored, SIDECAR_V1).is_none(),
            "expected the stored Pod to carry {SIDECAR_V2} only, found: {}",
            describe_pod(&stored)
        );
        step!("template edit live after {elapsed:?} (bounded by {PATIENCE:?})");
    }

    /// Step: an invalid edit records an Event on the ConfigMap naming the error, readiness
    /// holds, and (with admission) the next Pod still gets the last good template.
    async fn invalid_template_edit(&self, live_sidecar: Option<&str>) {
        // A deployed copy's ConfigMap may carry such Events from earlier runs: only a new
        // Event, or a repeat of one (its count or time moves on), counts.
        let naming_bad_field = |e: &Event| e.message.as_deref().is_some_and(|m| m.contains(BAD_FIELD));
        let before: Vec<String> = self
            .configmap_events()
            .await
            .unwrap_or_else(|e| panic!("expected to list Events in {}, found: {e}", self.config_ns))
            .iter()
            .filter(|e| naming_bad_field(e))
            .map(event_fingerprint)
            .collect();
        self.set_template(&bad_template(&self.settings.sidecar_image)).await;
        let what = format!(
            "a new Event on ConfigMap {}/{CONFIGMAP} naming the unknown field `{BAD_FIELD}`",
            self.config_ns
        );
        let event = self
            .eventually(&what, PATIENCE, async || {
                let events = self.configmap_events().await?;
                events
                    .iter()
                    .find(|e| naming_bad_field(e) && !before.contains(&event_fingerprint(e)))
                    .cloned()
                    .ok_or_else(|| {
                        format!(
                            "Events about it: {:?}",
                            events
                                .iter()
                                .map(|e| format!("{:?} {:?}", e.reason, e.message))
                                .collect::<Vec<_>>()
                        )
                    })
            })
            .await;
        assert_eq!(
            event.type_.as_deref(),
            Some("Warning"),
            "expected the bad-template Event to be a Warning, found {event:?}"
        );
        step!(
            "bad template reported: {} {}",
            event.reason.as_deref().unwrap_or_default(),
            event.message.as_deref().unwrap_or_default()
        );
        if let Err(e) = self.readyz().await {
            panic!("expected /readyz to stay 200 with the last good template live, found {e}");
        }
        let Some(live) = live_sidecar else {
            return;
        };
        let stored = self
            .space
            .create_stored(&pod(
                "e2e-after-bad-edit",
                &[(INJECT, "true")],
                &self.settings.app_image,
            ))
            .await;
        assert!(
            container(&stored, live).is_some() && container(&stored, SIDECAR_BAD).is_none(),
            "expected the last good template ({live}) after the invalid edit, found: {}",
            describe_pod(&stored)
        );
        step!("next Pod still injected with the last good template ({live})");
    }

    // ---- second tier: Pods that run -----------------------------------------------------

    async fn running_tier_enabled(&self, admission: bool) -> bool {
        if !self.settings.run_pods {
            shout(
                "SKIPPED e2e running-Pod tier: set E2E_RUN_PODS=1 (and have nodes) to check that an injected Pod runs",
            );
            return false;
        }
        if !admission {
            shout("SKIPPED e2e running-Pod tier: it needs the admission steps, so set E2E_WEBHOOK_HOST too");
            return false;
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        match nodes.list(&ListParams::default().limit(1)).await {
            Ok(list) if !list.items.is_empty() => true,
            Ok(_) => {
                shout("SKIPPED e2e running-Pod tier: E2E_RUN_PODS=1 but the cluster has no nodes");
                false
            }
            Err(e) => panic!(
                "expected to list Nodes for the running-Pod tier, found: {}",
                api_error(&e)
            ),
        }
    }

    /// Step (tier 2): an opted-in Pod is scheduled and runs, its sidecar container running.
    async fn injected_pod_runs(&self, sidecar: &str) {
        let name = "e2e-running";
        self.space.create_stored(&pod(name, &[(INJECT, "true")], &self.settings.app_image))
            .await;
        self.pod_runs(name, &["app", sidecar]).await;
        step!("Pod {name} runs with its sidecar {sidecar}");
    }

    /// Waits until Pod `name` is Running with every container of `containers` running.
    async fn pod_runs(&self, name: &str, containers: &[&str]) -> Pod {
        let what = format!("Pod {name} Running with containers {containers:?} running (images may need pulling)");
        self.eventually(&what, RUN_PATIENCE, async || {
            let p = self.space.pods.get(name).await.map_err(|e| api_error(&e))?;
            match running(&p, containers) {
                Ok(()) => Ok(p),
                Err(e) => Err(format!("{e}; {}", self.pod_events(name).await)),
            }
        })
        .await
    }

    /// The Warning Events about a Pod, for failure messages (sandbox and pull errors).
    async fn pod_events(&self, name: &str) -> String {
        match self.events_about("Pod", name).await {
            Ok(events) => format!(
                "Warning Events {:?}",
                events
                    .iter()
                    .filter(|e| e.type_.as_deref() == Some("Warning"))
                    .map(|e| format!(
                        "{} {}",
                        e.reason.as_deref().unwrap_or_default(),
                        e.message.as_deref().unwrap_or_default()
                    ))
                    .collect::<Vec<_>>()
            ),
            Err(e) => format!("(Events unreadable: {e})"),
        }
    }

    /// Step (tier 2): a Deployment whose Pod template opts in rolls out with every Pod
    /// (created by a ReplicaSet, `generateName` only) injected and running; so does a second
    /// rollout of it.
    async fn deployment_rollout_is_injected(&self, sidecar: &str) {
        let name = "e2e-web";
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.ns);
        let web = deployment(name, 2, &[(INJECT, "true")], &self.settings.app_image);
        deployments
            .create(
                &PostParams {
                    dry_run: false,
                    field_manager: Some(FIELD_MANAGER.to_string()),
                },
                &web,
            )
            .await
            .unwrap_or_else(|e| panic!("expected to create Deployment {name}, found: {}", api_error(&e)));
        self.rollout_is_injected(&deployments, name, "1", sidecar).await;

        let patch = json!({ "spec": { "template": { "metadata": { "annotations": { ROLLOUT: "2" } } } } });
        deployments
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("expected to update Deployment {name}, found: {}", api_error(&e)));
        self.rollout_is_injected(&deployments, name, "2", sidecar).await;
    }

    /// Waits for the rollout of Deployment `name` to finish, then checks that each of its
    /// Pods of revision `revision` (the ROLLOUT annotation; "1" when absent) carries and
    /// runs `sidecar`.
    async fn rollout_is_injected(&self, deployments: &Api<Deployment>, name: &str, revision: &str, sidecar: &str) {
        let what =
            format!("Deployment {name} rollout {revision} complete (2 updated, available replicas, no old ones)");
        self.eventually(&what, RUN_PATIENCE, async || {
            let d = deployments.get(name).await.map_err(|e| api_error(&e))?;
            let status = d.status.clone().unwrap_or_default();
            let counts = (
                status.replicas.unwrap_or(0),
                status.updated_replicas.unwrap_or(0),
                status.available_replicas.unwrap_or(0),
            );
            let observed = status.observed_generation.is_some() && status.observed_generation == d.metadata.generation;
            if observed && counts == (2, 2, 2) {
                Ok(())
            } else {
                let pods = self.deployment_pods(name).await.unwrap_or_default();
                Err(format!(
                    "(replicas, updated, available) = {counts:?}, generation observed={observed}; Pods: {:?}",
                    pods.iter().map(describe_pod).collect::<Vec<_>>()
                ))
            }
        })
        .await;
        let pods: Vec<Pod> = self
            .deployment_pods(name)
            .await
            .unwrap_or_else(|e| panic!("expected to list the Pods of Deployment {name}, found: {e}"))
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| annotation(p, ROLLOUT).unwrap_or("1") == revision)
            .collect();
        assert_eq!(
            pods.len(),
            2,
            "expected 2 Pods of Deployment {name} rollout {revision}, found: {:?}",
            pods.iter().map(describe_pod).collect::<Vec<_>>()
        );
        for p in &pods {
            let pod_name = p.metadata.name.clone().unwrap_or_default();
            assert!(
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(&format!("{name}-")))
                    && container(p, sidecar).is_some()
                    && annotation(p, STATUS).is_some(),
                "expected Pod {pod_name} of Deployment {name} injected with {sidecar} and {STATUS}, found: {}",
                describe_pod(p)
            );
            if let Err(e) = running(p, &["app", sidecar]) {
                panic!("expected Pod {pod_name} of Deployment {name} running: {e}");
            }
        }
        step!(
            "Deployment {name} rollout {revision}: Pods {:?} injected with {sidecar} and running",
            pods.iter().filter_map(|p| p.metadata.name.clone()).collect::<Vec<_>>()
        );
    }

    async fn deployment_pods(&self, name: &str) -> Result<Vec<Pod>, String> {
        self.space.pods
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await
            .map(|list| list.items)
            .map_err(|e| api_error(&e))
    }

    /// Whether the Multus tier applies: in-cluster, multus backend, NAD CRD installed.
    async fn multus_tier_enabled(&self) -> bool {
        match (self.settings.mode, self.backend) {
            (Mode::InCluster, Backend::Ready { multus: true }) => true,
            (Mode::Local, _) => {
                shout(
                    "SKIPPED e2e Multus tier: local mode runs `serve --network-backend none`; `make e2e` \
                     (in-cluster) with Multus installed checks the interface",
                );
                false
            }
            _ => {
                shout(&format!(
                    "SKIPPED e2e Multus tier: the deployed copy has no multus backend, or {NAD_CRD} is not \
                     installed (`make e2e E2E_MULTUS=1` installs Multus on kind)"
                ));
                false
            }
        }
    }

    /// Step (tier 2, Multus): a Pod joining the seed Network runs, and Multus reports an
    /// interface for that Network with an address inside its CIDR.
    async fn network_pod_gets_an_interface(&self) {
        let name = "e2e-multus";
        let joining = pod(
            name,
            &[(INJECT, "true"), (NETWORK, SEED_NETWORK)],
            &self.settings.app_image,
        );
        self.space.create_stored(&joining).await;
        self.pod_runs(name, &["app", SIDECAR_V2]).await;
        let what = format!("Multus to report the {SEED_NETWORK} interface of Pod {name} in {NETWORK_STATUS}");
        let ips = self
            .eventually(&what, PATIENCE, async || {
                let p = self.space.pods.get(name).await.map_err(|e| api_error(&e))?;
                let status = annotation(&p, NETWORK_STATUS).ok_or_else(|| {
                    format!(
                        "no {NETWORK_STATUS} annotation (is Multus running?): {}",
                        describe_pod(&p)
                    )
                })?;
                let ips = attachment_ips(status, &self.ns, SEED_NETWORK)?;
                if ips.iter().any(|ip| ip_in_cidr(ip, SEED_CIDR) == Some(true)) {
                    Ok(ips)
                } else {
                    Err(format!(
                        "no address in {SEED_CIDR} among {ips:?}; {NETWORK_STATUS}={status}"
                    ))
                }
            })
            .await;
        step!("Pod {name} has an interface on {SEED_NETWORK} with {ips:?} (in {SEED_CIDR})");
    }
}
