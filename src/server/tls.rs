//! The webhook's TLS: rustls configuration, the serving certificate, and its reload from
//! files that a mounted Secret updates in place.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tracing::{info, warn};

use crate::metrics::{LoadLabels, LoadResult, Metrics};
use crate::tls::{TlsError, fingerprint, load_pem};

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum TlsSource {
    /// PEM files (`--tls-cert`, `--tls-key`), read through their paths every
    /// `reload_interval` and swapped in when their contents change.
    Files {
        cert: PathBuf,
        key: PathBuf,
        reload_interval: Duration,
    },
    /// PEM held in memory for the life of the process (the standalone self-signed pair).
    Pem { cert_pem: String, key_pem: String },
    /// A store someone else keeps current (the Secret-backed bootstrap in
    /// `crate::tls_bootstrap`); the server serves whatever it holds.
    Store(Arc<CertStore>),
}

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

/// TLS 1.2 and 1.3 only, ALPN `h2` then `http/1.1`, certificate from `store`.
pub fn server_config(store: Arc<CertStore>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Certificate and key file contents, as last read.
pub(crate) type PemPair = (Vec<u8>, Vec<u8>);

/// Loads the initial certificate from `source`, returning it and, for files, the bytes
/// it was built from (so the reloader only reacts to changes).
pub fn load_source(source: &TlsSource) -> Result<(CertifiedKey, Option<PemPair>), TlsError> {
    match source {
        TlsSource::Files { cert, key, .. } => {
            let cert_bytes = read_file("--tls-cert", cert)?;
            let key_bytes = read_file("--tls-key", key)?;
            let loaded = load_pem(&cert_bytes, &key_bytes, &display(cert), &display(key))?;
            Ok((loaded, Some((cert_bytes, key_bytes))))
        }
        TlsSource::Pem { cert_pem, key_pem } => {
            let loaded = load_pem(
                cert_pem.as_bytes(),
                key_pem.as_bytes(),
                "the generated certificate",
                "the generated key",
            )?;
            Ok((loaded, None))
        }
        TlsSource::Store(store) => Ok((store.current().as_ref().clone(), None)),
    }
}

fn read_file(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// Polls the certificate and key files until shutdown. Every distinct change is counted
/// once in `tls_reloads`: success swaps the certificate, failure keeps the old one.
pub(crate) async fn reload_files(
    store: Arc<CertStore>,
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
    initial: PemPair,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut last_seen = initial;
    let mut last_read_error: Option<String> = None;
    loop {
        tokio::select! {
            () = super::listener::stopped(&mut shutdown) => return,
            _ = ticker.tick() => {}
        }
        let (cert_bytes, key_bytes) = match read_pair(&cert, &key).await {
            Ok(Some(pair)) => pair,
            // The files changed while being read (a Secret update in flight): next tick.
            Ok(None) => continue,
            Err(err) => {
                let message = err.to_string();
                if last_read_error.as_deref() != Some(message.as_str()) {
                    warn!(error = %message, "cannot reload the serving certificate; keeping the current one");
                    count(&metrics, LoadResult::Error);
                    last_read_error = Some(message);
                }
                continue;
            }
        };
        last_read_error = None;
        if (&cert_bytes, &key_bytes) == (&last_seen.0, &last_seen.1) {
            continue;
        }
        match load_pem(&cert_bytes, &key_bytes, &display(&cert), &display(&key)) {
            Ok(loaded) => {
                info!(
                    cert = %cert.display(),
                    fingerprint = %fingerprint(&loaded),
                    "serving certificate reloaded; new connections use it"
                );
                store.replace(loaded);
                count(&metrics, LoadResult::Success);
            }
            Err(err) => {
                warn!(
                    cert = %cert.display(),
                    key = %key.display(),
                    error = %err,
                    "cannot use the changed certificate files; keeping the current certificate"
                );
                count(&metrics, LoadResult::Error);
            }
        }
        last_seen = (cert_bytes, key_bytes);
    }
}

/// Reads cert, key, then cert again: if the cert changed in between, a swap was in
/// progress and the pair may not belong together, so `None` asks for another try.
async fn read_pair(cert: &Path, key: &Path) -> Result<Option<PemPair>, TlsError> {
    let read = |flag: &'static str, path: &Path| {
        let path = path.to_path_buf();
        async move {
            tokio::fs::read(&path)
                .await
                .map_err(|source| TlsError::Read { flag, path, source })
        }
    };
    let cert_bytes = read("--tls-cert", cert).await?;
    let key_bytes = read("--tls-key", key).await?;
    let again = read("--tls-cert", cert).await?;
    Ok((again == cert_bytes).then_some((cert_bytes, key_bytes)))
}

fn count(metrics: &Metrics, result: LoadResult) {
    metrics.tls_reloads.get_or_create(&LoadLabels { result }).inc();
}
