//! `envoy-injector serve` child processes: start, signal, readiness, metrics, logs.
//!
//! Every process is watched: a bounded wait ([`super::wait_for`]) fails at once, with the
//! process's last log lines, when one the suite expects running has exited. When a tier
//! fails, each of its processes prints its last log lines as it is dropped.

use std::ffi::OsString;
use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use envoy_injector::tls::ServiceCerts;

use super::{PATIENCE, admin_client, free_port, metric_sum, shout, step, temp_dir, wait_for};

/// Log lines shown when something fails.
const TAIL: usize = 60;

struct Watched {
    name: String,
    child: Mutex<Child>,
    log: PathBuf,
    /// Cleared before the suite stops the process on purpose.
    expected_running: AtomicBool,
}

impl Watched {
    fn try_wait(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        child.try_wait().ok().flatten()
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

static WATCHED: Mutex<Vec<Weak<Watched>>> = Mutex::new(Vec::new());

/// `Err` naming the first process that exited although the suite expects it running.
pub fn check_processes() -> Result<(), String> {
    let mut watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
    watched.retain(|w| w.strong_count() > 0);
    for process in watched.iter().filter_map(Weak::upgrade) {
        if !process.expected_running.load(Ordering::Acquire) {
            continue;
        }
        if let Some(status) = process.try_wait() {
            return Err(format!(
                "envoy-injector {} exited ({status}); the end of its log ({}):\n{}",
                process.name,
                process.log.display(),
                process.log_tail(TAIL)
            ));
        }
    }
    Ok(())
}

/// One running `envoy-injector serve`. Dropping it stops it (SIGTERM, then SIGKILL).
pub struct Injector {
    watched: Arc<Watched>,
    /// Name in logs and messages; for as-deployed processes also their `POD_NAME`.
    pub name: String,
    /// The admin listener (`/readyz`, `/metrics`), always on loopback.
    pub admin: SocketAddr,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Injector {
    /// Starts the binary cargo built for the tests with `args` and `env`, its output in a
    /// log file in `dir`. Does not wait for readiness.
    pub fn spawn(
        name: &str,
        args: Vec<OsString>,
        env: Vec<(String, String)>,
        admin: SocketAddr,
        dir: tempfile::TempDir,
    ) -> Injector {
        let bin = env!("CARGO_BIN_EXE_envoy-injector");
        let log = dir.path().join(format!("{name}.log"));
        let log_file = File::create(&log).expect("create the process log");
        let child = Command::new(bin)
            .args(&args)
            .envs(env)
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone the log file handle"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        step!(
            "started envoy-injector {name} (pid {}): {}; log {}",
            child.id(),
            args.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            log.display()
        );
        let watched = Arc::new(Watched {
            name: name.to_string(),
            child: Mutex::new(child),
            log,
            expected_running: AtomicBool::new(true),
        });
        WATCHED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&watched));
        Injector {
            watched,
            name: name.to_string(),
            admin,
            http: admin_client(),
            _dir: dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.watched.child.lock().unwrap_or_else(|e| e.into_inner()).id()
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.watched.log).unwrap_or_default()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.watched.log_tail(lines)
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
        let child = self.watched.child.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: kill(2) on the pid of our own child, which is only reaped through this
        // same Mutex, so the pid cannot have been reused while we hold it.
        unsafe {
            libc::kill(child.id() as libc::pid_t, signal);
        }
    }

    /// Waits (bounded) for the process to exit after a signal.
    pub async fn exited(&self, within: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.watched.try_wait() {
                return status;
            }
            if start.elapsed() > within {
                panic!(
                    "expected envoy-injector {} to exit within {within:?}; the end of its log:\n{}",
                    self.name,
                    self.log_tail(TAIL)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, and the exit status of the graceful shutdown that follows.
    pub async fn terminate(&self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.exited(Duration::from_secs(40)).await
    }

    async fn get(&self, path: &str) -> Result<(reqwest::StatusCode, String), String> {
        let url = format!("http://{}{path}", self.admin);
        let response = self.http.get(&url).send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        Ok((status, response.text().await.unwrap_or_default()))
    }

    /// `Ok` when `/readyz` answers 200; `Err` with its answer otherwise.
    pub async fn readyz(&self) -> Result<(), String> {
        match self.get("/readyz").await? {
            (status, _) if status.is_success() => Ok(()),
            (status, body) => Err(format!("{} /readyz: HTTP {status}: {body}", self.name)),
        }
    }

    /// The HTTP status of `/readyz` (or of `/healthz`, `/metrics`: any admin path).
    pub async fn admin_status(&self, path: &str) -> Result<u16, String> {
        self.get(path).await.map(|(status, _)| status.as_u16())
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
        match self.get("/metrics").await? {
            (status, body) if status.is_success() => Ok(body),
            (status, body) => Err(format!("{} /metrics: HTTP {status}: {body}", self.name)),
        }
    }

    /// One metric of this process, summed over the series matching `labels`.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_sum(&self.metrics().await, name, labels)
    }

    /// Admission requests this process answered (any outcome, dry run or not).
    pub async fn admissions(&self) -> f64 {
        self.metric("envoy_injector_admission_requests_total", &[]).await
    }

    fn stop(&self) {
        if self.watched.try_wait().is_some() {
            return;
        }
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.watched.try_wait().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut child = self.watched.child.lock().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Starts `envoy-injector serve ARGS` as process `name` on loopback: the webhook listener
/// on a free port of 127.0.0.1 with the serving pair of `certs`, the admin listener on
/// another. Does not wait for readiness. Returns the process and its webhook address.
pub fn serve_on_loopback(name: &str, certs: &ServiceCerts, args: &[&str]) -> (Injector, SocketAddr) {
    let dir = temp_dir("envoy-injector-e2e");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, &certs.serving.cert_pem).expect("write tls.crt");
    std::fs::write(&key, &certs.serving.key_pem).expect("write tls.key");
    let webhook = SocketAddr::from(([127, 0, 0, 1], free_port("127.0.0.1")));
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port("127.0.0.1")));
    let mut all: Vec<OsString> = std::iter::once("serve")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect();
    all.extend([
        "--addr".into(),
        webhook.to_string().into(),
        "--admin-addr".into(),
        admin.to_string().into(),
        "--tls-cert".into(),
        cert.into(),
        "--tls-key".into(),
        key.into(),
    ]);
    (Injector::spawn(name, all, Vec::new(), admin, dir), webhook)
}

impl Drop for Injector {
    fn drop(&mut self) {
        if std::thread::panicking() {
            shout(&format!(
                "e2e failed; the end of the log of envoy-injector {} ({}):\n{}",
                self.name,
                self.watched.log.display(),
                self.log_tail(TAIL)
            ));
        }
        self.stop();
    }
}
