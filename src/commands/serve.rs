//! `serve`: runs the webhook until SIGTERM/SIGINT, then shuts down gracefully.

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tracing::{info, warn};

use crate::admission::{Admission, Standalone};
use crate::certs::{self, CertError};
use crate::cli::{NetworkBackendKind, ServeArgs};
use crate::events::{EventSink, Publisher};
use crate::metrics::Metrics;
use crate::network::{
    self,
    backend::{Backend, MultusBackend, NoBackend},
    controller::Context,
};
use crate::server::{self, AppState, Readiness, ServerConfig, ServerError, TlsSource};
use crate::template::LiveTemplates;
use crate::template::{ConfigError, TemplateSet};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot set up the self-managed serving certificate (or pass --tls-cert/--tls-key): {0}")]
    TlsBootstrap(#[from] crate::tls_bootstrap::BootstrapError),
    #[error("--config is for --standalone; in cluster mode templates come from ConfigMap {namespace}/envoy-injector")]
    ConfigInClusterMode { namespace: String },
    #[error("cannot reach the cluster (KUBECONFIG or in-cluster config): {0}")]
    Client(#[from] kube::Error),
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
        run_cluster(args).await
    }
}

/// Webhook and Network controller against the cluster, reading one shared cache.
async fn run_cluster(args: ServeArgs) -> Result<(), ServeError> {
    let signals = Signals::register().map_err(ServeError::Signal)?;
    if args.config.is_some() {
        return Err(ServeError::ConfigInClusterMode {
            namespace: args.namespace.clone(),
        });
    }
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let limits = crate::client::Limits {
        qps: args.api_qps,
        burst: args.api_burst,
    };
    let client = crate::client::connect(limits, &metrics).await?;
    // Without files, the certificate lives in a Secret this process manages; the
    // bootstrap keeps it current until `_tls_bootstrap` is dropped on return.
    let (tls, _tls_bootstrap) = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => (
            TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
                reload_interval: args.tls_reload_interval,
            },
            None,
        ),
        _ => {
            let config = crate::tls_bootstrap::BootstrapConfig::from_args(&args);
            let running = crate::tls_bootstrap::start(client.clone(), config, metrics.clone()).await?;
            (running.tls_source(), Some(running))
        }
    };
    let identity = args.identity.clone().unwrap_or_else(crate::leader::default_identity);
    info!(namespace = %args.namespace, %identity, "starting in cluster mode");

    let (cache, configmap_feed) = crate::cache::start(client.clone(), &args.namespace, metrics.clone());
    let templates = Arc::new(LiveTemplates::new(None));
    let events: Arc<dyn EventSink> = Arc::new(Publisher::new(client.clone(), &identity));
    tokio::spawn(crate::template::reload::run(
        configmap_feed,
        templates.clone(),
        metrics.clone(),
        events.clone(),
    ));

    let readiness: Readiness = {
        let templates = templates.clone();
        let synced = cache.synced.clone();
        let namespace = args.namespace.clone();
        Arc::new(move || {
            synced.check()?;
            if templates.is_loaded() {
                Ok(())
            } else {
                Err(format!(
                    "no valid templates loaded from ConfigMap {namespace}/envoy-injector"
                ))
            }
        })
    };
    let state = AppState {
        admission: Arc::new(Admission::new(
            templates,
            Arc::new(cache.stores.clone()),
            metrics.clone(),
        )),
        registry: Arc::new(registry),
        metrics: metrics.clone(),
        readiness,
    };
    let server = server::start(ServerConfig::from(&args), tls, state).await?;

    let (stop_controller, controller_shutdown) = tokio::sync::watch::channel(false);
    let election = args.leader_elect.then(|| crate::leader::Election {
        client: client.clone(),
        namespace: args.namespace.clone(),
        lease_name: args.lease_name.clone(),
        identity: identity.clone(),
        duration_seconds: args.lease_duration_seconds,
    });
    let controller = {
        let cache = Arc::new(cache);
        let start = controller_starter(client, events, cache, metrics.clone(), args.network_backend);
        tokio::spawn(crate::leader::supervise(election, metrics, controller_shutdown, start))
    };

    let signal = signals.recv().await;
    info!(signal, "shutting down: finishing in-flight requests");
    let _ = stop_controller.send(true);
    server.shutdown();
    if let Err(err) = controller.await {
        warn!(error = %err, "the controller supervisor failed");
    }
    server.wait().await?;
    Ok(())
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
            metrics.template_load(None);
            return Err(err.into());
        }
    };
    metrics.template_load(Some(set.len()));
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
        admission: Arc::new(Admission::new(templates, Arc::new(Standalone), metrics.clone())),
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

/// Builds what `leader::supervise` calls each time this replica starts leading.
fn controller_starter(
    client: kube::Client,
    events: Arc<dyn EventSink>,
    cache: Arc<crate::cache::Cache>,
    metrics: Metrics,
    backend: NetworkBackendKind,
) -> impl Fn(tokio::sync::oneshot::Receiver<()>) -> futures::future::BoxFuture<'static, ()> {
    move |stop| {
        let (client, events, cache, metrics) = (client.clone(), events.clone(), cache.clone(), metrics.clone());
        Box::pin(async move {
            let backend: Arc<dyn Backend> = match backend {
                NetworkBackendKind::Multus => Arc::new(MultusBackend::new(client.clone())),
                NetworkBackendKind::None => Arc::new(NoBackend),
            };
            let ctx = Arc::new(Context::new(
                client,
                backend,
                events,
                cache.stores.networks.clone(),
                cache.indexes.clone(),
                metrics,
            ));
            network::controller::run_on_cache(ctx, &cache, async move {
                let _ = stop.await;
            })
            .await;
        })
    }
}
