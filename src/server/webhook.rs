//! `POST /mutate` and `POST /validate`: read the AdmissionReview body within its limits
//! and hand it to [`Admission`] or [`TemplateValidation`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::BodyExt;
use tracing::{Instrument, debug, debug_span, error, info};

use super::budget::{BUDGET_WAIT, BodyBudget, Reservation};
use super::connection::{ConnectionHandle, linger_on_stream};
use crate::admission::{Admission, RequestError, TemplateValidation};
use crate::duration as go_duration;
use crate::metrics::{Metrics, Outcome, OutcomeLabels};

pub(crate) struct WebhookState {
    pub admission: Arc<Admission>,
    pub validation: TemplateValidation,
    pub metrics: Metrics,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    pub budget: BodyBudget,
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
    let validation = state.validation.clone();
    review(state, request, "validate", move |body| validation.handle(body)).await
}

/// Reads the body within the limits and answers it with `handler`.
async fn review(
    state: Arc<WebhookState>,
    request: Request,
    route: &'static str,
    handler: impl Fn(&[u8]) -> Result<Vec<u8>, RequestError>,
) -> Response {
    let timeout = effective_timeout(request.uri().query(), state.request_timeout);
    let span = debug_span!("review", route, version = ?request.version(), timeout_ms = timeout.as_millis() as u64);
    async move {
        let (parts, mut body) = request.into_parts();
        let read = tokio::time::timeout(timeout, read_body(&mut body, &parts.headers, &state));
        let (body, _reservation) = match read.await {
            Ok(Ok(read)) => read,
            Ok(Err(rejection)) => return reject(&state.metrics, &parts, body, rejection),
            Err(_) => {
                let message = format!(
                    "expected the request body within {} ms (request timeout), found it still arriving",
                    timeout.as_millis()
                );
                let rejection = Rejection::new(StatusCode::REQUEST_TIMEOUT, message);
                return reject(&state.metrics, &parts, body, rejection);
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

/// A request answered with an HTTP error before its body was read to the end.
struct Rejection {
    status: StatusCode,
    message: String,
    retry_after: bool,
}

impl Rejection {
    fn new(status: StatusCode, message: String) -> Rejection {
        Rejection {
            status,
            message,
            retry_after: false,
        }
    }
}

/// Reads the whole body within `--max-body-bytes`, holding its size in the in-flight
/// body budget (returned alongside, released when dropped).
async fn read_body(
    body: &mut Body,
    headers: &HeaderMap,
    state: &WebhookState,
) -> Result<(Vec<u8>, Reservation), Rejection> {
    let limit = state.max_body_bytes;
    let too_large = || {
        Rejection::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("expected a request body of at most {limit} bytes (--max-body-bytes), found more"),
        )
    };
    let no_room = || {
        state.metrics.body_budget_rejections.inc();
        Rejection {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!(
                "expected room for this request body within {} ms, found the in-flight body budget (--max-inflight-body-bytes) full; retry shortly",
                BUDGET_WAIT.as_millis()
            ),
            retry_after: true,
        }
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // Refused before a byte of it is read (a client waiting for `100-continue` sends none).
    if declared.is_some_and(|declared| declared > limit as u64) {
        return Err(too_large());
    }
    let declared = declared.map(|d| d as usize);
    let mut reservation = state
        .budget
        .reserve(declared.unwrap_or(0))
        .await
        .map_err(|_| no_room())?;
    let mut buffer = Vec::with_capacity(declared.unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| Rejection::new(StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            let length = buffer.len() + data.len();
            if length > limit {
                return Err(too_large());
            }
            if declared.is_none_or(|declared| length > declared) {
                state
                    .budget
                    .ensure(&mut reservation, length)
                    .await
                    .map_err(|_| no_room())?;
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok((buffer, reservation))
}

/// Answers a request whose body was not read to its end. HTTP/1.1: the connection cannot
/// carry another request, so the answer says `Connection: close`, and the connection
/// lingers on close so the client reads the answer even while it is still sending.
/// HTTP/2: the stream lingers the same way (the rest of `body` is read and dropped, within
/// the same bounds), then, if the client is still sending, it is reset with NO_ERROR (RFC
/// 9113 §8.1: "stop sending, the answer is complete"); the connection goes on.
fn reject(metrics: &Metrics, request: &Parts, body: Body, rejection: Rejection) -> Response {
    info!(status = rejection.status.as_u16(), reason = %rejection.message, "rejecting admission request");
    metrics
        .admission_requests
        .get_or_create(&OutcomeLabels {
            outcome: Outcome::Invalid,
            dry_run: false,
        })
        .inc();
    let mut response = text(rejection.status, rejection.message);
    if rejection.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let Some(connection) = request.extensions.get::<ConnectionHandle>() {
        connection.linger_on_close();
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    } else if request.version == Version::HTTP_2 {
        linger_on_stream(body);
    }
    response
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
