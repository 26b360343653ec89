//! The real binary as a child process: `serve --standalone` on ephemeral ports, its
//! log, SIGTERM, its exit.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use super::{PATIENCE, eventually, service_certs};

/// The server process; killed if a test fails before it exits on its own.
pub struct Server {
    pub child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub fn terminate(&self) {
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0, "send SIGTERM");
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `serve --standalone` on ephemeral ports; returns it with its webhook and admin
/// addresses, read from its JSON start-up log.
pub fn spawn_server(cert: &std::path::Path, key: &std::path::Path, extra: &[&str]) -> (Server, SocketAddr, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_envoy-injector"))
        .args([
            "serve",
            "--standalone",
            "--addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
        ])
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .args(["--shutdown-timeout", "60s", "--request-timeout", "60s"])
        .args(extra)
        .env("LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start envoy-injector");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<Value>(&line)
                    && let (Some(listener), Some(addr)) = (event["listener"].as_str(), event["addr"].as_str())
                    && let Ok(addr) = addr.parse::<SocketAddr>()
                {
                    let _ = addr_tx.send((listener.to_string(), addr));
                }
                log.lock().unwrap().push(line);
            }
        });
    }
    let server = Server { child, log };
    let (mut webhook, mut admin) = (None, None);
    while webhook.is_none() || admin.is_none() {
        let (listener, addr) = addr_rx
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("server did not log its addresses:\n{}", server.log()));
        match listener.as_str() {
            "webhook" => webhook = Some(addr),
            "admin" => admin = Some(addr),
            _ => {}
        }
    }
    (server, webhook.unwrap(), admin.unwrap())
}

/// A spawned server that reports ready, with what the tests talk to it with.
pub struct Ready {
    pub _dir: tempfile::TempDir,
    pub certs: envoy_injector::tls::ServiceCerts,
    pub server: Server,
    pub webhook: SocketAddr,
    pub http: reqwest::Client,
    pub readyz: String,
}

pub async fn ready_server(extra: &[&str]) -> Ready {
    let dir = tempfile::tempdir().unwrap();
    let certs = service_certs();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, &certs.serving.cert_pem).unwrap();
    std::fs::write(&key, &certs.serving.key_pem).unwrap();
    let (server, webhook, admin) = spawn_server(&cert, &key, extra);
    let http = reqwest::Client::builder().timeout(PATIENCE).build().unwrap();
    let readyz = format!("http://{admin}/readyz");
    eventually("readyz 200", || async {
        (status_of(&http, &readyz).await == Some(StatusCode::OK)).then_some(())
    })
    .await;
    Ready {
        _dir: dir,
        certs,
        server,
        webhook,
        http,
        readyz,
    }
}

/// Waits (within [`PATIENCE`]) for the server to exit on its own; `what` says why it
/// should have.
pub async fn exit_status(server: &mut Server, what: &str) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "{what}:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn status_of(http: &reqwest::Client, url: &str) -> Option<StatusCode> {
    http.get(url).send().await.ok().map(|r| r.status())
}
