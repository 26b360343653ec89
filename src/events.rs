//! Kubernetes Events (events.k8s.io/v1): the one way every part of the process publishes
//! them (the template reload on the ConfigMap, the Network controller on Networks).
//!
//! Events are best effort: one that cannot be published is logged and the caller goes on.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};
use tracing::warn;

pub use kube::runtime::events::EventType;

/// The Events API refuses notes longer than this many bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// Where Events go. [`Publisher`] in a cluster; tests record them.
pub trait EventSink: Send + Sync {
    fn publish(&self, regarding: ObjectReference, event: Event) -> BoxFuture<'_, ()>;
}

/// Publishes through kube-runtime's [`Recorder`] as `reportingController: envoy-injector`,
/// `reportingInstance` = this replica's identity.
#[derive(Clone)]
pub struct Publisher {
    recorder: Recorder,
}

impl Publisher {
    pub fn new(client: Client, identity: &str) -> Publisher {
        let reporter = Reporter {
            controller: crate::NAME.to_string(),
            instance: Some(identity.to_string()),
        };
        Publisher {
            recorder: Recorder::new(client, reporter),
        }
    }
}

impl EventSink for Publisher {
    fn publish(&self, regarding: ObjectReference, mut event: Event) -> BoxFuture<'_, ()> {
        event.note = event.note.map(truncate_note);
        Box::pin(async move {
            if let Err(error) = self.recorder.publish(&event, &regarding).await {
                warn!(
                    %error,
                    reason = %event.reason,
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
