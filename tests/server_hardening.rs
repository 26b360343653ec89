//! The webhook and admin listeners under hostile traffic, over real TLS: a deadline on
//! every connection phase, the connection cap, a readable 413 for a client still sending,
//! the in-flight body budget, and an object whose kind is not the one the review claims.

mod common;

use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn series(name: &str, labels: &str) -> String {
    format!("envoy_injector_{name}{{{labels}}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_phase_has_a_deadline_on_both_listeners() {
    let certs = service_certs();
    let mut config = test_config();
    let short = Duration::from_millis(300);
    config.timeouts.tls_handshake = short;
    config.timeouts.first_request = short;
    config.timeouts.idle = short;
    let server = start(config, pem_source(&certs)).await;
    let (webhook, admin) = (server.server.webhook_addr(), server.server.admin_addr());
    let ca = certs.ca.cert_pem.as_str();

    // Connects, never says hello.
    let mut silent = TcpStream::connect(webhook).await.unwrap();
    // Handshakes, then sends nothing.
    let mut after_handshake = tls_connect(webhook, ca, &[b"http/1.1"]).await;
    // HTTP/2: the preface and one byte of a frame, then silence.
    let mut h2_partial = tls_connect(webhook, ca, &[b"h2"]).await;
    h2_partial.write_all(H2_PREFACE).await.unwrap();
    h2_partial.write_all(&[0]).await.unwrap();
    // One answered request, then an idle keep-alive connection.
    let mut kept_alive = tls_connect(webhook, ca, &[b"http/1.1"]).await;
    kept_alive
        .write_all(&http1_post(&fixture("dry-run.json"), true))
        .await
        .unwrap();
    let answer = read_http1_response(&mut kept_alive, &mut Vec::new()).await.unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    // The admin listener is plain HTTP: connected, nothing sent.
    let mut admin_silent = TcpStream::connect(admin).await.unwrap();

    assert!(closed_by_peer(&mut silent).await, "no ClientHello: closed");
    assert!(
        closed_by_peer(&mut after_handshake).await,
        "no request after the handshake: closed"
    );
    assert!(closed_by_peer(&mut h2_partial).await, "a partial HTTP/2 frame: closed");
    assert!(closed_by_peer(&mut kept_alive).await, "idle keep-alive: closed");
    assert!(closed_by_peer(&mut admin_silent).await, "admin, no request: closed");

    let metrics = server.metrics_text();
    let timeouts = |listener: &str, phase: &str| {
        metric_value(
            &metrics,
            &series(
                "connection_timeouts_total",
                &format!("listener=\"{listener}\",phase=\"{phase}\""),
            ),
        )
        .unwrap_or(0.0)
    };
    assert_eq!(timeouts("webhook", "tls_handshake"), 1.0, "{metrics}");
    assert_eq!(timeouts("webhook", "first_request"), 2.0, "{metrics}");
    assert_eq!(timeouts("webhook", "idle"), 1.0, "{metrics}");
    assert_eq!(timeouts("admin", "first_request"), 1.0, "{metrics}");

    // And it still serves.
    let client = client(webhook, &[ca], Protocol::Alpn);
    assert_eq!(
        post_review(&client, webhook, fixture("dry-run.json")).await.status(),
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_flood_is_capped_and_the_server_stays_reachable() {
    const CAP: usize = 8;
    const EXTRA: usize = 20;
    let certs = service_certs();
    let mut config = test_config();
    // Far beyond the test: only the cap can close the flood's extra connections.
    config.timeouts.first_request = Duration::from_secs(600);
    config.timeouts.tls_handshake = Duration::from_secs(600);
    config.max_connections = CAP;
    config.admin_max_connections = 2;
    let server = start(config, pem_source(&certs)).await;
    let (webhook, admin) = (server.server.webhook_addr(), server.server.admin_addr());
    let ca = certs.ca.cert_pem.as_str();

    let mut flood = Vec::new();
    for _ in 0..CAP {
        flood.push(tls_connect(webhook, ca, &[b"h2", b"http/1.1"]).await);
    }
    let open = series("connections_open", "listener=\"webhook\"");
    eventually("the flood to hold every slot", || async {
        (metric_value(&server.metrics_text(), &open) == Some(CAP as f64)).then_some(())
    })
    .await;
    for _ in 0..EXTRA {
        let mut extra = TcpStream::connect(webhook).await.unwrap();
        assert!(closed_by_peer(&mut extra).await, "over the cap: closed at once");
    }
    // The admin listener has its own cap and stays usable beside the webhook's flood.
    let http = reqwest::Client::builder().timeout(PATIENCE).build().unwrap();
    let healthz = http.get(format!("http://{admin}/healthz")).send().await.unwrap();
    assert_eq!(healthz.status(), StatusCode::OK);
    drop(http);
    let admin_open = series("connections_open", "listener=\"admin\"");
    eventually("the health check's connection to close", || async {
        (metric_value(&server.metrics_text(), &admin_open) == Some(0.0)).then_some(())
    })
    .await;
    let mut admin_flood = Vec::new();
    for _ in 0..2 {
        admin_flood.push(TcpStream::connect(admin).await.unwrap());
    }
    eventually("the admin flood to hold its slots", || async {
        (metric_value(&server.metrics_text(), &admin_open) == Some(2.0)).then_some(())
    })
    .await;
    let mut admin_extra = TcpStream::connect(admin).await.unwrap();
    assert!(closed_by_peer(&mut admin_extra).await, "admin over its cap: closed");

    let metrics = server.metrics_text();
    let rejected = |listener: &str| {
        metric_value(
            &metrics,
            &series("connections_rejected_total", &format!("listener=\"{listener}\"")),
        )
    };
    assert_eq!(rejected("webhook"), Some(EXTRA as f64), "{metrics}");
    assert_eq!(rejected("admin"), Some(1.0), "{metrics}");

    // The flood leaves; its slots come back and a real client is served.
    drop(flood);
    drop(admin_flood);
    eventually("the slots to be given back", || async {
        (metric_value(&server.metrics_text(), &open) == Some(0.0)).then_some(())
    })
    .await;
    let client = client(webhook, &[ca], Protocol::Alpn);
    let body = fixture("dry-run.json");
    let response = post_review(&client, webhook, body.clone()).await;
    assert_eq!(response.status(), 200);
    check_review("dry-run.json", &body, &response.bytes().await.unwrap());
}

/// A body far over `--max-body-bytes`, written by a client that keeps sending while it
/// reads: it must read the 413, not a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_gets_a_readable_413_while_the_client_is_still_sending() {
    const LIMIT: usize = 64 * 1024;
    const SENT: usize = 12 * 1024 * 1024;
    let (certs, server) = start_with_body_limit(LIMIT).await;
    let addr = server.server.webhook_addr();
    let ca = certs.ca.cert_pem.as_str();

    // HTTP/1.1, by hand: headers declaring 12 MB, then the body in chunks.
    for declared in [true, false] {
        let stream = tls_connect(addr, ca, &[b"http/1.1"]).await;
        let (mut reader, mut writer) = tokio::io::split(stream);
        let head = if declared {
            format!(
                "POST /mutate HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nContent-Length: {SENT}\r\n\r\n"
            )
        } else {
            format!(
                "POST /mutate HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
        };
        let sender = tokio::spawn(async move {
            writer.write_all(head.as_bytes()).await?;
            let chunk = vec![b' '; 64 * 1024];
            for _ in 0..SENT / chunk.len() {
                if declared {
                    writer.write_all(&chunk).await?;
                } else {
                    writer.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).await?;
                    writer.write_all(&chunk).await?;
                    writer.write_all(b"\r\n").await?;
                }
            }
            Ok::<_, std::io::Error>(())
        });
        let response = tokio::time::timeout(PATIENCE, read_http1_response(&mut reader, &mut Vec::new()))
            .await
            .expect("an answer within the test's patience")
            .unwrap_or_else(|| panic!("declared length {declared}: the connection ended without an answer"));
        assert_eq!(response.status, 413, "declared length {declared}: {response:?}");
        let text = String::from_utf8_lossy(&response.body);
        assert!(text.contains(&LIMIT.to_string()), "{text}");
        assert!(response.headers.contains("connection: close"), "{response:?}");
        // The sender may finish or be cut off by the close; either way it ends.
        let _ = tokio::time::timeout(PATIENCE, sender).await.expect("the sender ends");
    }

    // HTTP/2: the stream is answered, then reset; the connection goes on.
    let client = client(addr, &[ca], Protocol::Alpn);
    let chunks = (0..SENT / (64 * 1024)).map(|_| Ok::<_, std::io::Error>(vec![b' '; 64 * 1024]));
    let response = client
        .post(mutate_url(addr))
        .headers(apiserver_headers())
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)))
        .send()
        .await
        .expect("HTTP/2: an answer, not a reset");
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(response.text().await.unwrap().contains(&LIMIT.to_string()));
    let body = fixture("dry-run.json");
    let response = post_review(&client, addr, body.clone()).await;
    assert_eq!(response.status(), 200, "the HTTP/2 connection still serves");
    check_review("dry-run.json", &body, &response.bytes().await.unwrap());
}

/// HTTP/2 by hand: a client that stops sending after the early answer has its stream
/// reset with RST_STREAM(NO_ERROR) once the stream has lingered — "stop sending, the
/// answer is complete" (RFC 9113 §8.1) — not CANCEL, which clients report as a failed
/// request without reading the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_http2_answer_resets_the_stream_with_no_error() {
    let (certs, server) = start_with_body_limit(64 * 1024).await;
    let addr = server.server.webhook_addr();
    let tls = tls_connect(addr, &certs.ca.cert_pem, &[b"h2"]).await;
    let (mut h2, connection) = h2::client::handshake(tls).await.expect("HTTP/2 handshake");
    tokio::spawn(connection);
    for declared in [Some(12 * 1024 * 1024), None] {
        let mut request = http::Request::post(format!("https://{HOST}/mutate"));
        if let Some(length) = declared {
            request = request.header("content-length", length);
        }
        h2 = h2.ready().await.unwrap();
        let (response, mut upload) = h2.send_request(request.body(()).unwrap(), false).unwrap();
        // Over the limit when undeclared; far from the end when declared.
        // With a declared length over the limit the server may answer and reset the
        // stream before any data goes out: sending into a reset stream is not a failure.
        let _ = upload.send_data(vec![b' '; 96 * 1024].into(), false);
        let response = tokio::time::timeout(PATIENCE, response)
            .await
            .unwrap()
            .expect("an answer");
        assert_eq!(response.status(), 413, "declared {declared:?}");
        let reason = tokio::time::timeout(PATIENCE, futures_util::future::poll_fn(|cx| upload.poll_reset(cx)))
            .await
            .expect("the stream is reset after the answer")
            .unwrap();
        assert_eq!(reason, h2::Reason::NO_ERROR, "declared {declared:?}");
    }
}

/// HTTP/2 by hand, a client that sends its whole body before it reads the answer (as curl
/// does; curl 7.88 drops an answer whose stream is reset, even with NO_ERROR): every byte
/// of 12 MiB goes out on a stream that stays open, the client then reads the 413 and its
/// message, and the connection serves the next review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_sending_its_whole_oversized_body_reads_the_413() {
    const LIMIT: usize = 64 * 1024;
    const SENT: usize = 12 * 1024 * 1024;
    let (certs, server) = start_with_body_limit(LIMIT).await;
    let addr = server.server.webhook_addr();
    let tls = tls_connect(addr, &certs.ca.cert_pem, &[b"h2"]).await;
    let (mut h2, connection) = h2::client::handshake(tls).await.expect("HTTP/2 handshake");
    tokio::spawn(connection);
    for declared in [true, false] {
        let mut request =
            http::Request::post(format!("https://{HOST}/mutate")).header("content-type", "application/json");
        if declared {
            request = request.header("content-length", SENT);
        }
        h2 = h2.ready().await.unwrap();
        let (response, mut upload) = h2.send_request(request.body(()).unwrap(), false).unwrap();
        let mut left = SENT;
        while left > 0 {
            upload.reserve_capacity(left.min(1024 * 1024));
            let capacity = tokio::time::timeout(PATIENCE, futures_util::future::poll_fn(|cx| upload.poll_capacity(cx)))
                .await
                .expect("flow-control capacity within the test's patience")
                .expect("the stream stays open")
                .unwrap_or_else(|err| {
                    panic!(
                        "declared {declared}: the stream was closed after {} bytes: {err}",
                        SENT - left
                    )
                });
            let chunk = capacity.min(left);
            left -= chunk;
            upload
                .send_data(vec![b' '; chunk].into(), left == 0)
                .unwrap_or_else(|err| panic!("declared {declared}: sending failed after {} bytes: {err}", SENT - left));
        }
        let response = tokio::time::timeout(PATIENCE, response)
            .await
            .unwrap()
            .expect("an answer");
        assert_eq!(response.status(), 413, "declared {declared}");
        let text = String::from_utf8(h2_body(response.into_body()).await).unwrap();
        assert!(text.contains(&LIMIT.to_string()), "declared {declared}: {text}");
    }
    let body = fixture("dry-run.json");
    let mut request = http::Request::post(format!("https://{HOST}{}", apiserver_path()));
    for (name, value) in &apiserver_headers() {
        request = request.header(name, value);
    }
    h2 = h2.ready().await.unwrap();
    let (response, mut upload) = h2.send_request(request.body(()).unwrap(), false).unwrap();
    upload.send_data(body.clone().into(), true).unwrap();
    let response = tokio::time::timeout(PATIENCE, response)
        .await
        .unwrap()
        .expect("an answer");
    assert_eq!(response.status(), 200, "the HTTP/2 connection still serves");
    check_review("dry-run.json", &body, &h2_body(response.into_body()).await);
}

/// An HTTP/2 response body read to its end.
async fn h2_body(mut body: h2::RecvStream) -> Vec<u8> {
    let mut read = Vec::new();
    while let Some(data) = tokio::time::timeout(PATIENCE, body.data())
        .await
        .expect("the body within the test's patience")
    {
        let data = data.expect("a body, not a reset");
        let _ = body.flow_control().release_capacity(data.len());
        read.extend_from_slice(&data);
    }
    read
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_fit_the_budget_waits_then_gets_503_with_retry_after() {
    const BUDGET: usize = 64 * 1024;
    let certs = service_certs();
    let mut config = test_config();
    config.max_body_bytes = BUDGET;
    config.max_inflight_body_bytes = BUDGET;
    let server = start(config, pem_source(&certs)).await;
    let addr = server.server.webhook_addr();
    let ca = certs.ca.cert_pem.as_str();

    // Holds most of the budget: declares 60 KiB, sends half, waits.
    let mut big = fixture("dry-run.json");
    big.resize(60 * 1024, b' ');
    let request = http1_post(&big, false);
    let split = request.len() - 30 * 1024;
    let mut holder = tls_connect(addr, ca, &[b"http/1.1"]).await;
    holder.write_all(&request[..split]).await.unwrap();
    let budget_in_use = "envoy_injector_body_budget_bytes";
    eventually("the first body to hold its reservation", || async {
        (metric_value(&server.metrics_text(), budget_in_use) == Some((60 * 1024) as f64)).then_some(())
    })
    .await;

    // 10 KiB more does not fit: waits, then 503 with Retry-After.
    let mut small = fixture("dry-run.json");
    small.resize(10 * 1024, b' ');
    let client = client(addr, &[ca], Protocol::Http1);
    let response = post_review(&client, addr, small.clone()).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    assert!(response.text().await.unwrap().contains("--max-inflight-body-bytes"));
    assert_eq!(
        metric_value(&server.metrics_text(), "envoy_injector_body_budget_rejections_total"),
        Some(1.0)
    );

    // The holder finishes and is answered; its bytes go back and the next fits.
    holder.write_all(&request[split..]).await.unwrap();
    let answer = read_http1_response(&mut holder, &mut Vec::new()).await.unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    check_review("dry-run.json", &big, &answer.body);
    eventually("the budget to be free again", || async {
        (metric_value(&server.metrics_text(), budget_in_use) == Some(0.0)).then_some(())
    })
    .await;
    let response = post_review(&client, addr, small.clone()).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_is_not_the_pod_the_review_claims_is_denied() {
    let certs = service_certs();
    let server = start(test_config(), pem_source(&certs)).await;
    let addr = server.server.webhook_addr();
    let client = client(addr, &[&certs.ca.cert_pem], Protocol::Alpn);
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default",
                     "annotations": {"sidecar.samplecrd.k8s.io/inject": "true"}},
        "type": "Opaque",
        "data": {"k": "dg=="}
    });
    let cases = [
        (secret.clone(), "kind \"Secret\""),
        (
            {
                let mut wrong_version: Value = serde_json::from_slice(&fixture("dry-run.json")).unwrap();
                wrong_version = wrong_version["request"]["object"].take();
                wrong_version["apiVersion"] = "v2".into();
                wrong_version
            },
            "apiVersion \"v2\"",
        ),
        (
            {
                let mut no_kind: Value = serde_json::from_slice(&fixture("dry-run.json")).unwrap();
                no_kind = no_kind["request"]["object"].take();
                no_kind.as_object_mut().unwrap().remove("kind");
                no_kind
            },
            "no kind",
        ),
    ];
    for (object, found) in cases {
        let mut review: Value = serde_json::from_slice(&fixture("dry-run.json")).unwrap();
        review["request"]["object"] = object;
        let response = post_review(&client, addr, serde_json::to_vec(&review).unwrap()).await;
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.unwrap();
        let answer = &answer["response"];
        assert_eq!(answer["allowed"], false, "{answer}");
        assert!(answer.get("patch").is_none(), "{answer}");
        let message = answer["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("apiVersion v1, kind Pod") && message.contains(found),
            "{message}"
        );
    }
}
