//! Publishing the Secret's `ca.crt` as the `caBundle` of every webhook of the
//! MutatingWebhookConfiguration `--webhook-config`, so that the API server trusts what
//! the replicas serve.

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::{debug, info, warn};

use super::FIELD_MANAGER;

/// How a `caBundle` sync went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SyncOutcome {
    /// No webhook configuration is managed (`--webhook-config ""`).
    Unmanaged,
    /// Every webhook's `caBundle` equals the bundle.
    Synced,
    /// The webhook configuration does not exist (yet).
    Absent,
    /// Could not read or patch it; retried later.
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

/// The `caBundle` side of the Secret manager: the configuration it manages (if any) and
/// what it last confirmed there.
pub(super) struct CaBundleSync {
    webhooks: Option<(Api<MutatingWebhookConfiguration>, String)>,
    /// The bundle last confirmed in every webhook's `caBundle`.
    synced: Option<Vec<u8>>,
    /// The last `caBundle` problem logged, to log each distinct one once.
    problem: Option<String>,
}

impl CaBundleSync {
    /// Manages the `caBundle` of `webhook_config`; `None` manages none.
    pub(super) fn new(client: kube::Client, webhook_config: Option<String>) -> CaBundleSync {
        CaBundleSync {
            webhooks: webhook_config.map(|name| (Api::all(client), name)),
            synced: None,
            problem: None,
        }
    }

    /// Whether a webhook configuration is managed at all.
    pub(super) fn manages(&self) -> bool {
        self.webhooks.is_some()
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

    /// Sets `caBundle = bundle` on every webhook of the configuration that differs, in one
    /// strategic-merge PATCH (webhooks merge by name) guarded by the read
    /// `resourceVersion`. Never fails the caller: problems are logged once and retried.
    pub(super) async fn sync(&mut self, bundle: &[u8]) -> SyncOutcome {
        let Some((api, name)) = &self.webhooks else {
            self.synced = Some(bundle.to_vec());
            return SyncOutcome::Unmanaged;
        };
        let (api, name) = (api.clone(), name.clone());
        let config = match api.get_opt(&name).await {
            Ok(Some(config)) => config,
            Ok(None) => {
                self.problem(format!(
                    "MutatingWebhookConfiguration {name} does not exist (yet); its caBundle will be set once it does"
                ));
                return SyncOutcome::Absent;
            }
            Err(err) => {
                self.problem(format!(
                    "cannot read MutatingWebhookConfiguration {name} to sync its caBundle: {err}"
                ));
                return SyncOutcome::Failed;
            }
        };
        let webhooks = config.webhooks.unwrap_or_default();
        let stale: Vec<String> = webhooks
            .iter()
            .filter(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle))
            .map(|w| w.name.clone())
            .collect();
        if webhooks.is_empty() {
            debug!(webhook_config = %name, "the MutatingWebhookConfiguration has no webhooks; no caBundle to sync");
        }
        if !stale.is_empty() {
            let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
            let patch = json!({
                "metadata": { "resourceVersion": config.metadata.resource_version },
                "webhooks": stale
                    .iter()
                    .map(|w| json!({ "name": w, "clientConfig": { "caBundle": encoded } }))
                    .collect::<Vec<_>>(),
            });
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            if let Err(err) = api.patch(&name, &params, &Patch::Strategic(patch)).await {
                self.problem(format!(
                    "cannot patch the caBundle of MutatingWebhookConfiguration {name} (webhooks {stale:?}): {err}"
                ));
                return SyncOutcome::Failed;
            }
            info!(webhook_config = %name, webhooks = ?stale, "caBundle set to the Secret's ca.crt");
        }
        if let Some(problem) = self.problem.take() {
            info!(webhook_config = %name, previous = %problem, "caBundle is in sync again");
        }
        self.synced = Some(bundle.to_vec());
        SyncOutcome::Synced
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
