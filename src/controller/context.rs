//! What every reconcile shares: the client, the backend, the stores and indexes it reads,
//! and what it keeps between reconciles of one Network (failures, its own writes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::Client;
use kube::runtime::reflector::{ObjectRef, Store};

use super::indexes::Indexes;
use super::writes;
use crate::events::EventSink;
use crate::metrics::Metrics;
use crate::network::backend::Backend;
use crate::network::crd::Network;

/// Everything a reconcile reads or writes. Build it with [`Context::new`].
pub struct Context {
    pub client: Client,
    pub backend: Arc<dyn Backend>,
    pub events: Arc<dyn EventSink>,
    pub networks: Store<Network>,
    /// Overlaps, attached-Pod counts and the requests they raise (kept by the cache).
    pub indexes: Indexes,
    pub metrics: Metrics,
    /// Consecutive failures per Network, for the exponential backoff of [`error_policy`].
    pub(super) failures: Mutex<HashMap<ObjectRef<Network>, u32>>,
    /// Our writes not yet seen back from the watch.
    pub(super) written: writes::Written,
}

impl Context {
    pub fn new(
        client: Client,
        backend: Arc<dyn Backend>,
        events: Arc<dyn EventSink>,
        networks: Store<Network>,
        indexes: Indexes,
        metrics: Metrics,
    ) -> Context {
        Context {
            client,
            backend,
            events,
            networks,
            indexes,
            metrics,
            failures: Mutex::default(),
            written: writes::Written::default(),
        }
    }

    /// Consecutive failed reconciles of this Network (0 after a success).
    pub fn failures(&self, network: &ObjectRef<Network>) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(network)
            .copied()
            .unwrap_or(0)
    }

    pub(super) fn record_failure(&self, network: ObjectRef<Network>) -> u32 {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let count = failures.entry(network).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    pub(super) fn reset_failures(&self, network: &ObjectRef<Network>) {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        // Most reconciles succeed first time: skip the write lock's work when absent.
        if !failures.is_empty() {
            failures.remove(network);
        }
    }
}
