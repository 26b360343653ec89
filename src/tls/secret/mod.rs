//! Self-managed webhook TLS for cluster mode (`serve` without `--tls-cert/--tls-key`).
//!
//! The CA and serving certificate live in one Secret (`--tls-secret`, type
//! `kubernetes.io/tls`, in `--namespace`) that every replica reads:
//!
//! | key | holds |
//! |---|---|
//! | `tls.crt` / `tls.key` | the serving certificate (SANs `S`, `S.N`, `S.N.svc`, `S.N.svc.cluster.local`) and its key |
//! | `ca.crt` | the trust bundle: the CA(s) the API server must trust, exactly what goes in `caBundle` |
//! | `ca.key` | the key of the CA that signs serving certificates, so any replica can renew |
//! | `ca-next.key` | only during a CA rotation: the key of the CA about to take over |
//!
//! **Start.** GET the Secret. If it is missing, or its serving certificate is unusable
//! (unreadable, key mismatch, expired, SANs not covering the Service, not chaining to
//! `ca.crt`) or due for renewal, a new one is issued (with the existing CA when its key is
//! there and it has life left, else a new CA) and written: POST when absent (a 409
//! AlreadyExists means another replica won: re-GET and use its Secret), PUT carrying the
//! read `resourceVersion` otherwise (a 409 Conflict means someone wrote in between: re-GET
//! and decide again). Then every webhook of `--webhook-config` (mutating) and of
//! `--validating-webhook-config` gets `caBundle = ca.crt` (PATCHed only when different; a
//! missing configuration is logged and retried).
//!
//! **Run.** Every replica polls the Secret ([`BootstrapConfig::poll_interval`]); when
//! `tls.crt`/`tls.key` change it validates them and swaps them into the [`CertStore`] (a bad
//! pair keeps the current certificate and counts `tls_reloads{result="error"}`). When the
//! Secret needs work (missing, unusable, renewal due, `caBundle` not yet in sync) or a full
//! check is due ([`BootstrapConfig::check_interval`], and at the computed renewal time), it
//! does what start does. A deleted Secret is recreated from the last good contents, so the
//! CA (and `caBundle`) stay the same.
//!
//! **Renewal** keeps the CA: clients trusting the current `caBundle` verify the new
//! certificate. **CA rotation** (only when the CA has less than
//! `validity + 2 × renew-before` days left, 425 of its 3650 by default, or when there is no
//! usable CA key) happens in two phases so that there is no moment when a served
//! certificate is not trusted:
//!
//! 1. *introduce*: a new CA is generated and appended to `ca.crt` (its key in
//!    `ca-next.key`); the serving certificate does not change. `caBundle` then holds both
//!    CAs, so certificates from either verify.
//! 2. *switch*, at least [`BootstrapConfig::ca_overlap`] later and only once `caBundle`
//!    is confirmed to hold the new CA (or no webhook configuration is managed): a serving
//!    certificate signed by the new CA is issued and `ca.key` becomes the new key. The old
//!    CA stays in `ca.crt` until the next renewal, for replicas that have not reloaded yet.
//!
//! | module | holds |
//! |---|---|
//! | `settings` | [`BootstrapConfig`], what the binary fills from the `serve` flags |
//! | `material` | [`TlsMaterial`], the Secret's keys, reading the CA bundle |
//! | `policy` | [`Policy`]: lifetimes, when to renew, rotate and switch |
//! | `decide` | [`decide`]: the pure decision of what the Secret needs, and the [`Plan`] that issues it |
//! | `sync` | [`TlsBootstrap`]: the loop that reads and writes the Secret |
//! | `ca_bundle` | publishing `ca.crt` as the webhooks' `caBundle` (mutating and validating) |

use std::sync::Arc;

use tokio::task::JoinHandle;
use tracing::{Instrument, info_span};

use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;
use crate::tls::{CertError, CertStore, TlsError, TlsSource};

mod ca_bundle;
mod decide;
mod material;
mod policy;
mod settings;
mod sync;
#[cfg(test)]
mod tests;

pub use decide::{Decision, Plan, WriteReason, decide};
pub use material::{CA_CRT, CA_KEY, NEXT_CA_KEY, SECRET_TYPE, TLS_CRT, TLS_KEY, TlsMaterial};
pub use policy::Policy;
pub use settings::{BootstrapConfig, DEFAULT_CA_OVERLAP, DEFAULT_CHECK_INTERVAL, DEFAULT_POLL_INTERVAL};
pub use sync::TlsBootstrap;

/// Who writes the Secret and the `caBundle`, for server-side field ownership.
const FIELD_MANAGER: &str = "envoy-injector";

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(
        "expected --cert-renew-before-days between 1 and --cert-validity-days - 1 ({max}), found {found}",
        max = validity.saturating_sub(1)
    )]
    RenewBeforeDays { found: u32, validity: u32 },
    #[error("expected --tls-secret to name a Secret, found an empty string")]
    EmptySecretName,
    #[error("expected poll and check intervals of at least 1ms, found {name} = {found:?}")]
    Interval {
        name: &'static str,
        found: std::time::Duration,
    },
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("cannot {action} Secret {secret}: {source}")]
    Api {
        action: &'static str,
        /// `namespace/name`.
        secret: String,
        source: Box<kube::Error>,
    },
    #[error(
        "expected to settle Secret {secret} within {attempts} writes, found it changed by someone else \
         before each of them (409 Conflict)"
    )]
    Contended { secret: String, attempts: usize },
    #[error("expected Secret {secret} to hold a servable certificate, found: {source}")]
    Load { secret: String, source: Box<TlsError> },
}

/// A running bootstrap: the store the server serves from, kept current by a background
/// task until the shutdown token is cancelled.
pub struct RunningBootstrap {
    store: Arc<CertStore>,
    task: JoinHandle<()>,
}

impl RunningBootstrap {
    /// The source for `server::start`.
    pub fn tls_source(&self) -> TlsSource {
        TlsSource::Store(self.store.clone())
    }

    /// Waits for the task to end (once `shutdown` is cancelled).
    pub async fn stopped(self) {
        // It has nothing to report but a panic, which the panic hook has already printed.
        let _ = self.task.await;
    }
}

/// Bootstraps the certificate (see the module docs) and keeps it current until
/// `shutdown` is cancelled.
pub async fn start(
    client: kube::Client,
    config: BootstrapConfig,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<RunningBootstrap, BootstrapError> {
    let mut bootstrap = TlsBootstrap::new(client, config, metrics)?;
    let store = bootstrap.bootstrap().await?;
    let task = tokio::spawn(
        bootstrap
            .run(store.clone(), shutdown)
            .instrument(info_span!("tls_bootstrap")),
    );
    Ok(RunningBootstrap { store, task })
}
