//! `POST /mutate` and `POST /validate`: read the AdmissionReview body within its limits
//! and hand it to [`Admission`] or [`TemplateValidation`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::BodyExt;
use tracing::{Instrument, debug, error, info_span, warn};

use crate::admission::{Admission, RequestError, TemplateValidation};
use crate::duration as go_duration;
use crate::metrics::{Metrics, Outcome, OutcomeLabels};

/// After answering 413, this much more of an oversized body is still read and dropped so
/// a client that is still sending sees the answer instead of a reset connection.
const OVERSIZE_DRAIN_BYTES: usize = 256 * 1024;

pub(crate) struct WebhookState {
    pub admission: Arc<Admission>,
    pub metrics: Metrics,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
}

pub(crate) fn router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate).fallback(method_not_allowed))
        .route("/validate", post(validate).fallback(method_not_allowed))
        .fallback(not_found)
        .with_state(state)
}

async fn not_found() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "not found: this server answers POST /mutate and POST /validate".to_string(),
    )
}

async fn method_not_allowed() -> Response {
    let mut response = text(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed: /mutate and /validate expect POST".to_string(),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    response
}

async fn mutate(State(state): State<Arc<WebhookState>>, request: Request) -> Response {
    let admission = state.admission.clone();
    review(state, request, "mutate", move |body| admission.handle(body)).await
}

async fn validate(State(state): State<Arc<WebhookState>>, request: Request) -> Response {
    review(state, request, "validate", |body| {
        TemplateValidation::new().handle(body)
    })
    .await
}

/// Reads the body within the limits and answers it with `handler`.
async fn review(
    state: Arc<WebhookState>,
    request: Request,
    route: &'static str,
    handler: impl Fn(&[u8]) -> Result<Vec<u8>, RequestError>,
) -> Response {
    let timeout = effective_timeout(request.uri().query(), state.request_timeout);
    let span = info_span!("review", route, version = ?request.version(), timeout_ms = timeout.as_millis() as u64);
    async move {
        let (parts, body) = request.into_parts();
        let body = match tokio::time::timeout(timeout, read_body(body, &parts.headers, state.max_body_bytes)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(rejection)) => return reject(&state.metrics, rejection),
            Err(_) => {
                let message = format!(
                    "expected the request body within {} ms (request timeout), found it still arriving",
                    timeout.as_millis()
                );
                return reject(&state.metrics, (StatusCode::REQUEST_TIMEOUT, message));
            }
        };
        // A panic here is a bug in the engine; answering 500 keeps this connection and the
        // rest of the server serving.
        match std::panic::catch_unwind(AssertUnwindSafe(|| handler(&body))) {
            Ok(Ok(review)) => {
                let mut response = (StatusCode::OK, review).into_response();
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                response
            }
            Ok(Err(err)) => text(StatusCode::BAD_REQUEST, err.to_string()),
            Err(_) => {
                error!("admission handler panicked; answering 500");
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error while reviewing the request".to_string(),
                )
            }
        }
    }
    .instrument(span)
    .await
}

/// The API server's `?timeout=` when it is shorter than ours.
fn effective_timeout(query: Option<&str>, ours: Duration) -> Duration {
    let theirs = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("timeout="))
        .and_then(|value| {
            let parsed = go_duration::parse(value);
            if parsed.is_none() {
                debug!(value, "ignoring unreadable ?timeout=");
            }
            parsed
        });
    match theirs {
        Some(theirs) if !theirs.is_zero() => theirs.min(ours),
        _ => ours,
    }
}

type Rejection = (StatusCode, String);

async fn read_body(mut body: Body, headers: &HeaderMap, limit: usize) -> Result<Vec<u8>, Rejection> {
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("expected a request body of at most {limit} bytes (--max-body-bytes), found more"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(declared) = declared
        && declared > limit as u64
    {
        let expects_continue = headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        // Small overshoots are read and dropped (see OVERSIZE_DRAIN_BYTES); a client
        // waiting for 100-continue has sent nothing yet, so there is nothing to drain.
        if !expects_continue && declared <= (limit + OVERSIZE_DRAIN_BYTES) as u64 {
            drain(body, limit + OVERSIZE_DRAIN_BYTES).await;
        }
        return Err(too_large());
    }
    let capacity = declared.map_or(0, |d| d as usize).min(limit);
    let mut buffer = Vec::with_capacity(capacity);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| (StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() + data.len() > limit {
                drain(body, OVERSIZE_DRAIN_BYTES).await;
                return Err(too_large());
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer)
}

async fn drain(mut body: Body, mut budget: usize) {
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            match budget.checked_sub(data.len()) {
                Some(left) => budget = left,
                None => return,
            }
        }
    }
}

fn reject(metrics: &Metrics, (status, message): Rejection) -> Response {
    warn!(status = status.as_u16(), reason = %message, "rejecting admission request");
    metrics
        .admission_requests
        .get_or_create(&OutcomeLabels {
            outcome: Outcome::Invalid,
            dry_run: false,
        })
        .inc();
    text(status, message)
}

pub(crate) fn text(status: StatusCode, message: String) -> Response {
    let mut response = (status, message).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shorter_timeout_wins() {
        let ours = Duration::from_secs(10);
        assert_eq!(effective_timeout(Some("timeout=3s"), ours), Duration::from_secs(3));
        assert_eq!(effective_timeout(Some("a=b&timeout=1m0s"), ours), ours);
        assert_eq!(effective_timeout(Some("timeout=0"), ours), ours);
        assert_eq!(effective_timeout(Some("timeout=soon"), ours), ours);
        assert_eq!(effective_timeout(None, ours), ours);
    }
}
