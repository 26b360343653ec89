//! Objects the tiers create, and readers of what the API server stored.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, MutatingWebhookConfiguration, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::{PART_OF, api_error};

/// Pod annotation: opt in (`"true"`) or out (`"false"`).
pub const INJECT: &str = "sidecar.samplecrd.k8s.io/inject";
/// Pod annotation: join the Network of that name.
pub const NETWORK: &str = "sidecar.samplecrd.k8s.io/network";
/// Pod annotation written by the injector.
pub const STATUS: &str = "sidecar.samplecrd.k8s.io/status";
/// Namespace label that opts every Pod in (`enabled`).
pub const NAMESPACE_OPT_IN: (&str, &str) = ("sidecar.samplecrd.k8s.io/inject", "enabled");
/// The Network finalizer.
pub const FINALIZER: &str = "samplecrd.k8s.io/network-cleanup";

/// The image of the first container of embedded template `name` (`config`, `classic`):
/// what a Pod injected with the shipped ConfigMap's template of that name runs.
pub fn embedded_image(name: &str) -> String {
    envoy_injector::template::TemplateSet::embedded()
        .get(name)
        .unwrap_or_else(|| panic!("no embedded template `{name}`"))
        .spec
        .containers[0]
        .image
        .clone()
        .unwrap_or_else(|| panic!("embedded template `{name}` names no image"))
}

/// A template as the `envoy-injector` ConfigMap holds it: one small sidecar.
pub fn template(sidecar: &str, image: &str) -> String {
    format!(
        "containers:\n- name: {sidecar}\n  image: {image}\n  imagePullPolicy: IfNotPresent\n  resources:\n    requests:\n      cpu: 5m\n      memory: 8Mi\n"
    )
}

pub fn network_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("samplecrd.k8s.io", "v1", "Network"), "networks")
}

/// A test namespace, labelled so leftovers can be found, plus `labels`.
pub fn namespace_object(name: &str, labels: &[(&str, &str)]) -> Namespace {
    let mut all: BTreeMap<&str, &str> = labels.iter().copied().collect();
    all.insert(PART_OF.0, PART_OF.1);
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": name, "labels": all },
    }))
    .expect("a Namespace")
}

pub fn service_account_object(name: &str) -> ServiceAccount {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": name },
    }))
    .expect("a ServiceAccount")
}

/// The `envoy-injector` ConfigMap with `config` as its default template.
pub fn configmap_object(name: &str, config: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name, "labels": { PART_OF.0: PART_OF.1 } },
        "data": { "config": config },
    }))
    .expect("a ConfigMap")
}

pub use crate::common::webhooks::base64;

/// `object` as JSON, placed in `namespace` (for `kubectl apply`, which reads it from there).
pub fn in_namespace(object: &impl serde::Serialize, namespace: &str) -> Value {
    let mut value = serde_json::to_value(object).expect("an object serializes to JSON");
    value["metadata"]["namespace"] = json!(namespace);
    value
}

/// Pod CREATE in namespace `namespace` only (by its automatic name label) goes to `url`.
pub fn webhook_configuration(name: &str, namespace: &str, url: &str, ca_pem: &[u8]) -> MutatingWebhookConfiguration {
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": { "name": name, "labels": { PART_OF.0: PART_OF.1 } },
        "webhooks": [{
            "name": format!("{namespace}.e2e.sidecar.samplecrd.k8s.io"),
            "clientConfig": {
                "url": url,
                "caBundle": base64(ca_pem),
            },
            "rules": [{
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }],
            "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": namespace } },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "reinvocationPolicy": "IfNeeded",
            "timeoutSeconds": 5,
        }],
    }))
    .expect("a MutatingWebhookConfiguration")
}

/// The shipped webhook configuration `relative` (a file of `manifests/`), renamed `name`,
/// each of its webhooks sent to `url` with `ca_pem` as the `caBundle` and narrowed to
/// `namespaces` (`common::webhooks::local_webhooks`).
pub fn shipped_webhooks_at(relative: &str, name: &str, url: &str, ca_pem: &[u8], namespaces: &[&str]) -> Value {
    let metadata = json!({ "name": name, "labels": { PART_OF.0: PART_OF.1 } });
    crate::common::webhooks::local_webhooks(super::read_manifest(relative), metadata, url, ca_pem, namespaces)
}

/// A Network object (for create; the namespace comes from the `Api`).
pub fn network(name: &str, cidr: &str, gateway: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "samplecrd.k8s.io/v1",
        "kind": "Network",
        "metadata": { "name": name },
        "spec": { "cidr": cidr, "gateway": gateway },
    }))
    .expect("a Network is a DynamicObject")
}

/// The Network's `Ready` condition, if it has one.
pub fn ready_condition(obj: &DynamicObject) -> Option<&Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// What a Network looks like now, for failure messages.
pub fn network_summary(obj: &DynamicObject) -> String {
    format!(
        "Network {} generation={:?} deletionTimestamp={:?} finalizers={:?} spec={} status={}",
        obj.metadata.name.as_deref().unwrap_or("?"),
        obj.metadata.generation,
        obj.metadata.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
        obj.metadata.finalizers.as_deref().unwrap_or_default(),
        obj.data["spec"],
        obj.data.get("status").unwrap_or(&Value::Null),
    )
}

/// A Pod with one app container. With `annotations` empty the Pod has no annotation map at
/// all (the JSON Patch must then create it).
pub fn pod(name: &str, annotations: &[(&str, &str)], image: &str) -> Pod {
    let mut metadata = json!({ "name": name, "labels": { "app.kubernetes.io/name": "e2e" } });
    if !annotations.is_empty() {
        let map: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        metadata["annotations"] = json!(map);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            // No projected token volume: the stored Pod shows exactly what admission added.
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "app", "image": image, "imagePullPolicy": "IfNotPresent" }],
        },
    }))
    .expect("a Pod")
}

/// A Deployment of `replicas` Pods like [`pod`], its template annotated with `annotations`.
pub fn deployment(name: &str, replicas: i32, annotations: &[(&str, &str)], image: &str) -> Deployment {
    let map: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name }, "annotations": map },
                "spec": {
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{ "name": "app", "image": image, "imagePullPolicy": "IfNotPresent" }],
                },
            },
        },
    }))
    .expect("a Deployment")
}

/// Whether `ip` lies in `cidr` (IPv4 or IPv6; `None` when either does not parse).
pub fn ip_in_cidr(ip: &str, cidr: &str) -> Option<bool> {
    use std::net::IpAddr;
    let (network, prefix) = cidr.split_once('/')?;
    let prefix: u32 = prefix.parse().ok()?;
    // Multus may report an address with its prefix length.
    let ip: IpAddr = ip.split('/').next()?.parse().ok()?;
    match (ip, network.parse::<IpAddr>().ok()?) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            Some(u32::from(ip) & mask == u32::from(net) & mask)
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            Some(u128::from(ip) & mask == u128::from(net) & mask)
        }
        (IpAddr::V4(_), IpAddr::V6(_)) | (IpAddr::V6(_), IpAddr::V4(_)) => Some(false),
        _ => None,
    }
}

/// The Multus `k8s.v1.cni.cncf.io/network-status` annotation: the attachment named
/// `network` (`namespace/name`, or `name`) and its IPs.
pub fn attachment_ips(network_status: &str, namespace: &str, network: &str) -> Result<Vec<String>, String> {
    let entries: Vec<Value> = serde_json::from_str(network_status)
        .map_err(|e| format!("the network-status annotation is not a JSON list ({e}): {network_status}"))?;
    let qualified = format!("{namespace}/{network}");
    let entry = entries
        .iter()
        .find(|e| e["name"] == qualified.as_str() || e["name"] == network)
        .ok_or_else(|| format!("no attachment named {qualified} in the network-status annotation: {network_status}"))?;
    Ok(entry["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.as_str().map(str::to_string))
        .collect())
}

/// A container of the Pod by name, regular or init (a native sidecar is an init container).
pub fn container<'p>(pod: &'p Pod, name: &str) -> Option<&'p Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

pub fn env_value<'c>(container: &'c Container, name: &str) -> Option<&'c str> {
    container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)?
        .value
        .as_deref()
}

pub fn annotation<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

pub fn label<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// What admission left on a Pod, for failure messages.
pub fn describe_pod(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    let names = |list: Option<&Vec<Container>>| list.into_iter().flatten().map(|c| c.name.clone()).collect::<Vec<_>>();
    format!(
        "Pod {} containers={:?} initContainers={:?} volumes={:?} annotations={:?} labels={:?}",
        pod.metadata.name.as_deref().unwrap_or("?"),
        names(spec.map(|s| &s.containers)),
        names(spec.and_then(|s| s.init_containers.as_ref())),
        spec.and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .map(|v| v.name.clone())
            .collect::<Vec<_>>(),
        pod.metadata.annotations.clone().unwrap_or_default(),
        pod.metadata.labels.clone().unwrap_or_default(),
    )
}

/// `Ok` when the Pod is Running with each of `containers` running (regular or init, so a
/// native sidecar counts); `Err` says what it is doing instead.
pub fn running(p: &Pod, containers: &[&str]) -> Result<(), String> {
    let status = p.status.clone().unwrap_or_default();
    let statuses: Vec<_> = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .collect();
    let is_running = |c: &str| {
        statuses
            .iter()
            .any(|s| s.name == c && s.state.as_ref().is_some_and(|st| st.running.is_some()))
    };
    if status.phase.as_deref() == Some("Running") && containers.iter().all(|c| is_running(c)) {
        return Ok(());
    }
    Err(format!(
        "phase {:?}, containers {:?}, conditions {:?}",
        status.phase,
        statuses
            .iter()
            .map(|s| {
                let state = s.state.as_ref();
                let waiting = state.and_then(|st| st.waiting.as_ref());
                format!(
                    "{} running={} waiting={:?} {:?}",
                    s.name,
                    state.is_some_and(|st| st.running.is_some()),
                    waiting.and_then(|w| w.reason.clone()),
                    waiting.and_then(|w| w.message.clone()),
                )
            })
            .collect::<Vec<_>>(),
        conditions_summary(status.conditions.as_deref())
    ))
}

/// A status condition of any kind, for failure messages.
pub trait Condition {
    /// `type`, `status` and `message`.
    fn parts(&self) -> (&str, &str, Option<&str>);
}

impl Condition for k8s_openapi::api::core::v1::PodCondition {
    fn parts(&self) -> (&str, &str, Option<&str>) {
        (&self.type_, &self.status, self.message.as_deref())
    }
}

impl Condition for k8s_openapi::api::apps::v1::DeploymentCondition {
    fn parts(&self) -> (&str, &str, Option<&str>) {
        (&self.type_, &self.status, self.message.as_deref())
    }
}

/// `type=status message` of each condition.
pub fn conditions_summary<C: Condition>(conditions: Option<&[C]>) -> Vec<String> {
    conditions
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let (type_, status, message) = c.parts();
            format!("{type_}={status} {}", message.unwrap_or(""))
        })
        .collect()
}

/// The kinds of the compiled admission policies and their bindings.
pub fn policy_kinds() -> [ApiResource; 4] {
    [
        ApiResource::erase::<MutatingAdmissionPolicy>(&()),
        ApiResource::erase::<MutatingAdmissionPolicyBinding>(&()),
        ApiResource::erase::<ValidatingAdmissionPolicy>(&()),
        ApiResource::erase::<ValidatingAdmissionPolicyBinding>(&()),
    ]
}

/// Every admission policy and binding labelled `app.kubernetes.io/managed-by=envoy-injector`:
/// its kind and metadata.
pub async fn compiled_objects(client: &kube::Client) -> Result<Vec<(String, ObjectMeta)>, String> {
    let mut out = Vec::new();
    for kind in policy_kinds() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind);
        let list = api
            .list_metadata(&ListParams::default().labels("app.kubernetes.io/managed-by=envoy-injector"))
            .await
            .map_err(|e| format!("cannot list {}: {}", kind.kind, api_error(&e)))?;
        out.extend(list.items.into_iter().map(|item| (kind.kind.clone(), item.metadata)));
    }
    Ok(out)
}

/// What of ours still acts on Pods: every compiled object labelled ours, and the webhook
/// configurations named `name`, as `Kind name`. Empty once an installation is removed.
pub async fn acting_on_pods(client: &kube::Client, name: &str) -> Result<Vec<String>, String> {
    let mut left: Vec<String> = compiled_objects(client)
        .await?
        .into_iter()
        .map(|(kind, meta)| format!("{kind} {}", meta.name.unwrap_or_default()))
        .collect();
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    if mutating.get_opt(name).await.map_err(|e| api_error(&e))?.is_some() {
        left.push(format!("MutatingWebhookConfiguration {name}"));
    }
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if validating.get_opt(name).await.map_err(|e| api_error(&e))?.is_some() {
        left.push(format!("ValidatingWebhookConfiguration {name}"));
    }
    Ok(left)
}
