//! `envoy_injector_pods_uninjected` as shown, from a [`Tracker`].

use std::collections::BTreeMap;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::namespaces::Namespaces;
use super::tracker::{Moved, Tracker};
use crate::metrics::{NamespaceLabels, ShownSeries};

/// `envoy_injector_pods_uninjected` as shown: an event sets its namespace's series alone,
/// everything is set again after a relist, a Namespace change and on each tick; a
/// namespace that no longer has a value loses its series.
pub(super) struct UninjectedGauge {
    series: ShownSeries<NamespaceLabels>,
}

impl UninjectedGauge {
    pub(super) fn new(family: Family<NamespaceLabels, Gauge>) -> UninjectedGauge {
        UninjectedGauge {
            series: ShownSeries::new(family),
        }
    }

    pub(super) fn show(&mut self, tracker: &Tracker, namespaces: &dyn Namespaces, moved: &Moved) {
        if !tracker.is_listed() {
            return;
        }
        match moved {
            Moved::Nothing => {}
            Moved::Namespace(name) => self.series.show_one(name, tracker.uninjected(name, namespaces)),
            Moved::Everything => self.show_all(&tracker.all_uninjected(namespaces)),
        }
    }

    pub(super) fn show_all(&mut self, values: &BTreeMap<String, i64>) {
        self.series.show_all(values);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap as Map;

    use k8s_openapi::api::core::v1::Pod;
    use kube::core::PartialObjectMeta;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::uninjected::fixtures::{IN, INJECTED, OUT, namespaces, pod, series};

    #[test]
    fn the_gauge_set_per_event_is_the_gauge_recounted_whole() {
        let labelled = namespaces(&["a"], &["b"]);
        let steps: Vec<Event<PartialObjectMeta<Pod>>> = vec![
            Event::Init,
            Event::InitApply(pod(1, "a", &[])),
            Event::InitApply(pod(2, "b", &[IN])),
            Event::InitApply(pod(3, "b", &[])),
            Event::InitDone,
            Event::Apply(pod(4, "c", &[IN])),
            Event::Apply(pod(1, "a", &[INJECTED])),
            Event::Apply(pod(3, "b", &[OUT])),
            Event::Delete(pod(2, "b", &[IN])),
            Event::Delete(pod(4, "c", &[IN])),
            Event::Init,
            Event::InitApply(pod(5, "d", &[IN])),
            Event::InitDone,
        ];
        let (per_event, whole) = (Family::default(), Family::default());
        let (mut shown, mut recounted) = (
            UninjectedGauge::new(per_event.clone()),
            UninjectedGauge::new(whole.clone()),
        );
        let mut tracker = Tracker::new(crate::inject::AnnotationOptIn::On);
        let mut seen = Vec::new();
        for event in steps {
            let label = format!("{event:?}");
            let moved = tracker.apply(event);
            shown.show(&tracker, &labelled, &moved);
            if tracker.is_listed() {
                recounted.show_all(&tracker.all_uninjected(&labelled));
            }
            assert_eq!(series(&per_event), series(&whole), "after {label}");
            seen.push(series(&per_event));
        }
        let expect =
            |pairs: &[(&str, i64)]| -> Map<String, i64> { pairs.iter().map(|(n, c)| (n.to_string(), *c)).collect() };
        assert_eq!(seen[3], expect(&[]), "no series before the first list is done");
        assert_eq!(seen[4], expect(&[("a", 1), ("b", 1)]));
        assert_eq!(seen[5], expect(&[("a", 1), ("b", 1), ("c", 1)]));
        assert_eq!(
            seen[6],
            expect(&[("a", 0), ("b", 1), ("c", 1)]),
            "labelled `a` stays at 0"
        );
        assert_eq!(
            seen[9],
            expect(&[("a", 0)]),
            "`b` and `c` hold nothing: their series go"
        );
        assert_eq!(seen[12], expect(&[("a", 0), ("d", 1)]));
    }
}
