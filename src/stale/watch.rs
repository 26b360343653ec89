//! The watch loop: a metadata-only watch of injected Pods feeding a [`Tracker`] and the
//! `envoy_injector_pods_stale` gauge.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tracing::warn;

use super::gauge::StaleGauge;
use super::tracker::{Moved, Tracker};
use crate::inject::REVISION_LABEL;
use crate::live::LiveTemplates;
use crate::metrics::{Metrics, TemplateLabels};
use crate::shutdown::CancellationToken;

/// How often the gauge is recomputed besides on Pod events (template edits change what is
/// stale without any Pod event).
pub const RECOUNT_INTERVAL: Duration = Duration::from_secs(10);

/// The watch's selector: injected Pods only.
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().labels(REVISION_LABEL)
}

/// Feeds a tracker from `events` and keeps `envoy_injector_pods_stale` current (on each
/// event for the templates it moved, wholly every `recount`), until `stop` or the end of
/// the stream.
pub async fn feed<S>(
    events: S,
    live: Arc<LiveTemplates>,
    gauge: Family<TemplateLabels, Gauge>,
    recount: Duration,
    stop: CancellationToken,
) -> Tracker
where
    S: Stream<Item = Result<Event<PartialObjectMeta<Pod>>, watcher::Error>> + Send,
{
    futures::pin_mut!(events);
    let mut tracker = Tracker::new();
    let mut gauge = StaleGauge::new(gauge);
    let mut tick = tokio::time::interval(recount);
    loop {
        let moved = tokio::select! {
            () = stop.cancelled() => return tracker,
            _ = tick.tick() => Moved::Everything,
            event = events.next() => match event {
                None => return tracker,
                Some(Ok(event)) => tracker.apply(event),
                Some(Err(err)) => {
                    warn!(error = %err, "stale-sidecar watch failed; retrying with backoff");
                    Moved::Nothing
                }
            },
        };
        if let Some(live) = live.current() {
            gauge.show(&tracker, live, &moved);
        }
    }
}

/// The metadata-only watch of injected Pods (cluster-wide, label-selected) feeding the
/// gauge, until `stop` (spawned by `serve` in cluster mode).
pub async fn run(client: Client, live: Arc<LiveTemplates>, metrics: Metrics, stop: CancellationToken) -> Tracker {
    let events = watcher::watcher(Api::<PartialObjectMeta<Pod>>::all(client), watch_config()).default_backoff();
    feed(events, live, metrics.pods_stale.clone(), RECOUNT_INTERVAL, stop).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stale::fixtures::{live, pod, uid};

    #[tokio::test]
    async fn feed_updates_the_gauge_from_a_watch_stream() {
        let set = live(&[("config", "envoy:1")]);
        let old = "000000000000";
        let events = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pod(&uid(1), "config", Some(old)))),
            Ok(Event::InitApply(pod(
                &uid(2),
                "config",
                Some(&set.get("config").unwrap().revision),
            ))),
            Ok(Event::InitDone),
        ]);
        let gauge: Family<TemplateLabels, Gauge> = Family::default();
        let tracker = feed(
            events,
            Arc::new(LiveTemplates::new(Some(set))),
            gauge.clone(),
            Duration::from_secs(3600),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(tracker.len(), 2);
        assert_eq!(
            gauge
                .get_or_create(&TemplateLabels {
                    template: "config".into()
                })
                .get(),
            1
        );
    }
}
