//! What admission answers a review: allowed or denied and why, the patch, the warnings,
//! and what the answer counts as in the metrics.

use tracing::info;

use super::review;
use crate::metrics::Outcome;

/// A decided response plus what to count it as.
pub(super) struct Answer {
    pub(super) allowed: bool,
    /// Why, when denied.
    pub(super) message: Option<String>,
    /// The JSON Patch, base64-encoded as the response carries it.
    pub(super) patch: Option<String>,
    pub(super) warnings: Vec<String>,
    pub(super) outcome: Outcome,
}

impl Answer {
    /// The response body for the request `uid`.
    pub(super) fn encode(&self, uid: &str) -> Vec<u8> {
        review::encode(&review::Reply {
            uid,
            allowed: self.allowed,
            message: self.message.as_deref(),
            patch: self.patch.as_deref(),
            warnings: &self.warnings,
        })
    }

    pub(super) fn allow(warnings: Vec<String>) -> Answer {
        Answer {
            allowed: true,
            message: None,
            patch: None,
            warnings,
            outcome: Outcome::Skipped,
        }
    }

    pub(super) fn deny(reason: String) -> Answer {
        info!(%reason, "denying");
        Answer {
            allowed: false,
            message: Some(reason),
            patch: None,
            warnings: Vec::new(),
            outcome: Outcome::Denied,
        }
    }
}
