//! What the compiled objects depend on besides the templates.

use crate::inject::AnnotationOptIn;

/// What the compiled objects depend on besides the templates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The injector's own namespace: its Pods are never injected (as the webhook
    /// configuration excludes it).
    pub injector_namespace: String,
    /// Whether Pods' annotations opt them in (`serve --annotation-opt-in`): without, the
    /// policy for annotated Pods is not written, and no Pod a selector does not pick is
    /// looked at.
    pub annotation_opt_in: AnnotationOptIn,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            injector_namespace: crate::NAME.to_string(),
            annotation_opt_in: AnnotationOptIn::On,
        }
    }
}
