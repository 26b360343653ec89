//! Graceful shutdown: SIGTERM to the real binary while requests are still uploading, and
//! the `--shutdown-timeout` bound on requests that never finish.

mod common;

use std::time::Duration;

use common::standalone::*;
use common::*;
use reqwest::StatusCode;
use tokio::sync::{mpsc, watch};

const REQUESTS: usize = 20;
const CHUNKS: usize = 10;
const PAUSE: Duration = Duration::from_millis(100);

/// A request body sent in [`CHUNKS`] pieces, [`PAUSE`] apart, that stops halfway until
/// `gate` opens and says so on `halfway`.
fn gated_body(body: Vec<u8>, gate: watch::Receiver<bool>, halfway: mpsc::UnboundedSender<()>) -> reqwest::Body {
    let size = body.len().div_ceil(CHUNKS);
    let chunks: Vec<Vec<u8>> = body.chunks(size).map(<[u8]>::to_vec).collect();
    let stream = futures_util::stream::unfold(
        (0usize, chunks, gate, halfway),
        |(index, chunks, mut gate, halfway)| async move {
            if index == chunks.len() {
                return None;
            }
            if index == CHUNKS / 2 {
                let _ = halfway.send(());
                let _ = gate.wait_for(|open| *open).await.map(|_| ());
            }
            if index > 0 {
                tokio::time::sleep(PAUSE).await;
            }
            let chunk = chunks[index].clone();
            Some((Ok::<_, std::io::Error>(chunk), (index + 1, chunks, gate, halfway)))
        },
    );
    reqwest::Body::wrap_stream(stream)
}

async fn receive_all(signals: &mut mpsc::UnboundedReceiver<()>, count: usize, what: &str) {
    for _ in 0..count {
        tokio::time::timeout(PATIENCE, signals.recv()).await.expect(what);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_uploads_answers_every_request_then_exits_cleanly() {
    let Ready {
        _dir,
        certs,
        mut server,
        webhook,
        http,
        readyz,
    } = ready_server(&[]).await;

    let clients = [
        (Protocol::Http1, client(webhook, &[&certs.ca.cert_pem], Protocol::Http1)),
        (Protocol::Alpn, client(webhook, &[&certs.ca.cert_pem], Protocol::Alpn)),
    ];
    let fixtures = fixtures();
    let (gate, gate_rx) = watch::channel(false);
    let (halfway_tx, mut halfway) = mpsc::unbounded_channel();
    let mut requests = Vec::new();
    for i in 0..REQUESTS {
        let (protocol, client) = clients[i % 2].clone();
        let (name, body) = fixtures[i % fixtures.len()].clone();
        let request = client
            .post(mutate_url(webhook))
            .headers(apiserver_headers())
            .body(gated_body(body.clone(), gate_rx.clone(), halfway_tx.clone()));
        requests.push(tokio::spawn(async move {
            let outcome = match request.send().await {
                Ok(response) => {
                    let (version, status) = (response.version(), response.status());
                    response
                        .bytes()
                        .await
                        .map(|bytes| (version, status, bytes))
                        .map_err(|e| format!("{e:?}"))
                }
                Err(err) => Err(format!("{err:?}")),
            };
            (protocol, name, body, outcome)
        }));
    }
    receive_all(&mut halfway, REQUESTS, "every upload reaches its halfway point").await;

    server.terminate();

    eventually("readyz 503 while draining", || async {
        (status_of(&http, &readyz).await == Some(StatusCode::SERVICE_UNAVAILABLE)).then_some(())
    })
    .await;
    eventually("new webhook connections to be refused", || async {
        match tokio::net::TcpStream::connect(webhook).await {
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(
        server.try_wait().is_none(),
        "the server must wait for the uploads in flight"
    );

    gate.send_replace(true);
    for request in requests {
        let (protocol, name, body, outcome) = tokio::time::timeout(PATIENCE, request).await.unwrap().unwrap();
        let (version, status, answer) =
            outcome.unwrap_or_else(|e| panic!("{name} over {protocol:?} failed: {e}\nserver log:\n{}", server.log()));
        assert_eq!(status, StatusCode::OK, "{name} over {protocol:?}");
        assert_eq!(version, protocol.expected_version(), "{name}");
        check_review(&name, &body, &answer);
    }

    let status = exit_status(&mut server, "server did not exit after draining").await;
    assert!(
        status.success(),
        "expected exit status 0, found {status}\n{}",
        server.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_timeout_bounds_a_request_that_never_finishes() {
    let certs = service_certs();
    let mut config = test_config();
    config.shutdown_timeout = Duration::from_millis(300);
    config.request_timeout = Duration::from_secs(600);
    let server = start(config, pem_source(&certs)).await;
    let addr = server.server.webhook_addr();
    let client = client(addr, &[&certs.ca.cert_pem], Protocol::Alpn);
    let (_gate, gate_rx) = watch::channel(false);
    let (halfway_tx, mut halfway) = mpsc::unbounded_channel();
    // The gate never opens: this upload would hold shutdown forever without the bound.
    let request = client
        .post(format!("https://{HOST}:{}/mutate?timeout=600s", addr.port()))
        .headers(apiserver_headers())
        .body(gated_body(fixture("dry-run.json"), gate_rx, halfway_tx))
        .send();
    let request = tokio::spawn(request);
    tokio::time::timeout(PATIENCE, halfway.recv()).await.unwrap();

    let TestServer { server, .. } = server;
    server.shutdown();
    tokio::time::timeout(PATIENCE, server.wait())
        .await
        .expect("shutdown ends within the test's patience")
        .expect("shutdown after the timeout is still clean");
    let outcome = tokio::time::timeout(PATIENCE, request).await.unwrap().unwrap();
    assert!(
        outcome.is_err(),
        "the abandoned request cannot have succeeded: {outcome:?}"
    );
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the webhook port is closed"
    );
}

/// What one keep-alive client saw through the shutdown.
#[derive(Debug, Default)]
struct KeepAliveRun {
    answered: usize,
    /// Requests written on an open connection that got no (whole) answer.
    lost: usize,
    /// Ended by an answer saying `Connection: close`.
    told_to_close: bool,
}

/// HTTP/1.1 keep-alive clients posting reviews back to back, as wrk does, through a
/// SIGTERM: each must end on an answer that says `Connection: close`, none may lose a
/// request; an idle HTTP/2 client must not hold the exit until --shutdown-timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_keep_alive_clients_loses_no_request_and_idle_clients_do_not_hold_it() {
    use tokio::io::AsyncWriteExt;
    const CLIENTS: usize = 8;
    let Ready {
        _dir,
        certs,
        mut server,
        webhook,
        ..
    } = ready_server(&[]).await;

    // Idle clients: HTTP/2 after one request, and HTTP/1.1 keep-alive after one request.
    let idle_h2 = client(webhook, &[&certs.ca.cert_pem], Protocol::Alpn);
    assert_eq!(
        post_review(&idle_h2, webhook, fixture("dry-run.json")).await.status(),
        200
    );
    let idle_h1 = client(webhook, &[&certs.ca.cert_pem], Protocol::Http1);
    assert_eq!(
        post_review(&idle_h1, webhook, fixture("dry-run.json")).await.status(),
        200
    );

    let request = http1_post(&fixture("replicaset-generatename-init-volumes.json"), true);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut stream = tls_connect(webhook, &certs.ca.cert_pem, &[b"http/1.1"]).await;
        let (request, started_tx) = (request.clone(), started_tx.clone());
        clients.push(tokio::spawn(async move {
            let mut run = KeepAliveRun::default();
            let mut pending = Vec::new();
            loop {
                if stream.write_all(&request).await.is_err() {
                    run.lost += 1;
                    return run;
                }
                match read_http1_response(&mut stream, &mut pending).await {
                    None => {
                        run.lost += 1;
                        return run;
                    }
                    Some(response) => {
                        assert_eq!(response.status, 200, "{response:?}");
                        run.answered += 1;
                        if run.answered == 3 {
                            let _ = started_tx.send(());
                        }
                        if response.headers.contains("connection: close") {
                            run.told_to_close = true;
                            return run;
                        }
                    }
                }
            }
        }));
    }
    receive_all(&mut started, CLIENTS, "every client gets going").await;

    server.terminate();
    for client in clients {
        let run = tokio::time::timeout(PATIENCE, client).await.unwrap().unwrap();
        assert_eq!(run.lost, 0, "{run:?}\nserver log:\n{}", server.log());
        assert!(run.told_to_close, "{run:?}");
    }

    // The spawned server's --shutdown-timeout is 60s, twice PATIENCE: exiting within
    // PATIENCE means the idle clients did not hold it.
    let status = exit_status(&mut server, "idle clients held the shutdown").await;
    assert!(status.success(), "{status}\n{}", server.log());
    drop((idle_h1, idle_h2));
}
