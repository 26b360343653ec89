//! The accept loop of one listener: a cap on open connections, backoff on accept
//! errors, and draining on shutdown. Each connection is served by `connection`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioTimer;
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinSet};
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::connection::{self, Listener, SpanExecutor};
use super::settings::ConnectionTimeouts;
use crate::backoff::{Episode, Exponential};
use crate::metrics::ListenerLabels;
use crate::shutdown::CancellationToken;

/// After a failed accept (out of file descriptors, most often), wait this long before the
/// next, doubling while it keeps failing: the failure is not spun on.
const ACCEPT_BACKOFF: Exponential = Exponential::new(Duration::from_millis(10), Duration::from_secs(1));

/// One open connection's share of the listener: its slot under the cap and its count in
/// `connections_open`, both given back when the connection task ends.
struct Slot {
    _permit: OwnedSemaphorePermit,
    open: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// Serves `listener` until `stop` is cancelled, then stops accepting and lets open
/// connections finish their requests, for at most `drain_timeout`.
pub(crate) async fn run(listener: TcpListener, config: Listener, stop: CancellationToken) {
    let config = Arc::new(config);
    let builder = Arc::new(http_builder(&config.timeouts));
    let labels = ListenerLabels { listener: config.name };
    let open = config.metrics.connections_open.get_or_create(&labels).clone();
    let rejected = config.metrics.connections_rejected.get_or_create(&labels).clone();
    let accept_errors = config.metrics.accept_errors.get_or_create(&labels).clone();
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let conn_stop = stop.clone();
    let mut connections = JoinSet::new();
    // Both logged once when they start and once when they end, not per connection.
    let mut at_cap = Episode::default();
    let mut failing = Episode::default();
    let mut admit = |connections: &mut JoinSet<()>, stream: TcpStream, peer: SocketAddr| {
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            // Closing at once keeps the descriptors (and memory) of this process bounded
            // whatever clients do; the client sees its connection closed.
            drop(stream);
            rejected.inc();
            if at_cap.fail() {
                warn!(
                    listener = config.name,
                    max_connections = config.max_connections,
                    "connection cap reached (--max-connections); closing new connections until some close"
                );
            }
            return;
        };
        if let Some((closed, lasted)) = at_cap.recover() {
            info!(
                listener = config.name,
                rejected = closed,
                lasted_ms = lasted.as_millis() as u64,
                "below the connection cap again"
            );
        }
        open.inc();
        let slot = Slot {
            _permit: permit,
            open: open.clone(),
        };
        let span = info_span!("connection", listener = config.name, %peer);
        let task = connection::serve(stream, config.clone(), builder.clone(), conn_stop.clone());
        connections.spawn(
            async move {
                task.await;
                drop(slot);
            }
            .instrument(span),
        );
    };
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if let Some((failures, lasted)) = failing.recover() {
                        info!(
                            listener = config.name,
                            failures,
                            lasted_ms = lasted.as_millis() as u64,
                            "accepting connections again"
                        );
                    }
                    admit(&mut connections, stream, peer)
                }
                Err(err) => {
                    accept_errors.inc();
                    if failing.fail() {
                        warn!(
                            listener = config.name,
                            error = %err,
                            "cannot accept connections; retrying with backoff (logged again when it recovers)"
                        );
                    }
                    let pause = ACCEPT_BACKOFF.delay(failing.failures());
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(pause) => {}
                    }
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
                    Ok(stream) => admit(&mut connections, stream, peer),
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

fn http_builder(timeouts: &ConnectionTimeouts) -> auto::Builder<SpanExecutor> {
    let mut builder = auto::Builder::new(SpanExecutor);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header_read);
    let interval = (!timeouts.http2_keepalive_interval.is_zero()).then_some(timeouts.http2_keepalive_interval);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(interval)
        .keep_alive_timeout(timeouts.http2_keepalive_timeout);
    builder
}

fn report(listener: &str, joined: Result<(), JoinError>) {
    if let Err(err) = joined
        && err.is_panic()
    {
        error!(listener, "a connection task panicked");
    }
}
