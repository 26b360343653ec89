//! The two ways certificate work fails: making or reading a certificate ([`CertError`]),
//! and turning PEM into something rustls can serve ([`TlsError`]).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(
        "expected {flag} to be a DNS label (lowercase letters, digits and '-', at most 63 \
         characters, starting and ending with a letter or digit), found {found:?}"
    )]
    InvalidName { flag: &'static str, found: String },
    #[error(
        "expected --san to be an IP address or a DNS name (letters, digits, '-' and '.', \
         optionally starting with '*.'), found {found:?}"
    )]
    InvalidSan { found: String },
    /// `what` is the flag the days came from, or what they were derived from.
    #[error("expected {what} between {min} and {max}, found {found}")]
    InvalidDays {
        what: &'static str,
        min: u32,
        max: u32,
        found: u32,
    },
    #[error("cannot generate the {what}: {source}")]
    Generate { what: &'static str, source: rcgen::Error },
    #[error("expected {what} to be {expected}, found {found}")]
    Unusable {
        what: String,
        expected: &'static str,
        found: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("expected {source_name} to hold PEM CERTIFICATE blocks, found malformed PEM: {message}")]
    BadCertPem { source_name: String, message: String },
    #[error("expected {source_name} to hold at least one PEM CERTIFICATE block, found none")]
    NoCertificate { source_name: String },
    #[error("expected {source_name} to hold a PEM private key (PKCS#8, PKCS#1 or SEC1), found {found}")]
    BadKey { source_name: String, found: String },
    #[error(
        "expected the private key in {key_source} to belong to the certificate in {cert_source}, \
         found a key for a different certificate"
    )]
    KeyMismatch { cert_source: String, key_source: String },
    #[error("cannot serve certificate {cert_source} with key {key_source}: {source}")]
    Rejected {
        cert_source: String,
        key_source: String,
        source: rustls::Error,
    },
    #[error("cannot build the TLS configuration: {0}")]
    Config(rustls::Error),
}
