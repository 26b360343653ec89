//! Every API read of the cluster's facts, for `check` and `rollout` alike: GET and LIST only.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, ObjectMeta};
use kube::core::PartialObjectMeta;
use serde::de::DeserializeOwned;

use super::error::ReadError;
use super::health::{Facts, Fetched, OldKubelet, ServiceFacts};
use super::injection::{self, Object, PolicyFacts, Served};
use super::snapshot::{Snapshot, Subject};
use super::workload::{ReplicaSetOwners, controller};
use crate::inject::REVISION_LABEL;
use crate::network::crd::Network;
use crate::policies::PolicyObject;
use crate::template::KubeVersion;

/// One line for an API error: code, reason and the server's message.
fn api_error(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!("HTTP {} {}: {}", status.code, status.reason, status.message),
        other => other.to_string(),
    }
}

async fn get<K>(api: Api<K>, name: &str) -> Fetched<K>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.map_err(|e| api_error(&e))
}

/// The installation's objects by name; those named `None` are not read.
#[derive(Debug, Clone, Copy)]
pub struct Installation<'a> {
    /// Where the injector's ConfigMap, Secret, Service and Lease live.
    pub namespace: &'a str,
    pub webhook_config: Option<&'a str>,
    pub validating_webhook_config: Option<&'a str>,
    pub tls_secret: Option<&'a str>,
    pub lease_name: Option<&'a str>,
}

/// The installation's objects, each read once; `kube_version` is the API server's, which
/// the caller has read (once, for the templates it parses too).
pub async fn facts(client: &kube::Client, installation: &Installation<'_>, kube_version: KubeVersion) -> Facts {
    let namespace = installation.namespace;
    let mut facts = Facts {
        namespace: namespace.to_string(),
        mutating: None,
        validating: None,
        tls_secret: None,
        services: BTreeMap::new(),
        configmap: get(Api::<ConfigMap>::namespaced(client.clone(), namespace), crate::NAME).await,
        lease: None,
        kube_version,
        old_kubelets: None,
    };
    if !kube_version.kubelets_run_native_sidecars() {
        facts.old_kubelets = Some(old_kubelets(client).await.map_err(|e| e.to_string()));
    }
    if let Some(name) = installation.webhook_config {
        let config = get(Api::<MutatingWebhookConfiguration>::all(client.clone()), name).await;
        facts.mutating = Some((name.to_string(), config));
    }
    if let Some(name) = installation.validating_webhook_config {
        let config = get(Api::<ValidatingWebhookConfiguration>::all(client.clone()), name).await;
        facts.validating = Some((name.to_string(), config));
    }
    if let Some(name) = installation.tls_secret {
        let secret = get(Api::<Secret>::namespaced(client.clone(), namespace), name).await;
        facts.tls_secret = Some((name.to_string(), secret));
    }
    if let Some(name) = installation.lease_name {
        let lease = get(Api::<Lease>::namespaced(client.clone(), namespace), name).await;
        facts.lease = Some((name.to_string(), lease));
    }
    for (service_namespace, name) in facts.service_refs() {
        let service = get(Api::<Service>::namespaced(client.clone(), &service_namespace), &name).await;
        let endpoint_slices = Api::<EndpointSlice>::namespaced(client.clone(), &service_namespace)
            .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
            .await
            .map(|list| list.items)
            .map_err(|e| api_error(&e));
        facts.services.insert(
            (service_namespace, name),
            ServiceFacts {
                service,
                endpoint_slices,
            },
        );
    }
    facts
}

/// The group version that serves the admission policies.
const ADMISSION_POLICIES: &str = "admissionregistration.k8s.io/v1";

/// Whether the API server serves MutatingAdmissionPolicy v1 (discovery).
async fn served(client: &kube::Client) -> Served {
    match client.list_api_group_resources(ADMISSION_POLICIES).await {
        Ok(list) => {
            if list.resources.iter().any(|r| r.name == "mutatingadmissionpolicies") {
                Served::Yes
            } else {
                Served::No
            }
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Served::No,
        Err(err) => Served::Unknown(api_error(&err)),
    }
}

/// The injector's Deployment, whether the API server serves MutatingAdmissionPolicy v1,
/// and the admission policies labelled as ours (the mutating kinds only when served).
pub async fn policy_facts(client: &kube::Client, namespace: &str, deployment: Option<&str>) -> PolicyFacts {
    let deployment = match deployment {
        Some(name) => Some((
            name.to_string(),
            get(Api::<Deployment>::namespaced(client.clone(), namespace), name).await,
        )),
        None => None,
    };
    let served = served(client).await;
    let found = ours(client, served == Served::Yes).await.map_err(|err| err.to_string());
    PolicyFacts {
        deployment,
        served,
        found,
    }
}

/// Every admission policy and binding labelled `app.kubernetes.io/managed-by=envoy-injector`.
async fn ours(client: &kube::Client, mutating: bool) -> Result<Vec<Object>, ReadError> {
    let mut out = Vec::new();
    if mutating {
        out.extend(ours_of(client, PolicyObject::Mutating).await?);
        out.extend(ours_of(client, PolicyObject::MutatingBinding).await?);
    }
    out.extend(ours_of(client, PolicyObject::Validating).await?);
    out.extend(ours_of(client, PolicyObject::ValidatingBinding).await?);
    Ok(out)
}

/// The objects of kind `K` labelled as ours, `wrap` naming their kind.
async fn ours_of<K>(client: &kube::Client, wrap: fn(Box<K>) -> PolicyObject) -> Result<Vec<Object>, ReadError>
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let labelled = ListParams::default().labels(&injection::labelled());
    let what = format!(
        "the objects of kind {} labelled {}",
        K::kind(&()),
        injection::labelled()
    );
    let api = Api::<K>::all(client.clone());
    list_paged(&api, labelled, &what, |object| {
        Some(Object::new(&wrap(Box::new(object))))
    })
    .await
}

fn pod_subject(pod: &Pod) -> Subject {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut value = serde_json::to_value(pod).unwrap_or_default();
    // What the API server stores besides what a CREATE sends: not part of the decision.
    if let Some(map) = value.as_object_mut() {
        map.remove("status");
        if let Some(metadata) = map.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            metadata.remove("managedFields");
        }
    }
    Subject {
        what: format!("Pod {namespace}/{name}"),
        namespace,
        pod: value,
    }
}

/// Every Pod of `namespace`, in the order of their names.
pub async fn namespace_pods(client: &kube::Client, namespace: &str) -> Result<Vec<Subject>, ReadError> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let what = format!("the Pods of namespace {namespace}");
    let mut subjects = list_paged(&api, ListParams::default(), &what, |pod| Some(pod_subject(&pod))).await?;
    subjects.sort_by(|a, b| a.what.cmp(&b.what));
    Ok(subjects)
}

/// The Pod `namespace`/`name`, which must exist.
pub async fn pod(client: &kube::Client, namespace: &str, name: &str) -> Result<Subject, ReadError> {
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| ReadError::Api {
            action: format!("read Pod {namespace}/{name}"),
            message: api_error(&e),
        })?
        .ok_or_else(|| ReadError::NoSuchPod {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })?;
    Ok(pod_subject(&pod))
}

/// The Namespaces and Networks the subjects name. A Network that cannot be read (or whose
/// CRD is not installed) is missing, as admission would find it.
pub async fn snapshot(client: &kube::Client, subjects: &[Subject]) -> Snapshot {
    let mut snapshot = Snapshot::default();
    for subject in subjects {
        let namespace = &subject.namespace;
        if !snapshot.namespaces.contains_key(namespace)
            && let Ok(Some(found)) = Api::<Namespace>::all(client.clone()).get_metadata_opt(namespace).await
        {
            snapshot
                .namespaces
                .insert(namespace.clone(), found.metadata.labels.unwrap_or_default());
        }
        if let Some(name) = subject.network() {
            let key = (namespace.clone(), name.to_string());
            if !snapshot.networks.contains_key(&key)
                && let Ok(Some(found)) = Api::<Network>::namespaced(client.clone(), namespace)
                    .get_opt(name)
                    .await
            {
                snapshot.networks.insert(key, found);
            }
        }
    }
    snapshot
}

/// Injected Pods (by the revision label, metadata only) in `namespace` or everywhere, and
/// the controllers of the ReplicaSets that own them.
pub async fn injected_pods(
    client: &kube::Client,
    namespace: Option<&str>,
) -> Result<(Vec<PartialObjectMeta<Pod>>, ReplicaSetOwners), ReadError> {
    let api: Api<PartialObjectMeta<Pod>> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let labelled = ListParams::default().labels(REVISION_LABEL);
    let pods = list_paged(&api, labelled, &format!("the Pods labelled {REVISION_LABEL}"), Some).await?;
    let owners = replica_set_owners(client, pods.iter().map(|p| &p.metadata)).await;
    Ok((pods, owners))
}

/// The injected Pods (whole, as JSON) in `namespace` or everywhere whose revision label
/// is a live template's revision, and the controllers of the ReplicaSets that own them.
pub async fn pods_at_revisions(
    client: &kube::Client,
    namespace: Option<&str>,
    live: &crate::template::TemplateSet,
) -> Result<(Vec<serde_json::Value>, ReplicaSetOwners), ReadError> {
    let revisions: std::collections::BTreeSet<&str> = live
        .names()
        .filter_map(|name| live.get(name))
        .filter_map(|t| crate::inject::revision_label_value(&t.revision))
        .collect();
    if revisions.is_empty() {
        return Ok((Vec::new(), ReplicaSetOwners::new()));
    }
    let selector = format!(
        "{REVISION_LABEL} in ({})",
        revisions.into_iter().collect::<Vec<_>>().join(",")
    );
    let api: Api<Pod> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let what = format!("the Pods labelled {selector}");
    let pods = list_paged(&api, ListParams::default().labels(&selector), &what, |pod: Pod| {
        Some((pod.metadata.clone(), pod_subject(&pod).pod))
    })
    .await?;
    let owners = replica_set_owners(client, pods.iter().map(|(meta, _)| meta)).await;
    Ok((pods.into_iter().map(|(_, pod)| pod).collect(), owners))
}

/// The controller of each ReplicaSet that owns one of `pods` (one GET per ReplicaSet).
pub async fn replica_set_owners<'p>(
    client: &kube::Client,
    pods: impl Iterator<Item = &'p ObjectMeta>,
) -> ReplicaSetOwners {
    let mut owners = ReplicaSetOwners::new();
    for pod in pods {
        let Some(owner) = controller(pod.owner_references.as_ref()).filter(|o| o.kind == "ReplicaSet") else {
            continue;
        };
        let pod_namespace = pod.namespace.clone().unwrap_or_default();
        let key = (pod_namespace.clone(), owner.name.clone());
        if owners.contains_key(&key) {
            continue;
        }
        let replica_set = Api::<ReplicaSet>::namespaced(client.clone(), &pod_namespace)
            .get_metadata_opt(&owner.name)
            .await
            .ok()
            .flatten();
        let parent = replica_set.and_then(|rs| controller(rs.metadata.owner_references.as_ref()).cloned());
        owners.insert(key, parent);
    }
    owners
}

/// The nodes whose kubelet is older than 1.29 (read only under a 1.31 API server, the one
/// that may have them; a node's version is in its status, so the list is paged and only
/// the name and version kept).
async fn old_kubelets(client: &kube::Client) -> Result<Vec<OldKubelet>, ReadError> {
    let api: Api<Node> = Api::all(client.clone());
    list_paged(&api, ListParams::default(), "the Nodes", |node| {
        let version = node.status?.node_info?.kubelet_version;
        let minor: u16 = version
            .trim_start_matches('v')
            .strip_prefix("1.")?
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()?;
        (minor < crate::template::NATIVE_SIDECAR_KUBELET_MINOR).then(|| OldKubelet {
            node: node.metadata.name.unwrap_or_default(),
            version,
        })
    })
    .await
}

/// Pages of at most this many objects: a cluster-wide list never arrives in one piece.
const PAGE: u32 = 500;

/// Every object of `api` that `params` select (metadata only for an
/// `Api<PartialObjectMeta<_>>`), page by page; `keep` drops what is not needed as each
/// page arrives.
async fn list_paged<K, T>(
    api: &Api<K>,
    params: ListParams,
    what: &str,
    mut keep: impl FnMut(K) -> Option<T>,
) -> Result<Vec<T>, ReadError>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = params.limit(PAGE);
    loop {
        let page = api.list(&params).await.map_err(|e| ReadError::Api {
            action: format!("list {what}"),
            message: api_error(&e),
        })?;
        out.extend(page.items.into_iter().filter_map(&mut keep));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(out),
        }
    }
}

/// Every Pod's metadata in `namespace` or everywhere, through `keep` page by page (what
/// it drops is never held all at once).
pub async fn pod_metadata<T>(
    client: &kube::Client,
    namespace: Option<&str>,
    keep: impl FnMut(PartialObjectMeta<Pod>) -> Option<T>,
) -> Result<Vec<T>, ReadError> {
    let api: Api<PartialObjectMeta<Pod>> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let what = namespace.map_or_else(|| String::from("the Pods"), |ns| format!("the Pods of namespace {ns}"));
    list_paged(&api, ListParams::default(), &what, keep).await
}

/// Namespace metadata (labels, managedFields) of `namespace`, or of every Namespace.
pub async fn namespace_metadata(client: &kube::Client, namespace: Option<&str>) -> Result<Vec<ObjectMeta>, ReadError> {
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
    match namespace {
        Some(name) => Ok(api
            .get_opt(name)
            .await
            .map_err(|e| ReadError::Api {
                action: format!("read namespace {name}"),
                message: api_error(&e),
            })?
            .map(|ns| ns.metadata)
            .into_iter()
            .collect()),
        None => list_paged(&api, ListParams::default(), "the Namespaces", |ns| Some(ns.metadata)).await,
    }
}

/// The whole Pods among `wanted` (namespace → uids), as `decision` reads them; one paged
/// list per namespace, keeping only the wanted ones.
pub async fn pods_by_uid(
    client: &kube::Client,
    wanted: &BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Result<Vec<(ObjectMeta, Subject)>, ReadError> {
    let mut out = Vec::new();
    for (namespace, uids) in wanted {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let what = format!("the Pods of namespace {namespace}");
        let found = list_paged(&api, ListParams::default(), &what, |pod: Pod| {
            let uid = pod.metadata.uid.as_deref()?;
            uids.contains(uid).then(|| (pod.metadata.clone(), pod_subject(&pod)))
        })
        .await?;
        out.extend(found);
    }
    Ok(out)
}
