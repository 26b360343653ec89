//! The as-deployed installation: `manifests/` itself, server-side applied, and processes of
//! this machine's binary that play the Deployment's Pods: run as its ServiceAccount, with
//! its arguments and environment, listening on the Service's ClusterIP at the Service port.
//!
//! That works where Service ClusterIPs are loopback addresses of this machine (the control
//! plane CI starts hands them out from 127.96.0.0/16): with no kube-proxy, the API server
//! dials `clusterIP:port` of `clientConfig.service` itself, so it reaches the process
//! exactly as it would reach a Pod. Elsewhere (kind) these tiers skip: `make e2e` checks the
//! deployed image there.

mod crds;
mod lease;
mod processes;
mod rbac;
mod service_account;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{EnvVar, Namespace, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::{FIELD_MANAGER, INJECTOR_NAME, Mode, Skip, Suite, api_error, manifest_path, temp_dir, wait_for};
use crate::common::kubectl;

/// `serve`'s defaults for the names the shipped Deployment does not pass as flags.
const DEFAULT_LEASE: &str = "envoy-injector-controller";
const DEFAULT_TLS_SECRET: &str = "envoy-injector-tls";

/// Everything a tier needs to run processes as the Deployment's Pods would run.
#[derive(Clone)]
pub struct Install {
    /// The injector's namespace (the Deployment's).
    pub namespace: String,
    pub service_ip: IpAddr,
    pub service_port: u16,
    /// The name the API server checks the serving certificate for: `S.N.svc`.
    pub service_host: String,
    /// The Deployment container's args and env, as written in `manifests/`.
    args: Vec<String>,
    env: Vec<EnvVar>,
    /// The Deployment's ServiceAccount, and a kubeconfig whose user it is.
    pub service_account: String,
    kubeconfig: PathBuf,
    pub configmap: String,
    pub webhook_config: String,
    pub lease: String,
    pub tls_secret: String,
    /// The first container of the shipped default template: what an injected Pod gets.
    pub sidecar: String,
    /// The Deployment's `replicas`.
    pub replicas: usize,
    /// The shipped ClusterRole, for the tier that takes a rule away.
    cluster_role: ClusterRole,
}

/// State kept between tiers: the rendered manifests, the ServiceAccount kubeconfig.
#[derive(Default)]
pub(super) struct Installer {
    prepared: Mutex<Option<Result<Prepared, String>>>,
}

struct Prepared {
    rendered: Vec<Value>,
    resources: Vec<(ApiResource, bool)>,
    kubeconfig: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Suite {
    /// Applies `manifests/` (again: each tier starts from the shipped state) and returns
    /// what it takes to run processes as its Pods; `Err(Skip)` says why this cluster cannot.
    pub async fn install(&self) -> Result<Install, Skip> {
        if self.settings.mode == Mode::InCluster {
            return Err(Skip(
                "E2E_MODE=in-cluster checks the copy `make deploy` installed (tier local) and starts nothing".into(),
            ));
        }
        let mut prepared = self.install.prepared.lock().await;
        if prepared.is_none() {
            *prepared = Some(self.prepare().await);
        }
        let state = match prepared.as_mut().expect("prepared above") {
            Ok(state) => state,
            Err(why) => return Err(Skip(why.clone())),
        };
        for (doc, (resource, namespaced)) in state.rendered.iter().zip(&state.resources) {
            self.apply(doc, resource, *namespaced).await;
        }
        self.crd_established("networks.samplecrd.k8s.io").await;
        let install = self.describe(&state.rendered).await;
        if state.kubeconfig.is_none() {
            state.kubeconfig = Some(self.service_account_kubeconfig(&install, state._dir.path()).await);
        }
        Ok(Install {
            kubeconfig: state.kubeconfig.clone().expect("written above"),
            ..install
        })
    }

    /// After a tier removed the installation: the next [`Suite::install`] waits for its
    /// namespace to be gone and asks for a token of the new ServiceAccount (the old one's is
    /// void).
    pub async fn removed(&self) {
        let mut prepared = self.install.prepared.lock().await;
        if let Some(Ok(state)) = prepared.as_mut() {
            state.kubeconfig = None;
            self.wait_namespace_gone_if_terminating(&doc_namespace(&state.rendered, "Deployment"))
                .await;
        }
    }

    /// Once per suite: render, decide whether this cluster can run the tiers, install the
    /// NAD CRD if missing, and register the removal of the cluster-wide objects.
    async fn prepare(&self) -> Result<Prepared, String> {
        let rendered = render()?;
        let deployments: Api<Deployment> =
            Api::namespaced(self.client.clone(), &doc_namespace(&rendered, "Deployment"));
        if let Ok(Some(_)) = deployments.get_opt(INJECTOR_NAME).await {
            return Err(format!(
                "Deployment {}/{INJECTOR_NAME} exists in this cluster; these tiers play its Pods themselves and \
                 would fight it. `make undeploy`, or check that copy with `make e2e-incluster`",
                doc_namespace(&rendered, "Deployment")
            ));
        }
        let mut resources = Vec::new();
        for doc in &rendered {
            resources.push(self.resource_of(doc).await);
        }
        self.check_service_reachable(&rendered, &resources).await?;
        self.wait_namespace_gone_if_terminating(&doc_namespace(&rendered, "Deployment"))
            .await;
        self.install_nad_crd().await;
        // Removed after the last tier, in reverse: the webhook configurations first, so no
        // opted-in Pod (or template ConfigMap) is ever sent to a Service nothing listens on
        // any more.
        for kind in [
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ] {
            for (doc, (resource, _)) in rendered.iter().zip(&resources) {
                if doc["kind"] == kind {
                    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
                    self.teardown.delete_later(resource.clone(), None, name);
                }
            }
        }
        let dir = temp_dir("envoy-injector-e2e-sa");
        Ok(Prepared {
            rendered,
            resources,
            kubeconfig: None,
            _dir: dir,
        })
    }

    async fn resource_of(&self, doc: &Value) -> (ApiResource, bool) {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default();
        let kind = doc["kind"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("expected the API server to serve {api_version} {kind}, found: {e}"));
        (resource, caps.scope == kube::discovery::Scope::Namespaced)
    }

    /// Server-side apply, taking over every field (the suite's own edits included). The
    /// Deployment is only dry-run applied: its Pods could never run here (no kubelet), the
    /// tiers' processes play them.
    async fn apply(&self, doc: &Value, resource: &ApiResource, namespaced: bool) {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = if namespaced {
            let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
            Api::namespaced_with(self.client.clone(), ns, resource)
        } else {
            Api::all_with(self.client.clone(), resource)
        };
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        params.dry_run = doc["kind"] == "Deployment";
        api.patch(name, &params, &Patch::Apply(doc)).await.unwrap_or_else(|e| {
            panic!(
                "expected {} {name} of manifests/ to apply (dry run: {}), found: {}",
                resource.kind,
                params.dry_run,
                api_error(&e)
            )
        });
    }

    /// Skips unless the Service gets a loopback ClusterIP this process may listen on. Asks
    /// with a dry-run apply, so nothing is installed on a cluster that cannot run the tiers.
    async fn check_service_reachable(
        &self,
        rendered: &[Value],
        resources: &[(ApiResource, bool)],
    ) -> Result<(), String> {
        let (doc, (resource, _)) = rendered
            .iter()
            .zip(resources)
            .find(|(doc, _)| doc["kind"] == "Service")
            .expect("manifests/ has a Service");
        let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
        // The namespace may not exist yet: ask in `default`, where it is the same allocator.
        let probe_ns = match Api::<Namespace>::all(self.client.clone()).get_opt(ns).await {
            Ok(Some(_)) => ns,
            _ => "default",
        };
        let mut probe = doc.clone();
        probe["metadata"]["namespace"] = json!(probe_ns);
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), probe_ns, resource);
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        params.dry_run = true;
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let answer = api
            .patch(name, &params, &Patch::Apply(&probe))
            .await
            .map_err(|e| format!("cannot dry-run apply the Service: {}", api_error(&e)))?;
        let ip: IpAddr = answer.data["spec"]["clusterIP"]
            .as_str()
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| format!("the Service got no ClusterIP: {}", answer.data["spec"]))?;
        if !ip.is_loopback() {
            return Err(format!(
                "Services get ClusterIPs like {ip}, not loopback addresses of this machine, so the API server could \
                 not reach a process here through clientConfig.service (the control plane CI starts gives out \
                 127.96.0.0/16); on kind, `make e2e` checks the deployed image"
            ));
        }
        let port = doc["spec"]["ports"][0]["port"].as_u64().unwrap_or(443) as u16;
        if let Err(e) = std::net::TcpListener::bind((ip, port))
            && e.kind() == std::io::ErrorKind::PermissionDenied
        {
            return Err(format!(
                "listening on {ip}:{port} (the Service port) needs root or CAP_NET_BIND_SERVICE: {e}"
            ));
        }
        Ok(())
    }

    /// A run that just ended leaves the namespace terminating for a few seconds.
    async fn wait_namespace_gone_if_terminating(&self, name: &str) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let what = format!("namespace {name} (terminating, from an earlier run) to be gone");
        wait_for(&what, Duration::from_secs(90), async || {
            match namespaces.get_opt(name).await {
                Ok(Some(ns)) if ns.metadata.deletion_timestamp.is_some() => Err("still terminating".to_string()),
                Ok(_) => Ok(()),
                Err(e) => Err(api_error(&e)),
            }
        })
        .await;
    }

    /// Reads the names, args and addresses out of the rendered manifests and the cluster.
    async fn describe(&self, rendered: &[Value]) -> Install {
        let deployment: Deployment = serde_json::from_value(find(rendered, "Deployment").clone())
            .expect("the rendered Deployment is a Deployment");
        let namespace = deployment.metadata.namespace.clone().unwrap_or_default();
        let replicas = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1) as usize;
        let container = deployment
            .spec
            .and_then(|s| s.template.spec)
            .map(|p| p.containers[0].clone())
            .expect("the Deployment has a container");
        let args = container.args.unwrap_or_default();
        let service_account = find(rendered, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .expect("the Deployment names its ServiceAccount")
            .to_string();
        let service_doc = find(rendered, "Service");
        let service = service_doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let service_port = service_doc["spec"]["ports"][0]["port"].as_u64().unwrap_or(443) as u16;
        let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(self.client.clone(), &namespace);
        let stored = services
            .get(&service)
            .await
            .unwrap_or_else(|e| panic!("expected Service {namespace}/{service}, found: {}", api_error(&e)));
        let service_ip: IpAddr = stored
            .spec
            .and_then(|s| s.cluster_ip)
            .and_then(|ip| ip.parse().ok())
            .expect("the Service has a ClusterIP");
        let configmap = find(rendered, "ConfigMap");
        let default_template: Value = serde_yaml_ng::from_str(configmap["data"]["config"].as_str().unwrap_or_default())
            .expect("the shipped template is YAML");
        let cluster_role: ClusterRole =
            serde_json::from_value(find(rendered, "ClusterRole").clone()).expect("a ClusterRole");
        Install {
            service_host: format!("{service}.{namespace}.svc"),
            service_ip,
            service_port,
            lease: flag(&args, "--lease-name").unwrap_or_else(|| DEFAULT_LEASE.to_string()),
            tls_secret: flag(&args, "--tls-secret").unwrap_or_else(|| DEFAULT_TLS_SECRET.to_string()),
            args,
            env: container.env.unwrap_or_default(),
            service_account,
            kubeconfig: PathBuf::new(),
            configmap: configmap["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            webhook_config: find(rendered, "MutatingWebhookConfiguration")["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            sidecar: default_template["containers"][0]["name"]
                .as_str()
                .expect("the shipped template has a container")
                .to_string(),
            cluster_role,
            replicas,
            namespace,
        }
    }
}

/// `kubectl kustomize manifests/`, one JSON value per document.
fn render() -> Result<Vec<Value>, String> {
    let text = kubectl::kustomize(&manifest_path("manifests"))?;
    Ok(serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("kustomize prints YAML objects"))
        .filter(|v: &Value| !v.is_null())
        .collect())
}

fn find<'v>(rendered: &'v [Value], kind: &str) -> &'v Value {
    rendered
        .iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("manifests/ has no {kind}"))
}

fn doc_namespace(rendered: &[Value], kind: &str) -> String {
    find(rendered, kind)["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string()
}

/// The value of `--name VALUE` or `--name=VALUE` in `args`.
fn flag(args: &[String], name: &str) -> Option<String> {
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if let Some(value) = arg.strip_prefix(&format!("{name}=")) {
            return Some(value.to_string());
        }
        if arg == name {
            return iter.next().cloned();
        }
    }
    None
}

impl Install {
    /// The CA in the self-managed TLS Secret (`ca.crt`).
    pub async fn ca_pem(&self, client: &Client) -> Vec<u8> {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &self.namespace);
        let secret = secrets.get(&self.tls_secret).await.unwrap_or_else(|e| {
            panic!(
                "expected Secret {}/{}, found: {}",
                self.namespace,
                self.tls_secret,
                api_error(&e)
            )
        });
        secret
            .data
            .unwrap_or_default()
            .get("ca.crt")
            .map(|b| b.0.clone())
            .unwrap_or_else(|| panic!("expected ca.crt in Secret {}/{}", self.namespace, self.tls_secret))
    }
}
