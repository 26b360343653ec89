//! `envoy_injector_pods_stale` as shown, from a [`Tracker`].

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::tracker::{Moved, Tracker};
use crate::metrics::{ShownSeries, TemplateLabels};
use crate::template::TemplateSet;

/// `envoy_injector_pods_stale` as shown. An event sets again only the templates whose
/// counts it moved, so a Pod event costs O(its template's revisions), not O(templates);
/// everything is set again after a relist, on each tick, and when the live templates are
/// another set (an edit changes what is stale without any Pod event).
pub(super) struct StaleGauge {
    series: ShownSeries<TemplateLabels>,
    /// The template set the shown values were computed against.
    against: Option<Arc<TemplateSet>>,
}

impl StaleGauge {
    pub(super) fn new(family: Family<TemplateLabels, Gauge>) -> StaleGauge {
        StaleGauge {
            series: ShownSeries::new(family),
            against: None,
        }
    }

    pub(super) fn show(&mut self, tracker: &Tracker, live: Arc<TemplateSet>, moved: &Moved) {
        let same_templates = self.against.as_ref().is_some_and(|shown| Arc::ptr_eq(shown, &live));
        match moved {
            Moved::Templates(before, after) if same_templates => {
                for name in [before, after].into_iter().flatten() {
                    self.series.show_one(name, tracker.stale_count(name, &live));
                }
            }
            Moved::Nothing if same_templates => {}
            // Another template set can change what is stale for every template.
            _ => self.show_all(&tracker.stale_counts(&live)),
        }
        self.against = Some(live);
    }

    /// Sets the gauge to `counts`; template names it held before and no longer counts are
    /// removed, so a deleted template does not linger.
    pub(super) fn show_all(&mut self, counts: &BTreeMap<String, i64>) {
        self.series.show_all(counts);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap as Map, HashSet};

    use k8s_openapi::api::core::v1::Pod;
    use kube::core::PartialObjectMeta;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::stale::fixtures::{live, pod, uid};

    #[test]
    fn the_gauge_drops_templates_that_are_gone() {
        let gauge: Family<TemplateLabels, Gauge> = Family::default();
        let mut shown = StaleGauge::new(gauge.clone());
        shown.show_all(&Map::from([("a".into(), 2), ("b".into(), 0)]));
        let value = |name: &str| gauge.get_or_create(&TemplateLabels { template: name.into() }).get();
        assert_eq!((value("a"), value("b")), (2, 0));
        shown.show_all(&Map::from([("b".into(), 1)]));
        assert_eq!(shown.series.shown(), &HashSet::from(["b".to_string()]));
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("pods_stale", "stale", gauge.clone());
        let text = crate::metrics::encode(&registry);
        assert!(text.contains("pods_stale{template=\"b\"} 1"), "{text}");
        assert!(!text.contains("template=\"a\""), "{text}");
    }

    /// The series of a `pods_stale` family, as /metrics shows them.
    fn series(family: &Family<TemplateLabels, Gauge>) -> Map<String, i64> {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("pods_stale", "stale", family.clone());
        crate::metrics::encode(&registry)
            .lines()
            .filter_map(|line| line.strip_prefix("pods_stale{template=\""))
            .map(|rest| {
                let (name, value) = rest.split_once("\"} ").unwrap();
                (name.to_string(), value.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn the_gauge_set_per_event_is_the_gauge_recounted_whole_after_every_event() {
        let first = Arc::new(live(&[("config", "envoy:1"), ("other", "x:1")]));
        let edited = Arc::new(live(&[("config", "envoy:2"), ("other", "x:1")]));
        let without_other = Arc::new(live(&[("config", "envoy:2")]));
        let revision = |set: &TemplateSet, name: &str| Some(set.get(name).unwrap().revision.clone());
        let (old, new, other) = (
            revision(&first, "config"),
            revision(&edited, "config"),
            revision(&first, "other"),
        );
        let injected = |n: u32, template: &str, revision: &Option<String>| pod(&uid(n), template, revision.as_deref());
        let steps: Vec<(&Arc<TemplateSet>, Event<PartialObjectMeta<Pod>>)> = vec![
            (&first, Event::Init),
            (&first, Event::InitApply(injected(0, "config", &old))),
            (&first, Event::InitApply(injected(1, "config", &old))),
            (&first, Event::InitApply(injected(2, "other", &other))),
            (&first, Event::InitApply(injected(3, "retired", &Some("r0".into())))),
            (&first, Event::InitDone),
            (&first, Event::Apply(injected(4, "config", &old))),
            // The template is edited: the next event, whatever it is, shows it.
            (&edited, Event::Apply(injected(5, "config", &new))),
            (&edited, Event::Delete(injected(0, "config", &old))),
            (&edited, Event::Apply(injected(1, "config", &new))),
            (&edited, Event::Apply(injected(2, "other", &None))),
            // A relist that drops `retired` and what changed during it.
            (&edited, Event::Init),
            (&edited, Event::InitApply(injected(1, "config", &new))),
            (&edited, Event::InitApply(injected(6, "other", &other))),
            (&edited, Event::Apply(injected(7, "config", &old))),
            (&edited, Event::Delete(injected(4, "config", &old))),
            (&edited, Event::InitDone),
            (&without_other, Event::Apply(injected(8, "other", &other))),
            (&without_other, Event::Delete(injected(6, "other", &other))),
            (&without_other, Event::Delete(injected(8, "other", &other))),
        ];
        let (per_event, whole) = (Family::default(), Family::default());
        let (mut shown, mut recounted) = (StaleGauge::new(per_event.clone()), StaleGauge::new(whole.clone()));
        let mut tracker = Tracker::new();
        let mut seen = Vec::new();
        for (set, event) in steps {
            let label = format!("{event:?}");
            let moved = tracker.apply(event);
            shown.show(&tracker, set.clone(), &moved);
            recounted.show_all(&tracker.stale_counts(set));
            assert_eq!(series(&per_event), series(&whole), "after {label}");
            seen.push(series(&per_event));
        }
        let at = |step: usize| seen[step].clone();
        let expect = |pairs: &[(&str, i64)]| -> Map<String, i64> {
            pairs.iter().map(|(name, count)| (name.to_string(), *count)).collect()
        };
        assert_eq!(
            at(4),
            expect(&[("config", 0), ("other", 0)]),
            "no Pod counts before the list is done"
        );
        assert_eq!(at(5), expect(&[("config", 0), ("other", 0), ("retired", 1)]));
        assert_eq!(at(7), expect(&[("config", 3), ("other", 0), ("retired", 1)]));
        assert_eq!(
            at(14),
            expect(&[("config", 2), ("other", 0), ("retired", 1)]),
            "p7 counts at once"
        );
        assert_eq!(
            at(16),
            expect(&[("config", 0), ("other", 0)]),
            "the relist dropped p7 and retired"
        );
        assert_eq!(
            at(17),
            expect(&[("config", 0), ("other", 2)]),
            "a removed template's Pods are stale"
        );
        assert_eq!(at(18), expect(&[("config", 0), ("other", 1)]));
        assert_eq!(
            at(19),
            expect(&[("config", 0)]),
            "a template neither live nor carried goes"
        );
    }
}
