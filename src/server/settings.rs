//! The listeners' addresses, limits and deadlines (the `serve` flags of the same names),
//! and the check that the server could work with them.

use std::net::SocketAddr;
use std::time::Duration;

use super::error::ServerError;

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
