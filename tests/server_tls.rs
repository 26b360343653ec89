//! The HTTPS webhook in-process: every captured AdmissionReview over HTTP/1.1 and HTTP/2
//! (ALPN), bad requests, limits, timeouts, and the admin listener.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use envoy_injector::server::{self, ServerConfig, ServerError};
use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::AsyncReadExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_captured_review_is_answered_over_http1_and_http2() {
    let certs = service_certs();
    let server = start(test_config(), pem_source(&certs)).await;
    let addr = server.server.webhook_addr();
    for protocol in [Protocol::Http1, Protocol::Alpn] {
        let client = client(addr, &[&certs.ca.cert_pem], protocol);
        for (name, body) in fixtures() {
            let response = post_review(&client, addr, body.clone()).await;
            assert_eq!(
                response.version(),
                protocol.expected_version(),
                "{name} over {protocol:?}"
            );
            assert_eq!(response.status(), StatusCode::OK, "{name} over {protocol:?}");
            assert_eq!(response.headers()["content-type"], "application/json", "{name}");
            let answer = response.bytes().await.unwrap();
            check_review(&name, &body, &answer);
        }
    }
    let metrics = server.metrics_text();
    assert!(metrics.contains("envoy_injector_admission_requests_total"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_and_tls13_are_both_accepted() {
    let certs = service_certs();
    let server = start(test_config(), pem_source(&certs)).await;
    let addr = server.server.webhook_addr();
    for version in [reqwest::tls::Version::TLS_1_2, reqwest::tls::Version::TLS_1_3] {
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(certs.ca.cert_pem.as_bytes()).unwrap())
            .resolve(HOST, addr)
            .min_tls_version(version)
            .max_tls_version(version)
            .timeout(PATIENCE)
            .build()
            .unwrap();
        let response = post_review(&client, addr, fixture("dry-run.json")).await;
        assert_eq!(response.status(), StatusCode::OK, "{version:?}");
    }
}

/// One bad request: what is sent and what must come back.
struct Case {
    name: &'static str,
    method: reqwest::Method,
    path: &'static str,
    body: Vec<u8>,
    status: StatusCode,
    /// Substring the plain-text answer must contain.
    says: &'static str,
}

fn with_request(edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut review: Value = serde_json::from_slice(&fixture("dry-run.json")).unwrap();
    edit(&mut review);
    serde_json::to_vec(&review).unwrap()
}

const LIMIT: usize = 8 * 1024;

/// The router's own answers (404, 405, 413) are tested in process (`server_routes.rs`);
/// here they are for what the connection does around them: a body sent and not read (a
/// wrong method or path), a body cut off at the limit, the connection serving on after each.
fn bad_requests() -> Vec<Case> {
    let post = reqwest::Method::POST;
    // A well-formed review made too large only by whitespace: rejected for its size alone.
    let mut oversized = fixture("dry-run.json");
    oversized.extend(std::iter::repeat_n(b' ', 2 * LIMIT));
    vec![
        Case {
            name: "not JSON",
            method: post.clone(),
            path: "/mutate",
            body: b"this is not json".to_vec(),
            status: StatusCode::BAD_REQUEST,
            says: "JSON",
        },
        Case {
            name: "empty body",
            method: post.clone(),
            path: "/mutate",
            body: Vec::new(),
            status: StatusCode::BAD_REQUEST,
            says: "JSON",
        },
        Case {
            name: "JSON that is not a review",
            method: post.clone(),
            path: "/mutate",
            body: br#"{"hello":"world"}"#.to_vec(),
            status: StatusCode::BAD_REQUEST,
            says: "AdmissionReview",
        },
        Case {
            name: "a JSON array",
            method: post.clone(),
            path: "/mutate",
            body: b"[1,2,3]".to_vec(),
            status: StatusCode::BAD_REQUEST,
            says: "AdmissionReview",
        },
        Case {
            name: "admission.k8s.io/v1beta1",
            method: post.clone(),
            path: "/mutate",
            body: with_request(|r| r["apiVersion"] = "admission.k8s.io/v1beta1".into()),
            status: StatusCode::BAD_REQUEST,
            says: "v1beta1",
        },
        Case {
            name: "review without request",
            method: post.clone(),
            path: "/mutate",
            body: br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            status: StatusCode::BAD_REQUEST,
            says: "request",
        },
        Case {
            name: "request without uid",
            method: post.clone(),
            path: "/mutate",
            body: with_request(|r| {
                r["request"].as_object_mut().unwrap().remove("uid");
            }),
            status: StatusCode::BAD_REQUEST,
            says: "uid",
        },
        Case {
            name: "request with an empty uid",
            method: post.clone(),
            path: "/mutate",
            body: with_request(|r| r["request"]["uid"] = "".into()),
            status: StatusCode::BAD_REQUEST,
            says: "uid",
        },
        Case {
            name: "body over --max-body-bytes",
            method: post.clone(),
            path: "/mutate",
            body: oversized,
            status: StatusCode::PAYLOAD_TOO_LARGE,
            says: "8192",
        },
        Case {
            name: "PUT /mutate",
            method: reqwest::Method::PUT,
            path: "/mutate",
            body: fixture("dry-run.json"),
            status: StatusCode::METHOD_NOT_ALLOWED,
            says: "POST",
        },
        Case {
            name: "unknown path",
            method: post,
            path: "/nowhere",
            body: fixture("dry-run.json"),
            status: StatusCode::NOT_FOUND,
            says: "/mutate",
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_http_errors_and_the_server_keeps_serving() {
    let (certs, server) = start_with_body_limit(LIMIT).await;
    let addr = server.server.webhook_addr();
    for protocol in [Protocol::Http1, Protocol::Alpn] {
        let client = client(addr, &[&certs.ca.cert_pem], protocol);
        for case in bad_requests() {
            let url = format!("https://{HOST}:{}{}?timeout=10s", addr.port(), case.path);
            let response = client
                .request(case.method.clone(), url)
                .headers(apiserver_headers())
                .body(case.body)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{} over {protocol:?}: no answer: {e}", case.name));
            let status = response.status();
            let content_type = response.headers().get("content-type").cloned();
            let text = response.text().await.unwrap();
            assert_eq!(status, case.status, "{} over {protocol:?}: {text}", case.name);
            assert!(
                text.contains(case.says),
                "{} over {protocol:?}: expected {:?} in {text:?}",
                case.name,
                case.says
            );
            assert_eq!(content_type.unwrap(), "text/plain; charset=utf-8", "{}", case.name);
        }
        // Still serving, on the same client (and connection, where it was kept).
        let good = fixture("dry-run.json");
        let response = post_review(&client, addr, good.clone()).await;
        assert_eq!(response.status(), StatusCode::OK);
        check_review("dry-run.json", &good, &response.bytes().await.unwrap());
    }
    let metrics = server.metrics_text();
    assert!(metrics.contains(r#"outcome="invalid""#), "{metrics}");
}

fn slow_body(chunks: Vec<Vec<u8>>, pause: Duration, then_stall: bool) -> reqwest::Body {
    let stream = futures_util::stream::unfold((chunks.into_iter(), true), move |(mut rest, first)| async move {
        if !first {
            tokio::time::sleep(pause).await;
        }
        match rest.next() {
            Some(chunk) => Some((Ok::<_, std::io::Error>(chunk), (rest, false))),
            None if then_stall => {
                std::future::pending::<()>().await;
                None
            }
            None => None,
        }
    });
    reqwest::Body::wrap_stream(stream)
}

/// POSTs `chunks` to `/mutate` 10 ms apart, without a Content-Length.
async fn post_slowly(client: &reqwest::Client, addr: std::net::SocketAddr, chunks: Vec<Vec<u8>>) -> reqwest::Response {
    client
        .post(mutate_url(addr))
        .headers(apiserver_headers())
        .body(slow_body(chunks, Duration::from_millis(10), false))
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_body_over_the_limit_is_refused_without_content_length() {
    let (certs, server) = start_with_body_limit(LIMIT).await;
    let addr = server.server.webhook_addr();
    for protocol in [Protocol::Http1, Protocol::Alpn] {
        let client = client(addr, &[&certs.ca.cert_pem], protocol);
        let chunks = vec![vec![b' '; 4096]; 4];
        let response = post_slowly(&client, addr, chunks).await;
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE, "{protocol:?}");
        assert!(response.text().await.unwrap().contains("8192"));
        // A slowly streamed body within the limit is fine.
        let good = fixture("dry-run.json");
        let chunks = good.chunks(500).map(<[u8]>::to_vec).collect();
        let response = post_slowly(&client, addr, chunks).await;
        assert_eq!(response.status(), StatusCode::OK, "{protocol:?}");
        check_review("dry-run.json", &good, &response.bytes().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_servers_shorter_timeout_bounds_a_stalled_body() {
    let certs = service_certs();
    let mut config = test_config();
    // Far beyond the client's patience: only the 1s from the query can end this request.
    config.request_timeout = Duration::from_secs(600);
    let server = start(config, pem_source(&certs)).await;
    let addr = server.server.webhook_addr();
    let client = client(addr, &[&certs.ca.cert_pem], Protocol::Alpn);
    let half = fixture("dry-run.json")[..1000].to_vec();
    let response = client
        .post(format!("https://{HOST}:{}/mutate?timeout=1s", addr.port()))
        .headers(apiserver_headers())
        .body(slow_body(vec![half], Duration::ZERO, true))
        .send()
        .await
        .expect("the server answers before the client gives up");
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    assert!(response.text().await.unwrap().contains("1000 ms"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_after_the_tls_handshake_timeout() {
    let certs = service_certs();
    let mut config = test_config();
    config.timeouts.tls_handshake = Duration::from_millis(200);
    let server = start(config, pem_source(&certs)).await;
    // Never sends a ClientHello: the server must hang up, not hold the socket forever.
    let mut socket = tokio::net::TcpStream::connect(server.server.webhook_addr())
        .await
        .unwrap();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(PATIENCE, socket.read(&mut buffer)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "expected the server to close the connection, found {read:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_report_health_readiness_and_metrics() {
    let certs = service_certs();
    let server = start(test_config(), pem_source(&certs)).await;
    let admin = format!("http://{}", server.server.admin_addr());
    let http = reqwest::Client::builder().timeout(PATIENCE).build().unwrap();

    // One review first, so the request counter has a sample.
    let webhook = client(server.server.webhook_addr(), &[&certs.ca.cert_pem], Protocol::Alpn);
    assert_eq!(
        post_review(&webhook, server.server.webhook_addr(), fixture("dry-run.json"))
            .await
            .status(),
        200
    );

    let healthz = http.get(format!("{admin}/healthz")).send().await.unwrap();
    assert_eq!(healthz.status(), StatusCode::OK);
    assert_eq!(healthz.text().await.unwrap(), "ok");
    let readyz = http.get(format!("{admin}/readyz")).send().await.unwrap();
    assert_eq!(readyz.status(), StatusCode::OK);
    let metrics = http.get(format!("{admin}/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    assert_eq!(
        metrics.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = metrics.text().await.unwrap();
    assert!(text.contains("envoy_injector_admission_requests_total"), "{text}");
    assert!(
        text.trim_end().ends_with("# EOF"),
        "OpenMetrics text ends with # EOF: {text}"
    );
    let missing = http.get(format!("{admin}/nothing")).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_reports_why_it_is_not_ready() {
    let certs = service_certs();
    let state = app_state(Some(Arc::new(|| {
        Err("templates not loaded: ConfigMap missing".to_string())
    })));
    let server = start_with(test_config(), pem_source(&certs), state).await;
    let http = reqwest::Client::builder().timeout(PATIENCE).build().unwrap();
    let readyz = http
        .get(format!("http://{}/readyz", server.server.admin_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(readyz.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(readyz.text().await.unwrap(), "templates not loaded: ConfigMap missing");
    let healthz = http
        .get(format!("http://{}/healthz", server.server.admin_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(
        healthz.status(),
        StatusCode::OK,
        "liveness does not depend on readiness"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_trust_the_ca_is_refused() {
    let certs = service_certs();
    let other = service_certs();
    let server = start(test_config(), pem_source(&certs)).await;
    let addr = server.server.webhook_addr();
    let stranger = client(addr, &[&other.ca.cert_pem], Protocol::Alpn);
    let result = stranger
        .post(mutate_url(addr))
        .body(fixture("dry-run.json"))
        .send()
        .await;
    assert!(
        result.is_err(),
        "a client trusting another CA must not get an answer: {result:?}"
    );
    // And the server is unaffected.
    let trusted = client(addr, &[&certs.ca.cert_pem], Protocol::Alpn);
    assert_eq!(post_review(&trusted, addr, fixture("dry-run.json")).await.status(), 200);
}

/// Every JSON pointer in `value`, parents before children.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                pointers(child, format!("{at}/{escaped}"), out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                pointers(child, format!("{at}/{index}"), out);
            }
        }
        _ => {}
    }
}

fn replacement(choice: u8) -> Value {
    match choice % 8 {
        0 => Value::Null,
        1 => 0.into(),
        2 => (-1).into(),
        3 => "x".into(),
        4 => serde_json::json!([]),
        5 => serde_json::json!({}),
        6 => true.into(),
        _ => "~1/..".repeat(200).into(),
    }
}

#[test]
fn damaged_reviews_get_200_or_400_never_5xx() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let certs = service_certs();
    let server = runtime.block_on(start(test_config(), pem_source(&certs)));
    let addr = server.server.webhook_addr();
    let client = runtime.block_on(async { client(addr, &[&certs.ca.cert_pem], Protocol::Alpn) });
    let originals: Vec<Value> = fixtures()
        .iter()
        .map(|(_, body)| serde_json::from_slice(body).unwrap())
        .collect();

    let strategy = (
        0..originals.len(),
        any::<prop::sample::Index>(),
        any::<u8>(),
        any::<bool>(),
        any::<u16>(),
    );
    let mut runner = TestRunner::new(Config {
        cases: 128,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |(which, place, choice, truncate, cut)| {
            let mut review = originals[which].clone();
            let mut all = Vec::new();
            pointers(&review, String::new(), &mut all);
            let target = place.get(&all[1..]).clone();
            *review.pointer_mut(&target).unwrap() = replacement(choice);
            let mut body = serde_json::to_vec(&review).unwrap();
            if truncate {
                body.truncate(usize::from(cut) % body.len());
            }
            let (status, text) = runtime.block_on(async {
                let response = post_review(&client, addr, body).await;
                (response.status(), response.text().await.unwrap())
            });
            prop_assert!(
                status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
                "{target} := {:?} (truncated: {truncate}) answered {status}: {text}",
                replacement(choice)
            );
            Ok(())
        })
        .unwrap();
    // Still serving.
    let good = fixture("dry-run.json");
    let answer = runtime.block_on(async { post_review(&client, addr, good.clone()).await.bytes().await.unwrap() });
    check_review("dry-run.json", &good, &answer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_reviews_up_to_the_limit_are_accepted() {
    // Above the 2 MiB that HTTP frameworks often cap bodies at by default.
    let certs = service_certs();
    let mut config = test_config();
    config.max_body_bytes = 4 * 1024 * 1024;
    let server = start(config, pem_source(&certs)).await;
    let addr = server.server.webhook_addr();
    let mut body = fixture("dry-run.json");
    body.extend(std::iter::repeat_n(b' ', 3 * 1024 * 1024));
    for protocol in [Protocol::Http1, Protocol::Alpn] {
        let client = client(addr, &[&certs.ca.cert_pem], protocol);
        let response = post_review(&client, addr, body.clone()).await;
        assert_eq!(response.status(), StatusCode::OK, "{protocol:?}");
        check_review("dry-run.json", &body, &response.bytes().await.unwrap());
    }
}

/// Admission requests a server has answered, from its own `/metrics` text.
fn answered(server: &TestServer) -> u64 {
    server
        .metrics_text()
        .lines()
        .filter(|line| line.starts_with("envoy_injector_admission_requests_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// `--reuse-port`: a second server binds the address the first one holds, the kernel
/// spreads new connections over both, and the second keeps answering once the first has
/// stopped (the hot restart `serve --reuse-port` is for). Without the flag the second bind
/// fails, so the flag is what makes it work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuse_port_lets_two_servers_answer_on_one_address() {
    let certs = service_certs();
    let shared = ServerConfig {
        reuse_port: true,
        ..test_config()
    };
    let first = start(shared.clone(), pem_source(&certs)).await;
    let addr = first.server.webhook_addr();

    let without_flag = ServerConfig { addr, ..test_config() };
    match server::start(without_flag, pem_source(&certs), app_state(None)).await {
        Ok(_) => panic!("expected binding {addr} without --reuse-port to fail while a server holds it"),
        Err(err) => assert!(
            matches!(&err, ServerError::Bind { source, .. }
                if source.kind() == std::io::ErrorKind::AddrInUse),
            "expected AddrInUse for --addr {addr}, found: {err}"
        ),
    }

    let second = start(ServerConfig { addr, ..shared }, pem_source(&certs)).await;
    assert_eq!(second.server.webhook_addr(), addr);
    // A client per request: each request is a new connection, which the kernel hands to
    // one of the two listeners by a hash of its address pair.
    const REQUESTS: u64 = 64;
    for _ in 0..REQUESTS {
        let fresh = client(addr, &[&certs.ca.cert_pem], Protocol::Alpn);
        let response = post_review(&fresh, addr, fixture("dry-run.json")).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    let (by_first, by_second) = (answered(&first), answered(&second));
    assert_eq!(by_first + by_second, REQUESTS, "every request answered once");
    assert!(
        by_first > 0 && by_second > 0,
        "expected both servers to answer some of {REQUESTS} new connections, found {by_first} and {by_second}"
    );

    first.server.shutdown();
    first.server.wait().await.expect("the first server stops cleanly");
    for _ in 0..8 {
        let fresh = client(addr, &[&certs.ca.cert_pem], Protocol::Alpn);
        let response = post_review(&fresh, addr, fixture("dry-run.json")).await;
        assert_eq!(response.status(), StatusCode::OK, "the second server answers alone");
    }
    assert_eq!(answered(&second), by_second + 8);
}
