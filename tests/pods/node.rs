//! What the tiers of this set share: the images, the stand-in template, the installation
//! they all run against (`make deploy`, as a user installs it), and reading running Pods.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::common::poll::{self, Miss};
use crate::support::*;

/// The stand-in proxy's container name.
pub const SIDECAR: &str = "proxy";
/// Where the stand-in proxy and every app container share a volume.
pub const SHARED_MOUNT: &str = "/var/run/proxy";
/// The file the stand-in proxy writes once started; its startupProbe waits for it.
pub const STARTED_FILE: &str = "/var/run/proxy/started";
/// Seconds the stand-in proxy takes to start.
pub const STARTUP_SECONDS: i64 = 2;
/// An app that runs until SIGTERM, then exits at once.
pub const APP_COMMAND: [&str; 3] = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"];
/// Bound for Pods to start and rollouts to finish: a safety limit, not an expectation.
pub const RUN_PATIENCE: Duration = Duration::from_secs(180);
/// The grace period of the Pods whose deletion is timed.
pub const GRACE_SECONDS: i64 = 30;

/// The images of the set (`E2E_IMAGE`, `E2E_IMAGE_NEXT`, `E2E_SHELL_IMAGE`).
#[derive(Debug, Clone)]
pub struct Images {
    pub injector: String,
    pub injector_next: Option<String>,
    pub shell: String,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

impl Images {
    pub fn from_env() -> Images {
        let injector = env("E2E_IMAGE").unwrap_or_else(|| {
            panic!(
                "E2E_NODE_KUBECONFIG is set but E2E_IMAGE is not: expected the tag of the injector image on the \
                 node (`make image-local NODE_SH=... IMAGE=envoy-injector:e2e`, or `make image kind-load` on kind)"
            )
        });
        Images {
            injector,
            injector_next: env("E2E_IMAGE_NEXT"),
            shell: env("E2E_SHELL_IMAGE").unwrap_or_else(|| "localhost/busybox:local".to_string()),
        }
    }
}

/// The template the set installs: a busybox stand-in for Envoy that takes
/// [`STARTUP_SECONDS`] to start (its startupProbe says when), shares a volume with every
/// app container, and exits at once on SIGTERM.
pub fn stand_in_template(shell_image: &str) -> String {
    format!(
        r#"# tests/pods: a stand-in for Envoy.
containers:
- name: {SIDECAR}
  image: {shell_image}
  imagePullPolicy: IfNotPresent
  command: ["sh", "-c", "trap 'exit 0' TERM; sleep {STARTUP_SECONDS}; touch {STARTED_FILE}; while true; do sleep 1; done"]
  startupProbe:
    exec:
      command: ["test", "-f", "{STARTED_FILE}"]
    periodSeconds: 1
    failureThreshold: 60
  volumeMounts:
  - name: proxy-shared
    mountPath: {SHARED_MOUNT}
volumes:
- name: proxy-shared
  emptyDir: {{}}
volumeMounts:
- name: proxy-shared
  mountPath: {SHARED_MOUNT}
"#
    )
}

/// A Pod like [`pod`] whose app runs [`APP_COMMAND`] in the shell image.
pub fn app_pod(name: &str, annotations: &[(&str, &str)], images: &Images) -> Pod {
    let mut p = pod(name, annotations, &images.shell);
    if let Some(spec) = p.spec.as_mut() {
        spec.containers[0].command = Some(APP_COMMAND.iter().map(|s| s.to_string()).collect());
    }
    p
}

/// The name of a Ready node, or why the set cannot run here.
pub async fn ready_node(client: &Client) -> Result<String, Skip> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("expected to list the nodes, found: {}", api_error(&e)));
    list.items
        .iter()
        .find(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .and_then(|n| n.metadata.name.clone())
        .ok_or_else(|| Skip(format!("no Ready node among {} (Pods could not run)", list.items.len())))
}

/// `make -C <repository> ARGS` (the Makefile a user runs), with its output.
pub async fn make(args: &[&str]) -> Output {
    let mut command = Command::new("make");
    command
        .arg("--no-print-directory")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(args);
    run_command(command, None).await
}

/// `kubectl exec -n NS POD -c CONTAINER -- COMMAND`.
pub async fn exec(namespace: &str, pod: &str, container: &str, command: &[&str]) -> Output {
    let mut args = vec!["exec", "-n", namespace, pod, "-c", container, "--"];
    args.extend_from_slice(command);
    kubectl(&args, None).await
}

/// `Ok` when `deployment` has every replica of its current generation updated, Ready and
/// Available.
pub fn rolled_out(deployment: &Deployment) -> Result<(), String> {
    let want = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = deployment.status.clone().unwrap_or_default();
    let current = status.observed_generation == deployment.metadata.generation;
    let done = current
        && status.updated_replicas == Some(want)
        && status.ready_replicas == Some(want)
        && status.available_replicas == Some(want)
        && status.replicas == Some(want);
    if done {
        Ok(())
    } else {
        Err(format!(
            "generation {:?} (observed {:?}), replicas {want}: {} updated, {} ready, {} available, {} in all",
            deployment.metadata.generation,
            status.observed_generation,
            status.updated_replicas.unwrap_or(0),
            status.ready_replicas.unwrap_or(0),
            status.available_replicas.unwrap_or(0),
            status.replicas.unwrap_or(0)
        ))
    }
}

/// The status of container `name` (regular, or init: a native sidecar is one).
pub fn status_of<'p>(pod: &'p Pod, name: &str) -> Option<&'p ContainerStatus> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|s| s.name == name)
}

/// `Ok` when the Pod's Ready condition is True.
pub fn ready(pod: &Pod) -> Result<(), String> {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    if conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")) {
        Ok(())
    } else {
        Err(format!(
            "Pod {} not Ready: {}",
            pod.metadata.name.as_deref().unwrap_or("?"),
            describe_pod(pod)
        ))
    }
}

/// The injector's Deployment, its namespace and its ConfigMap, as `manifests/` names them.
pub struct Installation {
    pub deployments: Api<Deployment>,
    pub pods: Api<Pod>,
    pub configmaps: Api<ConfigMap>,
}

impl Installation {
    pub fn new(client: &Client) -> Installation {
        Installation {
            deployments: Api::namespaced(client.clone(), INJECTOR_NAMESPACE),
            pods: Api::namespaced(client.clone(), INJECTOR_NAMESPACE),
            configmaps: Api::namespaced(client.clone(), INJECTOR_NAMESPACE),
        }
    }

    /// `make deploy IMAGE=image INJECTION=webhook`: `manifests/` applied as they are but
    /// pinned to the webhook (the tiers before `independence` assert what the webhook
    /// does), then the rollout waited for. Returns how long it took.
    pub async fn deploy(&self, image: &str) -> Duration {
        self.deploy_with(image, WEBHOOK).await
    }

    /// `make deploy IMAGE=image INJECTION=injection`.
    pub async fn deploy_with(&self, image: &str, injection: &str) -> Duration {
        let started = std::time::Instant::now();
        let out = make(&["deploy", &format!("IMAGE={image}"), &format!("INJECTION={injection}")]).await;
        assert!(
            out.status.success(),
            "expected `make deploy IMAGE={image} INJECTION={injection}` to install the injector and roll it out, found {}",
            describe_output(&out)
        );
        started.elapsed()
    }

    pub async fn rolled_out(&self) -> Result<Deployment, String> {
        let deployment = self
            .deployments
            .get_opt(INJECTOR_NAME)
            .await
            .map_err(|e| api_error(&e))?
            .ok_or_else(|| format!("no Deployment {}/{INJECTOR_NAME}", INJECTOR_NAMESPACE))?;
        rolled_out(&deployment).map(|()| deployment)
    }

    /// The image of the Deployment's Pod template.
    pub async fn image(&self) -> Option<String> {
        let deployment = self.deployments.get_opt(INJECTOR_NAME).await.ok().flatten()?;
        image_of(&deployment)
    }

    /// The injector's Pods that are not being deleted.
    pub async fn live_pods(&self) -> Vec<Pod> {
        let selector = "app.kubernetes.io/name=envoy-injector,app.kubernetes.io/component=webhook";
        self.pods
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap_or_else(|e| panic!("expected to list the injector's Pods, found: {}", api_error(&e)))
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect()
    }

    /// Makes the stand-in template live in the ConfigMap; the first time, registers the
    /// shipped one to be put back when the set ends.
    pub async fn use_stand_in(&self, suite: &Suite, images: &Images) {
        self.use_config(suite, "the stand-in template", &stand_in_template(&images.shell))
            .await;
    }

    /// Makes `wanted` the ConfigMap's `config` (`what` names it in the step); the first
    /// time, registers the shipped one to be put back when the set ends.
    pub async fn use_config(&self, suite: &Suite, what: &str, wanted: &str) {
        static TAKEN: AtomicBool = AtomicBool::new(false);
        let current = self.configmaps.get(INJECTOR_NAME).await.unwrap_or_else(|e| {
            panic!(
                "expected the ConfigMap {}/{INJECTOR_NAME}, found: {}",
                INJECTOR_NAMESPACE,
                api_error(&e)
            )
        });
        let config = current.data.unwrap_or_default().get("config").cloned();
        if !TAKEN.swap(true, Ordering::SeqCst) {
            suite
                .teardown
                .restore_template(INJECTOR_NAMESPACE, INJECTOR_NAME, config.clone());
        }
        if config.as_deref() == Some(wanted) {
            return;
        }
        let patch = json!({ "data": { "config": wanted } });
        self.configmaps
            .patch(INJECTOR_NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("expected to set {what}, found: {}", api_error(&e)));
        step!(
            "ConfigMap {}/{INJECTOR_NAME}: `config` is {what} (the shipped one is put back at the end)",
            INJECTOR_NAMESPACE
        );
    }
}

/// The mode the tiers run the injector in, but for `independence`.
pub const WEBHOOK: &str = "webhook";

fn injection_of(deployment: &Deployment) -> Option<String> {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.args.as_ref())
        .and_then(|args| {
            args.iter()
                .find_map(|a| a.strip_prefix("--injection=").map(String::from))
        })
}

fn image_of(deployment: &Deployment) -> Option<String> {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
}

/// For the tiers after `installed`: the injector rolled out with `E2E_IMAGE` (deployed now
/// when it is not, e.g. with `E2E_TIERS=jobs`) and the stand-in template live.
pub async fn installation(suite: &Suite) -> Result<(Installation, Images), Skip> {
    ready_node(&suite.client).await?;
    let images = Images::from_env();
    let installation = Installation::new(&suite.client);
    let current = installation.rolled_out().await;
    let up = current.as_ref().is_ok_and(|d| {
        image_of(d).is_some_and(|i| i == images.injector || Some(&i) == images.injector_next.as_ref())
            && injection_of(d).as_deref() == Some(WEBHOOK)
    });
    if !up {
        step!(
            "injector not rolled out with {} in webhook mode ({:?}): make deploy",
            images.injector,
            current.err()
        );
        installation.deploy(&images.injector).await;
    }
    installation.use_stand_in(suite, &images).await;
    Ok((installation, images))
}

/// Deleting a Pod: both containers exit on SIGTERM, so the Pod is gone long before its
/// grace period ends. Returns the seconds it took.
pub async fn deletion_is_graceful(ns: &TestNs, pod: &Pod) -> f64 {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone();
    let started = Instant::now();
    ns.pods
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("expected to delete Pod {name}, found: {}", api_error(&e)));
    let limit = Duration::from_secs(GRACE_SECONDS as u64);
    wait_for(
        "the deleted Pod to be gone",
        limit + Duration::from_secs(30),
        async || match ns.pods.get_opt(&name).await.map_err(|e| api_error(&e))? {
            Some(p) if p.metadata.uid == uid => Err(format!("still there: {}", describe_pod(&p))),
            _ => Ok(()),
        },
    )
    .await;
    let took = started.elapsed();
    assert!(
        took < limit,
        "expected Pod {name} gone within its {GRACE_SECONDS} s grace period (both containers exit on SIGTERM), \
         found {:.1} s: something waited for the SIGKILL",
        took.as_secs_f64()
    );
    step!(
        "Pod {name} deleted: gone in {:.1} s of its {GRACE_SECONDS} s grace period",
        took.as_secs_f64()
    );
    took.as_secs_f64()
}

/// [`wait_every`] for work done piece by piece (Pods starting on the node): `probe` says
/// how many pieces are done; panics only when that count has not grown for `patience` (see
/// [`poll::while_advancing`]).
pub async fn wait_while_advancing<T>(
    what: &str,
    patience: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, (usize, String)>,
) -> T {
    poll::while_advancing(what, patience, every, async || {
        check_processes().map_err(|why| (0, Miss::Fatal(why)))?;
        probe().await.map_err(|(done, found)| (done, Miss::Retry(found)))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The compiled policy that annotated Pods meet (one for every template).
pub const ANNOTATED_POLICY: &str = "envoy-injector-inject-annotated";
/// The annotation of a mutating policy: the templates it holds, with their revisions.
const TEMPLATES: &str = "sidecar.samplecrd.k8s.io/templates";

/// The revision of `config` the compiled policy holds, if it exists.
pub async fn policy_revision(client: &Client) -> Option<String> {
    let api: Api<MutatingAdmissionPolicy> = Api::all(client.clone());
    let policy = api.get_opt(ANNOTATED_POLICY).await.ok().flatten()?;
    let held: std::collections::BTreeMap<String, String> =
        serde_json::from_str(policy.metadata.annotations?.get(TEMPLATES)?).ok()?;
    held.get("config").cloned()
}

/// The revision of the installed ConfigMap's `config`.
pub async fn config_revision(installation: &Installation) -> String {
    let configmap = installation
        .configmaps
        .get(INJECTOR_NAME)
        .await
        .unwrap_or_else(|e| panic!("expected the ConfigMap, found: {}", api_error(&e)));
    let text = configmap
        .data
        .unwrap_or_default()
        .get("config")
        .cloned()
        .unwrap_or_default();
    envoy_injector::template::template_revision(&text)
}
