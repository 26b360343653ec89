//! Clients of the webhook as the API server dials it (the Service name resolved to the test
//! server): reqwest over HTTP/1.1 or HTTP/2, raw TLS, and HTTP/1.1 written and read by hand.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{HOST, PATIENCE, apiserver_headers, apiserver_path};

pub fn mutate_url(addr: SocketAddr) -> String {
    format!("https://{HOST}:{}{}", addr.port(), apiserver_path())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// ALPN offers only `http/1.1`.
    Http1,
    /// ALPN offers `h2` and `http/1.1`; the server should pick `h2`.
    Alpn,
}

impl Protocol {
    pub fn expected_version(self) -> reqwest::Version {
        match self {
            Protocol::Http1 => reqwest::Version::HTTP_11,
            Protocol::Alpn => reqwest::Version::HTTP_2,
        }
    }
}

/// A client that trusts only `ca_pems` and resolves [`HOST`] to `addr`, as the API server
/// dials the Service.
pub fn client(addr: SocketAddr, ca_pems: &[&str], protocol: Protocol) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .tls_info(true)
        .resolve(HOST, addr)
        .timeout(PATIENCE);
    for pem in ca_pems {
        builder = builder.add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap());
    }
    if protocol == Protocol::Http1 {
        builder = builder.http1_only();
    }
    builder.build().expect("build client")
}

pub async fn post_review(client: &reqwest::Client, addr: SocketAddr, body: Vec<u8>) -> reqwest::Response {
    client
        .post(mutate_url(addr))
        .headers(apiserver_headers())
        .body(body)
        .send()
        .await
        .expect("request completes")
}

/// A TLS connection to the webhook at `addr` (SNI [`HOST`]), trusting `ca_pem`, offering
/// `alpn` (e.g. `b"h2"`, `b"http/1.1"`): for tests that write bytes by hand.
pub async fn tls_connect(
    addr: SocketAddr,
    ca_pem: &str,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA PEM"))
        .expect("add CA");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    connector
        .connect(ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .expect("TLS handshake")
}

/// Reads until the peer closes (EOF or an error such as a reset), within [`PATIENCE`]:
/// true when it closed.
pub async fn closed_by_peer<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 4096];
    let until_closed = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(PATIENCE, until_closed).await.is_ok()
}

/// An HTTP/1.1 POST of `body` to the API server's path, as bytes.
pub fn http1_post(body: &[u8], keep_alive: bool) -> Vec<u8> {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let mut request = format!(
        "POST {} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
        apiserver_path(),
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// One HTTP/1.1 response read by hand.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// The header block, lowercased.
    pub headers: String,
    pub body: Vec<u8>,
}

/// Reads one HTTP/1.1 response framed by `Content-Length`; `None` when the connection
/// ends (or fails) before the whole response arrived.
pub async fn read_http1_response<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    pending: &mut Vec<u8>,
) -> Option<RawResponse> {
    use tokio::io::AsyncReadExt;
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&pending[..head_end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while pending.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
    }
    let body = pending[head_end..head_end + length].to_vec();
    pending.drain(..head_end + length);
    Some(RawResponse {
        status,
        headers: head,
        body,
    })
}

/// DER of the first certificate in a PEM string.
pub fn leaf_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("PEM certificate")
        .to_vec()
}
