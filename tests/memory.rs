//! Memory after a burst of large bodies, on the real binary: the in-flight body budget
//! bounds the peak, and the memory goes back to the system afterwards. Bounds are
//! generous (a debug build, other work on the machine); the defects they catch were
//! hundreds of MiB (786 MB peak, 731 MB retained).

mod common;

use std::time::Duration;

use common::standalone::*;
use common::*;
use reqwest::StatusCode;

const BODIES: usize = 24;
const BODY_BYTES: usize = 8 * 1024 * 1024 - 1024;
const MIB: u64 = 1024 * 1024;

/// (VmRSS, VmHWM) in bytes.
fn memory(pid: u32) -> (u64, u64) {
    let (rss, hwm) = common::process::memory_kib(pid).unwrap_or_else(|e| panic!("{e}"));
    (rss * 1024, hwm * 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_large_bodies_is_bounded_and_its_memory_given_back() {
    let ready = ready_server(&["--max-inflight-body-bytes", "67108864"]).await;
    let (pid, webhook) = (ready.server.pid(), ready.webhook);
    let client = client(webhook, &[&ready.certs.ca.cert_pem], Protocol::Http1);
    assert_eq!(
        post_review(&client, webhook, fixture("dry-run.json")).await.status(),
        200
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = memory(pid).0;

    let mut body = fixture("replicaset-generatename-init-volumes.json");
    body.resize(BODY_BYTES, b' ');
    let mut burst = Vec::new();
    for _ in 0..BODIES {
        let (client, body) = (client.clone(), body.clone());
        burst.push(tokio::spawn(async move {
            let response = post_review(&client, webhook, body).await;
            response.status()
        }));
    }
    let mut answered = 0;
    for request in burst {
        let status = tokio::time::timeout(PATIENCE, request).await.unwrap().unwrap();
        assert!(
            status == StatusCode::OK || status == StatusCode::SERVICE_UNAVAILABLE,
            "{status}"
        );
        answered += usize::from(status == StatusCode::OK);
    }
    assert!(answered > 0, "at least the first bodies fit the budget");
    let peak = memory(pid).1;
    // The budget holds 64 MiB of bodies; TLS, HTTP and parsing buffers come on top.
    assert!(
        peak <= idle + 192 * MIB,
        "peak RSS {} MiB, idle {} MiB",
        peak / MIB,
        idle / MIB
    );
    let retained = eventually("RSS back near idle after the burst", || async {
        let now = memory(pid).0;
        (now <= idle + 16 * MIB).then_some(now)
    })
    .await;
    eprintln!(
        "idle {} MiB, peak {} MiB, after {} MiB ({answered} of {BODIES} bodies answered 200)",
        idle / MIB,
        peak / MIB,
        retained / MIB
    );
}
