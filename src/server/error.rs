//! What starting or running the server fails with, naming the flag or listener at fault.

use std::net::SocketAddr;

use crate::tls::TlsError;

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
