//! The webhook entries' `matchConditions`, written once by the engine
//! (`policies::webhook::entries`):
//!
//! - the committed copies, `manifests/webhook.yaml` (each entry's `matchConditions` block)
//!   and the chart's `templates/_match-conditions.tpl` (which its `templates/webhook.yaml`
//!   includes), are exactly what the engine writes; `make generate` (this test with
//!   `UPDATE_GENERATED=1`) rewrites them;
//! - with each entry's selectors as shipped, they send the API server's Pods exactly where
//!   `inject::decide` has work to do (module `sent`).

mod generated;
mod sent;
