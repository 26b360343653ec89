use std::collections::BTreeMap as Map;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::inject::{
    INJECT_ANNOTATION, LEGACY_INJECT_ANNOTATION, NAMESPACE_LABEL, NAMESPACE_OPT_IN, STATUS_ANNOTATION,
};

fn meta(namespace: &str, annotations: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(namespace.into()),
        annotations: Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ObjectMeta::default()
    }
}

fn pod(n: u32, namespace: &str, annotations: &[(&str, &str)]) -> PartialObjectMeta<Pod> {
    let mut metadata = meta(namespace, annotations);
    metadata.uid = Some(format!("00000000-0000-0000-0000-{n:012x}"));
    metadata.name = Some(format!("pod-{n}"));
    PartialObjectMeta {
        types: None,
        metadata,
        _phantom: Default::default(),
    }
}

/// Namespace labels: `labelled` carry the opt-in label, `plain` none.
fn namespaces(labelled: &[&str], plain: &[&str]) -> Map<String, Map<String, String>> {
    let opt_in = Map::from([(NAMESPACE_LABEL.to_string(), NAMESPACE_OPT_IN.to_string())]);
    labelled
        .iter()
        .map(|n| (n.to_string(), opt_in.clone()))
        .chain(plain.iter().map(|n| (n.to_string(), Map::new())))
        .collect()
}

const IN: (&str, &str) = (INJECT_ANNOTATION, "true");
const OUT: (&str, &str) = (INJECT_ANNOTATION, "false");
const INJECTED: (&str, &str) = (STATUS_ANNOTATION, "{}");

#[test]
fn the_rule_is_the_policy_with_the_namespace_label_applied_apart() {
    let labelled = NamespaceOptIn::Labeled;
    let plain = NamespaceOptIn::NotLabeled;
    // (annotations, opted in when labelled, when not)
    type Case<'a> = (&'a [(&'a str, &'a str)], Option<OptIn>, Option<OptIn>);
    let cases: [Case; 7] = [
        (&[IN], Some(OptIn::Annotation), Some(OptIn::Annotation)),
        (
            &[(LEGACY_INJECT_ANNOTATION, "true")],
            Some(OptIn::LegacyAnnotation),
            Some(OptIn::LegacyAnnotation),
        ),
        (&[], Some(OptIn::NamespaceLabel), None),
        // An unreadable value opts nothing in by itself; the label still does.
        (&[(INJECT_ANNOTATION, "yes")], Some(OptIn::NamespaceLabel), None),
        // Opt-out wins over the label, and an injected Pod never counts.
        (&[OUT], None, None),
        (&[IN, INJECTED], None, None),
        (&[INJECTED], None, None),
    ];
    for (annotations, in_labelled, in_plain) in cases {
        let meta = meta("ns", annotations);
        assert_eq!(
            uninjected(&meta, labelled),
            in_labelled,
            "{annotations:?} in a labelled namespace"
        );
        assert_eq!(
            uninjected(&meta, plain),
            in_plain,
            "{annotations:?} in a plain namespace"
        );
    }
    let mut going = meta("ns", &[IN]);
    going.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    assert_eq!(
        uninjected(&going, labelled),
        None,
        "a Pod being deleted is being replaced already"
    );
}

#[test]
fn counts_follow_pods_namespace_labels_and_relists() {
    let mut labels = namespaces(&["apps"], &["other"]);
    let mut tracker = Tracker::new();
    tracker.apply(Event::Init);
    tracker.apply(Event::InitApply(pod(1, "apps", &[])));
    tracker.apply(Event::InitApply(pod(2, "apps", &[IN])));
    tracker.apply(Event::InitApply(pod(3, "apps", &[INJECTED])));
    tracker.apply(Event::InitApply(pod(4, "other", &[])));
    tracker.apply(Event::InitApply(pod(5, "other", &[IN])));
    tracker.apply(Event::InitApply(pod(6, "other", &[OUT])));
    assert!(
        !tracker.is_listed() && tracker.is_empty(),
        "nothing counts before the list is done"
    );
    assert_eq!(tracker.apply(Event::InitDone), Moved::Everything);
    assert_eq!(tracker.len(), 4, "injected and opted-out Pods are not held");
    assert_eq!(
        tracker.all_uninjected(&labels),
        Map::from([("apps".into(), 2), ("other".into(), 1)])
    );

    // The label moves on `other`: its plain Pod counts, with no Pod event.
    labels = namespaces(&["apps", "other"], &[]);
    assert_eq!(
        tracker.all_uninjected(&labels),
        Map::from([("apps".into(), 2), ("other".into(), 2)])
    );
    labels = namespaces(&[], &["apps", "other"]);
    assert_eq!(
        tracker.all_uninjected(&labels),
        Map::from([("apps".into(), 1), ("other".into(), 1)])
    );

    // A restart replaces the Pods: the new ones are injected, the old ones go.
    labels = namespaces(&["apps"], &["other"]);
    let moved = tracker.apply(Event::Apply(pod(1, "apps", &[INJECTED])));
    assert_eq!(moved, Moved::Namespace(Arc::from("apps")));
    tracker.apply(Event::Delete(pod(2, "apps", &[IN])));
    assert_eq!(tracker.apply(Event::Apply(pod(7, "apps", &[INJECTED]))), Moved::Nothing);
    assert_eq!(
        tracker.apply(Event::Apply(pod(4, "other", &[]))),
        Moved::Nothing,
        "an update that changes nothing moves nothing"
    );
    assert_eq!(
        tracker.uninjected("apps", &labels),
        Some(0),
        "a labelled namespace shows 0"
    );
    assert_eq!(
        tracker.all_uninjected(&labels),
        Map::from([("apps".into(), 0), ("other".into(), 1)])
    );

    // A relist drops what it no longer holds.
    tracker.apply(Event::Init);
    tracker.apply(Event::InitApply(pod(8, "third", &[IN])));
    tracker.apply(Event::InitDone);
    assert_eq!(
        tracker.all_uninjected(&labels),
        Map::from([("apps".into(), 0), ("third".into(), 1)])
    );
    assert_eq!(
        tracker.uninjected("other", &labels),
        None,
        "no Pod held, not labelled: no series"
    );
}

/// The series of a `pods_uninjected` family, as /metrics shows them.
fn series(family: &Family<NamespaceLabels, Gauge>) -> Map<String, i64> {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("pods_uninjected", "uninjected", family.clone());
    crate::metrics::encode(&registry)
        .lines()
        .filter_map(|line| line.strip_prefix("pods_uninjected{namespace=\""))
        .map(|rest| {
            let (name, value) = rest.split_once("\"} ").expect("a sample line");
            (name.to_string(), value.parse().expect("an integer"))
        })
        .collect()
}

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
    let mut tracker = Tracker::new();
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

#[test]
fn ten_thousand_pods_hold_well_under_300_bytes_each() {
    let mut tracker = Tracker::new();
    tracker.apply(Event::Init);
    for n in 0..10_000 {
        let namespace = format!("team-{:03}", n % 100);
        tracker.apply(Event::InitApply(pod(n, &namespace, &[])));
    }
    tracker.apply(Event::InitDone);
    assert_eq!(tracker.len(), 10_000);
    let per_pod = tracker.approximate_bytes() / 10_000;
    assert!(per_pod <= 100, "{per_pod} bytes per Pod");
}
