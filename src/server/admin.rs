//! Admin listener routes: `/healthz`, `/readyz`, `/metrics`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;

use super::state::Readiness;
use super::webhook::text;
use crate::shutdown::CancellationToken;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub(crate) struct AdminState {
    pub registry: Arc<Registry>,
    pub readiness: Readiness,
    /// True once shutdown began: from then on the pod must leave the Service endpoints.
    pub stopping: CancellationToken,
}

pub(crate) fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            text(
                StatusCode::NOT_FOUND,
                "not found: try /healthz, /readyz or /metrics".into(),
            )
        })
        .with_state(state)
}

async fn healthz() -> Response {
    text(StatusCode::OK, "ok".into())
}

async fn readyz(State(state): State<Arc<AdminState>>) -> Response {
    if state.stopping.is_cancelled() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "shutting down".into());
    }
    match (state.readiness)() {
        Ok(()) => text(StatusCode::OK, "ok".into()),
        Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

async fn metrics(State(state): State<Arc<AdminState>>) -> Response {
    let body = crate::metrics::encode(&state.registry);
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
    response
}
