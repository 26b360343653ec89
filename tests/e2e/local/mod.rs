//! Tier `local`: `serve` on this machine behind a `url:` webhook registered for the test
//! namespace only (`--network-backend none`, no leader election), checked through the
//! Kubernetes API: the Network controller (seed example, CEL refusals, overlaps within and
//! across namespaces, protection while Pods use a Network, finalizer),
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
//!
//! This file holds the order of the steps and their shared context ([`Ctx`]); the steps are
//! in files by capability: `setup.rs`, `controller.rs`, `admission.rs`, `running.rs` (Pods
//! that run, Multus); `inputs.rs` checks without a cluster what the steps send.

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
/// The example's addressing: inside 198.18.64.0/18, the range a test node accepts for
/// Networks (and no private range: the seed's 192.168.0.0/16 is never put on an interface).
const SEED_CIDR: &str = "198.18.72.0/24";
const SEED_GATEWAY: &str = "198.18.72.1";
const MULTUS: &str = "k8s.v1.cni.cncf.io/networks";
const SIDECAR_V1: &str = "e2e-sidecar";
const SIDECAR_V2: &str = "e2e-sidecar-v2";
/// The name in the rejected template: it must never reach a Pod.
const SIDECAR_BAD: &str = "e2e-sidecar-bad";
/// The misspelt field of the rejected template; the Event on the ConfigMap must name it.
const BAD_FIELD: &str = "imagee";
/// Two Networks that overlap: the later one must report `Overlaps`.
const OVERLAP_A: (&str, &str, &str) = ("e2e-net-a", "198.18.74.0/23", "198.18.74.1");
const OVERLAP_B: (&str, &str, &str) = ("e2e-net-b", "198.18.75.0/24", "198.18.75.1");
/// In another namespace, inside the seed's CIDR: overlaps are judged cluster-wide.
const OVERLAP_ELSEWHERE: (&str, &str, &str) = ("e2e-net-c", "198.18.72.0/25", "198.18.72.1");
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

mod admission;
mod controller;
pub mod inputs;
mod running;
mod setup;

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
            skipped("e2e tier local's admission steps", &format!(
                "E2E_WEBHOOK_HOST is not set, so the API server cannot reach the \
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
    if joined {
        ctx.network_protected_while_in_use().await;
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
}
