//! The watch of the backend objects the controller owns (the Multus NADs): it keeps the
//! backend's [`NadIndex`] current and requeues the Network whose NAD changed (drift
//! repair). Member Pods and overlaps are followed by the cache's indexes instead.

use std::sync::Arc;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};

use super::queue::Pending;
use super::settings::{BACKOFF, BACKOFF_QUIET};
use crate::backoff::{Episode, Streak};
use crate::network::nad::{MANAGED_BY_LABEL, MANAGER};
use crate::network::nad_index::NadIndex;

/// Follows our labelled objects of `resource` until dropped. Whole objects, not metadata:
/// drift detection compares their config, and only a 64-bit fingerprint of it is kept.
///
/// Watch errors back off with [`Streak`] (kube's default backoff would keep retrying a
/// missing CRD every few seconds); the first error of a streak is logged at warn, the rest
/// at debug.
pub(super) async fn follow_owned(client: Client, resource: ApiResource, index: Arc<NadIndex>, pending: Arc<Pending>) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGER}"));
    let kind = resource.kind.clone();
    let mut failing = Episode::default();
    let events = watcher(api, config).backoff(Streak::new(BACKOFF, BACKOFF_QUIET));
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                // `Init` comes before every (re)list attempt; only a completed list
                // (`InitDone`) shows the watch works again.
                if matches!(event, watcher::Event::InitDone)
                    && let Some((failures, lasted)) = failing.recover()
                {
                    tracing::info!(
                        kind = %kind,
                        failures,
                        lasted_ms = lasted.as_millis() as u64,
                        "watch of owned backend objects recovered"
                    );
                }
                pending.push(index.apply(&event));
            }
            Err(error) => {
                if failing.fail() {
                    index.failed();
                    tracing::warn!(
                        %error,
                        kind = %kind,
                        "cannot watch owned backend objects (is the CRD installed? RBAC list/watch?); retrying with backoff up to {}s",
                        BACKOFF.max.as_secs()
                    );
                } else {
                    tracing::debug!(%error, kind = %kind, "watch of owned backend objects still failing");
                }
            }
        }
    }
}
