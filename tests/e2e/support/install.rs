//! The as-deployed installation: `manifests/` itself, server-side applied, and processes of
//! this machine's binary that play the Deployment's Pods: run as its ServiceAccount, with
//! its arguments and environment, listening on the Service's ClusterIP at the Service port.
//!
//! That works where Service ClusterIPs are loopback addresses of this machine (the control
//! plane CI starts hands them out from 127.96.0.0/16): with no kube-proxy, the API server
//! dials `clusterIP:port` of `clientConfig.service` itself, so it reaches the process
//! exactly as it would reach a Pod. Elsewhere (kind) these tiers skip: `make e2e` checks the
//! deployed image there.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{EnvVar, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Resource};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::{
    FIELD_MANAGER, INJECTOR_NAME, Injector, Mode, PATIENCE, Skip, Suite, api_error, free_port, manifest_path, step,
    temp_dir, wait_for,
};

/// `serve`'s defaults for the names the shipped Deployment does not pass as flags.
const DEFAULT_LEASE: &str = "envoy-injector-controller";
const DEFAULT_TLS_SECRET: &str = "envoy-injector-tls";
/// The Multus CRD, shared with the scale benchmark (see the file).
const NAD_CRD_FILE: &str = "tests/fixtures/nad-crd.yaml";

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

    /// Applies `manifests/crd.yaml` (server-side; it stays installed, as the README says of
    /// every run) and waits until the Network resource is served.
    pub async fn install_network_crd(&self) {
        let crd = super::read_manifest("manifests/crd.yaml");
        let name = crd["metadata"]["name"]
            .as_str()
            .expect("manifests/crd.yaml has metadata.name")
            .to_string();
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        crds.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("expected manifests/crd.yaml to apply, found: {}", api_error(&e)));
        self.network_crd_served(&name).await;
    }

    /// Waits until the Network CRD `name` is Established and its resource served.
    pub async fn network_crd_served(&self, name: &str) {
        self.crd_established(name).await;
        // Established means served; discovery may lag a moment behind it.
        let networks: Api<DynamicObject> = Api::all_with(self.client.clone(), &super::network_resource());
        wait_for("the Network resource to be served", PATIENCE, async || {
            networks
                .list(&ListParams::default().limit(1))
                .await
                .map(drop)
                .map_err(|e| api_error(&e))
        })
        .await;
        step!("CRD {name} established");
    }

    /// Installs the Multus NetworkAttachmentDefinition CRD (`tests/fixtures/nad-crd.yaml`) when
    /// the cluster has none, and then removes it again when the suite ends.
    pub async fn install_nad_crd(&self) {
        let crd = super::read_manifest(NAD_CRD_FILE);
        let name = crd["metadata"]["name"]
            .as_str()
            .expect("the NAD CRD has a name")
            .to_string();
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        match crds.get_opt(&name).await {
            Ok(Some(_)) => return,
            Ok(None) => {}
            Err(e) => panic!("expected to read CRD {name}, found: {}", api_error(&e)),
        }
        crds.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("expected {NAD_CRD_FILE} to apply, found: {}", api_error(&e)));
        self.teardown
            .delete_later(ApiResource::erase::<CustomResourceDefinition>(&()), None, &name);
        self.crd_established(&name).await;
        step!("installed CRD {name} (removed at the end)");
    }

    pub async fn crd_established(&self, name: &str) {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        wait_for(&format!("CRD {name} to be Established"), PATIENCE, async || {
            let crd = crds.get(name).await.map_err(|e| api_error(&e))?;
            let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                Ok(())
            } else {
                Err(format!(
                    "conditions {:?}",
                    conditions
                        .iter()
                        .map(|c| format!("{}={} ({})", c.type_, c.status, c.message.as_deref().unwrap_or("")))
                        .collect::<Vec<_>>()
                ))
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

    /// A kubeconfig for the Deployment's ServiceAccount: a token from the TokenRequest API
    /// (what `kubectl create token` asks for), the same server and certificate authority as
    /// `KUBECONFIG`.
    async fn service_account_kubeconfig(&self, install: &Install, dir: &std::path::Path) -> PathBuf {
        let account = &install.service_account;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &install.namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let token = accounts
            .create_token_request(account, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "expected a token for ServiceAccount {account}, found: {}",
                    api_error(&e)
                )
            })
            .status
            .expect("a TokenRequest answer has a status")
            .token;
        let kubeconfig = Kubeconfig::read().expect("KUBECONFIG is readable");
        let context = kubeconfig
            .contexts
            .iter()
            .find(|c| Some(&c.name) == kubeconfig.current_context.as_ref())
            .and_then(|c| c.context.clone())
            .expect("KUBECONFIG has a current context");
        let cluster = kubeconfig
            .clusters
            .iter()
            .find(|c| c.name == context.cluster)
            .and_then(|c| c.cluster.clone())
            .expect("the current context names a cluster");
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "cluster", "cluster": cluster }],
            "users": [{ "name": account, "user": { "token": token } }],
            "contexts": [{ "name": "sa", "context": { "cluster": "cluster", "user": account } }],
            "current-context": "sa",
        });
        let path = dir.join("serviceaccount.kubeconfig");
        std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("JSON")).expect("write the kubeconfig");
        step!(
            "kubeconfig for ServiceAccount {}/{account}: {}",
            install.namespace,
            path.display()
        );
        path
    }
}

/// `kubectl kustomize manifests/`, one JSON value per document.
fn render() -> Result<Vec<Value>, String> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(manifest_path("manifests"))
        .output()
        .map_err(|e| format!("kubectl is needed to render manifests/ (kubectl kustomize): {e}"))?;
    if !output.status.success() {
        panic!(
            "expected `kubectl kustomize manifests/` to render, found {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8(output.stdout).expect("kustomize prints UTF-8");
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

/// `args` without `--name VALUE` / `--name=VALUE`.
fn without_flag(args: &[String], name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == name {
            iter.next();
        } else if !arg.starts_with(&format!("{name}=")) {
            out.push(arg.clone());
        }
    }
    out
}

impl Install {
    /// The webhook address: the Service's ClusterIP at the Service port.
    pub fn webhook_addr(&self) -> SocketAddr {
        SocketAddr::new(self.service_ip, self.service_port)
    }

    /// Starts a process as Pod `name` of the Deployment would run: its args, except `--addr`
    /// (the ClusterIP at the Service port) and `--admin-addr` (a free loopback port), plus
    /// `--reuse-port` if asked; its env, the Downward API's fields filled in; the
    /// ServiceAccount's credentials.
    pub fn start(&self, name: &str, reuse_port: bool) -> Injector {
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port("127.0.0.1")));
        let mut args = without_flag(&without_flag(&self.args, "--addr"), "--admin-addr");
        args.extend([
            "--addr".to_string(),
            self.webhook_addr().to_string(),
            "--admin-addr".to_string(),
            admin.to_string(),
        ]);
        if reuse_port {
            args.push("--reuse-port".to_string());
        }
        let mut env: Vec<(String, String)> = self
            .env
            .iter()
            .map(|var| (var.name.clone(), self.env_value(var, name)))
            .collect();
        env.push(("KUBECONFIG".to_string(), self.kubeconfig.display().to_string()));
        let dir = temp_dir("envoy-injector-e2e");
        Injector::spawn(name, args.into_iter().map(OsString::from).collect(), env, admin, dir)
    }

    /// What the kubelet would put in `var` for Pod `pod`.
    fn env_value(&self, var: &EnvVar, pod: &str) -> String {
        if let Some(value) = &var.value {
            return value.clone();
        }
        let field = var
            .value_from
            .as_ref()
            .and_then(|from| from.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        match field {
            Some("metadata.namespace") => self.namespace.clone(),
            Some("metadata.name") => pod.to_string(),
            other => panic!(
                "env {} of the Deployment comes from {other:?}; the suite knows metadata.namespace and metadata.name",
                var.name
            ),
        }
    }

    /// The holder of the controller Lease, if any.
    pub async fn lease_holder(&self, client: &Client) -> Result<Option<String>, String> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let lease = leases.get_opt(&self.lease).await.map_err(|e| api_error(&e))?;
        Ok(lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    }

    /// `leaseDurationSeconds` of the controller Lease.
    pub async fn lease_duration(&self, client: &Client) -> Duration {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let seconds = leases
            .get(&self.lease)
            .await
            .ok()
            .and_then(|l| l.spec)
            .and_then(|s| s.lease_duration_seconds)
            .expect("the controller Lease has leaseDurationSeconds");
        Duration::from_secs(seconds as u64)
    }

    /// Waits until `identity` holds the controller Lease.
    pub async fn wait_leader(&self, client: &Client, candidates: &[&Injector]) -> String {
        let names: Vec<&str> = candidates.iter().map(|p| p.name.as_str()).collect();
        let what = format!("one of {names:?} to hold Lease {}/{}", self.namespace, self.lease);
        wait_for(&what, PATIENCE * 2, async || match self.lease_holder(client).await? {
            Some(holder) if names.contains(&holder.as_str()) => Ok(holder),
            other => Err(format!("holder {other:?}")),
        })
        .await
    }

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

    /// Replaces the ClusterRole's rules with the shipped ones minus the rule for `resource`;
    /// returns the rule taken away.
    pub async fn remove_cluster_role_rule(&self, client: &Client, resource: &str) -> PolicyRule {
        let shipped = self.cluster_role.rules.clone().unwrap_or_default();
        let (taken, kept): (Vec<PolicyRule>, Vec<PolicyRule>) = shipped
            .into_iter()
            .partition(|r| r.resources.iter().flatten().any(|x| x == resource));
        assert_eq!(
            taken.len(),
            1,
            "expected one ClusterRole rule for {resource}, found {taken:?}"
        );
        self.replace_cluster_role_rules(client, kept).await;
        taken.into_iter().next().expect("one rule")
    }

    /// Puts the shipped ClusterRole rules back.
    pub async fn restore_cluster_role(&self, client: &Client) {
        self.replace_cluster_role_rules(client, self.cluster_role.rules.clone().unwrap_or_default())
            .await;
    }

    async fn replace_cluster_role_rules(&self, client: &Client, rules: Vec<PolicyRule>) {
        let roles: Api<ClusterRole> = Api::all(client.clone());
        let name = self.cluster_role.meta().name.clone().unwrap_or_default();
        let mut role = roles
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("expected ClusterRole {name}, found: {}", api_error(&e)));
        role.rules = Some(rules);
        // A replace, not an apply: the rules must become exactly these, whoever else
        // applied the same ones before.
        roles
            .replace(&name, &PostParams::default(), &role)
            .await
            .unwrap_or_else(|e| panic!("expected to replace ClusterRole {name}, found: {}", api_error(&e)));
    }
}
