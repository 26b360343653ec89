//! `envoy-injector serve` child processes of the suite (on `tests/common`'s
//! [`Process`]): start on port 0 with the addresses read back, signal, readiness, metrics,
//! logs.
//!
//! Every process is watched: a bounded wait ([`super::wait_for`]) fails at once, with the
//! process's last log lines, when one the suite expects running has exited. When a tier
//! fails, each of its processes prints its last log lines as it is dropped.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use envoy_injector::tls::ServiceCerts;

use super::{PATIENCE, metric_sum, shout, step, temp_dir, wait_for};
use crate::common::process::{ANY_LOOPBACK_PORT, Admin, Process, listen_args};

struct Watched {
    name: String,
    process: Process,
    /// Cleared before the suite stops the process on purpose.
    expected_running: AtomicBool,
}

static WATCHED: Mutex<Vec<Weak<Watched>>> = Mutex::new(Vec::new());

/// `Err` naming the first process that exited although the suite expects it running.
pub fn check_processes() -> Result<(), String> {
    let mut watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
    watched.retain(|w| w.strong_count() > 0);
    for watched in watched.iter().filter_map(Weak::upgrade) {
        if !watched.expected_running.load(Ordering::Acquire) {
            continue;
        }
        if let Some(status) = watched.process.try_wait() {
            let exited = format!("envoy-injector {} exited ({status})", watched.name);
            return Err(watched.process.with_log_tail(&exited));
        }
    }
    Ok(())
}

/// One running `envoy-injector serve`. Dropping it stops it (SIGTERM, then SIGKILL).
pub struct Injector {
    watched: Arc<Watched>,
    /// Name in logs and messages; for as-deployed processes also their `POD_NAME`.
    pub name: String,
    /// The webhook listener, as `serve` bound it.
    pub webhook: SocketAddr,
    /// The admin listener (`/readyz`, `/metrics`), always on loopback.
    admin: Admin,
    _dir: tempfile::TempDir,
}

impl Injector {
    /// Starts `serve` (the binary cargo built for the tests) with `args` and `env`, its
    /// output in a log file in `dir`, and reads back the addresses it bound (`args` may ask
    /// for port 0). Does not wait for readiness.
    pub async fn spawn(
        name: &str,
        args: Vec<OsString>,
        env: Vec<(String, String)>,
        dir: tempfile::TempDir,
    ) -> Injector {
        let bin = Path::new(env!("CARGO_BIN_EXE_envoy-injector"));
        // The tiers assert what the webhook does: in cluster mode each process is pinned to
        // it unless the tier says otherwise (tiers `policies` and `policy_mode` do).
        let mut args = args;
        let cluster_mode = args.first().is_some_and(|a| a == "serve") && !args.iter().any(|a| a == "--standalone");
        if cluster_mode && !args.iter().any(|a| a.to_string_lossy().starts_with("--injection")) {
            args.extend(["--injection", "webhook"].map(OsString::from));
        }
        let log = dir.path().join(format!("{name}.log"));
        let process = Process::spawn(bin, &args, &env, &log).unwrap_or_else(|e| panic!("{e}"));
        step!(
            "started envoy-injector {name} (pid {}): {}; log {}",
            process.pid(),
            args.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            log.display()
        );
        let listeners = process
            .listeners(PATIENCE)
            .await
            .unwrap_or_else(|e| panic!("envoy-injector {name}: {e}"));
        let watched = Arc::new(Watched {
            name: name.to_string(),
            process,
            expected_running: AtomicBool::new(true),
        });
        WATCHED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&watched));
        Injector {
            watched,
            name: name.to_string(),
            webhook: listeners.webhook,
            admin: Admin::new(listeners.admin, Duration::from_secs(5)),
            _dir: dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.watched.process.pid()
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        self.watched.process.log()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.watched.process.log_tail(lines)
    }

    /// Log lines containing `needle` (case-insensitive).
    pub fn log_lines_with(&self, needle: &str) -> Vec<String> {
        let needle = needle.to_lowercase();
        self.log()
            .lines()
            .filter(|l| l.to_lowercase().contains(&needle))
            .map(str::to_string)
            .collect()
    }

    /// Sends `signal` (the process is then no longer expected to run).
    pub fn signal(&self, signal: libc::c_int) {
        self.watched.expected_running.store(false, Ordering::Release);
        let _ = self.watched.process.signal(signal);
    }

    /// Waits (bounded) for the process to exit after a signal.
    pub async fn exited(&self, within: Duration) -> ExitStatus {
        self.watched
            .process
            .exited(within)
            .await
            .unwrap_or_else(|e| panic!("expected envoy-injector {} to exit: {e}", self.name))
    }

    /// SIGTERM, and the exit status of the graceful shutdown that follows.
    pub async fn terminate(&self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.exited(Duration::from_secs(40)).await
    }

    /// `Ok` when `/readyz` answers 200; `Err` with its answer otherwise.
    pub async fn readyz(&self) -> Result<(), String> {
        self.admin.readyz().await.map_err(|e| format!("{}: {e}", self.name))
    }

    /// The HTTP status of `/readyz` (or of `/healthz`, `/metrics`: any admin path).
    pub async fn admin_status(&self, path: &str) -> Result<u16, String> {
        self.admin.get(path).await.map(|(status, _)| status.as_u16())
    }

    /// Waits until `/readyz` answers 200 (every cache synced, a template loaded).
    pub async fn wait_ready(&self) {
        let what = format!("envoy-injector {} to answer 200 on /readyz", self.name);
        wait_for(&what, PATIENCE * 3, async || self.readyz().await).await;
        step!("envoy-injector {} is ready", self.name);
    }

    /// `/metrics` as text.
    pub async fn metrics(&self) -> String {
        self.try_metrics()
            .await
            .unwrap_or_else(|e| panic!("expected {} to answer /metrics, found: {e}", self.name))
    }

    /// `/metrics` as text; `Err` says what answered instead (for probes of a process that
    /// may not listen yet).
    pub async fn try_metrics(&self) -> Result<String, String> {
        self.admin.metrics().await.map_err(|e| format!("{}: {e}", self.name))
    }

    /// One metric of this process, summed over the series matching `labels`.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_sum(&self.metrics().await, name, labels)
    }

    /// Admission requests this process answered (any outcome, dry run or not).
    pub async fn admissions(&self) -> f64 {
        self.metric("envoy_injector_admission_requests_total", &[]).await
    }
}

/// Starts `envoy-injector serve ARGS` as process `name` on loopback: the webhook listener
/// on a port of 127.0.0.1 `serve` picks, with the serving pair of `certs`, the admin
/// listener on another. Does not wait for readiness. Returns the process and its webhook
/// address.
pub async fn serve_on_loopback(name: &str, certs: &ServiceCerts, args: &[&str]) -> (Injector, SocketAddr) {
    let dir = temp_dir("envoy-injector-e2e");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, &certs.serving.cert_pem).expect("write tls.crt");
    std::fs::write(&key, &certs.serving.key_pem).expect("write tls.key");
    let mut all: Vec<OsString> = std::iter::once("serve")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect();
    all.extend(listen_args(ANY_LOOPBACK_PORT, ANY_LOOPBACK_PORT, &cert, &key));
    let injector = Injector::spawn(name, all, Vec::new(), dir).await;
    let webhook = injector.webhook;
    (injector, webhook)
}

impl Drop for Injector {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let failed = format!("e2e failed, envoy-injector {}", self.name);
            shout(&self.watched.process.with_log_tail(&failed));
        }
        self.watched.expected_running.store(false, Ordering::Release);
        self.watched.process.stop(Duration::from_secs(10));
    }
}
