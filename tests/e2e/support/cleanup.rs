//! What a tier (or the suite) created outside this process, undone when its [`Scope`] is
//! dropped: on success and on a failed step alike.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::json;

use super::{Mode, POLL, api_error, network_resource, shout, step};
use crate::common::poll::{self, Miss};

enum Undo {
    /// Delete an object (cluster-scoped when `namespace` is `None`).
    Delete {
        resource: ApiResource,
        namespace: Option<String>,
        name: String,
    },
    /// Put key `config` of a ConfigMap back (remove it when `None`).
    RestoreTemplate {
        namespace: String,
        configmap: String,
        original: Option<String>,
    },
    /// Delete a test namespace, first stripping the finalizers of its Networks when no
    /// controller is left to remove them.
    Namespace { name: String, strip_finalizers: bool },
}

/// Undo actions, run last-registered first (like `defer`): a webhook configuration
/// registered after its namespace is deleted before it, so nothing calls a dead webhook.
///
/// Declare the scope before the tier's processes: they are dropped (stopped) first, then
/// the scope strips the finalizers their controller can no longer remove.
pub struct Scope {
    mode: Mode,
    undo: Mutex<Vec<Undo>>,
}

impl Scope {
    pub fn new(mode: Mode) -> Scope {
        Scope {
            mode,
            undo: Mutex::new(Vec::new()),
        }
    }

    fn push(&self, undo: Undo) {
        self.undo.lock().unwrap_or_else(|e| e.into_inner()).push(undo);
    }

    pub fn delete_later(&self, resource: ApiResource, namespace: Option<&str>, name: &str) {
        self.push(Undo::Delete {
            resource,
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        });
    }

    pub fn restore_template(&self, namespace: &str, configmap: &str, original: Option<String>) {
        self.push(Undo::RestoreTemplate {
            namespace: namespace.to_string(),
            configmap: configmap.to_string(),
            original,
        });
    }

    pub fn namespace(&self, name: &str) {
        self.push(Undo::Namespace {
            name: name.to_string(),
            // A deployed controller removes the finalizers itself.
            strip_finalizers: self.mode == Mode::Local,
        });
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let undo = std::mem::take(self.undo.get_mut().unwrap_or_else(|e| e.into_inner()));
        if undo.is_empty() {
            return;
        }
        // A thread of its own with a runtime of its own: this works whether or not the drop
        // happens inside a runtime, and a dead cluster cannot hang it (every call is bounded).
        let tidy =
            std::thread::spawn(
                move || match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime.block_on(tidy(undo)),
                    Err(e) => shout(&format!(
                        "e2e cleanup: cannot build a runtime ({e}); delete leftovers by hand"
                    )),
                },
            );
        let _ = tidy.join();
    }
}

const CALL_LIMIT: Duration = Duration::from_secs(15);

async fn bounded<T>(what: &str, call: impl Future<Output = Result<T, kube::Error>>) -> Option<T> {
    match tokio::time::timeout(CALL_LIMIT, call).await {
        Ok(Ok(value)) => Some(value),
        Ok(Err(kube::Error::Api(status))) if status.is_not_found() => None,
        Ok(Err(e)) => {
            shout(&format!("e2e cleanup: {what} failed: {}", api_error(&e)));
            None
        }
        Err(_) => {
            shout(&format!("e2e cleanup: {what} took longer than {CALL_LIMIT:?}"));
            None
        }
    }
}

async fn tidy(mut undo: Vec<Undo>) {
    let client = match tokio::time::timeout(CALL_LIMIT, Client::try_default()).await {
        Ok(Ok(client)) => client,
        _ => {
            shout(
                "e2e cleanup: no API client; leftovers (if any) are labelled app.kubernetes.io/part-of=envoy-injector-e2e",
            );
            return;
        }
    };
    let mut namespaces_deleted = Vec::new();
    while let Some(action) = undo.pop() {
        match action {
            Undo::Delete {
                resource,
                namespace,
                name,
            } => {
                let api: Api<DynamicObject> = match &namespace {
                    Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                    None => Api::all_with(client.clone(), &resource),
                };
                let what = format!("deleting {} {name}", resource.kind);
                if bounded(&what, api.delete(&name, &DeleteParams::background()))
                    .await
                    .is_some()
                {
                    step!("cleanup: deleted {} {name}", resource.kind);
                }
            }
            Undo::RestoreTemplate {
                namespace,
                configmap,
                original,
            } => {
                let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
                let patch = json!({ "data": { "config": original } });
                let what = format!("restoring the template of ConfigMap {namespace}/{configmap}");
                if bounded(
                    &what,
                    configmaps.patch(&configmap, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await
                .is_some()
                {
                    step!("cleanup: restored the template of ConfigMap {namespace}/{configmap}");
                }
            }
            Undo::Namespace { name, strip_finalizers } => {
                if strip_finalizers {
                    strip_network_finalizers(&client, &name).await;
                }
                let namespaces: Api<Namespace> = Api::all(client.clone());
                let what = format!("deleting namespace {name}");
                if bounded(&what, namespaces.delete(&name, &DeleteParams::background()))
                    .await
                    .is_some()
                {
                    namespaces_deleted.push(name);
                }
            }
        }
    }
    wait_gone(&client, &namespaces_deleted).await;
}

/// The next tier must not meet this one's objects (a controller would reconcile its
/// Networks, for one): wait until the namespaces are gone, bounded.
async fn wait_gone(client: &Client, names: &[String]) {
    const LIMIT: Duration = Duration::from_secs(90);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let start = std::time::Instant::now();
    for name in names {
        let gone = poll::until(
            &format!("namespace {name} to be gone"),
            LIMIT.saturating_sub(start.elapsed()),
            POLL,
            async || match tokio::time::timeout(CALL_LIMIT, namespaces.get_opt(name)).await {
                Ok(Ok(None)) => Ok(()),
                Ok(Ok(Some(_))) => Err(Miss::Retry("still there".into())),
                Ok(Err(e)) => Err(Miss::Fatal(api_error(&e))),
                Err(_) => Err(Miss::Fatal(format!("no answer within {CALL_LIMIT:?}"))),
            },
        )
        .await;
        match gone {
            Ok(()) => step!("cleanup: namespace {name} deleted"),
            Err(e) => shout(&format!(
                "e2e cleanup: namespace {name} still there after {LIMIT:?} ({e}); the next tier may meet its objects"
            )),
        }
    }
}

/// The test's controller is stopped: nothing else would remove the Networks' finalizers,
/// and the namespace could never go.
async fn strip_network_finalizers(client: &Client, namespace: &str) {
    let networks: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &network_resource());
    let Some(list) = bounded("listing leftover Networks", networks.list(&ListParams::default())).await else {
        return;
    };
    for obj in list.items {
        let Some(name) = obj.metadata.name.clone() else {
            continue;
        };
        if obj.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
            let patch = json!({ "metadata": { "finalizers": null } });
            let what = format!("removing the finalizers of Network {name}");
            bounded(
                &what,
                networks.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await;
        }
    }
}
