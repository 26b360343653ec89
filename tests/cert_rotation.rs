//! Serving-certificate reload from a directory laid out like a kubelet-mounted Secret:
//! `..data` is a symlink swapped atomically to a new timestamped directory.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use envoy_injector::server;
use envoy_injector::tls::{ServiceCerts, TlsSource};
use reqwest::StatusCode;

/// A Secret volume as the kubelet writes it.
struct SecretDir {
    root: tempfile::TempDir,
}

impl SecretDir {
    fn new(first_version: &str, cert: &str, key: &str) -> SecretDir {
        let dir = SecretDir {
            root: tempfile::tempdir().unwrap(),
        };
        dir.write_version(first_version, cert, key);
        std::os::unix::fs::symlink(first_version, dir.path("..data")).unwrap();
        std::os::unix::fs::symlink("..data/tls.crt", dir.path("tls.crt")).unwrap();
        std::os::unix::fs::symlink("..data/tls.key", dir.path("tls.key")).unwrap();
        dir
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    fn write_version(&self, version: &str, cert: &str, key: &str) {
        let dir = self.path(version);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("tls.crt"), cert).unwrap();
        std::fs::write(dir.join("tls.key"), key).unwrap();
    }

    /// Writes a new version and points `..data` at it in one rename, as the kubelet does.
    fn swap_to(&self, version: &str, cert: &str, key: &str) {
        self.write_version(version, cert, key);
        let tmp = self.path("..data_tmp");
        std::os::unix::fs::symlink(version, &tmp).unwrap();
        std::fs::rename(&tmp, self.path("..data")).unwrap();
    }

    fn source(&self) -> TlsSource {
        TlsSource::Files {
            cert: self.path("tls.crt"),
            key: self.path("tls.key"),
            reload_interval: Duration::from_millis(100),
        }
    }
}

/// One request on a brand-new client (so a new TLS handshake): status and server leaf.
async fn fresh_request(addr: std::net::SocketAddr, cas: &[&str]) -> Result<Vec<u8>, String> {
    let client = client(addr, cas, Protocol::Alpn);
    let body = fixture("dry-run.json");
    let response = client
        .post(mutate_url(addr))
        .headers(apiserver_headers())
        .body(body.clone())
        .send()
        .await
        .map_err(|e| format!("request failed: {e:?}"))?;
    let peer = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .map(<[u8]>::to_vec)
        .ok_or("no peer certificate")?;
    if response.status() != StatusCode::OK {
        return Err(format!("status {}", response.status()));
    }
    check_review(
        "dry-run.json",
        &body,
        &response.bytes().await.map_err(|e| e.to_string())?,
    );
    Ok(peer)
}

const RELOAD_OK: &str = r#"envoy_injector_tls_reloads_total{result="success"}"#;
const RELOAD_ERROR: &str = r#"envoy_injector_tls_reloads_total{result="error"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_swap_rotates_the_certificate_without_a_failed_request() {
    let old = service_certs();
    let new = service_certs();
    let secret = SecretDir::new("..2026_11_21_a", &old.serving.cert_pem, &old.serving.key_pem);
    let server = start(test_config(), secret.source()).await;
    let addr = server.server.webhook_addr();
    let (old_leaf, new_leaf) = (leaf_der(&old.serving.cert_pem), leaf_der(&new.serving.cert_pem));

    // Requests back to back, each on a new connection, for the whole rotation.
    let stop = Arc::new(AtomicBool::new(false));
    let cas = [old.ca.cert_pem.clone(), new.ca.cert_pem.clone()];
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let looper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let cas: Vec<&str> = cas.iter().map(String::as_str).collect();
            while !stop.load(Ordering::SeqCst) {
                let _ = seen_tx.send(fresh_request(addr, &cas).await);
            }
        })
    };
    let mut seen: Vec<Result<Vec<u8>, String>> = Vec::new();
    // A few answers with the old certificate before rotating.
    while seen.len() < 3 {
        seen.push(tokio::time::timeout(PATIENCE, seen_rx.recv()).await.unwrap().unwrap());
    }
    secret.swap_to("..2026_11_21_b", &new.serving.cert_pem, &new.serving.key_pem);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut after_new = 0;
    while after_new < 5 {
        let next = tokio::time::timeout_at(deadline, seen_rx.recv())
            .await
            .expect("the new certificate is served within the test's patience")
            .unwrap();
        if next.as_ref().is_ok_and(|leaf| *leaf == new_leaf) || after_new > 0 {
            after_new += 1;
        }
        seen.push(next);
    }
    stop.store(true, Ordering::SeqCst);
    looper.await.unwrap();

    let failures: Vec<&String> = seen.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failures.is_empty(), "no request may fail during rotation: {failures:?}");
    let leaves: Vec<&Vec<u8>> = seen.iter().map(|r| r.as_ref().unwrap()).collect();
    assert_eq!(leaves[0], &old_leaf, "served the initial certificate first");
    let first_new = leaves.iter().position(|leaf| **leaf == new_leaf).unwrap();
    assert!(
        leaves[first_new..].iter().all(|leaf| **leaf == new_leaf),
        "once rotated, only the new cert"
    );
    assert!(
        leaves[..first_new].iter().all(|leaf| **leaf == old_leaf),
        "before rotation, only the old cert"
    );
    let metrics = server.metrics_text();
    assert_eq!(metric_value(&metrics, RELOAD_OK), Some(1.0), "{metrics}");
    assert_eq!(
        metric_value(&metrics, RELOAD_ERROR),
        None,
        "a clean swap is not an error: {metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_new_files_keep_the_old_certificate_and_count_an_error() {
    let old = service_certs();
    let new = service_certs();
    let secret = SecretDir::new("..v1", &old.serving.cert_pem, &old.serving.key_pem);
    let server = start(test_config(), secret.source()).await;
    let addr = server.server.webhook_addr();
    let cas = [old.ca.cert_pem.as_str(), new.ca.cert_pem.as_str()];
    let old_leaf = leaf_der(&old.serving.cert_pem);
    assert_eq!(fresh_request(addr, &cas).await.unwrap(), old_leaf);

    let bad_versions: [(&str, &str, &str); 3] = [
        ("..v2", "this is not a certificate\n", new.serving.key_pem.as_str()),
        (
            "..v3",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            new.serving.key_pem.as_str(),
        ),
        // Valid files, but the key belongs to another certificate.
        ("..v4", new.serving.cert_pem.as_str(), old.serving.key_pem.as_str()),
    ];
    for (count, (version, cert, key)) in bad_versions.into_iter().enumerate() {
        secret.swap_to(version, cert, key);
        let expected = (count + 1) as f64;
        eventually(&format!("reload error #{} ({version})", count + 1), || async {
            (metric_value(&server.metrics_text(), RELOAD_ERROR) == Some(expected)).then_some(())
        })
        .await;
        assert_eq!(
            fresh_request(addr, &cas).await.unwrap(),
            old_leaf,
            "{version}: still the old certificate"
        );
    }
    assert_eq!(metric_value(&server.metrics_text(), RELOAD_OK), None);

    // A good version afterwards is picked up.
    secret.swap_to("..v5", &new.serving.cert_pem, &new.serving.key_pem);
    let new_leaf = leaf_der(&new.serving.cert_pem);
    eventually("the fixed certificate to be served", || async {
        (fresh_request(addr, &cas).await.ok()? == new_leaf).then_some(())
    })
    .await;
    assert_eq!(metric_value(&server.metrics_text(), RELOAD_OK), Some(1.0));
    assert_eq!(
        metric_value(&server.metrics_text(), RELOAD_ERROR),
        Some(3.0),
        "no error counted twice"
    );
}

fn write_pair(dir: &Path, certs: &ServiceCerts) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, &certs.serving.cert_pem).unwrap();
    std::fs::write(&key, &certs.serving.key_pem).unwrap();
    (cert, key)
}

async fn start_error(cert: PathBuf, key: PathBuf) -> String {
    let source = TlsSource::Files {
        cert,
        key,
        reload_interval: Duration::from_secs(1),
    };
    match server::start(test_config(), source, app_state(None)).await {
        Ok(_) => panic!("expected the server to refuse to start"),
        Err(err) => err.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_files_at_start_are_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let certs = service_certs();
    let (cert, key) = write_pair(dir.path(), &certs);

    let missing = dir.path().join("absent.crt");
    let err = start_error(missing.clone(), key.clone()).await;
    assert!(
        err.contains("--tls-cert") && err.contains(&missing.display().to_string()),
        "{err}"
    );

    let garbage = dir.path().join("garbage.crt");
    std::fs::write(&garbage, "hello").unwrap();
    let err = start_error(garbage.clone(), key.clone()).await;
    assert!(
        err.contains(&garbage.display().to_string()) && err.contains("CERTIFICATE"),
        "{err}"
    );

    let no_key = dir.path().join("empty.key");
    std::fs::write(&no_key, "").unwrap();
    let err = start_error(cert.clone(), no_key.clone()).await;
    assert!(
        err.contains(&no_key.display().to_string()) && err.contains("private key"),
        "{err}"
    );

    let other = service_certs();
    let other_key = dir.path().join("other.key");
    std::fs::write(&other_key, &other.serving.key_pem).unwrap();
    let err = start_error(cert.clone(), other_key.clone()).await;
    assert!(
        err.contains(&other_key.display().to_string()) && err.contains(&cert.display().to_string()),
        "{err}"
    );
    assert!(err.contains("different certificate"), "{err}");
}
