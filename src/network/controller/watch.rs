//! What triggers a reconcile besides the Network itself: member Pods (their attached
//! count) and the backend objects the controller owns (drift repair).

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::{BACKOFF, BACKOFF_QUIET};
use crate::backoff::Streak;
use crate::network::crd::Network;
use crate::network::join::NETWORK_LABEL;
use crate::network::nad::{MANAGED_BY_LABEL, MANAGER};

/// The Network a member Pod belongs to (its label + namespace).
pub fn network_of_pod(pod: &PartialObjectMeta<Pod>) -> Option<ObjectRef<Network>> {
    let name = pod.labels().get(NETWORK_LABEL)?;
    let namespace = pod.metadata.namespace.as_deref()?;
    Some(ObjectRef::new(name).within(namespace))
}

/// missing NAD CRD does not delay the Network triggers sharing the controller's queue),
/// the first error of a streak is logged at warn, the rest at debug.
pub(super) fn owned_objects(
    client: Client,
    resource: &ApiResource,
) -> impl Stream<Item = Result<PartialObjectMeta<DynamicObject>, watcher::Error>> + Send + 'static {
    // `Api<PartialObjectMeta<_>>` makes metadata-only list/watch requests.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, resource);
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGER}"));
    let kind = resource.kind.clone();
    let mut failing = false;
    watcher(api, config)
        .backoff(Streak::new(BACKOFF, BACKOFF_QUIET))
        .filter_map(move |event| {
            let item = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o)) => Some(Ok(o)),
                // `Init` comes before every (re)list attempt; only a completed list
                // (`InitDone`) shows the watch works again.
                Ok(watcher::Event::Init) => None,
                Ok(watcher::Event::InitDone) => {
                    if failing {
                        tracing::info!(kind = %kind, "watch of owned backend objects recovered");
                        failing = false;
                    }
                    None
                }
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(
                        %error,
                        kind = %kind,
                        "cannot watch owned backend objects (is the CRD installed? RBAC list/watch?); retrying with backoff up to {}s",
                        BACKOFF.max.as_secs()
                    );
                    None
                }
                Err(error) => {
                    tracing::debug!(%error, kind = %kind, "watch of owned backend objects still failing");
                    None
                }
            };
            futures::future::ready(item)
        })
}
