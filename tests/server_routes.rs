//! The webhook's and the admin listener's routes in process, without a socket: each
//! request handed to the router (`tower::ServiceExt::oneshot`) as a served connection
//! hands it over. What the routers own is here — 404, 405, 413, the request timeout
//! (408), the admin answers; what the connection owns (TLS, HTTP/1.1 and HTTP/2, the
//! deadline of each phase, lingering after an early answer) stays with the TLS tests
//! (`server_tls.rs`, `server_hardening.rs`).

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use common::*;
use envoy_injector::server::{self, ServerConfig};
use envoy_injector::shutdown::CancellationToken;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use tower::ServiceExt;

const LIMIT: usize = 8 * 1024;

fn config() -> ServerConfig {
    let mut config = test_config();
    config.max_body_bytes = LIMIT;
    config
}

/// What the router answered: status, the `Allow` and `Content-Type` headers, the body.
struct Answer {
    status: StatusCode,
    allow: Option<String>,
    content_type: Option<String>,
    text: String,
}

async fn send(config: &ServerConfig, request: Request<Body>) -> Answer {
    let router = server::webhook_router(config, &app_state(None));
    answer(router.oneshot(request).await.expect("the router is infallible")).await
}

async fn answer(response: axum::response::Response) -> Answer {
    let header = |name| {
        response
            .headers()
            .get(name)
            .map(|v: &axum::http::HeaderValue| v.to_str().unwrap().to_string())
    };
    let (status, allow, content_type) = (response.status(), header(header::ALLOW), header(header::CONTENT_TYPE));
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        allow,
        content_type,
        text: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn request(method: Method, uri: &str, body: Body) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap()
}

/// A body without a Content-Length: `chunks`, then, if `stall`, nothing ever again.
fn streamed(chunks: Vec<Vec<u8>>, stall: bool) -> Body {
    let chunks = futures_util::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    let stall = futures_util::stream::once(std::future::pending())
        .take(usize::from(stall))
        .map(|()| Ok(Vec::new()));
    Body::from_stream(chunks.chain(stall))
}

#[tokio::test]
async fn a_review_is_answered_in_process() {
    let review = fixture("dry-run.json");
    let answer = send(&config(), request(Method::POST, "/mutate", Body::from(review.clone()))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert_eq!(answer.content_type.as_deref(), Some("application/json"));
    check_review("dry-run.json", &review, answer.text.as_bytes());
}

#[tokio::test]
async fn a_review_streamed_without_content_length_is_answered() {
    let review = fixture("dry-run.json");
    let chunks = review.chunks(500).map(<[u8]>::to_vec).collect();
    let answer = send(&config(), request(Method::POST, "/mutate", streamed(chunks, false))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    check_review("dry-run.json", &review, answer.text.as_bytes());
}

#[tokio::test]
async fn an_unknown_path_is_404_naming_the_routes() {
    for (method, path) in [
        (Method::POST, "/nowhere"),
        (Method::GET, "/"),
        (Method::POST, "/mutate/extra"),
    ] {
        let answer = send(
            &config(),
            request(method.clone(), path, Body::from(fixture("dry-run.json"))),
        )
        .await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{method} {path}: {}", answer.text);
        assert_eq!(
            answer.text, "not found: this server answers POST /mutate and POST /validate",
            "{method} {path}"
        );
        assert_eq!(answer.content_type.as_deref(), Some("text/plain; charset=utf-8"));
    }
}

#[tokio::test]
async fn another_method_than_post_is_405_with_allow_post() {
    for (method, path) in [
        (Method::GET, "/mutate"),
        (Method::PUT, "/mutate"),
        (Method::DELETE, "/mutate"),
        (Method::GET, "/validate"),
    ] {
        let answer = send(&config(), request(method.clone(), path, Body::empty())).await;
        assert_eq!(
            answer.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}: {}",
            answer.text
        );
        assert_eq!(answer.allow.as_deref(), Some("POST"), "{method} {path}");
        assert_eq!(
            answer.text, "method not allowed: /mutate and /validate expect POST",
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_declared_or_streamed() {
    let expected = format!("expected a request body of at most {LIMIT} bytes (--max-body-bytes), found more");
    for path in ["/mutate", "/validate"] {
        // Declared too large: refused before a byte of it is read.
        let declared = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::CONTENT_LENGTH, LIMIT + 1)
            .body(streamed(Vec::new(), true))
            .unwrap();
        let answer = send(&config(), declared).await;
        assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE, "{path}: {}", answer.text);
        assert_eq!(answer.text, expected, "{path}");

        // No Content-Length: refused once what arrived passes the limit.
        let chunks = vec![vec![b' '; 4096]; 3];
        let answer = send(&config(), request(Method::POST, path, streamed(chunks, true))).await;
        assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE, "{path}: {}", answer.text);
        assert_eq!(answer.text, expected, "{path}");
    }
    // Exactly the limit is read (and then judged: whitespace is no review).
    let answer = send(
        &config(),
        request(Method::POST, "/mutate", streamed(vec![vec![b' '; LIMIT]], false)),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text);
}

#[tokio::test]
async fn a_stalled_body_is_408_after_the_request_timeout() {
    let mut config = config();
    config.request_timeout = Duration::from_millis(200);
    let half = fixture("dry-run.json")[..1000].to_vec();
    let answer = send(&config, request(Method::POST, "/mutate", streamed(vec![half], true))).await;
    assert_eq!(answer.status, StatusCode::REQUEST_TIMEOUT, "{}", answer.text);
    assert_eq!(
        answer.text,
        "expected the request body within 200 ms (request timeout), found it still arriving"
    );
}

#[tokio::test]
async fn the_api_servers_shorter_timeout_wins_and_a_longer_one_does_not() {
    let mut config = config();
    // Far beyond the test's patience: only the query's 150ms can end the first request.
    config.request_timeout = Duration::from_secs(600);
    let half = || fixture("dry-run.json")[..1000].to_vec();
    let uri = "/mutate?timeout=150ms";
    let answer = send(&config, request(Method::POST, uri, streamed(vec![half()], true))).await;
    assert_eq!(answer.status, StatusCode::REQUEST_TIMEOUT, "{}", answer.text);
    assert!(answer.text.contains("within 150 ms"), "{}", answer.text);

    config.request_timeout = Duration::from_millis(100);
    let uri = "/mutate?timeout=10s";
    let answer = send(&config, request(Method::POST, uri, streamed(vec![half()], true))).await;
    assert_eq!(answer.status, StatusCode::REQUEST_TIMEOUT, "{}", answer.text);
    assert!(answer.text.contains("within 100 ms"), "{}", answer.text);
}

#[tokio::test]
async fn the_admin_routes_answer_and_readyz_turns_503_once_stopping() {
    let state = app_state(Some(std::sync::Arc::new(
        || Err("templates not loaded yet".to_string()),
    )));
    let stopping = CancellationToken::new();
    let admin = || server::admin_router(&state, stopping.clone());
    let get = |path: &str| Request::builder().uri(path).body(Body::empty()).unwrap();

    let got = answer(admin().oneshot(get("/healthz")).await.unwrap()).await;
    assert_eq!((got.status, got.text.as_str()), (StatusCode::OK, "ok"));
    let got = answer(admin().oneshot(get("/readyz")).await.unwrap()).await;
    assert_eq!(
        (got.status, got.text.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "templates not loaded yet")
    );
    let got = answer(admin().oneshot(get("/metrics")).await.unwrap()).await;
    assert_eq!(got.status, StatusCode::OK);
    assert!(
        got.content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{:?}",
        got.content_type
    );
    let got = answer(admin().oneshot(get("/mutate")).await.unwrap()).await;
    assert_eq!(
        (got.status, got.text.as_str()),
        (StatusCode::NOT_FOUND, "not found: try /healthz, /readyz or /metrics")
    );

    stopping.cancel();
    let got = answer(admin().oneshot(get("/readyz")).await.unwrap()).await;
    assert_eq!(
        (got.status, got.text.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    );
}
