//! `serve`: runs the webhook until SIGTERM/SIGINT, then shuts down gracefully.

use std::sync::Arc;

use kube::runtime::events::{Recorder, Reporter};
use prometheus_client::registry::Registry;
use tracing::{info, warn};

use crate::admission::{Admission, Standalone};
use crate::cli::{NetworkBackendKind, ServeArgs};
use crate::config::{ConfigError, TemplateSet};
use crate::metrics::Metrics;
use crate::network::{
    self,
    backend::{Backend, MultusBackend, NoBackend},
    controller::Context,
};
use crate::server::{self, AppState, Readiness, ServerConfig, ServerError};
use crate::templates::LiveTemplates;
use crate::tls::secret::{self, BootstrapConfig, BootstrapError};
use crate::tls::{self, CertError, TlsSource};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot set up the self-managed serving certificate (or pass --tls-cert/--tls-key): {0}")]
    TlsBootstrap(#[from] BootstrapError),
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
    let client = kube::Client::try_default().await?;
    // Without files, the certificate lives in a Secret this process manages; the
    // bootstrap keeps it current until `_tls_bootstrap` is dropped on return.
    let (tls, _tls_bootstrap) = match files_source(&args) {
        Some(files) => (files, None),
        None => {
            let running = secret::start(client.clone(), self_tls_config(&args), metrics.clone()).await?;
            (running.tls_source(), Some(running))
        }
    };
    let identity = args.identity.clone().unwrap_or_else(crate::leader::default_identity);
    info!(namespace = %args.namespace, %identity, "starting in cluster mode");

    let (cache, configmap_feed) = crate::cache::start(client.clone(), &args.namespace, metrics.clone());
    let templates = Arc::new(LiveTemplates::new(None));
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: String::from("envoy-injector"),
            instance: Some(identity.clone()),
        },
    );
    tokio::spawn(crate::reload::run(
        configmap_feed,
        templates.clone(),
        metrics.clone(),
        Arc::new(crate::reload::RecorderSink(recorder.clone())),
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
        let start = controller_starter(client, recorder, cache, metrics.clone(), args.network_backend);
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

/// `--tls-cert`/`--tls-key`, when given (clap makes them come together).
fn files_source(args: &ServeArgs) -> Option<TlsSource> {
    let (cert, key) = (args.tls_cert.as_ref()?, args.tls_key.as_ref()?);
    Some(TlsSource::Files {
        cert: cert.clone(),
        key: key.clone(),
        reload_interval: args.tls_reload_interval,
    })
}

/// The self-managed certificate's settings from the `serve` flags; `--webhook-config ""`
/// manages no `caBundle`.
fn self_tls_config(args: &ServeArgs) -> BootstrapConfig {
    let flags = &args.self_tls;
    BootstrapConfig {
        namespace: args.namespace.clone(),
        secret_name: flags.tls_secret.clone(),
        webhook_config: (!flags.webhook_config.is_empty()).then(|| flags.webhook_config.clone()),
        service: flags.service.clone(),
        validity_days: flags.cert_validity_days,
        renew_before_days: flags.cert_renew_before_days,
        poll_interval: secret::DEFAULT_POLL_INTERVAL,
        check_interval: secret::DEFAULT_CHECK_INTERVAL,
        ca_overlap: secret::DEFAULT_CA_OVERLAP,
    }
}

fn tls_source(args: &ServeArgs) -> Result<TlsSource, ServeError> {
    if let Some(files) = files_source(args) {
        return Ok(files);
    }
    let pair = tls::self_signed_localhost()?;
    info!(
        fingerprint = %pair.fingerprint(),
        "no --tls-cert/--tls-key: generated a self-signed certificate for localhost, 127.0.0.1 and ::1"
    );
    Ok(TlsSource::Pem(pair))
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
    recorder: Recorder,
    cache: Arc<crate::cache::Cache>,
    metrics: Metrics,
    backend: NetworkBackendKind,
) -> impl Fn(tokio::sync::oneshot::Receiver<()>) -> futures::future::BoxFuture<'static, ()> {
    move |stop| {
        let (client, recorder, cache, metrics) = (client.clone(), recorder.clone(), cache.clone(), metrics.clone());
        Box::pin(async move {
            use futures::StreamExt as _;
            let backend: Arc<dyn Backend> = match backend {
                NetworkBackendKind::Multus => Arc::new(MultusBackend::new(client.clone())),
                NetworkBackendKind::None => Arc::new(NoBackend),
            };
            let stores = &cache.stores;
            let ctx = Arc::new(Context::new(
                client,
                backend,
                recorder,
                stores.networks.clone(),
                stores.member_pods.clone(),
                metrics,
            ));
            // Attach before taking the snapshot: an event in between is seen twice (the
            // controller dedups), never lost.
            let network_events = cache.network_events.attach().await;
            let pod_events = cache.pod_events.attach().await;
            let networks = futures::stream::iter(stores.networks.state()).chain(network_events);
            network::controller::run(ctx, networks, pod_events, async move {
                let _ = stop.await;
            })
            .await;
            cache.network_events.detach().await;
            cache.pod_events.detach().await;
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    /// The `serve` flags map onto the bootstrap configuration; `--webhook-config ""`
    /// manages no caBundle.
    #[test]
    fn serve_flags_map_onto_the_bootstrap_config() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["envoy-injector", "serve"], args].concat()).unwrap();
            let Command::Serve(args) = cli.command else {
                panic!("expected the serve command")
            };
            self_tls_config(&args)
        };
        let defaults = parse(&["--namespace", "ns"]);
        assert_eq!(defaults.secret_name, "envoy-injector-tls");
        assert_eq!(defaults.webhook_config.as_deref(), Some("envoy-injector"));
        assert_eq!(defaults.service, "envoy-injector");
        assert_eq!((defaults.validity_days, defaults.renew_before_days), (365, 30));
        defaults.validate().unwrap();
        let custom = parse(&[
            "--namespace",
            "ns",
            "--tls-secret",
            "s",
            "--webhook-config",
            "",
            "--service",
            "svc",
            "--cert-validity-days",
            "90",
            "--cert-renew-before-days",
            "10",
        ]);
        assert_eq!(custom.secret_name, "s");
        assert_eq!(custom.webhook_config, None);
        assert_eq!(custom.service, "svc");
        assert_eq!((custom.validity_days, custom.renew_before_days), (90, 10));
        let bad = parse(&["--namespace", "ns", "--cert-renew-before-days", "400"]);
        let err = bad.validate().unwrap_err().to_string();
        assert!(
            err.contains("--cert-renew-before-days") && err.contains("found 400"),
            "{err}"
        );
    }
}
