//! kubectl in the tiers (for the steps that are about what kubectl itself does, `kubectl
//! apply` refused by a webhook for one): a skip without it, and the shipped webhooks
//! registered through it. Running commands is `tests/common/kubectl.rs`.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::core::ApiResource;

use super::{Scope, Skip, shipped_webhooks_at};
use crate::common::kubectl::{client_found, kubectl_apply, refuse_to_skip_in_ci};

/// `Ok` when a kubectl client is installed; tiers that drive it skip, loudly, without (and
/// fail under CI, `common::kubectl::present_or_skip`'s rule).
pub fn require_kubectl() -> Result<(), Skip> {
    if client_found() {
        return Ok(());
    }
    refuse_to_skip_in_ci("this tier");
    Err(Skip("kubectl is not installed, and this tier drives it".into()))
}

/// Registers the shipped MutatingWebhookConfiguration (`manifests/webhook.yaml`) as `name`,
/// calling `url` for `namespaces` only and trusting `ca_pem`; `scope` deletes it.
pub async fn register_shipped_webhooks(scope: &Scope, name: &str, url: &str, ca_pem: &[u8], namespaces: &[&str]) {
    scope.delete_later(ApiResource::erase::<MutatingWebhookConfiguration>(&()), None, name);
    kubectl_apply(&[shipped_webhooks_at(
        "manifests/webhook.yaml",
        name,
        url,
        ca_pem,
        namespaces,
    )])
    .await;
}
