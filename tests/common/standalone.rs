//! The real binary as a child process for the server tests: `serve --standalone` on
//! ephemeral ports, its log, SIGTERM, its exit.

use std::ffi::OsString;
use std::net::SocketAddr;

use reqwest::StatusCode;

use super::process::{ANY_LOOPBACK_PORT, Process, listen_args};
use super::{PATIENCE, eventually, service_certs};

/// The server process; killed if a test fails before it exits on its own.
pub struct Server {
    process: Process,
}

impl Server {
    pub fn terminate(&self) {
        self.process.signal(libc::SIGTERM).expect("send SIGTERM");
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The exit status, once it has exited.
    pub fn try_wait(&self) -> Option<std::process::ExitStatus> {
        self.process.try_wait()
    }

    pub fn log(&self) -> String {
        self.process.log()
    }
}

/// A spawned server that reports ready, with what the tests talk to it with.
pub struct Ready {
    /// First, so the process is killed before its directory goes.
    pub server: Server,
    pub _dir: tempfile::TempDir,
    pub certs: envoy_injector::tls::ServiceCerts,
    pub webhook: SocketAddr,
    pub http: reqwest::Client,
    pub readyz: String,
}

/// Starts `serve --standalone EXTRA` on ephemeral ports of 127.0.0.1 and waits until it
/// answers 200 on `/readyz`.
pub async fn ready_server(extra: &[&str]) -> Ready {
    let dir = tempfile::tempdir().unwrap();
    let certs = service_certs();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, &certs.serving.cert_pem).unwrap();
    std::fs::write(&key, &certs.serving.key_pem).unwrap();
    let mut args: Vec<OsString> = vec!["serve".into(), "--standalone".into()];
    args.extend(listen_args(ANY_LOOPBACK_PORT, ANY_LOOPBACK_PORT, &cert, &key));
    args.extend(["--shutdown-timeout", "60s", "--request-timeout", "60s"].map(OsString::from));
    args.extend(extra.iter().map(OsString::from));
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_envoy-injector"));
    let env = [("RUST_LOG".to_string(), "info".to_string())];
    let process = Process::spawn(bin, &args, &env, &dir.path().join("serve.log")).unwrap_or_else(|e| panic!("{e}"));
    let listeners = process.listeners(PATIENCE).await.unwrap_or_else(|e| panic!("{e}"));
    let server = Server { process };
    let http = reqwest::Client::builder().timeout(PATIENCE).build().unwrap();
    let readyz = format!("http://{}/readyz", listeners.admin);
    eventually("readyz 200", || async {
        (status_of(&http, &readyz).await == Some(StatusCode::OK)).then_some(())
    })
    .await;
    Ready {
        server,
        _dir: dir,
        certs,
        webhook: listeners.webhook,
        http,
        readyz,
    }
}

/// Waits (within [`PATIENCE`]) for the server to exit on its own; `what` says why it
/// should have.
pub async fn exit_status(server: &mut Server, what: &str) -> std::process::ExitStatus {
    server
        .process
        .exited(PATIENCE)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

pub async fn status_of(http: &reqwest::Client, url: &str) -> Option<StatusCode> {
    http.get(url).send().await.ok().map(|r| r.status())
}
