//! `serve`: runs the webhook until SIGTERM/SIGINT, then shuts down gracefully.

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tracing::{info, warn};

use super::flags::{self, non_empty};
use crate::cli::{NetworkBackendKind, ServeArgs};
use envoy_injector::admission::{Admission, TemplateValidation};
use envoy_injector::controller::{self, Context};
use envoy_injector::events::{EventSink, Publisher};
use envoy_injector::inject::{AnnotationOptIn, Standalone};
use envoy_injector::live::LiveTemplates;
use envoy_injector::metrics::Metrics;
use envoy_injector::network::backend::{Backend, MultusBackend, NoBackend};
use envoy_injector::policies::{self as compiled, Path};
use envoy_injector::policy_sync;
use envoy_injector::rollout::auto::AutoSettings;
use envoy_injector::server::{self, AppState, ConnectionTimeouts, Readiness, ServerConfig, ServerError};
use envoy_injector::shutdown::{CancellationToken, cancel_on_signals};
use envoy_injector::template::{ConfigError, TemplateSet};
use envoy_injector::tls::secret::{self, BootstrapConfig, BootstrapError};
use envoy_injector::tls::{self, CertError, TlsSource};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot set up the self-managed serving certificate (or pass --tls-cert/--tls-key): {0}")]
    TlsBootstrap(#[from] BootstrapError),
    #[error("--config is for --standalone; in cluster mode templates come from ConfigMap {namespace}/envoy-injector")]
    ConfigInClusterMode { namespace: String },
    #[error("{0}; cluster mode needs one (or run `serve --standalone`)")]
    NoKubeconfig(#[from] super::kubeconfig::KubeconfigError),
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
    let shutdown = CancellationToken::new();
    let signal = cancel_on_signals(shutdown.clone()).map_err(ServeError::Signal)?;
    if args.config.is_some() {
        return Err(ServeError::ConfigInClusterMode {
            namespace: args.namespace.clone(),
        });
    }
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let limits = envoy_injector::client::Limits {
        qps: args.api_qps,
        burst: args.api_burst,
    };
    super::kubeconfig::find()?;
    let client = envoy_injector::client::connect(limits, &metrics).await?;
    // The rules of the API server's own version: it is the one that checks the Pods.
    let version = envoy_injector::client::kube_version(&client).await;
    // Without files, the certificate lives in a Secret this process manages; the
    // bootstrap keeps it current until shutdown.
    let (tls, tls_bootstrap) = match files_source(&args) {
        Some(files) => (files, None),
        None => {
            let config = self_tls_config(&args);
            let running = secret::start(client.clone(), config, metrics.clone(), shutdown.clone()).await?;
            (running.tls_source(), Some(running))
        }
    };
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(envoy_injector::leader::default_identity);
    info!(namespace = %args.namespace, %identity, "starting in cluster mode");

    // Every replica says its injection mode; the Lease holder acts on it.
    let (mode, mode_feed) = tokio::sync::watch::channel(None);
    tokio::spawn(policy_sync::decide_path(
        client.clone(),
        args.injection,
        metrics.clone(),
        shutdown.clone(),
        mode,
    ));

    // The controller's indexes, kept current by the cache's watches on every replica.
    let indexes = controller::Indexes::default();
    let followers = args.networks.then(|| indexes.followers());
    let (cache, configmap_feed) =
        envoy_injector::cache::start(client.clone(), &args.namespace, metrics.clone(), followers);
    let templates = Arc::new(LiveTemplates::new(None));
    let events: Arc<dyn EventSink> = Arc::new(Publisher::new(client.clone(), &identity));
    tokio::spawn(envoy_injector::live::reload::run(
        configmap_feed,
        templates.clone(),
        version,
        metrics.clone(),
        events.clone(),
    ));
    // Injected Pods (by their revision label, metadata only) → envoy_injector_pods_stale.
    tokio::spawn(envoy_injector::stale::run(
        client.clone(),
        templates.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));

    // Every Pod's metadata → envoy_injector_pods_uninjected (opted in, not injected).
    if args.watch_uninjected {
        tokio::spawn(envoy_injector::uninjected::run(
            client.clone(),
            cache.stores.namespaces.clone(),
            cache.namespace_changed.clone(),
            metrics.clone(),
            annotation_opt_in(&args),
            shutdown.clone(),
        ));
    }

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
        admission: Arc::new(
            Admission::new(templates.clone(), Arc::new(cache.stores.clone()), metrics.clone())
                .with_annotation_opt_in(annotation_opt_in(&args)),
        ),
        validation: TemplateValidation::new(version).with_namespaces(Arc::new(cache.stores.clone())),
        registry: Arc::new(registry),
        metrics: metrics.clone(),
        readiness,
    };
    let server = server::start(server_config(&args), tls, state).await?;

    let election = args.leader_elect.then(|| envoy_injector::leader::Election {
        client: client.clone(),
        namespace: args.namespace.clone(),
        lease_name: args.lease_name.clone(),
        identity: identity.clone(),
        duration_seconds: args.lease_duration_seconds,
    });
    let controller = {
        let cache = Arc::new(cache);
        let policies = PolicySync {
            templates,
            mode: mode_feed,
            options: compiled::Options {
                injector_namespace: args.namespace.clone(),
                annotation_opt_in: annotation_opt_in(&args),
            },
            owner: args.policy_owner.clone(),
        };
        let cluster = (cache, indexes);
        let networks = args.networks.then_some(args.network_backend);
        let auto_rollout = args.auto_rollout.then(|| AutoSettings {
            injector_namespace: args.namespace.clone(),
            pod_name: args.identity.clone(),
            interval: args.auto_rollout_interval,
            timeout: args.auto_rollout_timeout,
        });
        let start = controller_starter(
            client,
            events,
            cluster,
            metrics.clone(),
            networks,
            (policies, auto_rollout),
        );
        tokio::spawn(envoy_injector::leader::supervise(
            election,
            metrics,
            shutdown.clone(),
            start,
        ))
    };

    let signal = signal.await.unwrap_or("a cancelled signal task");
    info!(signal, "shutting down: finishing in-flight requests");
    server.shutdown();
    if let Err(err) = controller.await {
        warn!(error = %err, "the controller supervisor failed");
    }
    server.wait().await?;
    if let Some(bootstrap) = tls_bootstrap {
        bootstrap.stopped().await;
    }
    Ok(())
}

async fn run_standalone(args: ServeArgs) -> Result<(), ServeError> {
    // Registered first so a signal during start-up is not lost (nor fatal).
    let shutdown = CancellationToken::new();
    let signal = cancel_on_signals(shutdown.clone()).map_err(ServeError::Signal)?;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);

    let loaded = match &args.config {
        Some(path) => TemplateSet::from_file(path, flags::kube_version(args.kube_version)),
        None => Ok(TemplateSet::embedded()),
    };
    let set = match loaded {
        Ok(set) => set,
        Err(err) => {
            metrics.template_load(None);
            return Err(err.into());
        }
    };
    envoy_injector::live::reload::loaded(&metrics, &set);
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
        admission: Arc::new(
            Admission::new(templates, Arc::new(Standalone), metrics.clone())
                .with_annotation_opt_in(annotation_opt_in(&args)),
        ),
        validation: TemplateValidation::new(args.kube_version),
        registry: Arc::new(registry),
        metrics,
        readiness,
    };
    let tls = tls_source(&args)?;
    let server = server::start(server_config(&args), tls, state).await?;
    let signal = signal.await.unwrap_or("a cancelled signal task");
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
/// and `--validating-webhook-config ""` manage no `caBundle` there.
fn self_tls_config(args: &ServeArgs) -> BootstrapConfig {
    let flags = &args.self_tls;
    BootstrapConfig {
        namespace: args.namespace.clone(),
        secret_name: flags.tls_secret.clone(),
        webhook_config: non_empty(&flags.webhook_config),
        validating_webhook_config: non_empty(&flags.validating_webhook_config),
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

/// What the Lease holder needs to keep the compiled admission policies in step.
#[derive(Clone)]
struct PolicySync {
    templates: Arc<LiveTemplates>,
    mode: tokio::sync::watch::Receiver<Option<Path>>,
    options: compiled::Options,
    /// `--policy-owner`.
    owner: String,
}

/// Builds what `leader::supervise` calls each time this replica starts leading: the
/// Network controller (unless `--networks=false`: `backend` is `None`), the
/// admission-policy sync and (with `--auto-rollout`) the automatic rollout, stopped together.
fn controller_starter(
    client: kube::Client,
    events: Arc<dyn EventSink>,
    (cache, indexes): (Arc<envoy_injector::cache::Cache>, controller::Indexes),
    metrics: Metrics,
    backend: Option<NetworkBackendKind>,
    (policies, auto_rollout): (PolicySync, Option<AutoSettings>),
) -> impl Fn(CancellationToken) -> futures::future::BoxFuture<'static, ()> {
    move |stop| {
        let (client, events, cache, metrics) = (client.clone(), events.clone(), cache.clone(), metrics.clone());
        let indexes = indexes.clone();
        let policies = policies.clone();
        let auto_rollout = auto_rollout.clone();
        Box::pin(async move {
            let rollout = auto_rollout.map(|settings| {
                tokio::spawn(envoy_injector::rollout::auto::run(
                    client.clone(),
                    policies.templates.clone(),
                    events.clone(),
                    metrics.clone(),
                    settings,
                    stop.clone(),
                ))
            });
            let sync = tokio::spawn(policy_sync::run(
                client.clone(),
                policies.templates,
                policies.mode,
                policies.options,
                policies.owner,
                metrics.clone(),
                stop.clone(),
            ));
            if let Some(backend) = backend {
                let backend: Arc<dyn Backend> = match backend {
                    NetworkBackendKind::Multus => Arc::new(MultusBackend::new(client.clone())),
                    NetworkBackendKind::None => Arc::new(NoBackend),
                };
                let ctx = Arc::new(Context::new(
                    client,
                    backend,
                    events,
                    cache.stores.networks.clone(),
                    indexes,
                    metrics,
                ));
                controller::run_on_cache(ctx, &cache, stop).await;
            } else {
                // No Network controller: the sync alone, until the Lease is lost.
                stop.cancelled().await;
            }
            if let Err(err) = sync.await {
                warn!(error = %err, "the admission-policy sync failed");
            }
            if let Some(task) = rollout
                && let Err(err) = task.await
            {
                warn!(error = %err, "the automatic rollout failed");
            }
        })
    }
}

/// `--annotation-opt-in` as the library reads it.
fn annotation_opt_in(args: &ServeArgs) -> AnnotationOptIn {
    if args.annotation_opt_in {
        AnnotationOptIn::On
    } else {
        AnnotationOptIn::Off
    }
}

/// The listeners' settings from the `serve` flags of the same names.
fn server_config(args: &ServeArgs) -> ServerConfig {
    ServerConfig {
        addr: args.addr,
        admin_addr: args.admin_addr,
        reuse_port: args.reuse_port,
        max_body_bytes: args.connections.max_body_bytes,
        max_inflight_body_bytes: args.connections.max_inflight_body_bytes,
        timeouts: ConnectionTimeouts {
            tls_handshake: args.connections.tls_handshake_timeout,
            first_request: args.connections.first_request_timeout,
            header_read: args.connections.header_read_timeout,
            idle: args.connections.idle_timeout,
            http2_keepalive_interval: args.connections.http2_keepalive_interval,
            http2_keepalive_timeout: args.connections.http2_keepalive_timeout,
        },
        request_timeout: args.connections.request_timeout,
        shutdown_timeout: args.shutdown_timeout,
        max_connections: args.connections.max_connections,
        admin_max_connections: args.connections.admin_max_connections,
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
        assert_eq!(defaults.validating_webhook_config.as_deref(), Some("envoy-injector"));
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
            "--validating-webhook-config",
            "checks",
            "--service",
            "svc",
            "--cert-validity-days",
            "90",
            "--cert-renew-before-days",
            "10",
        ]);
        assert_eq!(custom.secret_name, "s");
        assert_eq!(custom.webhook_config, None);
        assert_eq!(custom.validating_webhook_config.as_deref(), Some("checks"));
        assert_eq!(custom.service, "svc");
        assert_eq!((custom.validity_days, custom.renew_before_days), (90, 10));
        let bad = parse(&["--namespace", "ns", "--cert-renew-before-days", "400"]);
        let err = bad.validate().unwrap_err().to_string();
        assert!(
            err.contains("--cert-renew-before-days") && err.contains("found 400"),
            "{err}"
        );
    }

    /// The connection flags reach the server's settings, with the documented defaults.
    #[test]
    fn connection_flags_map_onto_the_server_config() {
        use std::time::Duration;
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["envoy-injector", "serve", "--standalone"], args].concat()).unwrap();
            let Command::Serve(args) = cli.command else {
                panic!("expected the serve command")
            };
            server_config(&args)
        };
        let defaults = parse(&[]);
        assert_eq!(defaults.max_inflight_body_bytes, 64 * 1024 * 1024);
        assert_eq!(
            defaults.timeouts,
            ConnectionTimeouts {
                tls_handshake: Duration::from_secs(5),
                first_request: Duration::from_secs(10),
                header_read: Duration::from_secs(5),
                idle: Duration::from_secs(60),
                http2_keepalive_interval: Duration::from_secs(20),
                http2_keepalive_timeout: Duration::from_secs(10),
            }
        );
        assert_eq!((defaults.max_connections, defaults.admin_max_connections), (4096, 128));
        defaults.validate().unwrap();
        let custom = parse(&[
            "--max-inflight-body-bytes",
            "1000",
            "--max-body-bytes",
            "2000",
            "--idle-timeout",
            "3s",
            "--http2-keepalive-interval",
            "0",
            "--max-connections",
            "7",
        ]);
        assert_eq!(custom.timeouts.idle, Duration::from_secs(3));
        assert!(custom.timeouts.http2_keepalive_interval.is_zero());
        assert_eq!(custom.max_connections, 7);
        let err = custom.validate().unwrap_err().to_string();
        assert!(
            err.contains("--max-body-bytes (2000)") && err.contains("--max-inflight-body-bytes (1000)"),
            "{err}"
        );
    }
}
