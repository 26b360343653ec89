//! The owner policy mode needs: `serve --policy-owner` names a ValidatingWebhookConfiguration
//! that owns every admission policy it writes, and none is written while it does not exist.

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, ApiResource, Patch, PatchParams};
use serde_json::json;

use super::{FIELD_MANAGER, PART_OF, Scope, api_error};

/// A ValidatingWebhookConfiguration without webhooks, to own the compiled objects (the
/// shipped one is the tier `deployed`'s); `scope` deletes it. Returns its uid.
pub async fn create_policy_owner(client: &kube::Client, scope: &Scope, name: &str) -> String {
    scope.delete_later(ApiResource::erase::<ValidatingWebhookConfiguration>(&()), None, name);
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let owner = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                       "metadata": {"name": name, "labels": {PART_OF.0: PART_OF.1}}});
    let created = api
        .patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&owner))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "expected to create ValidatingWebhookConfiguration {name}, found: {}",
                api_error(&e)
            )
        });
    created.metadata.uid.expect("a stored object has a uid")
}
