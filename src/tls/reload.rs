//! Keeping the served certificate current: the store rustls asks on every handshake, the
//! one reloader that swaps a changed certificate into it, and the poller of files that a
//! mounted Secret updates in place.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::time::MissedTickBehavior;
use tracing::{info, warn};

use super::{TlsError, fingerprint, load_pem};
use crate::backoff::Episode;
use crate::metrics::{LoadLabels, LoadResult, Metrics};

/// Certificate and key bytes as read from files or a Secret, before any check.
pub(super) type PemBytes = (Vec<u8>, Vec<u8>);

/// The serving certificate, swappable while the listener runs. rustls asks it once per
/// full handshake, so a swap affects new connections only.
#[derive(Debug)]
pub struct CertStore {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertStore {
    pub fn new(initial: CertifiedKey) -> CertStore {
        CertStore {
            current: RwLock::new(Arc::new(initial)),
        }
    }

    pub fn current(&self) -> Arc<CertifiedKey> {
        // The lock only guards an Arc swap, which cannot be left half-done.
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn replace(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// What became of a certificate and key offered to a [`Reloader`].
#[derive(Debug)]
pub enum Offer {
    /// The same bytes as last offered: nothing done, nothing counted.
    Unchanged,
    /// Swapped in; new connections use the certificate with this SHA-256 fingerprint.
    Served { fingerprint: String },
    /// Unusable: the store keeps its current certificate.
    Kept(TlsError),
}

/// Swaps changed certificate/key bytes into a [`CertStore`], whatever they were read
/// from. Each distinct pair of bytes counts once in `tls_reloads`: success serves it,
/// failure keeps the current certificate.
pub struct Reloader {
    metrics: Metrics,
    /// The certificate and key bytes last offered (served or rejected).
    offered: Option<PemBytes>,
}

impl Reloader {
    pub fn new(metrics: Metrics) -> Reloader {
        Reloader { metrics, offered: None }
    }

    /// Records the bytes the store was started with, so that only a change counts.
    pub fn started_with(&mut self, cert: Vec<u8>, key: Vec<u8>) {
        self.offered = Some((cert, key));
    }

    /// Loads `cert`/`key` (named `cert_source`/`key_source` in errors) into `store` if
    /// they differ from the bytes last offered.
    pub fn offer(&mut self, store: &CertStore, cert: &[u8], key: &[u8], cert_source: &str, key_source: &str) -> Offer {
        if self
            .offered
            .as_ref()
            .is_some_and(|(c, k)| (c.as_slice(), k.as_slice()) == (cert, key))
        {
            return Offer::Unchanged;
        }
        self.offered = Some((cert.to_vec(), key.to_vec()));
        match load_pem(cert, key, cert_source, key_source) {
            Ok(loaded) => {
                let fingerprint = fingerprint(&loaded);
                store.replace(loaded);
                self.count(LoadResult::Success);
                Offer::Served { fingerprint }
            }
            Err(err) => {
                self.count(LoadResult::Error);
                Offer::Kept(err)
            }
        }
    }

    /// Counts a reload that failed before anything could be offered (unreadable files).
    pub fn count_failure(&self) {
        self.count(LoadResult::Error);
    }

    fn count(&self, result: LoadResult) {
        self.metrics.tls_reloads.get_or_create(&LoadLabels { result }).inc();
    }
}

const CERT_FLAG: &str = "--tls-cert";
const KEY_FLAG: &str = "--tls-key";

/// Reads one of the files; the error names its flag and path.
fn read_file(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

/// The `--tls-cert`/`--tls-key` files.
#[derive(Debug, Clone)]
pub(super) struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    /// Reads both files at start; errors name the flag and the path.
    pub fn read(&self) -> Result<PemBytes, TlsError> {
        Ok((read_file(CERT_FLAG, &self.cert)?, read_file(KEY_FLAG, &self.key)?))
    }

    /// Reads cert, key, then cert again: if the cert changed in between, a swap was in
    /// progress and the pair may not belong together, so `None` asks for another try.
    /// On the blocking pool, as `tokio::fs` would, in one hop for the three reads.
    async fn read_settled(&self) -> Result<Option<PemBytes>, TlsError> {
        let files = self.clone();
        let read = tokio::task::spawn_blocking(move || {
            let (cert_bytes, key_bytes) = files.read()?;
            let again = read_file(CERT_FLAG, &files.cert)?;
            Ok((again == cert_bytes).then_some((cert_bytes, key_bytes)))
        });
        // Only a runtime shutting down (or a panic, which std::fs::read does not raise)
        // ends the task early: reported as a failed read of the certificate.
        read.await.unwrap_or_else(|err| {
            Err(TlsError::Read {
                flag: CERT_FLAG,
                path: self.cert.clone(),
                source: std::io::Error::other(err),
            })
        })
    }

    /// The names errors use for the two files.
    pub fn sources(&self) -> (String, String) {
        (self.cert.display().to_string(), self.key.display().to_string())
    }

    /// Polls the files every `interval` until `shutdown` completes, offering each settled
    /// read to `reloader`. The kubelet updates a mounted Secret by swapping its `..data`
    /// link, so reading through the paths sees either the old pair or the new one.
    pub async fn watch(
        self,
        store: Arc<CertStore>,
        mut reloader: Reloader,
        interval: Duration,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker.tick().await;
        let (cert_source, key_source) = self.sources();
        // Out of file descriptors, or the files gone for a while: one WARN when reads
        // start failing and one INFO when they work again, not one per tick (nor one per
        // distinct message: under EMFILE the cert and the key take turns failing).
        let mut unreadable = Episode::default();
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = ticker.tick() => {}
            }
            let (cert_bytes, key_bytes) = match self.read_settled().await {
                Ok(Some(pair)) => pair,
                // The files changed while being read (a Secret update in flight): next tick.
                Ok(None) => continue,
                Err(err) => {
                    if unreadable.fail() {
                        warn!(error = %err, "cannot reload the serving certificate; keeping the current one");
                        reloader.count_failure();
                    }
                    continue;
                }
            };
            if let Some((failures, lasted)) = unreadable.recover() {
                info!(
                    failed_reads = failures,
                    lasted_ms = lasted.as_millis() as u64,
                    "serving certificate files readable again"
                );
            }
            match reloader.offer(&store, &cert_bytes, &key_bytes, &cert_source, &key_source) {
                Offer::Unchanged => {}
                Offer::Served { fingerprint } => info!(
                    cert = %self.cert.display(),
                    fingerprint = %fingerprint,
                    "serving certificate reloaded; new connections use it"
                ),
                Offer::Kept(err) => warn!(
                    cert = %self.cert.display(),
                    key = %self.key.display(),
                    error = %err,
                    "cannot use the changed certificate files; keeping the current certificate"
                ),
            }
        }
    }
}
