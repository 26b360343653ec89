//! `serve`'s side of the compiled policies (the only part of `policies` that does I/O):
//! which injection mode runs, and, on the Lease holder, the compiled objects kept in step
//! with the live templates by server-side apply.
//!
//! Write order keeps every Pod that both the old and the new templates allow injected:
//! a template's objects are written policy before binding, the known-templates check
//! after every template's objects (so a new template exists before Pods may name it) and
//! before any deletion (so a removed template is unknown before its objects go), and
//! bindings are deleted before their policies. Each object carries a hash of what was
//! compiled: an object already as compiled is not written again, so a replica restarting
//! over converged state writes nothing.
//!
//! Every object written is owned (an ownerReference, no `blockOwnerDeletion`) by the
//! installation's ValidatingWebhookConfiguration, which every install path ships and
//! nobody deletes to unblock Pods: whatever removes the installation, the garbage
//! collector then removes the policies. Its uid is read before each pass and is part of
//! the hash, so objects written before ownership, or owned by an earlier copy of it, are
//! owned anew; while it is absent (the installation being removed around a replica that
//! still runs) nothing is written.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::Resource as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::Value;
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use crate::backoff::Exponential;
use crate::live::LiveTemplates;
use crate::metrics::{Metrics, ModeLabels, PolicyWriteLabels};
use crate::policies::{MANAGED_BY_LABEL, Mode, NotCompiled, Options, Path, PolicyObject, compile, names};
use crate::shutdown::CancellationToken;
use crate::template::{TemplateSet, content_revision};

/// The annotation holding the hash of an object as compiled.
pub const HASH_ANNOTATION: &str = "sidecar.samplecrd.k8s.io/policy-hash";
/// The group and version whose MutatingAdmissionPolicy policy mode needs.
const GROUP_VERSION: &str = MutatingAdmissionPolicy::API_VERSION;
/// A pass also runs this often with no template change: an object deleted or edited by
/// hand is put back.
const RESYNC: Duration = Duration::from_secs(300);
const RETRY: Exponential = Exponential::new(Duration::from_millis(500), Duration::from_secs(30));

/// Whether the API server serves MutatingAdmissionPolicy in `admissionregistration.k8s.io/v1`.
pub async fn serves_policies(client: &kube::Client) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(GROUP_VERSION).await {
        Ok(list) => Ok(list
            .resources
            .iter()
            .any(|r| r.name == MutatingAdmissionPolicy::URL_PATH_SEGMENT)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(err) => Err(err),
    }
}

/// Decides the path `mode` sets up (asking the API server for `auto`, retried while it
/// does not answer), says it in a log line and the `injection_mode` metric, and publishes it.
/// `None` only when stopped first.
pub async fn decide_path(
    client: kube::Client,
    mode: Mode,
    metrics: Metrics,
    shutdown: CancellationToken,
    publish: watch::Sender<Option<Path>>,
) {
    let mut failures = 0;
    let path = loop {
        let (path, reason) = match mode {
            Mode::Webhook => (Path::Webhook, String::from("--injection=webhook")),
            _ => match serves_policies(&client).await {
                Ok(true) => (
                    Path::Policy,
                    format!("the API server serves MutatingAdmissionPolicy {GROUP_VERSION}"),
                ),
                Ok(false) if mode == Mode::Policy => {
                    error!(
                        "--injection=policy, but the API server does not serve MutatingAdmissionPolicy {GROUP_VERSION} (Kubernetes 1.36 or later): injecting by the webhook"
                    );
                    (
                        Path::Webhook,
                        format!("no MutatingAdmissionPolicy {GROUP_VERSION} served"),
                    )
                }
                Ok(false) => (
                    Path::Webhook,
                    format!("the API server does not serve MutatingAdmissionPolicy {GROUP_VERSION}"),
                ),
                Err(err) => {
                    failures += 1;
                    warn!(error = %err, "cannot ask the API server whether it serves MutatingAdmissionPolicy yet");
                    tokio::select! {
                        () = tokio::time::sleep(RETRY.delay(failures)) => continue,
                        () = shutdown.cancelled() => return,
                    }
                }
            },
        };
        info!(mode = path.as_str(), %reason, "injection mode");
        break path;
    };
    for other in [Path::Policy, Path::Webhook] {
        let value = i64::from(other == path);
        metrics
            .injection_mode
            .get_or_create(&ModeLabels {
                mode: other.as_str().to_string(),
            })
            .set(value);
    }
    publish.send_replace(Some(path));
}

/// The Lease holder's part, until `stop`: in policy mode the compiled objects follow the
/// live templates, each owned by the ValidatingWebhookConfiguration `owner`; in webhook
/// mode the objects this injector wrote are deleted once.
pub async fn run(
    client: kube::Client,
    templates: Arc<LiveTemplates>,
    mut path: watch::Receiver<Option<Path>>,
    options: Options,
    owner: String,
    metrics: Metrics,
    stop: CancellationToken,
) {
    let path = tokio::select! {
        decided = path.wait_for(Option::is_some) => match decided {
            Ok(decided) => decided.unwrap_or(Path::Webhook),
            Err(_) => return,
        },
        () = stop.cancelled() => return,
    };
    let sync = Sync {
        client,
        options,
        owner,
        metrics: metrics.clone(),
    };
    match path {
        Path::Webhook => sync.remove_ours(&stop).await,
        Path::Policy => sync.follow(templates, &stop).await,
    }
    metrics.policies_in_step.set(0);
}

struct Sync {
    client: kube::Client,
    options: Options,
    /// The name of the ValidatingWebhookConfiguration that owns every object written.
    owner: String,
    metrics: Metrics,
}

/// One compiled object as written: its kind's resource, its name, its JSON.
struct Desired {
    resource: ApiResource,
    name: String,
    body: Value,
    hash: String,
}

/// An object of ours found in the cluster.
struct Existing {
    resource: ApiResource,
    name: String,
    hash: Option<String>,
    written_by_us: bool,
}

fn resources() -> [ApiResource; 4] {
    [
        ApiResource::erase::<ValidatingAdmissionPolicyBinding>(&()),
        ApiResource::erase::<MutatingAdmissionPolicyBinding>(&()),
        ApiResource::erase::<ValidatingAdmissionPolicy>(&()),
        ApiResource::erase::<MutatingAdmissionPolicy>(&()),
    ]
}

fn resource_of(object: &PolicyObject) -> ApiResource {
    match object {
        PolicyObject::Mutating(_) => ApiResource::erase::<MutatingAdmissionPolicy>(&()),
        PolicyObject::MutatingBinding(_) => ApiResource::erase::<MutatingAdmissionPolicyBinding>(&()),
        PolicyObject::Validating(_) => ApiResource::erase::<ValidatingAdmissionPolicy>(&()),
        PolicyObject::ValidatingBinding(_) => ApiResource::erase::<ValidatingAdmissionPolicyBinding>(&()),
    }
}

/// The objects of `set` as they are written, owned by `owner`, each with the hash of its
/// compiled JSON and ownerReference.
fn desired(set: &TemplateSet, options: &Options, owner: &OwnerReference) -> (Vec<Desired>, Vec<NotCompiled>) {
    let compiled = compile(set, options);
    let owners = serde_json::to_value([owner]).unwrap_or_default();
    let objects = compiled
        .objects
        .iter()
        .filter_map(|object| {
            let mut body = serde_json::to_value(object).ok()?;
            body["metadata"]["ownerReferences"] = owners.clone();
            let hash = content_revision(&body.to_string());
            body["metadata"]["annotations"][HASH_ANNOTATION] = Value::String(hash.clone());
            Some(Desired {
                resource: resource_of(object),
                name: object.name().to_string(),
                body,
                hash,
            })
        })
        .collect();
    (objects, compiled.not_compiled)
}

/// What one pass wrote.
#[derive(Debug, Default)]
struct Writes {
    applied: Vec<String>,
    deleted: Vec<String>,
}

impl Sync {
    fn api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), resource)
    }

    /// Every object labelled ours, of the four kinds (bindings first).
    async fn ours(&self) -> Result<Vec<Existing>, kube::Error> {
        let selector = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={}", crate::NAME));
        let mut out = Vec::new();
        for resource in resources() {
            for item in self.api(&resource).list_metadata(&selector).await?.items {
                let meta = item.metadata;
                out.push(Existing {
                    resource: resource.clone(),
                    name: meta.name.unwrap_or_default(),
                    hash: meta.annotations.and_then(|a| a.get(HASH_ANNOTATION).cloned()),
                    written_by_us: meta
                        .managed_fields
                        .iter()
                        .flatten()
                        .any(|m| m.manager.as_deref() == Some(crate::NAME)),
                });
            }
        }
        Ok(out)
    }

    /// The owner as it is now (its uid), or `None` when it does not exist.
    async fn owner(&self) -> Result<Option<OwnerReference>, kube::Error> {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let Some(found) = api.get_metadata_opt(&self.owner).await? else {
            return Ok(None);
        };
        Ok(found.metadata.uid.map(|uid| OwnerReference {
            api_version: ValidatingWebhookConfiguration::api_version(&()).into_owned(),
            kind: ValidatingWebhookConfiguration::kind(&()).into_owned(),
            name: self.owner.clone(),
            uid,
            block_owner_deletion: None,
            controller: None,
        }))
    }

    /// One pass: the compiled objects of `set` applied where they differ, ours that
    /// `set` no longer has deleted; `None`, and nothing written, while the owner is absent.
    async fn converge(&self, set: &TemplateSet) -> Result<Option<Writes>, kube::Error> {
        let Some(owner) = self.owner().await? else {
            return Ok(None);
        };
        let (desired, not_compiled) = desired(set, &self.options, &owner);
        for left in &not_compiled {
            debug!(template = %left.template, reason = %left.reason, "template left to the webhook");
        }
        let existing = self.ours().await?;
        let found: BTreeMap<(String, String), Option<&String>> = existing
            .iter()
            .map(|e| ((e.resource.kind.clone(), e.name.clone()), e.hash.as_ref()))
            .collect();
        let mut writes = Writes::default();
        let params = PatchParams::apply(crate::NAME).force();
        for object in &desired {
            let key = (object.resource.kind.clone(), object.name.clone());
            if found.get(&key).copied().flatten() == Some(&object.hash) {
                continue;
            }
            self.api(&object.resource)
                .patch(&object.name, &params, &Patch::Apply(&object.body))
                .await?;
            self.count("apply");
            writes.applied.push(format!("{} {}", object.resource.kind, object.name));
        }
        // `existing` lists bindings first: a policy goes after its binding. Objects of the
        // previous layout go too, applied by hand or not: the present one, written above,
        // injects and denies as they did.
        for stale in existing.iter().filter(|e| {
            (e.written_by_us || names::previous_layout(&e.name))
                && !desired
                    .iter()
                    .any(|d| d.resource.kind == e.resource.kind && d.name == e.name)
        }) {
            match self.delete(stale).await {
                Ok(()) => writes.deleted.push(format!("{} {}", stale.resource.kind, stale.name)),
                // The shipped roles name the compiled objects only: an object of the previous
                // layout is removed once, by an admin (docs/operations.md#every-right-named).
                Err(kube::Error::Api(status)) if status.code == 403 && names::previous_layout(&stale.name) => {
                    warn!(
                        object = %format!("{} {}", stale.resource.kind, stale.name),
                        "expected no admission policy of the previous layout, found this one, which the injector may not delete; delete it once: kubectl delete {} {}",
                        stale.resource.plural,
                        stale.name
                    );
                }
                Err(err) => return Err(err),
            }
        }
        Ok(Some(writes))
    }

    async fn delete(&self, object: &Existing) -> Result<(), kube::Error> {
        match self
            .api(&object.resource)
            .delete(&object.name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(err),
        }
        self.count("delete");
        Ok(())
    }

    fn count(&self, action: &str) {
        self.metrics
            .policy_writes
            .get_or_create(&PolicyWriteLabels {
                action: action.to_string(),
            })
            .inc();
    }

    /// Policy mode: a pass at each template change (and every [`RESYNC`]), retried with
    /// backoff when it fails.
    async fn follow(&self, templates: Arc<LiveTemplates>, stop: &CancellationToken) {
        let mut changes = templates.changes();
        let mut failures = 0;
        loop {
            let wait = match templates.current() {
                None => RESYNC,
                Some(set) => match self.converge(&set).await {
                    Ok(None) => {
                        failures += 1;
                        self.metrics.policies_in_step.set(0);
                        let delay = RETRY.jittered(failures);
                        warn!(
                            owner = %self.owner,
                            retry_in_ms = delay.as_millis() as u64,
                            "the ValidatingWebhookConfiguration that owns the admission policies is absent (the installation is being removed, or not applied yet): writing none"
                        );
                        delay
                    }
                    Ok(Some(writes)) => {
                        failures = 0;
                        self.metrics.policies_in_step.set(1);
                        if writes.applied.is_empty() && writes.deleted.is_empty() {
                            debug!(source = %set.source, "admission policies in step with the templates");
                        } else {
                            info!(
                                source = %set.source,
                                applied = ?writes.applied,
                                deleted = ?writes.deleted,
                                "admission policies brought in step with the templates"
                            );
                        }
                        RESYNC
                    }
                    Err(err) => {
                        failures += 1;
                        self.metrics.policy_sync_errors.inc();
                        self.metrics.policies_in_step.set(0);
                        let delay = RETRY.jittered(failures);
                        warn!(error = %err, retry_in_ms = delay.as_millis() as u64, "cannot write the admission policies");
                        delay
                    }
                },
            };
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(wait) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Webhook mode: the objects this injector wrote go (those applied by hand with
    /// `policies -f` stay). Without the rights to list them, or on an API server that
    /// does not serve them, there is nothing of ours.
    async fn remove_ours(&self, stop: &CancellationToken) {
        let mut failures = 0;
        loop {
            let result = async {
                let ours: Vec<Existing> = self.ours().await?.into_iter().filter(|e| e.written_by_us).collect();
                for object in &ours {
                    self.delete(object).await?;
                }
                Ok::<usize, kube::Error>(ours.len())
            }
            .await;
            match result {
                Ok(0) => return,
                Ok(count) => {
                    info!(
                        count,
                        "webhook mode: deleted the admission policies this injector had written"
                    );
                    return;
                }
                // No rights on admission policies, or an API server that does not serve
                // them: there is nothing of ours to remove.
                Err(kube::Error::Api(status)) if status.code == 403 || status.code == 404 => {
                    debug!(message = %status.message, "webhook mode: no admission policies of ours can exist here");
                    return;
                }
                Err(err) => {
                    failures += 1;
                    self.metrics.policy_sync_errors.inc();
                    warn!(error = %err, "webhook mode: cannot remove the admission policies written before");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(RETRY.jittered(failures)) => {}
                () = stop.cancelled() => return,
            }
        }
    }
}
