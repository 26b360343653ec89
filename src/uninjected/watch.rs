//! The watch loop: a metadata-only watch of every Pod feeding a [`Tracker`] and the
//! `envoy_injector_pods_uninjected` gauge, recounted on the cache's Namespace events.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::Store;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tracing::warn;

use super::gauge::UninjectedGauge;
use super::namespaces::Namespaces;
use super::tracker::{Moved, Tracker};
use crate::inject::AnnotationOptIn;
use crate::metrics::{Metrics, NamespaceLabels};
use crate::shutdown::CancellationToken;

/// How often the gauge is recomputed whole besides on events.
pub const RECOUNT_INTERVAL: Duration = Duration::from_secs(10);

/// Feeds a tracker from `events` and keeps `gauge` current: per event for its namespace,
/// wholly after a relist, when `namespace_changed` is notified and every `recount`, until
/// `stop` or the end of the stream.
pub async fn feed<S, N>(
    events: S,
    namespaces: N,
    namespace_changed: Arc<Notify>,
    gauge: Family<NamespaceLabels, Gauge>,
    recount: Duration,
    annotations: AnnotationOptIn,
    stop: CancellationToken,
) -> Tracker
where
    S: Stream<Item = Result<Event<PartialObjectMeta<Pod>>, watcher::Error>> + Send,
    N: Namespaces,
{
    futures::pin_mut!(events);
    let mut tracker = Tracker::new(annotations);
    let mut gauge = UninjectedGauge::new(gauge);
    let mut tick = tokio::time::interval(recount);
    loop {
        let moved = tokio::select! {
            () = stop.cancelled() => return tracker,
            _ = tick.tick() => Moved::Everything,
            () = namespace_changed.notified() => Moved::Everything,
            event = events.next() => match event {
                None => return tracker,
                Some(Ok(event)) => tracker.apply(event),
                Some(Err(err)) => {
                    warn!(error = %err, "uninjected-Pod watch failed; retrying with backoff");
                    Moved::Nothing
                }
            },
        };
        gauge.show(&tracker, &namespaces, &moved);
    }
}

/// The metadata-only watch of every Pod feeding `envoy_injector_pods_uninjected`, until
/// `stop` (spawned by `serve` in cluster mode unless `--watch-uninjected=false`).
/// `namespaces` is the shared cache's store; `namespace_changed` is notified on its events.
pub async fn run(
    client: Client,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    namespace_changed: Arc<Notify>,
    metrics: Metrics,
    annotations: AnnotationOptIn,
    stop: CancellationToken,
) -> Tracker {
    let events =
        watcher::watcher(Api::<PartialObjectMeta<Pod>>::all(client), watcher::Config::default()).default_backoff();
    feed(
        events,
        namespaces,
        namespace_changed,
        metrics.pods_uninjected.clone(),
        RECOUNT_INTERVAL,
        annotations,
        stop,
    )
    .await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap as Map;

    use super::*;
    use crate::inject::NamespaceOptIn;
    use crate::uninjected::fixtures::{IN, INJECTED, namespaces, pod, series};

    /// Namespace labels that a test changes while `feed` runs.
    #[derive(Clone, Default)]
    struct Shared(Arc<std::sync::Mutex<Map<String, Map<String, String>>>>);

    impl Namespaces for Shared {
        fn opt_in(&self, namespace: &str) -> NamespaceOptIn {
            self.0.lock().unwrap().opt_in(namespace)
        }

        fn labelled(&self) -> Vec<String> {
            self.0.lock().unwrap().labelled()
        }
    }

    #[tokio::test]
    async fn feed_follows_pod_events_and_namespace_changes() {
        let labels = Shared::default();
        *labels.0.lock().unwrap() = namespaces(&[], &["apps"]);
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let changed = Arc::new(Notify::new());
        let gauge: Family<NamespaceLabels, Gauge> = Family::default();
        let stop = CancellationToken::new();
        let fed = tokio::spawn(feed(
            rx,
            labels.clone(),
            changed.clone(),
            gauge.clone(),
            Duration::from_secs(3600),
            crate::inject::AnnotationOptIn::On,
            stop.clone(),
        ));
        let wait_for = async |want: Map<String, i64>| {
            for _ in 0..200 {
                if series(&gauge) == want {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            panic!("expected {want:?}, found {:?}", series(&gauge));
        };
        for event in [
            Event::Init,
            Event::InitApply(pod(1, "apps", &[])),
            Event::InitApply(pod(2, "apps", &[IN])),
            Event::InitDone,
        ] {
            tx.unbounded_send(Ok(event)).unwrap();
        }
        wait_for(Map::from([("apps".into(), 1)])).await;
        // The namespace is labelled: only its Namespace event says so.
        *labels.0.lock().unwrap() = namespaces(&["apps"], &[]);
        changed.notify_one();
        wait_for(Map::from([("apps".into(), 2)])).await;
        tx.unbounded_send(Ok(Event::Delete(pod(1, "apps", &[])))).unwrap();
        tx.unbounded_send(Ok(Event::Apply(pod(2, "apps", &[IN, INJECTED]))))
            .unwrap();
        wait_for(Map::from([("apps".into(), 0)])).await;
        stop.cancel();
        let tracker = fed.await.unwrap();
        assert!(tracker.is_empty());
    }
}
