//! Template hot reload: each change of the `envoy-injector` ConfigMap builds a new
//! template set; a good one replaces the live set at once, a bad one keeps the last good
//! set live and says why (log, metric, Event on the ConfigMap).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::{error, info, warn};

use crate::cache::ConfigMapEvents;
use crate::config::TemplateSet;
use crate::metrics::Metrics;
use crate::templates::LiveTemplates;

/// Where the verdict on a ConfigMap goes besides logs and metrics.
pub trait ConfigMapEventSink: Send + Sync {
    fn publish(
        &self,
        configmap: &ConfigMap,
        warning: bool,
        reason: &str,
        note: String,
    ) -> futures::future::BoxFuture<'_, ()>;
}

/// Events through kube-runtime's Recorder (events.k8s.io/v1).
pub struct RecorderSink(pub Recorder);

impl ConfigMapEventSink for RecorderSink {
    fn publish(
        &self,
        configmap: &ConfigMap,
        warning: bool,
        reason: &str,
        note: String,
    ) -> futures::future::BoxFuture<'_, ()> {
        let reference: ObjectReference = configmap.object_ref(&());
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.to_string(),
            // The Events API caps notes at 1 KiB.
            note: Some(truncate(note, 1000)),
            action: String::from("LoadTemplates"),
            secondary: None,
        };
        Box::pin(async move {
            if let Err(err) = self.0.publish(&event, &reference).await {
                warn!(error = %err, "cannot record an Event on the ConfigMap");
            }
        })
    }
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let cut = text.floor_char_boundary(max - 1);
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Applies one ConfigMap state to the live templates. Returns whether it was loaded.
pub async fn apply(
    configmap: Option<&ConfigMap>,
    live: &LiveTemplates,
    metrics: &Metrics,
    events: &dyn ConfigMapEventSink,
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
            metrics.template_load(Some(set.len()));
            live.replace(set);
            info!(configmap = %source, templates = ?names, "templates loaded");
            events
                .publish(
                    configmap,
                    false,
                    "TemplatesLoaded",
                    format!("loaded templates {}", names.join(", ")),
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
            events
                .publish(configmap, true, "TemplatesInvalid", format!("{err}; {kept}"))
                .await;
            false
        }
    }
}

/// Runs until the ConfigMap feed ends (the cache stopped).
pub async fn run(
    mut feed: ConfigMapEvents,
    live: Arc<LiveTemplates>,
    metrics: Metrics,
    events: Arc<dyn ConfigMapEventSink>,
) {
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

    impl ConfigMapEventSink for Recorded {
        fn publish(
            &self,
            _: &ConfigMap,
            warning: bool,
            reason: &str,
            note: String,
        ) -> futures::future::BoxFuture<'_, ()> {
            self.0.lock().unwrap().push((warning, reason.to_string(), note));
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
        let metrics = Metrics::unregistered();
        let events = Recorded::default();
        assert!(apply(Some(&configmap("containers:\n- name: a\n")), &live, &metrics, &events).await);
        assert_eq!(
            live.current().unwrap().get("config").unwrap().spec.containers[0].name,
            "a"
        );

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

        assert!(apply(Some(&configmap("containers:\n- name: c\n")), &live, &metrics, &events).await);
        assert_eq!(
            live.current().unwrap().get("config").unwrap().spec.containers[0].name,
            "c"
        );
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

    #[test]
    fn notes_are_cut_at_a_char_boundary() {
        let cut = truncate("é".repeat(600), 1000);
        assert!(cut.len() <= 1000 + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }
}
