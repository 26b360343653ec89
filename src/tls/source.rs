//! What the webhook listener serves: where its certificate comes from ([`TlsSource`])
//! and the rustls configuration over it ([`ServerTls`]).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{Instrument, info_span};

use super::reload::{CertFiles, CertStore, PemBytes, Reloader};
use super::{CertPair, TlsError, fingerprint, load_pem};
use crate::metrics::Metrics;

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
    Pem(CertPair),
    /// A store someone else keeps current (the Secret-backed bootstrap in
    /// `crate::tls::secret`); the server serves whatever it holds.
    Store(Arc<CertStore>),
}

/// The webhook listener's TLS: a rustls configuration serving whatever the store holds,
/// and for files, what is needed to keep the store current.
pub struct ServerTls {
    config: Arc<rustls::ServerConfig>,
    store: Arc<CertStore>,
    /// Set for [`TlsSource::Files`]: the files, their poll interval and the bytes served.
    files: Option<(CertFiles, Duration, PemBytes)>,
}

impl ServerTls {
    /// Loads the initial certificate from `source`; an unusable one is an error that
    /// names the file (or what generated it).
    pub fn load(source: TlsSource) -> Result<ServerTls, TlsError> {
        let (store, files) = match source {
            TlsSource::Files {
                cert,
                key,
                reload_interval,
            } => {
                let files = CertFiles { cert, key };
                let (cert_bytes, key_bytes) = files.read()?;
                let (cert_source, key_source) = files.sources();
                let loaded = load_pem(&cert_bytes, &key_bytes, &cert_source, &key_source)?;
                let store = Arc::new(CertStore::new(loaded));
                (store, Some((files, reload_interval, (cert_bytes, key_bytes))))
            }
            TlsSource::Pem(pair) => {
                let loaded = load_pem(
                    pair.cert_pem.as_bytes(),
                    pair.key_pem.as_bytes(),
                    "the generated certificate",
                    "the generated key",
                )?;
                (Arc::new(CertStore::new(loaded)), None)
            }
            TlsSource::Store(store) => (store, None),
        };
        Ok(ServerTls {
            config: server_config(store.clone())?,
            store,
            files,
        })
    }

    /// TLS 1.2 and 1.3 only, ALPN `h2` then `http/1.1`, certificate from the store.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }

    /// SHA-256 fingerprint of the certificate served now, for logs.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.store.current())
    }

    /// For a [`TlsSource::Files`] source, starts polling the files until `shutdown`
    /// completes, serving each change (counted in `tls_reloads`). Other sources need no
    /// task: `None`.
    pub fn spawn_reloader(
        self,
        metrics: Metrics,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Option<JoinHandle<()>> {
        let (files, interval, (cert, key)) = self.files?;
        let mut reloader = Reloader::new(metrics);
        reloader.started_with(cert, key);
        let task = files.watch(self.store, reloader, interval, shutdown);
        Some(tokio::spawn(task.instrument(info_span!("tls_reload"))))
    }
}

fn server_config(store: Arc<CertStore>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(super::provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
