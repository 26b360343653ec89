//! What the handlers share, and what says whether the process may receive traffic.

use std::sync::Arc;

use prometheus_client::registry::Registry;

use crate::admission::{Admission, TemplateValidation};
use crate::metrics::Metrics;

/// Says whether the process may receive traffic; `Err` carries the reason it may not.
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub admission: Arc<Admission>,
    /// `POST /validate`, with the value rules of the API server's version.
    pub validation: TemplateValidation,
    pub registry: Arc<Registry>,
    pub metrics: Metrics,
    /// Readiness besides shutdown (which the server adds itself).
    pub readiness: Readiness,
}
