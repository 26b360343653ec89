//! Publishing the Secret's `ca.crt` as the `caBundle` of every webhook of the
//! MutatingWebhookConfiguration `--webhook-config` and of the ValidatingWebhookConfiguration
//! `--validating-webhook-config`, so that the API server trusts what the replicas serve.

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::FIELD_MANAGER;
use crate::tls::WebhookConfig;

/// How a `caBundle` sync went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SyncOutcome {
    /// No webhook configuration is managed (`--webhook-config ""` and
    /// `--validating-webhook-config ""`).
    Unmanaged,
    /// Every webhook's `caBundle` equals the bundle.
    Synced,
    /// A webhook configuration does not exist (yet).
    Absent,
    /// Could not read or patch one; retried later.
    Failed,
}

impl SyncOutcome {
    /// Whether a CA that is in the bundle may start signing: nothing can call the webhook
    /// with an older `caBundle` once it is synced, unmanaged or absent.
    pub(super) fn allows_switch(self) -> bool {
        self != SyncOutcome::Failed
    }

    /// Whether nothing is left to retry: a missing configuration is retried like a failure.
    pub(super) fn is_complete(self) -> bool {
        self != SyncOutcome::Failed && self != SyncOutcome::Absent
    }
}

/// Which kind of webhook configuration a managed one is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConfigKind {
    Mutating,
    Validating,
}

impl ConfigKind {
    fn kind(self) -> &'static str {
        match self {
            ConfigKind::Mutating => MutatingWebhookConfiguration::KIND,
            ConfigKind::Validating => ValidatingWebhookConfiguration::KIND,
        }
    }
}

/// What a sync reads of a webhook configuration.
struct Current {
    resource_version: Option<String>,
    /// Each webhook's name and `caBundle`.
    webhooks: Vec<(String, Option<Vec<u8>>)>,
}

/// One managed webhook configuration and the last problem logged about it.
struct Managed {
    kind: ConfigKind,
    name: String,
    /// The last `caBundle` problem logged, to log each distinct one once.
    problem: Option<String>,
}

/// The `caBundle` side of the Secret manager: the configurations it manages (if any) and
/// what it last confirmed there.
pub(super) struct CaBundleSync {
    client: kube::Client,
    managed: Vec<Managed>,
    /// The bundle last confirmed in every webhook's `caBundle`.
    synced: Option<Vec<u8>>,
}

impl CaBundleSync {
    /// Manages the `caBundle` of each named configuration, in this order; an empty list
    /// manages none.
    pub(super) fn new(client: kube::Client, configs: Vec<(ConfigKind, String)>) -> CaBundleSync {
        CaBundleSync {
            client,
            managed: configs
                .into_iter()
                .map(|(kind, name)| Managed {
                    kind,
                    name,
                    problem: None,
                })
                .collect(),
            synced: None,
        }
    }

    /// Whether a webhook configuration is managed at all.
    pub(super) fn manages(&self) -> bool {
        !self.managed.is_empty()
    }

    /// Whether `bundle` is the one last confirmed (or, unmanaged, last offered).
    pub(super) fn is_synced(&self, bundle: &[u8]) -> bool {
        self.synced.as_deref() == Some(bundle)
    }

    /// Syncs when `full` or when `bundle` is not the one last confirmed.
    pub(super) async fn sync_if_needed(&mut self, bundle: &[u8], full: bool) -> SyncOutcome {
        if !full && self.is_synced(bundle) {
            return SyncOutcome::Synced;
        }
        self.sync(bundle).await
    }

    /// Sets `caBundle = bundle` on every webhook of each configuration that differs, one
    /// strategic-merge PATCH per configuration (webhooks merge by name) guarded by the read
    /// `resourceVersion`. Never fails the caller: problems are logged once and retried.
    /// The outcome is the worst of the configurations' (failed, then absent, then synced).
    pub(super) async fn sync(&mut self, bundle: &[u8]) -> SyncOutcome {
        if self.managed.is_empty() {
            self.synced = Some(bundle.to_vec());
            return SyncOutcome::Unmanaged;
        }
        let mut outcome = SyncOutcome::Synced;
        for managed in &mut self.managed {
            outcome = outcome.max(managed.sync(&self.client, bundle).await);
        }
        if outcome == SyncOutcome::Synced {
            self.synced = Some(bundle.to_vec());
        }
        outcome
    }
}

impl Managed {
    async fn sync(&mut self, client: &kube::Client, bundle: &[u8]) -> SyncOutcome {
        let (kind, name) = (self.kind.kind(), self.name.clone());
        let config = match self.read(client).await {
            Ok(Some(config)) => config,
            Ok(None) => {
                self.problem(format!(
                    "{kind} {name} does not exist (yet); its caBundle will be set once it does"
                ));
                return SyncOutcome::Absent;
            }
            Err(err) => {
                self.problem(format!("cannot read {kind} {name} to sync its caBundle: {err}"));
                return SyncOutcome::Failed;
            }
        };
        let stale: Vec<String> = config
            .webhooks
            .iter()
            .filter(|(_, current)| current.as_deref() != Some(bundle))
            .map(|(webhook, _)| webhook.clone())
            .collect();
        if config.webhooks.is_empty() {
            debug!(webhook_config = %name, kind, "the webhook configuration has no webhooks; no caBundle to sync");
        }
        if !stale.is_empty() {
            let encoded = base64_simd::STANDARD.encode_to_string(bundle);
            let patch = json!({
                "metadata": { "resourceVersion": config.resource_version },
                "webhooks": stale
                    .iter()
                    .map(|w| json!({ "name": w, "clientConfig": { "caBundle": encoded } }))
                    .collect::<Vec<_>>(),
            });
            if let Err(err) = self.patch(client, patch).await {
                self.problem(format!(
                    "cannot patch the caBundle of {kind} {name} (webhooks {stale:?}): {err}"
                ));
                return SyncOutcome::Failed;
            }
            info!(webhook_config = %name, kind, webhooks = ?stale, "caBundle set to the Secret's ca.crt");
        }
        if let Some(problem) = self.problem.take() {
            info!(webhook_config = %name, kind, previous = %problem, "caBundle is in sync again");
        }
        SyncOutcome::Synced
    }

    async fn read(&self, client: &kube::Client) -> Result<Option<Current>, kube::Error> {
        match self.kind {
            ConfigKind::Mutating => read_typed::<MutatingWebhookConfiguration>(client, &self.name).await,
            ConfigKind::Validating => read_typed::<ValidatingWebhookConfiguration>(client, &self.name).await,
        }
    }

    async fn patch(&self, client: &kube::Client, patch: Value) -> Result<(), kube::Error> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let patch = Patch::Strategic(patch);
        match self.kind {
            ConfigKind::Mutating => Api::<MutatingWebhookConfiguration>::all(client.clone())
                .patch(&self.name, &params, &patch)
                .await
                .map(drop),
            ConfigKind::Validating => Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .patch(&self.name, &params, &patch)
                .await
                .map(drop),
        }
    }

    fn problem(&mut self, message: String) {
        if self.problem.as_deref() == Some(message.as_str()) {
            debug!(problem = %message, "caBundle still not in sync; will retry");
        } else {
            warn!(problem = %message, "caBundle not in sync; will retry");
            self.problem = Some(message);
        }
    }
}

async fn read_typed<K>(client: &kube::Client, name: &str) -> Result<Option<Current>, kube::Error>
where
    K: WebhookConfig
        + kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let Some(config) = Api::<K>::all(client.clone()).get_opt(name).await? else {
        return Ok(None);
    };
    Ok(Some(Current {
        resource_version: config.meta().resource_version.clone(),
        webhooks: config
            .clients()
            .into_iter()
            .map(|(name, client)| (name.to_string(), client.ca_bundle.as_ref().map(|b| b.0.clone())))
            .collect(),
    }))
}
