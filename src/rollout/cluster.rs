//! Every API request of a rollout: the live templates, where they are served (through
//! `cluster`'s reads of the compiled policies, and each replica's `/metrics` through the API
//! server's Pod proxy), the workloads and their Pods, and the restart itself — a patch of
//! the Pod template's `kubectl.kubernetes.io/restartedAt` annotation, as `kubectl rollout
//! restart` makes it.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::Selector;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::error::RolloutError;
use super::in_step::{self, InStep, Probe, Replica, Replicas, shown_revisions};
use super::plan::{Kind, Object, Objects, Target};
use crate::cluster::health::{self, Fetched};
use crate::cluster::injection::Policies;
use crate::cluster::stale::StaleGroup;
use crate::cluster::workload::controller;
use crate::stale::injected;
use crate::template::TemplateSet;

/// The Pod template annotation a restart sets, as `kubectl rollout restart` does.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// The admin port of a replica when its Pod names none `admin`: `serve --admin-addr`'s.
const ADMIN_PORT: i32 = 9090;

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> RolloutError {
    let action = action.into();
    move |err| RolloutError::Api {
        action,
        message: match err {
            kube::Error::Api(status) => format!("HTTP {} {}: {}", status.code, status.reason, status.message),
            other => other.to_string(),
        },
    }
}

/// The templates of the `envoy-injector` ConfigMap in `namespace`, parsed as the replicas
/// parse them (values checked for the API server's version; a set served with values it
/// refuses is still what they serve); `Err` says why there are none (missing, unreadable,
/// not parsing).
pub async fn live_templates(client: &kube::Client, namespace: &str) -> Result<TemplateSet, String> {
    let read: Fetched<ConfigMap> = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(crate::NAME)
        .await
        .map_err(|e| e.to_string());
    let version = crate::client::kube_version(client).await;
    health::templates_of(namespace, &read, version).map(|live| live.set)
}

/// Whether `live` is in step everywhere it is served: the compiled policies and the
/// replicas first, then (once they are) what a Pod each of `targets` creates now gets.
pub async fn in_step(
    client: &kube::Client,
    namespace: &str,
    deployment: Option<&str>,
    live: &TemplateSet,
    targets: &[Target],
) -> InStep {
    let (policies, replicas) = serving(client, namespace, deployment, live).await;
    let verdict = in_step::judge(live, &policies, &replicas);
    if !verdict.ready || targets.is_empty() {
        return verdict;
    }
    let mut probes = Vec::new();
    for target in targets {
        probes.push((target.workload.to_string(), probe(client, target).await));
    }
    verdict.and(in_step::judge_probes(live, &probes))
}

/// Where `live` is served: the compiled policies as found, and the Ready replicas of the
/// injector's `deployment` with the revisions each shows.
async fn serving(
    client: &kube::Client,
    namespace: &str,
    deployment: Option<&str>,
    live: &TemplateSet,
) -> (Policies, Replicas) {
    let (policies, read) = crate::cluster::policies(client, namespace, deployment, &Ok(live.clone())).await;
    let replicas = match (deployment, read) {
        (None, _) | (_, None) => Replicas::NotChecked,
        (Some(name), Some(Err(err))) => {
            Replicas::Unreadable(format!("cannot read Deployment {namespace}/{name}: {err}"))
        }
        (Some(name), Some(Ok(None))) => Replicas::Unreadable(format!(
            "expected Deployment {namespace}/{name} (the injector), found none; pass --deployment NAME, or --deployment \"\" when it does not run as a Deployment"
        )),
        (Some(name), Some(Ok(Some(found)))) => match ready_replicas(client, namespace, &found).await {
            Ok(ready) => Replicas::Read {
                deployment: name.to_string(),
                ready,
            },
            Err(err) => Replicas::Unreadable(err.to_string()),
        },
    };
    (policies, replicas)
}

/// The Ready, not terminating, Pods of the injector's Deployment, each with what its
/// `/metrics` show (read through the API server's Pod proxy: `get pods/proxy`).
async fn ready_replicas(
    client: &kube::Client,
    namespace: &str,
    deployment: &Deployment,
) -> Result<Vec<Replica>, RolloutError> {
    let name = deployment.metadata.name.clone().unwrap_or_default();
    let selector = deployment.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
    let pods = pods_selected(
        client,
        namespace,
        &selector,
        &format!("the Pods of Deployment {namespace}/{name}"),
    )
    .await?;
    let mut out = Vec::new();
    for pod in pods.iter().filter(|p| super::progress::not_ready(p).is_none()) {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let port = admin_port(pod);
        let path = format!("/api/v1/namespaces/{namespace}/pods/{pod_name}:{port}/proxy/metrics");
        let shown = match http::Request::get(&path).body(Vec::new()) {
            Ok(request) => match client.request_text(request).await {
                Ok(text) => shown_revisions(&text),
                Err(err) => Err(format!(
                    "cannot read its /metrics through the API server ({path}): {err}"
                )),
            },
            Err(err) => Err(err.to_string()),
        };
        out.push(Replica { name: pod_name, shown });
    }
    Ok(out)
}

/// The port named `admin` of the Pod's containers, else `serve`'s default.
fn admin_port(pod: &Pod) -> i32 {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some("admin"))
        .map_or(ADMIN_PORT, |p| p.container_port)
}

/// The Pods `selector` selects in `namespace`, not being deleted.
async fn pods_selected(
    client: &kube::Client,
    namespace: &str,
    selector: &LabelSelector,
    what: &str,
) -> Result<Vec<Pod>, RolloutError> {
    let params = list_params(selector, what)?;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .map_err(api_error(format!("list {what}")))?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

fn list_params(selector: &LabelSelector, what: &str) -> Result<ListParams, RolloutError> {
    let selector = Selector::try_from(selector.clone()).map_err(|err| RolloutError::Selector {
        what: what.to_string(),
        message: err.to_string(),
    })?;
    Ok(ListParams::default().labels_from(&selector))
}

/// The workloads of `groups` that rollout may restart: each read by name, or, with a
/// `--selector`, those of its kinds it selects in `scope`.
pub async fn objects(
    client: &kube::Client,
    groups: &[StaleGroup],
    scope: Option<&str>,
    selector: Option<&str>,
) -> Result<Objects, RolloutError> {
    let wanted: BTreeSet<(Kind, String, String)> = groups
        .iter()
        .filter_map(|g| Some((Kind::of(&g.kind)?, g.namespace.clone(), g.name.clone())))
        .collect();
    let mut out = Objects::new();
    match selector {
        None => {
            for (kind, namespace, name) in wanted {
                let object = read(client, kind, &namespace, &name).await?;
                out.insert((kind, namespace, name), object);
            }
        }
        Some(selector) => {
            for kind in Kind::ALL {
                if !wanted.iter().any(|(k, _, _)| *k == kind) {
                    continue;
                }
                for object in list(client, kind, scope, selector).await? {
                    let meta = object.metadata();
                    let key = (
                        kind,
                        meta.namespace.clone().unwrap_or_default(),
                        meta.name.clone().unwrap_or_default(),
                    );
                    if wanted.contains(&key) {
                        out.insert(key, Some(object));
                    }
                }
            }
        }
    }
    Ok(out)
}

async fn list_kind<K>(
    client: &kube::Client,
    scope: Option<&str>,
    selector: &str,
    wrap: fn(Box<K>) -> Object,
) -> Result<Vec<Object>, RolloutError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = match scope {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let what = format!("the {}s selected by {selector}", K::kind(&()));
    let list = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(api_error(format!("list {what}")))?;
    Ok(list.items.into_iter().map(|o| wrap(Box::new(o))).collect())
}

async fn list(
    client: &kube::Client,
    kind: Kind,
    scope: Option<&str>,
    selector: &str,
) -> Result<Vec<Object>, RolloutError> {
    match kind {
        Kind::Deployment => list_kind::<Deployment>(client, scope, selector, Object::Deployment).await,
        Kind::StatefulSet => list_kind::<StatefulSet>(client, scope, selector, Object::StatefulSet).await,
        Kind::DaemonSet => list_kind::<DaemonSet>(client, scope, selector, Object::DaemonSet).await,
    }
}

async fn get<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    wrap: fn(Box<K>) -> Object,
) -> Result<Option<Object>, RolloutError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map(|found| found.map(|o| wrap(Box::new(o))))
        .map_err(api_error(format!("read {} {namespace}/{name}", K::kind(&()))))
}

/// The workload `kind` `namespace/name`, or `None` when it does not exist.
pub async fn read(
    client: &kube::Client,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Option<Object>, RolloutError> {
    match kind {
        Kind::Deployment => get::<Deployment>(client, namespace, name, Object::Deployment).await,
        Kind::StatefulSet => get::<StatefulSet>(client, namespace, name, Object::StatefulSet).await,
        Kind::DaemonSet => get::<DaemonSet>(client, namespace, name, Object::DaemonSet).await,
    }
}

/// What a Pod `target` creates now would get: its Pod template created as a Pod with
/// `dryRun=All`, through every admission the API server runs (webhooks, the compiled
/// policies), nothing stored.
pub async fn probe(client: &kube::Client, target: &Target) -> Probe {
    let meta = target.object.metadata();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let template = target.object.pod_template().cloned().unwrap_or_default();
    let mut metadata = template.metadata.unwrap_or_default();
    metadata.name = None;
    metadata.generate_name = Some(format!("{}-rollout-probe-", meta.name.as_deref().unwrap_or_default()));
    metadata.namespace = Some(namespace.clone());
    let pod = Pod {
        metadata,
        spec: template.spec,
        status: None,
    };
    let params = PostParams {
        dry_run: true,
        field_manager: Some(crate::NAME.to_string()),
    };
    match Api::<Pod>::namespaced(client.clone(), &namespace)
        .create(&params, &pod)
        .await
    {
        Ok(stored) => match injected(&stored.metadata) {
            Some((template, revision)) => Probe::Injected { template, revision },
            None => Probe::NotInjected,
        },
        // RBAC's refusal says who cannot do what; admission's says why the Pod is refused.
        Err(kube::Error::Api(status)) if status.code == 403 && status.message.contains(" cannot create resource ") => {
            Probe::NotPermitted(status.message)
        }
        Err(kube::Error::Api(status)) => {
            Probe::Refused(format!("HTTP {} {}: {}", status.code, status.reason, status.message))
        }
        Err(err) => Probe::Refused(err.to_string()),
    }
}

/// Restarts the workload as `kubectl rollout restart` does; returns the generation the
/// patch made, which its controller must observe.
pub async fn restart(client: &kube::Client, kind: Kind, namespace: &str, name: &str) -> Result<i64, RolloutError> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: now}}}}});
    let params = PatchParams {
        field_manager: Some(crate::NAME.to_string()),
        ..PatchParams::default()
    };
    let action = format!("restart {} {namespace}/{name}", kind.name());
    let patch = Patch::Strategic(&patch);
    let generation = match kind {
        Kind::Deployment => Api::<Deployment>::namespaced(client.clone(), namespace)
            .patch(name, &params, &patch)
            .await
            .map(|o| o.metadata.generation),
        Kind::StatefulSet => Api::<StatefulSet>::namespaced(client.clone(), namespace)
            .patch(name, &params, &patch)
            .await
            .map(|o| o.metadata.generation),
        Kind::DaemonSet => Api::<DaemonSet>::namespaced(client.clone(), namespace)
            .patch(name, &params, &patch)
            .await
            .map(|o| o.metadata.generation),
    }
    .map_err(api_error(action))?;
    Ok(generation.unwrap_or(0))
}

/// The Pods (not being deleted) that `object` controls: through its ReplicaSets for a
/// Deployment.
pub async fn pods_of(client: &kube::Client, object: &Object) -> Result<Vec<Pod>, RolloutError> {
    let meta = object.metadata();
    let (namespace, name) = (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    );
    let what = format!("the Pods of {} {namespace}/{name}", object.kind().name());
    let selector = match object {
        Object::Deployment(d) => d.spec.as_ref().map(|s| s.selector.clone()),
        Object::StatefulSet(s) => s.spec.as_ref().map(|s| s.selector.clone()),
        Object::DaemonSet(d) => d.spec.as_ref().map(|s| s.selector.clone()),
    }
    .unwrap_or_default();
    let mut owners: BTreeSet<String> = meta.uid.iter().cloned().collect();
    if let Object::Deployment(_) = object {
        let params = list_params(&selector, &what)?;
        let sets = Api::<ReplicaSet>::namespaced(client.clone(), &namespace)
            .list(&params)
            .await
            .map_err(api_error(format!(
                "list the ReplicaSets of Deployment {namespace}/{name}"
            )))?;
        owners = sets
            .items
            .into_iter()
            .filter(|rs| controller(rs.metadata.owner_references.as_ref()).is_some_and(|o| owners.contains(&o.uid)))
            .filter_map(|rs| rs.metadata.uid)
            .collect();
    }
    let pods = pods_selected(client, &namespace, &selector, &what).await?;
    Ok(pods
        .into_iter()
        .filter(|p| controller(p.metadata.owner_references.as_ref()).is_some_and(|o| owners.contains(&o.uid)))
        .collect())
}
