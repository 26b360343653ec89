//! The two listeners: HTTPS webhook (`POST /mutate`) and plain-HTTP admin (`/healthz`,
//! `/readyz`, `/metrics`), with graceful shutdown; TLS comes from `crate::tls`.

mod admin;
mod budget;
mod connection;
mod listener;
mod summary;
mod webhook;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tracing::info;

use crate::admission::{Admission, TemplateValidation};
use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;
use crate::tls::{ServerTls, TlsError, TlsSource};
use tokio_util::sync::DropGuard;

/// Says whether the process may receive traffic; `Err` carries the reason it may not.
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub admission: Arc<Admission>,
    /// `POST /validate`, with the value rules of the API server's version.
    pub validation: TemplateValidation,
    pub registry: Arc<Registry>,
    pub metrics: Metrics,
    /// Readiness besides shutdown (which the server adds itself).
    pub readiness: Readiness,
}

/// Listener addresses and limits (the `serve` flags of the same names).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// SO_REUSEPORT on the webhook listener (`--reuse-port`); the admin listener never:
    /// each process must have its own, or a probe would ask a random one.
    pub reuse_port: bool,
    pub max_body_bytes: usize,
    /// Request bodies held at once across all connections.
    pub max_inflight_body_bytes: usize,
    pub timeouts: ConnectionTimeouts,
    pub request_timeout: Duration,
    pub shutdown_timeout: Duration,
    /// Connections open at once on the webhook listener.
    pub max_connections: usize,
    /// Connections open at once on the admin listener.
    pub admin_max_connections: usize,
}

/// The deadlines of a connection's phases and its HTTP/2 keep-alive, the same on both
/// listeners (the `serve` flags of the same names, see `connection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionTimeouts {
    pub tls_handshake: Duration,
    pub first_request: Duration,
    /// Bounds the wait for an HTTP/1.1 request's headers once it started.
    pub header_read: Duration,
    pub idle: Duration,
    /// `ZERO` sends no keep-alive PINGs.
    pub http2_keepalive_interval: Duration,
    pub http2_keepalive_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot bind {flag} {addr}: {source}")]
    Bind {
        flag: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(
        "expected --max-body-bytes ({max_body_bytes}) to be at most --max-inflight-body-bytes ({budget}), found it larger: such a body could never be read"
    )]
    BodyBudget { max_body_bytes: usize, budget: usize },
    #[error("expected {flag} to be at least 1, found 0: the listener could serve nothing")]
    NoConnections { flag: &'static str },
    #[error("expected the {listener} listener to stop cleanly, found its task failed: {message}")]
    Task { listener: &'static str, message: String },
}

/// A started server. Dropping it without [`RunningServer::shutdown`] also stops it.
pub struct RunningServer {
    webhook_addr: SocketAddr,
    admin_addr: SocketAddr,
    stop: CancellationToken,
    _stop_on_drop: DropGuard,
    supervisor: JoinHandle<Result<(), ServerError>>,
}

impl RunningServer {
    /// The webhook's bound address (the real port when `--addr` asked for port 0).
    pub fn webhook_addr(&self) -> SocketAddr {
        self.webhook_addr
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Begins graceful shutdown: `/readyz` turns 503, the webhook stops accepting and
    /// finishes in-flight requests (bounded by `shutdown_timeout`), then the admin
    /// listener closes. Returns at once; [`RunningServer::wait`] awaits the end.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }

    /// Waits until both listeners have closed (only happens after shutdown).
    pub async fn wait(self) -> Result<(), ServerError> {
        // The guard lives until the server has stopped: waiting does not stop it.
        let RunningServer {
            supervisor,
            _stop_on_drop,
            ..
        } = self;
        supervisor.await.map_err(|err| ServerError::Task {
            listener: "supervisor",
            message: err.to_string(),
        })?
    }
}

/// Binds both listeners, loads the certificate, and starts serving.
pub async fn start(config: ServerConfig, tls: TlsSource, state: AppState) -> Result<RunningServer, ServerError> {
    config.validate()?;
    let tls = ServerTls::load(tls)?;
    info!(fingerprint = %tls.fingerprint(), "serving certificate loaded (SHA-256)");
    let acceptor = TlsAcceptor::from(tls.config());

    let webhook_listener = if config.reuse_port {
        bind_reuse_port("--addr", config.addr)?
    } else {
        bind("--addr", config.addr).await?
    };
    let admin_listener = bind("--admin-addr", config.admin_addr).await?;
    let webhook_addr = local_addr("--addr", &webhook_listener, config.addr)?;
    let admin_addr = local_addr("--admin-addr", &admin_listener, config.admin_addr)?;
    info!(listener = "webhook", addr = %webhook_addr, "listening (HTTPS, POST /mutate)");
    info!(listener = "admin", addr = %admin_addr, "listening (HTTP, /healthz /readyz /metrics)");

    let stop = CancellationToken::new();
    // The admin listener outlives the webhook's drain so /readyz can say 503 meanwhile.
    let admin_stop = CancellationToken::new();

    let reloader = tls.spawn_reloader(state.metrics.clone(), stop.clone().cancelled_owned());
    let summary = tokio::spawn(summary::run(
        state.metrics.clone(),
        summary::SUMMARY_INTERVAL,
        stop.clone(),
    ));

    let webhook_router = webhook_router(&config, &state);
    let admin_router = admin_router(&state, stop.clone());
    let listener = |name, router, tls, max_connections, drain_timeout| listener::Listener {
        name,
        router,
        tls,
        timeouts: config.timeouts,
        max_connections,
        drain_timeout,
        metrics: state.metrics.clone(),
    };
    let webhook = tokio::spawn(listener::run(
        webhook_listener,
        listener(
            "webhook",
            webhook_router,
            Some(acceptor),
            config.max_connections,
            config.shutdown_timeout,
        ),
        stop.clone(),
    ));
    let admin = tokio::spawn(listener::run(
        admin_listener,
        listener(
            "admin",
            admin_router,
            None,
            config.admin_max_connections,
            // Admin requests are instant; this only bounds a stuck scrape.
            config.shutdown_timeout.min(Duration::from_secs(5)),
        ),
        admin_stop.clone(),
    ));
    let supervisor = tokio::spawn(async move {
        let webhook_result = webhook.await;
        admin_stop.cancel();
        let admin_result = admin.await;
        // It logs the last stretch on the same signal; it cannot fail.
        let _ = summary.await;
        if let Some(reloader) = reloader {
            // It stops on the same signal; a failure there must not fail shutdown.
            let _ = reloader.await;
        }
        webhook_result.map_err(|err| ServerError::Task {
            listener: "webhook",
            message: err.to_string(),
        })?;
        admin_result.map_err(|err| ServerError::Task {
            listener: "admin",
            message: err.to_string(),
        })?;
        info!("server stopped");
        Ok(())
    });
    Ok(RunningServer {
        webhook_addr,
        admin_addr,
        _stop_on_drop: stop.clone().drop_guard(),
        stop,
        supervisor,
    })
}

/// The webhook listener's routes: `POST /mutate` and `POST /validate`, each body read
/// within `--max-body-bytes`, the in-flight body budget and the request timeout; 404 and
/// 405 for anything else. What a request gets once its connection is served: TLS and the
/// connection's deadlines are the listener's (`connection`), not the router's. Public so
/// that tests drive it in process, without a socket.
pub fn webhook_router(config: &ServerConfig, state: &AppState) -> axum::Router {
    webhook::router(Arc::new(webhook::WebhookState {
        admission: state.admission.clone(),
        validation: state.validation,
        metrics: state.metrics.clone(),
        max_body_bytes: config.max_body_bytes,
        request_timeout: config.request_timeout,
        budget: budget::BodyBudget::new(config.max_inflight_body_bytes, state.metrics.body_budget_bytes.clone()),
    }))
}

/// The admin listener's routes: `/healthz`, `/readyz` (503 once `stopping` is cancelled,
/// or while `state.readiness` says why not), `/metrics`. Public as [`webhook_router`] is.
pub fn admin_router(state: &AppState, stopping: CancellationToken) -> axum::Router {
    admin::router(Arc::new(admin::AdminState {
        registry: state.registry.clone(),
        readiness: state.readiness.clone(),
        stopping,
    }))
}

impl ServerConfig {
    /// Refuses settings the server could not work with, naming the flags.
    pub fn validate(&self) -> Result<(), ServerError> {
        if self.max_body_bytes > self.max_inflight_body_bytes {
            return Err(ServerError::BodyBudget {
                max_body_bytes: self.max_body_bytes,
                budget: self.max_inflight_body_bytes,
            });
        }
        for (flag, value) in [
            ("--max-connections", self.max_connections),
            ("--admin-max-connections", self.admin_max_connections),
        ] {
            if value == 0 {
                return Err(ServerError::NoConnections { flag });
            }
        }
        Ok(())
    }
}

async fn bind(flag: &'static str, addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { flag, addr, source })
}

/// Like [`bind`] (SO_REUSEADDR, backlog 1024), plus SO_REUSEPORT.
#[cfg(unix)]
fn bind_reuse_port(flag: &'static str, addr: SocketAddr) -> Result<TcpListener, ServerError> {
    let bind = || {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        socket.bind(addr)?;
        socket.listen(1024)
    };
    bind().map_err(|source| ServerError::Bind { flag, addr, source })
}

#[cfg(not(unix))]
fn bind_reuse_port(flag: &'static str, addr: SocketAddr) -> Result<TcpListener, ServerError> {
    Err(ServerError::Bind {
        flag,
        addr,
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "--reuse-port needs SO_REUSEPORT (Unix)",
        ),
    })
}

fn local_addr(flag: &'static str, listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, ServerError> {
    listener
        .local_addr()
        .map_err(|source| ServerError::Bind { flag, addr, source })
}
