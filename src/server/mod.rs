//! The two listeners: HTTPS webhook (`POST /mutate`) and plain-HTTP admin (`/healthz`,
//! `/readyz`, `/metrics`), with graceful shutdown; TLS comes from `crate::tls`.

mod admin;
mod budget;
mod connection;
mod error;
mod listener;
mod settings;
mod state;
mod summary;
mod webhook;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tracing::info;

use crate::shutdown::CancellationToken;
use crate::tls::{ServerTls, TlsSource};
use tokio_util::sync::DropGuard;

pub use error::ServerError;
pub use settings::{ConnectionTimeouts, ServerConfig};
pub use state::{AppState, Readiness};

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
    let listener = |name, router, tls, max_connections, drain_timeout| connection::Listener {
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
        validation: state.validation.clone(),
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
