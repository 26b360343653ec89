//! One connection from accept to close: the TLS handshake, HTTP/1.1 or HTTP/2 serving,
//! a deadline on every phase, the shutdown policy, and a lingering close (HTTP/1.1) or a
//! lingering stream (HTTP/2) after answering a request whose body was left unread.
//!
//! Phases and what bounds them (each a `serve` flag):
//! - accept → TLS handshake done: `--tls-handshake-timeout`;
//! - handshake (or accept, plain HTTP) → first request's headers read: `--first-request-timeout`;
//! - a request's headers once it started (HTTP/1.1): `--header-read-timeout`;
//! - last response → next request: `--idle-timeout` (HTTP/1.1 keep-alive and HTTP/2);
//! - a silent HTTP/2 peer: keep-alive PINGs every `--http2-keepalive-interval`, closed when
//!   one is not answered within `--http2-keepalive-timeout`.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Version, header};
use http_body_util::BodyExt;
use hyper::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::ServiceExt;
use tracing::{Instrument, debug};

use axum::Router;
use tokio_rustls::TlsAcceptor;

use super::settings::ConnectionTimeouts;
use crate::metrics::Metrics;
use crate::metrics::TimeoutLabels;
use crate::shutdown::CancellationToken;

/// On shutdown, an HTTP/1.1 connection with no request in flight is closed once it has
/// been quiet (no byte either way) this long. A keep-alive client may have its next
/// request already on the wire; closing under it would lose that request, so the server
/// waits this long to see it, answers it with `Connection: close`, then closes. A client
/// that sends later races the close, as it would with any HTTP/1.1 server.
pub(crate) const SHUTDOWN_QUIET: Duration = Duration::from_millis(250);

/// How long a connection closed after an unread request body keeps reading (and
/// dropping) what the client still sends, so the client reads the answer instead of a
/// reset: closing a socket with unread data makes the kernel send RST, and an RST makes
/// the client's kernel drop the answer it has not read yet.
const LINGER_TIME: Duration = Duration::from_secs(5);
/// ...and at most this much.
const LINGER_BYTES: u64 = 64 * 1024 * 1024;

/// What a handler can ask of its connection, found in the request's extensions.
#[derive(Clone)]
pub(crate) struct ConnectionHandle(Arc<Activity>);

impl ConnectionHandle {
    /// The request body is left (partly) unread: when this HTTP/1.1 connection closes,
    /// read and drop what the client still sends for a while instead of resetting it.
    pub(crate) fn linger_on_close(&self) {
        self.0.linger.store(true, Ordering::Relaxed);
    }
}

/// Shared between the I/O wrapper, the service wrapper and the connection task.
#[derive(Default)]
struct Activity {
    /// Bytes read plus bytes written: unchanged over a period means the peer was quiet.
    bytes: AtomicU64,
    linger: AtomicBool,
}

/// Where the requests of a connection stand, for its deadlines.
#[derive(Clone, Copy)]
struct ConnState {
    in_flight: u32,
    requests: u64,
    /// When `in_flight` last dropped to 0 (the connection's start before any request).
    idle_since: Instant,
    http2: bool,
}

/// Serves one accepted TCP connection until it ends, a deadline passes or shutdown ends it.
pub(crate) async fn serve(
    stream: TcpStream,
    config: Arc<Listener>,
    builder: Arc<auto::Builder<SpanExecutor>>,
    stop: CancellationToken,
) {
    // Admission answers are small and latency-bound.
    let _ = stream.set_nodelay(true);
    let Some(acceptor) = &config.tls else {
        return serve_http(stream, false, &config, &builder, stop).await;
    };
    match tokio::time::timeout(config.timeouts.tls_handshake, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let http2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            serve_http(tls, http2, &config, &builder, stop).await
        }
        // A TCP probe or port scan: connects and leaves without a ClientHello.
        Ok(Err(err)) if err.kind() == io::ErrorKind::UnexpectedEof => {
            debug!(error = %err, "connection closed before the TLS handshake completed")
        }
        Ok(Err(err)) => debug!(error = %err, "TLS handshake failed"),
        Err(_) => {
            config.timed_out("tls_handshake");
            debug!(
                timeout_ms = config.timeouts.tls_handshake.as_millis() as u64,
                "TLS handshake not completed within --tls-handshake-timeout; closing"
            )
        }
    }
}

/// How one listener serves its connections.
pub(crate) struct Listener {
    /// `webhook` or `admin`, for logs and metric labels.
    pub name: &'static str,
    pub router: Router,
    pub tls: Option<TlsAcceptor>,
    pub timeouts: ConnectionTimeouts,
    /// Connections open at once; more are accepted and closed at once.
    pub max_connections: usize,
    /// How long in-flight connections may take to finish once `stop` is set.
    pub drain_timeout: Duration,
    pub metrics: Metrics,
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

impl Listener {
    fn timed_out(&self, phase: &'static str) {
        self.metrics
            .connection_timeouts
            .get_or_create(&TimeoutLabels {
                listener: self.name,
                phase,
            })
            .inc();
    }
}

async fn serve_http<I>(
    io: I,
    alpn_h2: bool,
    config: &Listener,
    builder: &auto::Builder<SpanExecutor>,
    stop: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let started = Instant::now();
    let activity = Arc::new(Activity::default());
    let kept = Arc::new(Mutex::new(None));
    let (state_tx, mut state_rx) = watch::channel(ConnState {
        in_flight: 0,
        requests: 0,
        idle_since: started,
        http2: alpn_h2,
    });
    let service = {
        let router = config.router.clone();
        let handle = ConnectionHandle(activity.clone());
        let state_tx = Arc::new(state_tx);
        let stop = stop.clone();
        hyper::service::service_fn(move |mut request: Request<Incoming>| {
            let version = request.version();
            let in_flight = InFlight::start(state_tx.clone(), version);
            if version < Version::HTTP_2 {
                request.extensions_mut().insert(handle.clone());
            }
            let (router, stop) = (router.clone(), stop.clone());
            async move {
                let mut response = router.oneshot(request).await?;
                // Shutting down: an HTTP/1.1 client learns that this connection closes after
                // this answer, so it does not send another request into the close.
                if stop.is_cancelled() && version < Version::HTTP_2 {
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                drop(in_flight);
                Ok::<_, std::convert::Infallible>(response)
            }
        })
    };
    let io = Tracked {
        io: Some(io),
        activity: activity.clone(),
        kept: kept.clone(),
    };
    // Boxed (not pinned on the stack) so it can be dropped, handing its I/O over for a
    // lingering close, before this function ends.
    let mut conn = Box::pin(builder.serve_connection(TokioIo::new(io), service));

    let mut stopping = false;
    let mut goaway_sent = false;
    // While stopping: the byte count at the last quiet check.
    let mut quiet_mark: Option<u64> = None;
    // Set once the connection is being closed: drop it at this instant at the latest.
    let mut closing: Option<Instant> = None;
    loop {
        let state = *state_rx.borrow_and_update();
        let deadline = if let Some(at) = closing {
            Some(at)
        } else if stopping {
            if state.http2 && !goaway_sent {
                // GOAWAY: the client sends no new stream here and retries elsewhere any
                // stream it sent that the server will not process.
                conn.as_mut().graceful_shutdown();
                goaway_sent = true;
            }
            Some(Instant::now() + SHUTDOWN_QUIET)
        } else if state.in_flight > 0 {
            None
        } else if state.requests == 0 {
            Some(started + config.timeouts.first_request)
        } else {
            Some(state.idle_since + config.timeouts.idle)
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(err) = result {
                    debug!(error = %err, "connection ended with an error");
                }
                break;
            }
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                quiet_mark = Some(activity.bytes.load(Ordering::Relaxed));
            }
            changed = state_rx.changed() => {
                if changed.is_err() {
                    // Cannot happen while the service (which owns the sender) lives; be safe.
                    break;
                }
                quiet_mark = Some(activity.bytes.load(Ordering::Relaxed));
            }
            () = sleep_until(deadline) => {
                if closing.is_some() {
                    break;
                }
                let state = *state_rx.borrow();
                if stopping {
                    let bytes = activity.bytes.load(Ordering::Relaxed);
                    if state.in_flight == 0 && quiet_mark == Some(bytes) {
                        // HTTP/1.1: closes at once when idle. HTTP/2: GOAWAY was sent and
                        // nothing is in flight.
                        conn.as_mut().graceful_shutdown();
                        closing = Some(Instant::now() + SHUTDOWN_QUIET);
                    }
                    quiet_mark = Some(bytes);
                } else if state.in_flight == 0 {
                    let phase = if state.requests == 0 { "first_request" } else { "idle" };
                    config.timed_out(phase);
                    debug!(phase, "closing a connection that sent no request in time");
                    if phase == "first_request" {
                        // It never sent a whole request: nothing to be polite to.
                        break;
                    }
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Instant::now() + SHUTDOWN_QUIET);
                }
            }
        }
    }
    drop(conn);
    let io = kept.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(io) = io {
        linger(io).await;
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Counts one request in flight on its connection from the call to the answer (or the
/// client giving up on it).
struct InFlight(Arc<watch::Sender<ConnState>>);

impl InFlight {
    fn start(state: Arc<watch::Sender<ConnState>>, version: Version) -> InFlight {
        state.send_modify(|s| {
            s.in_flight += 1;
            s.requests += 1;
            s.http2 |= version == Version::HTTP_2;
        });
        InFlight(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|s| {
            s.in_flight = s.in_flight.saturating_sub(1);
            if s.in_flight == 0 {
                s.idle_since = Instant::now();
            }
        });
    }
}

/// Reads and drops what the client still sends, for a bounded time and amount, after the
/// answer went out and the write side was shut.
async fn linger<I: AsyncRead + AsyncWrite + Unpin>(mut io: I) {
    let drained = tokio::time::timeout(LINGER_TIME, async {
        // HTTP/1.1 has shut the write side already; this only makes sure of it.
        let _ = io.shutdown().await;
        let mut buffer = vec![0u8; 16 * 1024];
        let mut total = 0u64;
        loop {
            match io.read(&mut buffer).await {
                Ok(0) | Err(_) => return total,
                Ok(n) => {
                    total += n as u64;
                    if total >= LINGER_BYTES {
                        return total;
                    }
                }
            }
        }
    })
    .await;
    match drained {
        Ok(bytes) => debug!(bytes, "lingering close done"),
        Err(_) => debug!("lingering close timed out"),
    }
}

/// HTTP/2: keeps reading (and dropping) the rest of a request body answered early, as
/// [`linger`] does for an HTTP/1.1 connection, for at most [`LINGER_TIME`] and
/// [`LINGER_BYTES`]. A client still sending then ends its stream and reads the answer as
/// usual; some clients (curl 7.88 with nghttp2) drop an answer whose stream is reset, even
/// with NO_ERROR. Past the bound the body is dropped, and since the answer is sent by then,
/// h2 resets the stream with NO_ERROR ("stop sending, the answer is complete").
pub(crate) fn linger_on_stream(mut body: Body) {
    let drain = async move {
        let drained = tokio::time::timeout(LINGER_TIME, async {
            let mut total = 0u64;
            // `None`: the client ended the stream; an error: it reset it, or the connection is gone.
            while let Some(Ok(frame)) = body.frame().await {
                total += frame.data_ref().map_or(0, |data| data.len() as u64);
                if total >= LINGER_BYTES {
                    return (total, false);
                }
            }
            (total, true)
        })
        .await;
        match drained {
            Ok((bytes, true)) => debug!(bytes, "lingering stream done: the client ended or reset it"),
            Ok((bytes, false)) => debug!(bytes, "lingering stream read its limit; resetting it"),
            Err(_) => debug!("lingering stream timed out; resetting it"),
        }
    };
    tokio::spawn(drain.in_current_span());
}

/// The connection's I/O, counting bytes for the quiet check, and handing itself over
/// for a lingering close instead of closing when a handler asked for one.
struct Tracked<I> {
    /// `None` only once dropped.
    io: Option<I>,
    activity: Arc<Activity>,
    kept: Arc<Mutex<Option<I>>>,
}

impl<I> Tracked<I> {
    fn io(&mut self) -> io::Result<&mut I> {
        self.io
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "connection already handed over"))
    }

    fn count(&self, n: usize) {
        self.activity.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl<I> Drop for Tracked<I> {
    fn drop(&mut self) {
        if self.activity.linger.load(Ordering::Relaxed)
            && let Some(io) = self.io.take()
        {
            *self.kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(io);
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Tracked<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(self.io()?).poll_read(cx, buf))?;
        let read = buf.filled().len() - before;
        self.count(read);
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Tracked<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(self.io()?).poll_write(cx, buf))?;
        self.count(written);
        Poll::Ready(Ok(written))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(self.io()?).poll_write_vectored(cx, bufs))?;
        self.count(written);
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(|io| io.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()?).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()?).poll_shutdown(cx)
    }
}
