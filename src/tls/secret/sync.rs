//! The Secret loop: reads the Secret, writes what [`decide`] asks for under optimistic
//! concurrency, keeps the [`CertStore`] serving the Secret's certificate, and has
//! [`CaBundleSync`] publish its `ca.crt`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::core::ObjectMeta;
use time::{Duration, OffsetDateTime};
use tracing::{info, warn};

use super::ca_bundle::{CaBundleSync, SyncOutcome};
use super::material::parse_bundle;
use super::{
    BootstrapConfig, BootstrapError, Decision, FIELD_MANAGER, Policy, SECRET_TYPE, TLS_CRT, TLS_KEY, TlsMaterial,
    WriteReason, decide,
};
use crate::backoff::{Episode, Exponential};
use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;
use crate::tls::{self, CertStore, Offer, Reloader, fingerprint, load_pem};

/// Writes that lose an optimistic-concurrency race before giving up (until the next check).
const MAX_WRITE_ATTEMPTS: usize = 5;

/// One read of the Secret, decoded once and decided on once.
struct Read {
    secret: Option<Secret>,
    /// The Secret's keys; when it is gone, the last good ones (to recreate it from).
    material: Option<TlsMaterial>,
    decision: Decision,
    /// When it was decided.
    at: OffsetDateTime,
}

/// The result of one reconcile.
struct Reconciled {
    /// What the Secret holds now.
    material: TlsMaterial,
    /// When the Secret needs looking at again (renewal, rotation).
    next_due: OffsetDateTime,
    /// False when something was left for later (`caBundle` not synced, CA switch waiting).
    complete: bool,
}

/// Keeps the Secret, the webhook configuration's `caBundle` and a [`CertStore`] in step.
pub struct TlsBootstrap {
    config: BootstrapConfig,
    policy: Policy,
    secrets: Api<Secret>,
    ca_bundle: CaBundleSync,
    /// Swaps the Secret's `tls.crt`/`tls.key` into the store when they change.
    reloader: Reloader,
    /// The last usable contents seen or written: a deleted Secret is recreated from them.
    last_good: Option<TlsMaterial>,
    /// When the next full check is due.
    next_full_check: OffsetDateTime,
    /// Failing reads of the Secret: logged when they start and when they end.
    unreadable: Episode,
    /// Reconciles that failed or left work: their count sets the retry backoff.
    failing: Episode,
    /// No reconcile before this, after a failed one.
    retry_at: Option<OffsetDateTime>,
}

impl TlsBootstrap {
    /// Checks `config`; makes no API call.
    pub fn new(
        client: kube::Client,
        config: BootstrapConfig,
        metrics: Metrics,
    ) -> Result<TlsBootstrap, BootstrapError> {
        config.validate()?;
        let secrets = Api::namespaced(client.clone(), &config.namespace);
        let ca_bundle = CaBundleSync::new(client, config.managed_configs());
        Ok(TlsBootstrap {
            policy: config.policy(),
            config,
            secrets,
            ca_bundle,
            reloader: Reloader::new(metrics),
            last_good: None,
            next_full_check: OffsetDateTime::now_utc(),
            unreadable: Episode::default(),
            failing: Episode::default(),
            retry_at: None,
        })
    }

    fn secret_ref(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.secret_name)
    }

    /// Makes sure the Secret holds a usable certificate (creating or renewing it), syncs
    /// `caBundle`, and returns a store serving the Secret's certificate.
    pub async fn bootstrap(&mut self) -> Result<Arc<CertStore>, BootstrapError> {
        let current = self.get().await?;
        let read = self.read(current, OffsetDateTime::now_utc());
        let reconciled = self.reconcile(read, true).await?;
        self.schedule(&reconciled, OffsetDateTime::now_utc());
        let material = reconciled.material;
        let (cert_source, key_source) = self.sources();
        let key = load_pem(&material.tls_crt, &material.tls_key, &cert_source, &key_source).map_err(|source| {
            BootstrapError::Load {
                secret: self.secret_ref(),
                source: Box::new(source),
            }
        })?;
        info!(
            secret = %self.secret_ref(),
            fingerprint = %fingerprint(&key),
            "serving certificate loaded from the Secret (SHA-256)"
        );
        self.reloader.started_with(material.tls_crt, material.tls_key);
        Ok(Arc::new(CertStore::new(key)))
    }

    /// Polls the Secret until `shutdown` is cancelled: reloads `store` when the
    /// certificate changes, renews, rotates and syncs `caBundle` when due. A poll under
    /// way is abandoned then; a write it sent is applied whole or not at all (the
    /// `resourceVersion` guard), so nothing is left half-done.
    pub async fn run(mut self, store: Arc<CertStore>, shutdown: CancellationToken) {
        let poll_interval = self.config.poll_interval;
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = async {
                loop {
                    tokio::time::sleep(poll_interval).await;
                    self.poll(&store).await;
                }
            } => {}
        }
        info!(secret = %self.secret_ref(), "stopped watching the TLS Secret");
    }

    /// One poll: read, reload, and reconcile when needed and not backing off.
    async fn poll(&mut self, store: &CertStore) {
        let secret = match self.get().await {
            Ok(secret) => secret,
            Err(err) => {
                if self.unreadable.fail() {
                    warn!(
                        error = %err,
                        "cannot read the TLS Secret; keeping the current certificate (logged again when it recovers)"
                    );
                }
                return;
            }
        };
        if let Some((failures, lasted)) = self.unreadable.recover() {
            info!(
                failed_reads = failures,
                lasted_ms = lasted.as_millis() as u64,
                "the TLS Secret is readable again"
            );
        }
        let material = secret.as_ref().map(TlsMaterial::from_secret);
        if let Some(material) = &material {
            self.reload(store, material);
        }
        let now = OffsetDateTime::now_utc();
        if self.retry_at.is_some_and(|at| now < at) {
            return;
        }
        let full = now >= self.next_full_check;
        let read = self.decide(secret, material, now);
        if !full && !self.needs_work(&read) {
            return;
        }
        match self.reconcile(read, full).await {
            Ok(reconciled) => {
                self.reload(store, &reconciled.material);
                self.schedule(&reconciled, now);
                if reconciled.complete {
                    self.failing.recover();
                    self.retry_at = None;
                } else {
                    self.failing.fail();
                    self.retry_at = Some(now + self.backoff());
                }
            }
            Err(err) => {
                self.failing.fail();
                let delay = self.backoff();
                warn!(error = %err, retry_in = ?delay, "cannot reconcile the TLS Secret; keeping the current certificate");
                self.retry_at = Some(now + delay);
            }
        }
    }

    /// After the failed syncs so far: the poll interval doubled per failure, at most the
    /// check interval.
    fn backoff(&self) -> Duration {
        let policy = Exponential::new(self.config.poll_interval, self.config.check_interval);
        let failures = self.failing.failures();
        Duration::try_from(policy.delay(failures.saturating_add(1))).unwrap_or(Duration::MAX)
    }

    fn schedule(&mut self, reconciled: &Reconciled, now: OffsetDateTime) {
        let check = Duration::try_from(self.config.check_interval).unwrap_or(Duration::MAX);
        self.next_full_check = now.saturating_add(check).min(reconciled.next_due);
    }

    /// Decodes a read Secret and decides what it needs at `now`.
    fn read(&self, secret: Option<Secret>, now: OffsetDateTime) -> Read {
        let material = secret.as_ref().map(TlsMaterial::from_secret);
        self.decide(secret, material, now)
    }

    /// Decides on `material`, the keys of `secret` (or, without a Secret, the last good
    /// ones).
    fn decide(&self, secret: Option<Secret>, material: Option<TlsMaterial>, now: OffsetDateTime) -> Read {
        let material = match secret {
            Some(_) => material,
            None => self.last_good.clone(),
        };
        Read {
            decision: decide(material.as_ref(), &self.policy, now),
            secret,
            material,
            at: now,
        }
    }

    /// Whether the polled Secret needs a reconcile before the next full check.
    fn needs_work(&self, read: &Read) -> bool {
        let (Some(_), Some(material)) = (&read.secret, &read.material) else {
            return true;
        };
        if self.ca_bundle.manages() && !self.ca_bundle.is_synced(&material.ca_crt) {
            return true;
        }
        !matches!(read.decision, Decision::Keep { .. })
    }

    fn sources(&self) -> (String, String) {
        let secret = self.secret_ref();
        (
            format!("Secret {secret} key {TLS_CRT}"),
            format!("Secret {secret} key {TLS_KEY}"),
        )
    }

    /// Swaps the Secret's certificate into `store` when it changed; each distinct change
    /// counts once in `tls_reloads`.
    fn reload(&mut self, store: &CertStore, material: &TlsMaterial) {
        let (cert_source, key_source) = self.sources();
        match self
            .reloader
            .offer(store, &material.tls_crt, &material.tls_key, &cert_source, &key_source)
        {
            Offer::Unchanged => {}
            Offer::Served { fingerprint } => info!(
                secret = %self.secret_ref(),
                fingerprint = %fingerprint,
                "serving certificate reloaded from the Secret; new connections use it"
            ),
            Offer::Kept(err) => warn!(
                secret = %self.secret_ref(),
                error = %err,
                "cannot use the changed certificate in the Secret; keeping the current certificate"
            ),
        }
    }

    fn api_error(&self, action: &'static str, source: kube::Error) -> BootstrapError {
        BootstrapError::Api {
            action,
            secret: self.secret_ref(),
            source: Box::new(source),
        }
    }

    async fn get(&self) -> Result<Option<Secret>, BootstrapError> {
        self.secrets
            .get_opt(&self.config.secret_name)
            .await
            .map_err(|source| self.api_error("read", source))
    }

    /// Settles the Secret (writing it when needed, re-reading after lost races) and
    /// syncs `caBundle` (always when `full`, else only when the bundle changed).
    async fn reconcile(&mut self, mut read: Read, full: bool) -> Result<Reconciled, BootstrapError> {
        for _ in 0..MAX_WRITE_ATTEMPTS {
            let Read {
                secret: current,
                material,
                decision,
                at: now,
            } = read;
            let (plan, material, reason) = match decision {
                Decision::Keep { next_due } => match (&current, material) {
                    (Some(_), Some(material)) => {
                        let outcome = self.ca_bundle.sync_if_needed(&material.ca_crt, full).await;
                        self.last_good = Some(material.clone());
                        return Ok(Reconciled {
                            material,
                            next_due,
                            complete: outcome.is_complete(),
                        });
                    }
                    (_, material) => (None, material.unwrap_or_default(), WriteReason::Recreate),
                },
                Decision::Write { plan, reason } => (Some(plan), material.unwrap_or_default(), reason),
            };
            if reason == WriteReason::SwitchCa {
                // Publish before use: the new CA is already in ca.crt; make sure caBundle
                // carries it before anything it signed can be served. Without a Secret,
                // what was published is the last good ca.crt (never an empty bundle).
                let outcome = self.ca_bundle.sync(&material.ca_crt).await;
                if !outcome.allows_switch() && current.is_some() {
                    info!(
                        secret = %self.secret_ref(),
                        "CA rotation: waiting for caBundle to carry the new CA before switching to it"
                    );
                    return Ok(Reconciled {
                        material,
                        next_due: now,
                        complete: false,
                    });
                }
            }
            // Issued only now that it is certain to be written.
            let target = match plan {
                Some(plan) => plan.issue(&self.policy)?,
                None => material,
            };
            let written = match &current {
                None => self.create(&target).await,
                Some(secret) => self.replace(secret, &target).await,
            };
            match written {
                Ok(_) => {
                    self.log_write(&reason, &target);
                    let outcome = if full || !self.ca_bundle.is_synced(&target.ca_crt) {
                        self.ca_bundle.sync(&target.ca_crt).await
                    } else {
                        SyncOutcome::Synced
                    };
                    // Pure: what the written contents need next, issuing nothing.
                    let next_due = match decide(Some(&target), &self.policy, now) {
                        Decision::Keep { next_due } => next_due,
                        Decision::Write { .. } => now,
                    };
                    self.last_good = Some(target.clone());
                    return Ok(Reconciled {
                        material: target,
                        next_due,
                        complete: outcome.is_complete(),
                    });
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    info!(
                        secret = %self.secret_ref(),
                        reason = %status.reason,
                        "another replica wrote the TLS Secret first; re-reading it"
                    );
                    read = self.read(self.get().await?, OffsetDateTime::now_utc());
                }
                Err(source) => {
                    let action = if current.is_some() { "update" } else { "create" };
                    return Err(self.api_error(action, source));
                }
            }
        }
        Err(BootstrapError::Contended {
            secret: self.secret_ref(),
            attempts: MAX_WRITE_ATTEMPTS,
        })
    }

    fn log_write(&self, reason: &WriteReason, target: &TlsMaterial) {
        let leaf = tls::first_certificate(&target.tls_crt)
            .map(|der| (tls::sha256_fingerprint(&der), tls::inspect_cert(&der).ok()));
        let cas = parse_bundle(&target.ca_crt)
            .iter()
            .map(|ca| tls::sha256_fingerprint(&ca.der))
            .collect::<Vec<_>>();
        info!(
            secret = %self.secret_ref(),
            reason = %reason,
            fingerprint = %leaf.as_ref().map(|l| l.0.as_str()).unwrap_or(""),
            not_after = %leaf.as_ref().and_then(|l| l.1.as_ref()).map(|i| i.not_after.to_string()).unwrap_or_default(),
            ca_bundle = ?cas,
            "TLS Secret written"
        );
    }

    async fn create(&self, target: &TlsMaterial) -> Result<Secret, kube::Error> {
        let mut data = BTreeMap::new();
        target.apply_to(&mut data);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(self.config.secret_name.clone()),
                namespace: Some(self.config.namespace.clone()),
                labels: Some(BTreeMap::from([
                    ("app.kubernetes.io/name".to_string(), "envoy-injector".to_string()),
                    ("app.kubernetes.io/managed-by".to_string(), "envoy-injector".to_string()),
                ])),
                ..ObjectMeta::default()
            },
            type_: Some(SECRET_TYPE.to_string()),
            data: Some(data),
            ..Secret::default()
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        self.secrets.create(&params, &secret).await
    }

    /// PUT of the read Secret with our keys changed: its `resourceVersion` makes the API
    /// server refuse it (409) if anyone wrote since; other keys, labels and type are kept.
    async fn replace(&self, current: &Secret, target: &TlsMaterial) -> Result<Secret, kube::Error> {
        let mut updated = current.clone();
        target.apply_to(updated.data.get_or_insert_with(BTreeMap::new));
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        self.secrets.replace(&self.config.secret_name, &params, &updated).await
    }
}
