//! Kubernetes Events (events.k8s.io/v1): the one way every part of the process publishes
//! them (the template reload on the ConfigMap, the Network controller on Networks).
//!
//! Events are best effort: one that cannot be published is logged and the caller goes on.
//!
//! Each Event is created as a new object. kube-runtime's `Recorder` instead keeps every
//! Event it sent for 6 minutes and turns a repeat of the same (type, reason, action) on the
//! same object into a count on the *first* Event, keeping that Event's note: a Network
//! that overlaps `a` and then `b` would show "overlaps a" twice, and a burst of 10,000
//! Networks held 10,000 Events in memory, scanned on every publish. Our callers publish on
//! transitions only, so repeats are rare and each one says something new.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::events::Event;
use tracing::warn;

pub use kube::runtime::events::EventType;

/// The Events API refuses notes longer than this many bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// Where Events go. [`Publisher`] in a cluster; tests record them.
pub trait EventSink: Send + Sync {
    fn publish(&self, regarding: ObjectReference, event: Event) -> BoxFuture<'_, ()>;
}

/// Publishes as `reportingController: envoy-injector`, `reportingInstance` = this
/// replica's identity.
#[derive(Clone)]
pub struct Publisher {
    client: Client,
    instance: String,
}

impl Publisher {
    pub fn new(client: Client, identity: &str) -> Publisher {
        Publisher {
            client,
            instance: identity.to_string(),
        }
    }

    fn object(&self, regarding: ObjectReference, event: Event) -> K8sEvent {
        let now = Timestamp::now();
        // Unique per Event and readable: `<object>.<nanoseconds, hex>`, as kubectl and
        // client-go name them.
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(crate::NAME),
            now.as_nanosecond()
        );
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some(event.action),
            reason: Some(event.reason),
            note: event.note.map(truncate_note),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            related: event.secondary,
            reporting_controller: Some(crate::NAME.to_string()),
            reporting_instance: Some(self.instance.clone()),
            ..K8sEvent::default()
        }
    }
}

impl EventSink for Publisher {
    fn publish(&self, regarding: ObjectReference, event: Event) -> BoxFuture<'_, ()> {
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".to_string());
        let object = self.object(regarding, event);
        Box::pin(async move {
            let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
            if let Err(error) = api.create(&PostParams::default(), &object).await {
                let regarding = object.regarding.unwrap_or_default();
                warn!(
                    %error,
                    reason = object.reason.as_deref().unwrap_or(""),
                    kind = regarding.kind.as_deref().unwrap_or(""),
                    namespace = regarding.namespace.as_deref().unwrap_or(""),
                    name = regarding.name.as_deref().unwrap_or(""),
                    "could not publish an Event"
                );
            }
        })
    }
}

/// Builds an Event; `warning` picks the type.
pub fn event(warning: bool, reason: &str, action: &str, note: String) -> Event {
    Event {
        type_: if warning { EventType::Warning } else { EventType::Normal },
        reason: reason.to_string(),
        note: Some(note),
        action: action.to_string(),
        secondary: None,
    }
}

/// Cuts a note to [`MAX_NOTE_BYTES`] at a char boundary, marking the cut with `…`.
pub fn truncate_note(mut text: String) -> String {
    if text.len() > MAX_NOTE_BYTES {
        let cut = text.floor_char_boundary(MAX_NOTE_BYTES - '…'.len_utf8());
        text.truncate(cut);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_at_a_char_boundary() {
        let long = "é".repeat(600);
        let cut = truncate_note(long.clone());
        assert!(cut.len() <= MAX_NOTE_BYTES, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(long.starts_with(cut.trim_end_matches('…')));
        assert_eq!(truncate_note("short".into()), "short");
    }
}
