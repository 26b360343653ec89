//! The controller Lease: who holds it, for how long, waiting for a leader.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;

use super::super::{Injector, PATIENCE, api_error, wait_for};
use super::Install;

impl Install {
    /// The holder of the controller Lease, if any.
    pub async fn lease_holder(&self, client: &Client) -> Result<Option<String>, String> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let lease = leases.get_opt(&self.lease).await.map_err(|e| api_error(&e))?;
        Ok(lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    }

    /// `leaseDurationSeconds` of the controller Lease.
    pub async fn lease_duration(&self, client: &Client) -> Duration {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let seconds = leases
            .get(&self.lease)
            .await
            .ok()
            .and_then(|l| l.spec)
            .and_then(|s| s.lease_duration_seconds)
            .expect("the controller Lease has leaseDurationSeconds");
        Duration::from_secs(seconds as u64)
    }

    /// Waits until `identity` holds the controller Lease.
    pub async fn wait_leader(&self, client: &Client, candidates: &[&Injector]) -> String {
        let names: Vec<&str> = candidates.iter().map(|p| p.name.as_str()).collect();
        let what = format!("one of {names:?} to hold Lease {}/{}", self.namespace, self.lease);
        wait_for(&what, PATIENCE * 2, async || match self.lease_holder(client).await? {
            Some(holder) if names.contains(&holder.as_str()) => Ok(holder),
            other => Err(format!("holder {other:?}")),
        })
        .await
    }
}
