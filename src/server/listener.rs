//! Accept loop and per-connection HTTP serving (HTTP/1.1 and HTTP/2, optionally over
//! TLS) with graceful shutdown.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::{JoinError, JoinSet};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;
use tracing::{Instrument, debug, error, info, info_span, warn};

use crate::shutdown::CancellationToken;

/// How one listener serves its connections.
pub(crate) struct Listener {
    /// `webhook` or `admin`, for logs.
    pub name: &'static str,
    pub router: Router,
    pub tls: Option<TlsAcceptor>,
    /// Bounds the TLS handshake and the wait for each request's headers.
    pub header_read_timeout: Duration,
    /// How long in-flight connections may take to finish once `stop` is set.
    pub drain_timeout: Duration,
}

/// Serves `listener` until `stop` is cancelled, then stops accepting and lets open
/// connections finish their requests, for at most `drain_timeout`.
pub(crate) async fn run(listener: TcpListener, config: Listener, stop: CancellationToken) {
    let config = Arc::new(config);
    let builder = Arc::new(http_builder(config.header_read_timeout));
    let conn_stop = stop.clone();
    let mut connections = JoinSet::new();
    let spawn = |connections: &mut JoinSet<()>, stream: TcpStream, peer: SocketAddr| {
        let span = info_span!("connection", listener = config.name, %peer);
        let task = serve_connection(stream, config.clone(), builder.clone(), conn_stop.clone());
        connections.spawn(task.instrument(span));
    };
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => spawn(&mut connections, stream, peer),
                Err(err) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    warn!(listener = config.name, error = %err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(joined) = connections.join_next(), if !connections.is_empty() => report(config.name, joined),
        }
    }
    // Connections the kernel completed before the listener closes would be reset: take
    // them now so those clients are served too.
    match listener.into_std() {
        Ok(listener) => loop {
            match listener.accept() {
                Ok((stream, peer)) => match stream.set_nonblocking(true).and_then(|()| TcpStream::from_std(stream)) {
                    Ok(stream) => spawn(&mut connections, stream, peer),
                    Err(err) => {
                        debug!(listener = config.name, error = %err, "dropping a queued connection")
                    }
                },
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) => {
                    debug!(listener = config.name, error = %err, "stopped taking queued connections");
                    break;
                }
            }
        },
        Err(err) => debug!(listener = config.name, error = %err, "cannot take queued connections"),
    }
    info!(
        listener = config.name,
        open_connections = connections.len(),
        "stopped accepting; finishing in-flight requests"
    );
    let drained = tokio::time::timeout(config.drain_timeout, async {
        while let Some(joined) = connections.join_next().await {
            report(config.name, joined);
        }
    })
    .await;
    if drained.is_err() {
        warn!(
            listener = config.name,
            remaining = connections.len(),
            timeout_ms = config.drain_timeout.as_millis() as u64,
            "shutdown timeout reached; closing the remaining connections"
        );
        connections.shutdown().await;
    }
    info!(listener = config.name, "closed");
}

fn http_builder(header_read_timeout: Duration) -> auto::Builder<SpanExecutor> {
    let mut builder = auto::Builder::new(SpanExecutor);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    builder
}

/// Spawns HTTP/2 stream tasks inside the connection's span, so their logs name the peer.
#[derive(Clone, Copy)]
pub(crate) struct SpanExecutor;

impl<F> hyper::rt::Executor<F> for SpanExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        tokio::spawn(future.in_current_span());
    }
}

fn report(listener: &str, joined: Result<(), JoinError>) {
    if let Err(err) = joined
        && err.is_panic()
    {
        error!(listener, "a connection task panicked");
    }
}

async fn serve_connection(
    stream: TcpStream,
    config: Arc<Listener>,
    builder: Arc<auto::Builder<SpanExecutor>>,
    stop: CancellationToken,
) {
    // Admission answers are small and latency-bound.
    let _ = stream.set_nodelay(true);
    let Some(acceptor) = &config.tls else {
        return serve_http(stream, &config, &builder, stop).await;
    };
    match tokio::time::timeout(config.header_read_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => serve_http(tls, &config, &builder, stop).await,
        // A TCP probe or port scan: connects and leaves without a ClientHello.
        Ok(Err(err)) if err.kind() == io::ErrorKind::UnexpectedEof => {
            debug!(error = %err, "connection closed before the TLS handshake completed")
        }
        Ok(Err(err)) => warn!(error = %err, "TLS handshake failed"),
        Err(_) => debug!(
            timeout_ms = config.header_read_timeout.as_millis() as u64,
            "TLS handshake not completed within --header-read-timeout"
        ),
    }
}

async fn serve_http<I>(io: I, config: &Listener, builder: &auto::Builder<SpanExecutor>, stop: CancellationToken)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let first_request = Arc::new(Notify::new());
    let service = {
        let first_request = first_request.clone();
        config.router.clone().map_request(move |request: Request<Incoming>| {
            // Stores a permit, so shutdown sees it even if it looks later.
            first_request.notify_one();
            request
        })
    };
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => return log_end(result),
        () = stop.cancelled() => {}
    }
    // A client that connected just before shutdown has not sent its request yet; closing
    // now would fail it, so give it the header-read time to start one.
    tokio::select! {
        result = conn.as_mut() => return log_end(result),
        _ = tokio::time::timeout(config.header_read_timeout, first_request.notified()) => {}
    }
    // HTTP/1.1: finish the current request, then close. HTTP/2: GOAWAY, finish open streams.
    conn.as_mut().graceful_shutdown();
    log_end(conn.await);
}

fn log_end(result: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(err) = result {
        debug!(error = %err, "connection ended with an error");
    }
}
