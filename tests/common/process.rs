//! `envoy-injector` as a child process, for every test binary that runs one and for
//! `examples/bench_scale.rs` (which is why the binary's path is a parameter:
//! `CARGO_BIN_EXE_*` exists only for tests). Its output goes to a log file. `serve` binds
//! port 0 and the listeners' addresses are read back from its JSON start-up log, so no port
//! is ever guessed.

use std::ffi::OsString;
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::poll::{self, Miss};

/// `--addr` / `--admin-addr` value: any free port of 127.0.0.1.
pub const ANY_LOOPBACK_PORT: &str = "127.0.0.1:0";

/// Log lines shown when something fails.
pub const TAIL: usize = 60;

/// How often a wait on the process looks again.
const EVERY: Duration = Duration::from_millis(20);

/// One child process. Dropping it kills it if it still runs.
pub struct Process {
    child: Mutex<Child>,
    log: PathBuf,
}

/// The addresses `serve` bound, as it logged them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listeners {
    pub webhook: SocketAddr,
    pub admin: SocketAddr,
}

impl Process {
    /// Starts `bin ARGS` with `env` added (after `LOG_FORMAT=json`, which `--log-format`
    /// overrides), its stdout and stderr written to `log`.
    pub fn spawn(bin: &Path, args: &[OsString], env: &[(String, String)], log: &Path) -> Result<Process, String> {
        let file = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let stdout = file
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
        let child = Command::new(bin)
            .args(args)
            .env("LOG_FORMAT", "json")
            .env("RUST_BACKTRACE", "1")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(file)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        Ok(Process {
            child: Mutex::new(child),
            log: log.to_path_buf(),
        })
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Child> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn pid(&self) -> u32 {
        self.child().id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// `message`, then the last lines of the log, for a failure.
    pub fn with_log_tail(&self, message: &str) -> String {
        format!(
            "{message}; the end of its log ({}):\n{}",
            self.log.display(),
            self.log_tail(TAIL)
        )
    }

    /// The exit status, once it has exited.
    pub fn try_wait(&self) -> Option<ExitStatus> {
        self.child().try_wait().ok().flatten()
    }

    /// Sends `signal`; `Err` when kill(2) refused.
    pub fn signal(&self, signal: libc::c_int) -> Result<(), String> {
        let child = self.child();
        // SAFETY: kill(2) on the pid of our own child, which is only reaped through this
        // same Mutex, so the pid cannot have been reused while we hold it.
        let sent = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        if sent == 0 {
            Ok(())
        } else {
            Err(format!(
                "kill({}, {signal}): {}",
                child.id(),
                std::io::Error::last_os_error()
            ))
        }
    }

    /// Waits (at most `within`) for the process to exit; `Err` ends with its last log lines.
    pub async fn exited(&self, within: Duration) -> Result<ExitStatus, String> {
        poll::until("the process to exit", within, EVERY, async || {
            self.try_wait().ok_or_else(|| "still running".to_string())
        })
        .await
        .map_err(|e| self.with_log_tail(&e))
    }

    /// The addresses `serve` logged for its listeners (`listener`, `addr` in its JSON
    /// start-up log), within `within`; `Err` at once if it exits first.
    pub async fn listeners(&self, within: Duration) -> Result<Listeners, String> {
        poll::until("serve to log its listeners' addresses", within, EVERY, async || {
            let (mut webhook, mut admin) = (None, None);
            for line in self.log().lines() {
                let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                let addr = event["addr"].as_str().and_then(|a| a.parse::<SocketAddr>().ok());
                match event["listener"].as_str() {
                    Some("webhook") => webhook = webhook.or(addr),
                    Some("admin") => admin = admin.or(addr),
                    _ => {}
                }
            }
            match (webhook, admin) {
                (Some(webhook), Some(admin)) => Ok(Listeners { webhook, admin }),
                _ => match self.try_wait() {
                    Some(status) => Err(Miss::Fatal(format!("it exited ({status})"))),
                    None => Err(Miss::Retry(format!("webhook {webhook:?}, admin {admin:?}"))),
                },
            }
        })
        .await
        .map_err(|e| self.with_log_tail(&e))
    }

    /// SIGTERM, then SIGKILL if it still runs after `grace`; blocks (for `Drop`).
    pub fn stop(&self, grace: Duration) {
        if self.try_wait().is_some() {
            return;
        }
        let _ = self.signal(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.try_wait().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }

    fn kill(&self) {
        let mut child = self.child();
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // A test that failed half-way must not leave the process behind.
        self.kill();
    }
}

/// Arguments `--addr ADDR --admin-addr ADMIN --tls-cert CERT --tls-key KEY` of `serve`.
pub fn listen_args(addr: &str, admin: &str, cert: &Path, key: &Path) -> Vec<OsString> {
    vec![
        "--addr".into(),
        addr.into(),
        "--admin-addr".into(),
        admin.into(),
        "--tls-cert".into(),
        cert.into(),
        "--tls-key".into(),
        key.into(),
    ]
}

/// The admin listener of a `serve` (`/readyz`, `/metrics`), over plain HTTP.
#[derive(Clone)]
pub struct Admin {
    pub addr: SocketAddr,
    http: reqwest::Client,
}

impl Admin {
    /// Each request bounded by `timeout`.
    pub fn new(addr: SocketAddr, timeout: Duration) -> Admin {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .expect("HTTP client for the admin listener");
        Admin { addr, http }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Status and body of `GET path`; `Err` when nothing answered.
    pub async fn get(&self, path: &str) -> Result<(reqwest::StatusCode, String), String> {
        let url = self.url(path);
        let response = self.http.get(&url).send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        Ok((status, response.text().await.unwrap_or_default()))
    }

    /// `Ok` when `path` answers 2xx (its body); `Err` with what answered instead.
    pub async fn get_ok(&self, path: &str) -> Result<String, String> {
        match self.get(path).await? {
            (status, body) if status.is_success() => Ok(body),
            (status, body) => Err(format!("{}: HTTP {status}: {body}", self.url(path))),
        }
    }

    /// `Ok` when `/readyz` answers 200.
    pub async fn readyz(&self) -> Result<(), String> {
        self.get_ok("/readyz").await.map(drop)
    }

    /// `/metrics` as text.
    pub async fn metrics(&self) -> Result<String, String> {
        self.get_ok("/metrics").await
    }
}

/// (VmRSS, VmHWM) of process `pid` in KiB, from `/proc/PID/status`.
pub fn memory_kib(pid: u32) -> Result<(u64, u64), String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no {name} in {path}"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}
