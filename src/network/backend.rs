//! The "actual state" behind a Network: a trait, the Multus backend (one
//! NetworkAttachmentDefinition per Network) and the status-only `none` backend.
//!
//! The trait is dyn-compatible (methods return [`BoxFuture`]) so the controller holds an
//! `Arc<dyn Backend>` chosen at start by `--network-backend`.
//!
//! # Telling "the NAD CRD is not installed" from "this NAD does not exist"
//!
//! Both answer a GET with HTTP 404, but the bodies differ:
//!
//! * a missing *object* is a `Status` with `reason: NotFound` whose `details.name` is the
//!   requested name (`network-attachment-definitions.k8s.cni.cncf.io "x" not found`);
//! * a missing *resource type* has no object name in the answer: either a `Status` whose
//!   `details` carry only group/kind (or nothing: "the server could not find the requested
//!   resource", when the group exists without that resource), or a plain-text
//!   `404 page not found` when the whole `k8s.cni.cncf.io` group is unknown.
//!
//! So a 404 that names the requested object means "create it"; any other 404 means the CRD
//! is missing ([`BackendError::Unavailable`]). This costs no extra discovery request.
//!
//! # Asking only when the index cannot tell
//!
//! The Multus backend first consults its [`NadIndex`] (kept by the controller's NAD
//! watch): a NAD in place with the desired fingerprint costs no request; a NAD known to be
//! absent is created at once (a 409 then falls back to the read path). Only when the index
//! cannot tell (not listed yet, watch failing) or the NAD drifted is it read first.

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams, Preconditions};
use kube::core::{GroupVersionKind, Status};
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;
use std::sync::Arc;

use super::crd::Network;
use super::nad::{self, MANAGED_BY_LABEL, MANAGER, NAD_GROUP, NAD_KIND, NAD_PLURAL, NAD_VERSION};
use super::nad_index::{Facts, Known, NadIndex};

/// What [`Backend::ensure`] or [`Backend::remove`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendState {
    /// The backend object that realises the Network, e.g.
    /// `NetworkAttachmentDefinition/default/example-network` (`none` for [`NoBackend`]).
    pub reference: String,
    /// True when a write was made (created, replaced or deleted).
    pub changed: bool,
}

/// Why the backend could not reach the desired state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The backend itself is missing from the cluster (e.g. the NAD CRD is not installed).
    /// Persistent until an operator acts: reported as a condition, retried with backoff.
    #[error("{message}")]
    Unavailable { message: String },
    /// The backend object exists but belongs to someone else: it is left untouched.
    #[error("{message}")]
    Conflict { message: String },
    /// An API call failed (transient or permission error): retried with backoff, the
    /// Network's status is left as it was.
    #[error("{action} {reference} failed: {message}")]
    Failed {
        action: &'static str,
        reference: String,
        message: String,
    },
}

/// The "actual state" of Networks. Both methods must be idempotent: the controller calls
/// them again after restarts, failures and periodic resyncs.
pub trait Backend: Send + Sync {
    /// Short name, as given to `--network-backend`.
    fn name(&self) -> &'static str;

    /// The kind of object this backend creates, owned by (with an ownerReference to) its
    /// Network and labelled `app.kubernetes.io/managed-by=envoy-injector`, so the controller
    /// watches it and repairs drift. `None` when the backend creates no Kubernetes objects.
    fn owned_resource(&self) -> Option<ApiResource> {
        None
    }

    /// What the backend knows of its owned objects without asking, kept current by the
    /// controller's watch of [`Backend::owned_resource`]. `None`: it always asks.
    fn nad_index(&self) -> Option<Arc<NadIndex>> {
        None
    }

    /// Makes the backend match the Network's spec. Writes only when something is missing
    /// or differs; a no-op reconcile makes no write (and, with an index, no request).
    fn ensure<'a>(&'a self, network: &'a Network) -> BoxFuture<'a, Result<BackendState, BackendError>>;

    /// Removes the Network's backend state. Nothing to remove (already gone, or the backend
    /// is not installed) is success with `changed: false`.
    fn remove<'a>(&'a self, network: &'a Network) -> BoxFuture<'a, Result<BackendState, BackendError>>;
}

/// `--network-backend none`: Networks get a status, nothing else.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoBackend;

/// [`BackendState::reference`] of [`NoBackend`].
pub const NO_BACKEND_REFERENCE: &str = "none";

impl Backend for NoBackend {
    fn name(&self) -> &'static str {
        "none"
    }

    fn ensure<'a>(&'a self, _network: &'a Network) -> BoxFuture<'a, Result<BackendState, BackendError>> {
        futures::future::ready(Ok(unchanged(NO_BACKEND_REFERENCE.to_string()))).boxed()
    }

    fn remove<'a>(&'a self, _network: &'a Network) -> BoxFuture<'a, Result<BackendState, BackendError>> {
        futures::future::ready(Ok(unchanged(NO_BACKEND_REFERENCE.to_string()))).boxed()
    }
}

fn unchanged(reference: String) -> BackendState {
    BackendState {
        reference,
        changed: false,
    }
}

/// The default backend: one Multus `NetworkAttachmentDefinition` (`k8s.cni.cncf.io/v1`) per
/// Network, same namespace and name, owned by the Network.
#[derive(Clone)]
pub struct MultusBackend {
    client: Client,
    resource: ApiResource,
    index: Arc<NadIndex>,
}

/// The message of [`BackendError::Unavailable`] for the Multus backend.
pub const NAD_CRD_MISSING: &str = "NetworkAttachmentDefinition CRD (k8s.cni.cncf.io/v1) is not installed; \
     install Multus or run with --network-backend none";

impl MultusBackend {
    /// A backend with an empty index: until a watch fills it (the controller's `run`
    /// does), every call reads the NAD first.
    pub fn new(client: Client) -> MultusBackend {
        MultusBackend {
            client,
            resource: nad_resource(),
            index: Arc::new(NadIndex::new()),
        }
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &self.resource)
    }
}

/// `k8s.cni.cncf.io/v1` `NetworkAttachmentDefinition` (`network-attachment-definitions`).
pub fn nad_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(NAD_GROUP, NAD_VERSION, NAD_KIND), NAD_PLURAL)
}

/// `NetworkAttachmentDefinition/<namespace>/<name>`.
pub fn nad_reference(namespace: &str, name: &str) -> String {
    format!("{NAD_KIND}/{namespace}/{name}")
}

/// The identity a Network's backend call needs: namespace, name and uid (set by the API
/// server on every stored object).
fn identity(network: &Network, action: &'static str) -> Result<(String, String, String), BackendError> {
    let name = network.name_any();
    let namespace = network.namespace();
    let uid = network.uid();
    match (namespace, uid) {
        (Some(namespace), Some(uid)) => Ok((namespace, name, uid)),
        (namespace, uid) => Err(BackendError::Failed {
            action,
            reference: nad_reference(namespace.as_deref().unwrap_or("<none>"), &name),
            message: format!(
                "expected the Network to carry metadata.namespace and metadata.uid, found namespace {namespace:?} and uid {uid:?}"
            ),
        }),
    }
}

/// A 404 is "object missing" only when the answer names the object; see the module docs.
enum Missing {
    Object,
    ResourceType,
}

fn not_found(status: &Status, name: &str) -> Option<Missing> {
    let is_404 = status.code == 404 || status.reason == "NotFound";
    if !is_404 {
        return None;
    }
    let names_object = status.details.as_ref().is_some_and(|d| d.name == name);
    Some(if names_object {
        Missing::Object
    } else {
        Missing::ResourceType
    })
}

/// True when a live NAD was made by this controller (our label, or an ownerReference to a
/// Network, e.g. one left by a deleted Network of the same name that the garbage collector
/// has not removed yet). Anything else is someone else's and is never touched.
pub fn managed_by_us(live: &DynamicObject) -> bool {
    let labelled = live.labels().get(MANAGED_BY_LABEL).is_some_and(|v| v == MANAGER);
    let owned = live
        .owner_references()
        .iter()
        .any(|o| o.kind == Network::kind(&()) && o.api_version == Network::api_version(&()));
    labelled || owned
}

fn failed(action: &'static str, reference: &str, error: kube::Error) -> BackendError {
    BackendError::Failed {
        action,
        reference: reference.to_string(),
        message: error.to_string(),
    }
}

/// What a create found.
enum Created {
    Done(BackendState),
    /// HTTP 409: a NAD of that name exists already.
    Exists,
}

impl MultusBackend {
    async fn ensure_nad(&self, network: &Network) -> Result<BackendState, BackendError> {
        let (namespace, name, uid) = identity(network, "ensure")?;
        let reference = nad_reference(&namespace, &name);
        let owner = nad::Owner {
            api_version: &Network::api_version(&()),
            kind: &Network::kind(&()),
            name: &name,
            uid: &uid,
        };
        let desired = nad::render(&namespace, &owner, &network.spec.cidr, &network.spec.gateway);
        let fingerprint = nad::fingerprint(&desired);
        let api = self.api(&namespace);
        match self.index.lookup(&namespace, &name) {
            Known::Present(facts) if facts.fingerprint == fingerprint => {
                return Ok(unchanged(reference));
            }
            Known::Absent => {
                if let Created::Done(state) = self
                    .create(&api, &name, reference.clone(), &desired, fingerprint)
                    .await?
                {
                    return Ok(state);
                }
                // Someone else's NAD of that name, or ours not seen yet: read it.
            }
            Known::Present(_) | Known::Unknown => {}
        }
        match api.get(&name).await {
            Ok(live) => {
                if !managed_by_us(&live) {
                    return Err(BackendError::Conflict {
                        message: format!(
                            "{reference} exists but is not managed by {MANAGER}: expected label \
                             {MANAGED_BY_LABEL}={MANAGER} or an ownerReference to a Network, found neither; \
                             delete that NetworkAttachmentDefinition or rename the Network"
                        ),
                    });
                }
                // The comparison the index makes, on the object just read.
                if Facts::of(&live).is_some_and(|facts| facts.fingerprint == fingerprint) {
                    return Ok(unchanged(reference));
                }
                tracing::info!(nad = %reference, "NetworkAttachmentDefinition drifted from its Network; replacing it");
                let replacement = repaired(live, &desired);
                // Announced, as for a create: our own change is no drift.
                self.index.expect(&namespace, &name, fingerprint);
                let replaced = match api.replace(&name, &PostParams::default(), &replacement).await {
                    Ok(replaced) => replaced,
                    Err(e) => {
                        self.index.unexpect(&namespace, &name);
                        return Err(failed("replace", &reference, e));
                    }
                };
                self.index.record(&replaced);
                Ok(BackendState {
                    reference,
                    changed: true,
                })
            }
            Err(kube::Error::Api(status)) => match not_found(&status, &name) {
                Some(Missing::Object) => match self
                    .create(&api, &name, reference.clone(), &desired, fingerprint)
                    .await?
                {
                    Created::Done(state) => Ok(state),
                    Created::Exists => Err(BackendError::Failed {
                        action: "create",
                        reference,
                        message: "expected the NetworkAttachmentDefinition to be missing (GET answered 404), \
                                  found it created meanwhile (409)"
                            .to_string(),
                    }),
                },
                Some(Missing::ResourceType) => Err(BackendError::Unavailable {
                    message: NAD_CRD_MISSING.to_string(),
                }),
                None => Err(failed("get", &reference, kube::Error::Api(status))),
            },
            Err(other) => Err(failed("get", &reference, other)),
        }
    }

    async fn create(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        reference: String,
        desired: &Value,
        fingerprint: u64,
    ) -> Result<Created, BackendError> {
        let object: DynamicObject = serde_json::from_value(desired.clone()).map_err(|e| BackendError::Failed {
            action: "render",
            reference: reference.clone(),
            message: e.to_string(),
        })?;
        let namespace = object.namespace().unwrap_or_default();
        self.index.expect(&namespace, name, fingerprint);
        let result = api.create(&PostParams::default(), &object).await;
        if result.is_err() {
            self.index.unexpect(&namespace, name);
        }
        match result {
            Ok(created) => {
                // Before its watch event arrives, so the event is no news.
                self.index.record(&created);
                tracing::info!(nad = %reference, "created NetworkAttachmentDefinition");
                Ok(Created::Done(BackendState {
                    reference,
                    changed: true,
                }))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Created::Exists),
            Err(kube::Error::Api(s)) if matches!(not_found(&s, name), Some(Missing::ResourceType)) => {
                Err(BackendError::Unavailable {
                    message: NAD_CRD_MISSING.to_string(),
                })
            }
            Err(other) => Err(failed("create", &reference, other)),
        }
    }

    async fn remove_nad(&self, network: &Network) -> Result<BackendState, BackendError> {
        let (namespace, name, _uid) = identity(network, "remove")?;
        let reference = nad_reference(&namespace, &name);
        let api = self.api(&namespace);
        let uid = match self.index.lookup(&namespace, &name) {
            // None of ours by that name. One that lost our label but kept our owner
            // reference goes with the Network through the garbage collector.
            Known::Absent => return Ok(unchanged(reference)),
            Known::Present(Facts { uid: Some(uid), .. }) => uid,
            Known::Present(_) | Known::Unknown => {
                let live = match api.get(&name).await {
                    Ok(live) => live,
                    // Gone already, or the CRD is not installed: nothing to remove either way.
                    Err(kube::Error::Api(status)) if not_found(&status, &name).is_some() => {
                        return Ok(unchanged(reference));
                    }
                    Err(other) => return Err(failed("get", &reference, other)),
                };
                if !managed_by_us(&live) {
                    tracing::warn!(nad = %reference, "not removing NetworkAttachmentDefinition: it is not managed by {MANAGER}");
                    return Ok(unchanged(reference));
                }
                live.uid().unwrap_or_default()
            }
        };
        // The uid precondition makes sure a NAD recreated meanwhile by someone else is not
        // the one deleted.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                self.index.forget(&namespace, &name);
                tracing::info!(nad = %reference, "deleted NetworkAttachmentDefinition");
                Ok(BackendState {
                    reference,
                    changed: true,
                })
            }
            Err(kube::Error::Api(status)) if not_found(&status, &name).is_some() => {
                self.index.forget(&namespace, &name);
                Ok(unchanged(reference))
            }
            Err(other) => Err(failed("delete", &reference, other)),
        }
    }
}

/// The live NAD with the desired config, owner and label, everything else (other labels,
/// annotations, resourceVersion for optimistic concurrency) kept.
fn repaired(mut live: DynamicObject, desired: &Value) -> DynamicObject {
    if let Some(spec) = desired.get("spec") {
        live.data["spec"] = spec.clone();
    }
    if let Some(owners) = desired.pointer("/metadata/ownerReferences").cloned() {
        live.metadata.owner_references = serde_json::from_value(owners).ok();
    }
    live.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(MANAGED_BY_LABEL.to_string(), MANAGER.to_string());
    live
}

impl Backend for MultusBackend {
    fn name(&self) -> &'static str {
        "multus"
    }

    fn owned_resource(&self) -> Option<ApiResource> {
        Some(self.resource.clone())
    }

    fn nad_index(&self) -> Option<Arc<NadIndex>> {
        Some(self.index.clone())
    }

    fn ensure<'a>(&'a self, network: &'a Network) -> BoxFuture<'a, Result<BackendState, BackendError>> {
        self.ensure_nad(network).boxed()
    }

    fn remove<'a>(&'a self, network: &'a Network) -> BoxFuture<'a, Result<BackendState, BackendError>> {
        self.remove_nad(network).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::StatusDetails;
    use serde_json::json;

    fn status(code: u16, reason: &str, details: Option<StatusDetails>) -> Status {
        Status {
            code,
            reason: reason.to_string(),
            details,
            ..Status::failure("x", reason)
        }
    }

    #[test]
    fn a_404_naming_the_object_is_a_missing_object_anything_else_a_missing_crd() {
        let details = |name: &str| StatusDetails {
            name: name.into(),
            group: NAD_GROUP.into(),
            kind: NAD_PLURAL.into(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 0,
        };
        let named = details("net");
        assert!(matches!(
            not_found(&status(404, "NotFound", Some(named)), "net"),
            Some(Missing::Object)
        ));
        let unnamed = details("");
        assert!(matches!(
            not_found(&status(404, "NotFound", Some(unnamed)), "net"),
            Some(Missing::ResourceType)
        ));
        // Plain-text "404 page not found", as kube-client reconstructs it.
        let plain = Status::failure("404 page not found", "Failed to parse error data").with_code(404);
        assert!(matches!(not_found(&plain, "net"), Some(Missing::ResourceType)));
        assert!(not_found(&status(403, "Forbidden", None), "net").is_none());
    }

    #[test]
    fn ownership_is_our_label_or_a_network_owner() {
        let mut nad: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "n", "namespace": "default"}, "spec": {"config": "{}"}
        }))
        .unwrap();
        assert!(!managed_by_us(&nad));
        nad.metadata.labels = Some([(MANAGED_BY_LABEL.to_string(), MANAGER.to_string())].into());
        assert!(managed_by_us(&nad));
        nad.metadata.labels = None;
        nad.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "samplecrd.k8s.io/v1".into(),
            kind: "Network".into(),
            name: "n".into(),
            uid: "old".into(),
            ..Default::default()
        }]);
        assert!(managed_by_us(&nad));
    }

    #[test]
    fn repair_takes_desired_config_and_owner_and_keeps_the_rest() {
        let owner = nad::Owner {
            api_version: "samplecrd.k8s.io/v1",
            kind: "Network",
            name: "n",
            uid: "u-2",
        };
        let desired = nad::render("default", &owner, "10.0.0.0/24", "10.0.0.1");
        let live: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "n", "namespace": "default", "resourceVersion": "7",
                         "annotations": {"keep": "me"}, "labels": {"team": "a"}},
            "spec": {"config": "{\"type\":\"macvlan\"}"}
        }))
        .unwrap();
        let fixed = repaired(live, &desired);
        let value = serde_json::to_value(&fixed).unwrap();
        assert!(!nad::drifted(&value, &desired));
        assert_eq!(value["metadata"]["resourceVersion"], "7");
        assert_eq!(value["metadata"]["annotations"]["keep"], "me");
        assert_eq!(value["metadata"]["labels"]["team"], "a");
        assert_eq!(value["metadata"]["labels"][MANAGED_BY_LABEL], MANAGER);
    }

    #[test]
    fn nad_resource_and_reference() {
        let ar = nad_resource();
        assert_eq!(ar.api_version, "k8s.cni.cncf.io/v1");
        assert_eq!(ar.plural, "network-attachment-definitions");
        assert_eq!(
            nad_reference("default", "example-network"),
            "NetworkAttachmentDefinition/default/example-network"
        );
    }
}
