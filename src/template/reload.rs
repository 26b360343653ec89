//! Template hot reload: each change of the `envoy-injector` ConfigMap builds a new
//! template set; a good one replaces the live set at once, a bad one keeps the last good
//! set live and says why (log, metric, Event on the ConfigMap).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use tracing::{error, info, warn};

use super::{LiveTemplates, TemplateSet};
use crate::events::{self, EventSink};
use crate::metrics::Metrics;

/// ConfigMap changes, as the cache's watch of it delivers them: the current object, or
/// `None` once it is deleted (or absent after the initial list).
pub type ConfigMapEvents = tokio::sync::mpsc::Receiver<Option<Arc<ConfigMap>>>;

/// The Events' `action`.
const ACTION: &str = "LoadTemplates";

/// Counts a successful load of `set` and shows its templates' revisions.
pub fn loaded(metrics: &Metrics, set: &TemplateSet) {
    metrics.template_load(Some(set.len()));
    metrics.templates_live(
        set.names()
            .filter_map(|name| Some((name, set.get(name)?.revision.as_str()))),
    );
}

/// Applies one ConfigMap state to the live templates. Returns whether it was loaded.
pub async fn apply(
    configmap: Option<&ConfigMap>,
    live: &LiveTemplates,
    metrics: &Metrics,
    events: &dyn EventSink,
) -> bool {
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
    match TemplateSet::from_data(&source, &data) {
        Ok(set) => {
            let unchanged = live.current().is_some_and(|current| *current == set);
            if unchanged {
                return true;
            }
            let names: Vec<String> = set.names().map(String::from).collect();
            loaded(metrics, &set);
            live.replace(set);
            info!(configmap = %source, templates = ?names, "templates loaded");
            let note = format!("loaded templates {}", names.join(", "));
            events
                .publish(
                    configmap.object_ref(&()),
                    events::event(false, "TemplatesLoaded", ACTION, note),
                )
                .await;
            true
        }
        Err(err) => {
            metrics.template_load(None);
            let kept = if live.is_loaded() {
                "keeping the last good templates"
            } else {
                "no templates loaded yet"
            };
            error!(configmap = %source, error = %err, "invalid templates; {kept}");
            let note = format!("{err}; {kept}");
            events
                .publish(
                    configmap.object_ref(&()),
                    events::event(true, "TemplatesInvalid", ACTION, note),
                )
                .await;
            false
        }
    }
}

/// Runs until the ConfigMap feed ends (the cache stopped).
pub async fn run(mut feed: ConfigMapEvents, live: Arc<LiveTemplates>, metrics: Metrics, events: Arc<dyn EventSink>) {
    while let Some(configmap) = feed.recv().await {
        apply(configmap.as_deref(), &live, &metrics, events.as_ref()).await;
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
        assert!(apply(Some(&configmap("containers:\n- name: a\n")), &live, &metrics, &events).await);
        assert_eq!(
            live.current().unwrap().get("config").unwrap().spec.containers[0].name,
            "a"
        );
        let first = revision(&live);
        let line = |revision: &str| {
            format!(r#"envoy_injector_template_revision{{template="config",revision="{revision}"}} 1"#)
        };
        assert_eq!(shown(), vec![line(&first)]);

        assert!(
            !apply(
                Some(&configmap("containers:\n- name: b\n  imag: x\n")),
                &live,
                &metrics,
                &events
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
        assert_eq!(shown(), vec![line(&first)], "a bad edit leaves the revision shown");

        assert!(apply(Some(&configmap("containers:\n- name: c\n")), &live, &metrics, &events).await);
        assert_eq!(
            live.current().unwrap().get("config").unwrap().spec.containers[0].name,
            "c"
        );
        assert_ne!(revision(&live), first);
        assert_eq!(shown(), vec![line(&revision(&live))], "only the live revision is shown");
    }

    #[tokio::test]
    async fn an_override_out_of_its_own_bounds_keeps_the_last_good_templates() {
        let live = LiveTemplates::new(None);
        let metrics = Metrics::unregistered();
        let events = Recorded::default();
        let good = crate::template::overrides::tests::EXAMPLE;
        assert!(apply(Some(&configmap(good)), &live, &metrics, &events).await);
        let bad = good.replace(r#"max: "2""#, "max: 50m");
        assert!(!apply(Some(&configmap(&bad)), &live, &metrics, &events).await);
        let current = live.current().unwrap();
        assert!(current.get("config").unwrap().overrides.get("cpu-request").is_some());
        assert_eq!(
            current.get("config").unwrap().spec,
            crate::template::Template::parse("config", good).unwrap().spec
        );
        let recorded = events.0.lock().unwrap().clone();
        let (warning, reason, note) = recorded.last().unwrap();
        assert!(*warning);
        assert_eq!(reason, "TemplatesInvalid");
        assert!(note.contains("field `overrides.cpu-request` at line 11"), "{note}");
        assert!(note.contains("above max \"50m\""), "{note}");
    }

    #[tokio::test]
    async fn unchanged_content_and_deletion_keep_what_is_live() {
        let live = LiveTemplates::new(None);
        let metrics = Metrics::unregistered();
        let events = Recorded::default();
        assert!(!apply(None, &live, &metrics, &events).await);
        assert!(!live.is_loaded());
        apply(Some(&configmap("containers:\n- name: a\n")), &live, &metrics, &events).await;
        apply(Some(&configmap("containers:\n- name: a\n")), &live, &metrics, &events).await;
        assert_eq!(
            events.0.lock().unwrap().len(),
            1,
            "a resync with equal content records nothing"
        );
        assert!(!apply(None, &live, &metrics, &events).await);
        assert!(live.is_loaded());
    }
}
