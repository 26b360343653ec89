//! Template hot reload: each change of the `envoy-injector` ConfigMap builds a new
//! template set; a good one replaces the live set at once, a bad one keeps the last good
//! set live and says why (log, metric, Event on the ConfigMap).
//!
//! Values the API server would refuse are a bad edit like any other, with one exception
//! for upgrades: the ConfigMap found when the injector starts, whose only faults are such
//! values, was served before the injector checked values, so it is served on, loudly (an
//! error log, a Warning Event, `envoy_injector_templates_refused_values`, and `check`
//! fails its templates line) until it is edited.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use tracing::{error, info, warn};

use super::LiveTemplates;
use crate::events::{self, EventSink};
use crate::metrics::Metrics;
use crate::template::{ConfigError, KubeVersion, TemplateSet};

/// ConfigMap changes, as the cache's watch of it delivers them: the current object, or
/// `None` once it is deleted (or absent after the initial list).
pub type ConfigMapEvents = tokio::sync::mpsc::Receiver<Option<Arc<ConfigMap>>>;

/// The Events' `action`.
const ACTION: &str = "LoadTemplates";

/// What a reload checks templates against and where it reports.
pub struct Reloader<'a> {
    /// The API server's version: the value rules that apply to its Pods.
    pub version: KubeVersion,
    pub metrics: &'a Metrics,
    pub events: &'a dyn EventSink,
}

/// Counts a successful load of `set` and shows its templates' revisions
/// (`envoy_injector_template_revision`, which `rollout` reads of every replica).
pub fn loaded(metrics: &Metrics, set: &TemplateSet) {
    metrics.template_load(Some(set.len()));
    metrics.templates_live(
        set.names()
            .filter_map(|name| Some((name, set.get(name)?.revision.as_str()))),
    );
}

/// Applies one ConfigMap state to the live templates. Returns whether it was loaded.
pub async fn apply(configmap: Option<&ConfigMap>, live: &LiveTemplates, reloader: &Reloader<'_>) -> bool {
    let Some(configmap) = configmap else {
        if live.is_loaded() {
            warn!("ConfigMap envoy-injector was deleted; keeping the last loaded templates until it is back");
        } else {
            warn!(
                "ConfigMap envoy-injector does not exist; not ready and opted-in Pods are denied until it is created"
            );
        }
        return false;
    };
    let namespace = configmap.metadata.namespace.as_deref().unwrap_or_default();
    let name = configmap.metadata.name.as_deref().unwrap_or_default();
    let source = format!("{namespace}/{name}");
    let data = configmap.data.clone().unwrap_or_default();
    let publish = |warning: bool, reason: &'static str, note: String| {
        reloader
            .events
            .publish(configmap.object_ref(&()), events::event(warning, reason, ACTION, note))
    };
    let (set, refused) = match TemplateSet::from_data_keeping(&source, &data, reloader.version) {
        Ok(loaded) => loaded,
        Err(err) => return keep_last_good(live, &source, &err, reloader.metrics, publish).await,
    };
    if live.current().is_some_and(|current| *current == set) {
        return true;
    }
    let names: Vec<String> = set.names().map(String::from).collect();
    match refused {
        None => {
            reloader.metrics.templates_refused_values.set(0);
            loaded(reloader.metrics, &set);
            live.replace(set);
            info!(configmap = %source, templates = ?names, "templates loaded");
            publish(
                false,
                "TemplatesLoaded",
                format!("loaded templates {}", names.join(", ")),
            )
            .await;
            true
        }
        // An edit that brings such values is refused like any bad edit.
        Some(err) if live.is_loaded() => keep_last_good(live, &source, &err, reloader.metrics, publish).await,
        Some(err) => {
            let refused_count = match &err {
                ConfigError::Templates { errors, .. } => errors.len(),
                _ => 1,
            };
            reloader.metrics.templates_refused_values.set(refused_count as i64);
            loaded(reloader.metrics, &set);
            live.replace(set);
            let note = note(
                &err,
                &format!(
                    "serving these templates as before, since they were live when the injector started, but the API server (Kubernetes {}) refuses the Pods they inject: fix the values (an edit that keeps them is refused)",
                    reloader.version
                ),
            );
            error!(configmap = %source, templates = ?names, error = %err, "templates with values the API server refuses; serving them as before");
            publish(true, "TemplatesRefusedValues", note).await;
            true
        }
    }
}

/// A ConfigMap that cannot be taken: the live set stays, and why is said.
async fn keep_last_good<F: std::future::Future<Output = ()>>(
    live: &LiveTemplates,
    source: &str,
    err: &ConfigError,
    metrics: &Metrics,
    publish: impl Fn(bool, &'static str, String) -> F,
) -> bool {
    metrics.template_load(None);
    let kept = if live.is_loaded() {
        "keeping the last good templates"
    } else {
        "no templates loaded yet"
    };
    error!(configmap = %source, error = %err, "invalid templates; {kept}");
    publish(true, "TemplatesInvalid", note(err, kept)).await;
    false
}

/// An Event's note: as many of the faults as fit beside what the injector does about them,
/// which is said whole.
fn note(err: &ConfigError, then: &str) -> String {
    let room = events::MAX_NOTE_BYTES.saturating_sub("; ".len() + then.len());
    format!("{}; {then}", err.report(room))
}

/// Runs until the ConfigMap feed ends (the cache stopped).
pub async fn run(
    mut feed: ConfigMapEvents,
    live: Arc<LiveTemplates>,
    version: KubeVersion,
    metrics: Metrics,
    events: Arc<dyn EventSink>,
) {
    let reloader = Reloader {
        version,
        metrics: &metrics,
        events: events.as_ref(),
    };
    while let Some(configmap) = feed.recv().await {
        apply(configmap.as_deref(), &live, &reloader).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(bool, String, String)>>);

    impl EventSink for Recorded {
        fn publish(
            &self,
            _: k8s_openapi::api::core::v1::ObjectReference,
            event: kube::runtime::events::Event,
        ) -> futures::future::BoxFuture<'_, ()> {
            let warning = event.type_ == events::EventType::Warning;
            self.0
                .lock()
                .unwrap()
                .push((warning, event.reason, event.note.unwrap_or_default()));
            Box::pin(async {})
        }
    }

    fn reloader<'a>(metrics: &'a Metrics, events: &'a Recorded) -> Reloader<'a> {
        Reloader {
            version: KubeVersion::NEWEST,
            metrics,
            events,
        }
    }

    fn configmap(template: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("envoy-injector".into()),
                namespace: Some("ei".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([("config".to_string(), template.to_string())])),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn good_edit_goes_live_bad_edit_keeps_the_last_good_one() {
        let live = LiveTemplates::new(None);
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut registry);
        let events = Recorded::default();
        // The revisions this replica shows: what `rollout` reads before it restarts.
        let shown = || {
            crate::metrics::encode(&registry)
                .lines()
                .filter(|line| line.starts_with("envoy_injector_template_revision{"))
                .map(String::from)
                .collect::<Vec<_>>()
        };
        let revision = |live: &LiveTemplates| live.current().unwrap().get("config").unwrap().revision.clone();
        let line = |revision: &str| {
            format!(r#"envoy_injector_template_revision{{template="config",revision="{revision}"}} 1"#)
        };
        assert!(
            apply(
                Some(&configmap("containers:\n- name: a\n  image: a\n")),
                &live,
                &reloader(&metrics, &events)
            )
            .await
        );
        assert_eq!(
            live.current().unwrap().get("config").unwrap().spec.containers[0].name,
            "a"
        );

        assert!(
            !apply(
                Some(&configmap("containers:\n- name: b\n  imag: x\n")),
                &live,
                &reloader(&metrics, &events)
            )
            .await
        );
        assert_eq!(
            live.current().unwrap().get("config").unwrap().spec.containers[0].name,
            "a"
        );
        let recorded = events.0.lock().unwrap().clone();
        let (warning, reason, note) = recorded.last().unwrap();
        assert!(*warning);
        assert_eq!(reason, "TemplatesInvalid");
        assert!(note.contains("unknown field `containers[0].imag` at line 3"), "{note}");
        assert!(note.contains("keeping the last good templates"), "{note}");
        let first = revision(&live);
        assert_eq!(shown(), vec![line(&first)], "a bad edit leaves the revision shown");

        assert!(
            apply(
                Some(&configmap("containers:\n- name: c\n  image: c\n")),
                &live,
                &reloader(&metrics, &events)
            )
            .await
        );
        assert_eq!(
            live.current().unwrap().get("config").unwrap().spec.containers[0].name,
            "c"
        );
        assert_ne!(revision(&live), first);
        assert_eq!(shown(), vec![line(&revision(&live))], "only the live revision is shown");
    }

    /// A template with more faults than a note holds: the note names as many as fit, counts
    /// the rest, and still says what the injector does.
    #[tokio::test]
    async fn an_event_note_holds_what_fits_and_the_count_of_the_rest() {
        let live = LiveTemplates::new(None);
        let metrics = Metrics::unregistered();
        let events = Recorded::default();
        let containers: String = (0..40)
            .map(|i| format!("- {{name: c{i}, image: e, imagePullPolcy: Always}}\n"))
            .collect();
        let bad = format!("containers:\n{containers}");
        assert!(!apply(Some(&configmap(&bad)), &live, &reloader(&metrics, &events)).await);
        let (warning, reason, note) = events.0.lock().unwrap().last().unwrap().clone();
        assert!(warning);
        assert_eq!(reason, "TemplatesInvalid");
        assert!(note.len() <= events::MAX_NOTE_BYTES, "{} bytes: {note}", note.len());
        assert!(
            note.starts_with(
                "config ei/envoy-injector: template `config`: unknown field `containers[0].imagePullPolcy` at line 2 (did you mean `imagePullPolicy`?); "
            ),
            "{note}"
        );
        assert!(note.contains(" more faults; no templates loaded yet"), "{note}");
        assert!(!note.contains('…'), "cut between faults, not inside one: {note}");
    }

    #[tokio::test]
    async fn an_override_out_of_its_own_bounds_keeps_the_last_good_templates() {
        let live = LiveTemplates::new(None);
        let metrics = Metrics::unregistered();
        let events = Recorded::default();
        let good = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/overrides/template.yaml"
        ));
        assert!(apply(Some(&configmap(good)), &live, &reloader(&metrics, &events)).await);
        let bad = good.replace(r#"max: "2""#, "max: 50m");
        assert!(!apply(Some(&configmap(&bad)), &live, &reloader(&metrics, &events)).await);
        let current = live.current().unwrap();
        assert!(current.get("config").unwrap().overrides.get("cpu-request").is_some());
        assert_eq!(
            current.get("config").unwrap().spec,
            crate::template::Template::parse("config", good, crate::template::KubeVersion::NEWEST)
                .unwrap()
                .spec
        );
        let recorded = events.0.lock().unwrap().clone();
        let (warning, reason, note) = recorded.last().unwrap();
        assert!(*warning);
        assert_eq!(reason, "TemplatesInvalid");
        assert!(note.contains("field `overrides.cpu-request` at line 11"), "{note}");
        assert!(note.contains("above max \"50m\""), "{note}");
    }

    #[tokio::test]
    async fn values_found_at_start_are_served_loudly_and_an_edit_keeping_them_is_refused() {
        let live = LiveTemplates::new(None);
        let metrics = Metrics::unregistered();
        let events = Recorded::default();
        // What an injector without value rules loaded: the API server refuses its Pods.
        let upgraded = "containers:\n- name: a\n  image: a\n  ports: [{containerPort: 80, protocol: tcp}]\n";
        assert!(apply(Some(&configmap(upgraded)), &live, &reloader(&metrics, &events)).await);
        assert_eq!(
            live.current().unwrap().get("config").unwrap().spec.containers[0].name,
            "a"
        );
        assert_eq!(metrics.templates_refused_values.get(), 1);
        let (warning, reason, note) = events.0.lock().unwrap().last().unwrap().clone();
        assert!(warning);
        assert_eq!(reason, "TemplatesRefusedValues");
        assert!(
            note.contains(r#"field `containers[0].ports[0].protocol` at line 4: expected one of "TCP", "UDP", "SCTP", found "tcp""#)
                && note.contains("serving these templates as before"),
            "{note}"
        );
        // A resync of the same content changes and says nothing.
        assert!(apply(Some(&configmap(upgraded)), &live, &reloader(&metrics, &events)).await);
        assert_eq!(events.0.lock().unwrap().len(), 1);

        // An edit that keeps such values is refused like any bad edit.
        let edited = upgraded.replace("name: a", "name: b");
        assert!(!apply(Some(&configmap(&edited)), &live, &reloader(&metrics, &events)).await);
        assert_eq!(
            live.current().unwrap().get("config").unwrap().spec.containers[0].name,
            "a"
        );
        assert_eq!(events.0.lock().unwrap().last().unwrap().1, "TemplatesInvalid");

        // Fixed: loaded, and the gauge is back to 0.
        let fixed = upgraded.replace("tcp", "TCP");
        assert!(apply(Some(&configmap(&fixed)), &live, &reloader(&metrics, &events)).await);
        assert_eq!(metrics.templates_refused_values.get(), 0);
    }

    #[tokio::test]
    async fn unchanged_content_and_deletion_keep_what_is_live() {
        let live = LiveTemplates::new(None);
        let metrics = Metrics::unregistered();
        let events = Recorded::default();
        assert!(!apply(None, &live, &reloader(&metrics, &events)).await);
        assert!(!live.is_loaded());
        apply(
            Some(&configmap("containers:\n- name: a\n  image: a\n")),
            &live,
            &reloader(&metrics, &events),
        )
        .await;
        apply(
            Some(&configmap("containers:\n- name: a\n  image: a\n")),
            &live,
            &reloader(&metrics, &events),
        )
        .await;
        assert_eq!(
            events.0.lock().unwrap().len(),
            1,
            "a resync with equal content records nothing"
        );
        assert!(!apply(None, &live, &reloader(&metrics, &events)).await);
        assert!(live.is_loaded());
    }
}
