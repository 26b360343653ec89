//! Plumbing shared by the tiers: the skip decision, the tier runner, the suite's API client,
//! bounded waits that watch the suite's processes, and (in the submodules) processes, test
//! namespaces, cleanup, the as-deployed installation, object builders and kubectl. Nothing
//! here knows a scenario. Polling, metrics, CRDs, kubectl commands and the child process
//! itself are `tests/common`'s (`crate::common`), shared with every test binary.

mod cleanup;
mod command;
pub mod harness;
mod install;
mod namespace;
mod objects;
mod owner;
mod process;

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kube::Client;
use serde_json::Value;

use crate::common::poll::{self, Miss};

pub use crate::common::kubectl::{describe_output, kubectl, kubectl_apply, run_command, skipped};
pub use crate::common::metrics::metric_sum;
pub use cleanup::Scope;
pub use command::{Ran, envoy_injector, register_shipped_webhooks, require_kubectl};
pub use install::Install;
pub use namespace::{LOOP_PAUSE, PodLoop, TestNs, injected_with, list_events_about};
pub use objects::*;
pub use owner::create_policy_owner;
pub use process::{Injector, check_processes, serve_on_loopback};

/// How often a bounded wait looks again.
pub const POLL: Duration = Duration::from_millis(250);
/// Default bound for anything the suite waits on: a safety limit, never a timing expectation.
pub const PATIENCE: Duration = Duration::from_secs(30);
/// `fieldManager` of everything the suite writes.
pub const FIELD_MANAGER: &str = "envoy-injector-e2e";
/// Label on every object the suite creates, to find leftovers by hand:
/// `kubectl get ns,mutatingwebhookconfigurations -l app.kubernetes.io/part-of=envoy-injector-e2e`.
pub const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "envoy-injector-e2e");

/// Writes one line to the process's real stderr. libtest captures `eprintln!` of passing
/// tests; skips, figures and the summary must be seen in a plain `cargo test` run.
pub fn shout(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

/// When the suite started, for the time stamps of progress lines.
pub static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Seconds since the suite started.
pub fn elapsed() -> f64 {
    STARTED.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Progress line, stamped with the seconds since the suite started: shown with
/// `--nocapture`, and with the output of a failing tier ([`harness::step_line`]).
macro_rules! step {
    ($($arg:tt)*) => {
        $crate::support::harness::step_line(format!(
            "e2e [{:6.1}s] {}",
            $crate::support::elapsed(),
            format_args!($($arg)*)
        ))
    };
}
pub(crate) use step;

/// Which copy of envoy-injector the suite checks (`E2E_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `local` (default): the suite starts `serve` on this machine.
    Local,
    /// `in-cluster`: the Deployment that `make deploy` installed, behind its Service and its
    /// own MutatingWebhookConfiguration; the suite starts and registers nothing, and only
    /// the `local` tier runs (against that copy).
    InCluster,
}

impl Mode {
    pub fn parse(value: Option<&str>) -> Result<Mode, String> {
        match value.map(str::trim) {
            None | Some("") | Some("local") => Ok(Mode::Local),
            Some("in-cluster") => Ok(Mode::InCluster),
            Some(other) => Err(format!(
                "E2E_MODE={other:?} is not a mode: expected `local` (the default) or `in-cluster`"
            )),
        }
    }
}

/// The namespace `make deploy` installs into (`E2E_INJECTOR_NAMESPACE` overrides it).
pub const INJECTOR_NAMESPACE: &str = "envoy-injector";
/// Name of the Deployment, Service, ConfigMap and MutatingWebhookConfiguration of
/// `manifests/`.
pub const INJECTOR_NAME: &str = "envoy-injector";

/// `pause` is tiny, has no shell, runs forever and is already on every kind node (it is the
/// sandbox image), so the running tier does not depend on pulling Envoy.
pub const DEFAULT_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// What the environment asks for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `E2E_MODE`: `local` (default) or `in-cluster`.
    pub mode: Mode,
    /// `E2E_INJECTOR_NAMESPACE`: namespace of the deployed copy (in-cluster mode).
    pub injector_namespace: String,
    /// `E2E_WEBHOOK_HOST`: where the API server reaches this machine (the local tier's
    /// `url:` webhook). Defaults to 127.0.0.1 when the API server itself is on loopback.
    pub webhook_host: Option<String>,
    /// `E2E_RUN_PODS=1`: also check Pods that actually run (needs nodes).
    pub run_pods: bool,
    /// `E2E_SIDECAR_IMAGE`: image of the test template's sidecar.
    pub sidecar_image: String,
    /// `E2E_APP_IMAGE`: image of the test Pods' own container.
    pub app_image: String,
    /// `E2E_TIERS`: comma list of tiers to run (default: all, always in the suite's order).
    pub tiers: Option<BTreeSet<String>>,
    /// `CONTROLPLANE_SH`: the control-plane script, for the API-outage tier.
    pub controlplane_sh: Option<PathBuf>,
}

impl Settings {
    /// `Err` with why when the set's tiers must skip.
    pub fn from_env(set: &TierSet, tiers: &[&str]) -> Result<Settings, String> {
        let mode = Mode::parse(non_empty_env("E2E_MODE").as_deref()).unwrap_or_else(|e| panic!("{e}"));
        if non_empty_env(set.kubeconfig_var).is_none() {
            return Err(format!("{} is not set", set.kubeconfig_var));
        }
        let selected = non_empty_env("E2E_TIERS").map(|list| {
            list.split(',')
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect::<BTreeSet<_>>()
        });
        if let Some(unknown) = selected.iter().flatten().find(|t| !tiers.contains(&t.as_str())) {
            panic!("E2E_TIERS names {unknown:?}, which is not a tier: expected some of {tiers:?}");
        }
        Ok(Settings {
            mode,
            injector_namespace: non_empty_env("E2E_INJECTOR_NAMESPACE")
                .unwrap_or_else(|| INJECTOR_NAMESPACE.to_string()),
            webhook_host: non_empty_env("E2E_WEBHOOK_HOST"),
            run_pods: non_empty_env("E2E_RUN_PODS").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true")),
            sidecar_image: non_empty_env("E2E_SIDECAR_IMAGE").unwrap_or_else(|| DEFAULT_IMAGE.to_string()),
            app_image: non_empty_env("E2E_APP_IMAGE").unwrap_or_else(|| DEFAULT_IMAGE.to_string()),
            tiers: selected,
            controlplane_sh: non_empty_env("CONTROLPLANE_SH").map(PathBuf::from),
        })
    }
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

// ---- tiers -------------------------------------------------------------------------------

/// Why a tier did not run; said loudly (the shared harness's).
pub use crate::common::harness::Skip;

/// `Ok` carries the tier's figures for the summary (may be empty).
pub type TierResult = Result<String, Skip>;

pub type TierFuture<'a> = Pin<Box<dyn Future<Output = TierResult> + 'a>>;

/// A test binary's tiers and the cluster they run against.
pub struct TierSet<'a> {
    /// `e2e` or `pods`: names the set in its lines.
    pub name: &'static str,
    /// The variable naming the set's kubeconfig. For any other than `KUBECONFIG` its value
    /// becomes this process's `KUBECONFIG`, so every client, kubectl call and child process
    /// of the set talks to that cluster.
    pub kubeconfig_var: &'static str,
    /// What to do to run the set, said when it skips.
    pub how_to_run: &'static str,
    /// Every tier, in the order they run.
    pub tiers: &'static [Tier],
    /// Checks of the set's own inputs that need no cluster: they run everywhere, first
    /// (`common::harness::tests!`).
    pub checks: &'a [crate::common::harness::Test],
}

/// One tier of the suite: a file of its own, listed once in `main.rs`.
pub struct Tier {
    pub name: &'static str,
    pub run: for<'a> fn(&'a Suite) -> TierFuture<'a>,
}

/// Shared by every tier: settings, an API client, the cluster-wide objects the tiers
/// installed (removed when the suite ends).
pub struct Suite {
    pub settings: Settings,
    pub client: Client,
    /// Cluster-wide leftovers of the as-deployed tiers, undone after the last tier.
    pub teardown: Scope,
    install: install::Installer,
}

impl Suite {
    async fn connect(mut settings: Settings) -> Suite {
        let config = kube::Config::infer()
            .await
            .unwrap_or_else(|e| panic!("KUBECONFIG is set but names no usable cluster: {e}"));
        let loopback_api = config
            .cluster_url
            .host()
            .is_some_and(|h| h == "localhost" || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()));
        if settings.webhook_host.is_none() && loopback_api {
            // The API server runs on this machine: it reaches a local webhook on loopback.
            settings.webhook_host = Some("127.0.0.1".to_string());
        }
        let client = Client::try_from(config).expect("a client from KUBECONFIG");
        let version = client.apiserver_version().await.unwrap_or_else(|e| {
            panic!(
                "expected the API server named by KUBECONFIG to answer, found: {}",
                api_error(&e)
            )
        });
        step!(
            "cluster {} (Kubernetes {}.{}), mode {:?}, webhook host {:?}",
            version.git_version,
            version.major,
            version.minor,
            settings.mode,
            settings.webhook_host
        );
        Suite {
            teardown: Scope::new(settings.mode),
            install: install::Installer::default(),
            settings,
            client,
        }
    }

    /// `Ok` when a tier may start `serve` here behind a `url: https://127.0.0.1:PORT/...`
    /// webhook (and compare outputs that name that address): local mode, and an API server
    /// that reaches this machine on 127.0.0.1. `Err` says why not.
    pub fn loopback_webhooks(&self) -> Result<(), Skip> {
        if self.settings.mode == Mode::InCluster {
            return Err(Skip(
                "E2E_MODE=in-cluster checks the copy `make deploy` installed (tier local); this tier starts a \
                 `serve` of its own"
                    .into(),
            ));
        }
        match self.settings.webhook_host.as_deref() {
            Some("127.0.0.1") => Ok(()),
            other => Err(Skip(format!(
                "the API server reaches this machine at {other:?}, not 127.0.0.1 (it does not run here), so it \
                 could not call a webhook this tier registers on loopback"
            ))),
        }
    }

    /// For a tier that starts `serve` behind a loopback webhook and drives kubectl:
    /// `Err(Skip)` unless both can work here; otherwise its cleanup scope (bind it first, so
    /// it is dropped last: after the tier's processes have stopped) and a suffix for its
    /// names.
    pub fn loopback_tier_with_kubectl(&self) -> Result<(Scope, String), Skip> {
        self.loopback_webhooks()?;
        command::require_kubectl()?;
        Ok((Scope::new(self.settings.mode), unique_suffix()))
    }
}

// ---- waiting -----------------------------------------------------------------------------

/// Polls `probe` every [`POLL`] until it returns `Ok`, for at most `patience`; panics naming
/// what was awaited, the bound and the last thing found. Fails at once when an injector
/// process the suite expects running has exited.
pub async fn wait_for<T>(what: &str, patience: Duration, probe: impl AsyncFnMut() -> Result<T, String>) -> T {
    wait_every(what, patience, POLL, probe).await
}

/// [`wait_for`] polling every `every` (for latencies measured by polling).
pub async fn wait_every<T>(
    what: &str,
    patience: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    poll::until(what, patience, every, async || {
        check_processes().map_err(Miss::Fatal)?;
        probe().await.map_err(Miss::Retry)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

// ---- small utilities ---------------------------------------------------------------------

/// Eight lowercase hex digits, different on every run (names must be DNS labels).
pub fn unique_suffix() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.write_u32(std::process::id());
    format!("{:08x}", hasher.finish() as u32)
}

/// A fresh temporary directory (removed when dropped) named `<prefix>…`.
pub fn temp_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("a temporary directory")
}

/// `host:port` for a URL, bracketing IPv6 literals.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

pub fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// A YAML manifest of the repository as JSON, exactly as written (nothing dropped).
pub fn read_manifest(relative: &str) -> Value {
    let path = manifest_path(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{} is not a YAML object: {e}", path.display()))
}

/// One line for an API error: code, reason and the server's message.
pub fn api_error(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!("HTTP {} {}: {}", status.code, status.reason, status.message),
        other => other.to_string(),
    }
}

/// Milliseconds of a duration, for figures.
pub fn ms(d: Duration) -> u128 {
    d.as_millis()
}
