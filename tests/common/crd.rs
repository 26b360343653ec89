//! CustomResourceDefinitions the tests install: apply, Established, present.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use super::poll;

/// Multus' NetworkAttachmentDefinition CRD, which the `multus` backend needs (there is no
/// Multus in the test clusters): the file, its text and its name.
pub const NAD_CRD_FILE: &str = "tests/fixtures/nad-crd.yaml";
pub const NAD_CRD_YAML: &str = include_str!("../fixtures/nad-crd.yaml");
pub const NAD_CRD: &str = "network-attachment-definitions.k8s.cni.cncf.io";

fn crds(client: &Client) -> Api<CustomResourceDefinition> {
    Api::all(client.clone())
}

/// Server-side applies `crd` (named `name`) as `field_manager`, taking over every field.
pub async fn apply(
    client: &Client,
    name: &str,
    crd: &(impl serde::Serialize + std::fmt::Debug),
    field_manager: &str,
) -> Result<(), String> {
    crds(client)
        .patch(name, &PatchParams::apply(field_manager).force(), &Patch::Apply(crd))
        .await
        .map(drop)
        .map_err(|e| format!("cannot apply CRD {name}: {e}"))
}

/// Whether CRD `name` exists.
pub async fn installed(client: &Client, name: &str) -> Result<bool, String> {
    crds(client)
        .get_opt(name)
        .await
        .map(|crd| crd.is_some())
        .map_err(|e| format!("cannot read CRD {name}: {e}"))
}

/// `Ok` when CRD `name` is Established; `Err` lists its conditions (or why it could not
/// be read).
pub async fn established(client: &Client, name: &str) -> Result<(), String> {
    let crd = crds(client)
        .get(name)
        .await
        .map_err(|e| format!("cannot read CRD {name}: {e}"))?;
    let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
    if conditions
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True")
    {
        return Ok(());
    }
    Err(format!(
        "conditions {:?}",
        conditions
            .iter()
            .map(|c| format!("{}={} ({})", c.type_, c.status, c.message.as_deref().unwrap_or("")))
            .collect::<Vec<_>>()
    ))
}

/// Waits (at most `patience`) until CRD `name` is Established.
pub async fn wait_established(client: &Client, name: &str, patience: Duration) -> Result<(), String> {
    poll::until(
        &format!("CRD {name} to be Established"),
        patience,
        Duration::from_millis(50),
        async || established(client, name).await,
    )
    .await
}
