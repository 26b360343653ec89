//! The CRDs the as-deployed tiers need: the Network CRD of `manifests/`, Multus' NAD CRD.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;

use super::super::{FIELD_MANAGER, PATIENCE, Suite, api_error, network_resource, read_manifest, step, wait_for};
use crate::common::crd::{self, NAD_CRD_FILE};

impl Suite {
    /// Applies `manifests/crd.yaml` (server-side; it stays installed, as docs/testing.md says of
    /// every run) and waits until the Network resource is served.
    pub async fn install_network_crd(&self) {
        let definition = read_manifest("manifests/crd.yaml");
        let name = definition["metadata"]["name"]
            .as_str()
            .expect("manifests/crd.yaml has metadata.name")
            .to_string();
        crd::apply(&self.client, &name, &definition, FIELD_MANAGER)
            .await
            .unwrap_or_else(|e| panic!("expected manifests/crd.yaml to apply, found: {e}"));
        self.network_crd_served(&name).await;
    }

    /// Waits until the Network CRD `name` is Established and its resource served.
    pub async fn network_crd_served(&self, name: &str) {
        self.crd_established(name).await;
        // Established means served; discovery may lag a moment behind it.
        let networks: Api<DynamicObject> = Api::all_with(self.client.clone(), &network_resource());
        wait_for("the Network resource to be served", PATIENCE, async || {
            networks
                .list(&ListParams::default().limit(1))
                .await
                .map(drop)
                .map_err(|e| api_error(&e))
        })
        .await;
        step!("CRD {name} established");
    }

    /// Installs the Multus NetworkAttachmentDefinition CRD (`tests/fixtures/nad-crd.yaml`) when
    /// the cluster has none, and then removes it again when the suite ends.
    pub async fn install_nad_crd(&self) {
        let definition = read_manifest(NAD_CRD_FILE);
        let name = definition["metadata"]["name"]
            .as_str()
            .expect("the NAD CRD has a name")
            .to_string();
        if crd::installed(&self.client, &name)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
        {
            return;
        }
        crd::apply(&self.client, &name, &definition, FIELD_MANAGER)
            .await
            .unwrap_or_else(|e| panic!("expected {NAD_CRD_FILE} to apply, found: {e}"));
        self.teardown
            .delete_later(ApiResource::erase::<CustomResourceDefinition>(&()), None, &name);
        self.crd_established(&name).await;
        step!("installed CRD {name} (removed at the end)");
    }

    /// Waits until CRD `name` is Established.
    pub async fn crd_established(&self, name: &str) {
        wait_for(&format!("CRD {name} to be Established"), PATIENCE, async || {
            crd::established(&self.client, name).await
        })
        .await;
    }
}
