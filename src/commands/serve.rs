//! `serve`: runs the webhook until SIGTERM/SIGINT, then shuts down gracefully.

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tracing::info;

use crate::admission::{Admission, NoNamespaces};
use crate::certs::{self, CertError};
use crate::cli::ServeArgs;
use crate::config::{ConfigError, TemplateSet};
use crate::metrics::{LoadLabels, LoadResult, Metrics};
use crate::server::{self, AppState, Readiness, ServerConfig, ServerError, TlsSource};
use crate::templates::LiveTemplates;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "expected --standalone: cluster mode (ConfigMap, Namespace and Network caches) is not \
         available in this build yet; run `envoy-injector serve --standalone`"
    )]
    ClusterModeUnavailable,
    #[error("cannot load the injection templates: {0}")]
    Templates(#[from] ConfigError),
    #[error("cannot generate the self-signed certificate: {0}")]
    SelfSigned(#[from] CertError),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("cannot listen for SIGTERM/SIGINT: {0}")]
    Signal(std::io::Error),
}

pub async fn run(args: ServeArgs) -> Result<(), ServeError> {
    if args.standalone {
        run_standalone(args).await
    } else {
        Err(ServeError::ClusterModeUnavailable)
    }
}

async fn run_standalone(args: ServeArgs) -> Result<(), ServeError> {
    // Registered first so a signal during start-up is not lost (nor fatal).
    let signals = Signals::register().map_err(ServeError::Signal)?;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);

    let loaded = match &args.config {
        Some(path) => TemplateSet::from_file(path),
        None => Ok(TemplateSet::embedded()),
    };
    let set = match loaded {
        Ok(set) => set,
        Err(err) => {
            metrics
                .template_loads
                .get_or_create(&LoadLabels {
                    result: LoadResult::Error,
                })
                .inc();
            return Err(err.into());
        }
    };
    metrics
        .template_loads
        .get_or_create(&LoadLabels {
            result: LoadResult::Success,
        })
        .inc();
    metrics.templates_loaded.set(set.len() as i64);
    info!(source = %set.source, templates = ?set.names().collect::<Vec<_>>(), "templates loaded");
    let templates = Arc::new(LiveTemplates::new(Some(set)));

    let readiness: Readiness = {
        let templates = templates.clone();
        Arc::new(move || {
            if templates.is_loaded() {
                Ok(())
            } else {
                Err("no injection template is loaded yet".to_string())
            }
        })
    };
    let state = AppState {
        admission: Arc::new(Admission::new(templates, Arc::new(NoNamespaces), metrics.clone())),
        registry: Arc::new(registry),
        metrics,
        readiness,
    };
    let tls = tls_source(&args)?;
    let server = server::start(ServerConfig::from(&args), tls, state).await?;
    let signal = signals.recv().await;
    info!(signal, "shutting down: finishing in-flight requests");
    server.shutdown();
    server.wait().await?;
    Ok(())
}

fn tls_source(args: &ServeArgs) -> Result<TlsSource, ServeError> {
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        return Ok(TlsSource::Files {
            cert: cert.clone(),
            key: key.clone(),
            reload_interval: args.tls_reload_interval,
        });
    }
    let pair = certs::self_signed_localhost()?;
    info!(
        fingerprint = %certs::sha256_fingerprint(&pair.cert_der),
        "no --tls-cert/--tls-key: generated a self-signed certificate for localhost, 127.0.0.1 and ::1"
    );
    Ok(TlsSource::Pem {
        cert_pem: pair.cert_pem,
        key_pem: pair.key_pem,
    })
}

/// SIGTERM (what the kubelet sends) and SIGINT (Ctrl-C).
struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn register() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                terminate: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    async fn recv(mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.terminate.recv() => "SIGTERM",
                _ = self.interrupt.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}
