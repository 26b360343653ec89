//! Reading certificates: validity, CA flag, SANs and public key; whether a leaf chains to
//! a CA; fingerprints for logs.

use std::time::Duration as StdDuration;

use rcgen::KeyPair;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use time::OffsetDateTime;

use super::CertError;

/// What the certificate bootstrap needs to know about one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    /// Basic constraints say CA.
    pub is_ca: bool,
    /// DNS names among the subject alternative names.
    pub dns_names: Vec<String>,
    /// The subject public key (the contents of the SubjectPublicKeyInfo bit string), to
    /// match the certificate with a private key.
    pub public_key: Vec<u8>,
}

/// Reads the validity, CA flag, DNS names and public key of a DER certificate.
pub fn inspect_cert(der: &[u8]) -> Result<CertInfo, CertError> {
    let unreadable = |message: String| CertError::Unusable {
        what: "the certificate".to_string(),
        expected: "a DER X.509 certificate",
        found: message,
    };
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| unreadable(format!("unparseable data ({e})")))?;
    let validity = cert.validity();
    let dns_names = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                x509_parser::extensions::GeneralName::DNSName(dns) => Some(dns.to_string()),
                _ => None,
            })
            .collect(),
        Ok(None) => Vec::new(),
        Err(e) => return Err(unreadable(format!("a malformed subjectAltName extension ({e})"))),
    };
    Ok(CertInfo {
        not_before: validity.not_before.to_datetime(),
        not_after: validity.not_after.to_datetime(),
        is_ca: cert.is_ca(),
        dns_names,
        public_key: cert.public_key().subject_public_key.data.to_vec(),
    })
}

/// The public key of a PEM (PKCS#8) private key, to compare with [`CertInfo::public_key`].
pub fn public_key_of(key_pem: &str) -> Result<Vec<u8>, CertError> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| CertError::Unusable {
        what: "the private key".to_string(),
        expected: "a PEM PKCS#8 private key",
        found: format!("an unreadable key ({e})"),
    })?;
    Ok(rcgen::PublicKeyData::der_bytes(&key).to_vec())
}

/// Whether `leaf` (with `intermediates`) verifies as a server certificate for `name` at
/// `now` with `ca` (DER) as the only trust anchor; `Err` says why not.
pub fn verifies(
    leaf: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    ca: &[u8],
    name: &str,
    now: OffsetDateTime,
) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.to_vec()))
        .map_err(|e| format!("the CA is not a usable trust anchor ({e})"))?;
    let verifier = WebPkiServerVerifier::builder_with_provider(std::sync::Arc::new(roots), super::provider())
        .build()
        .map_err(|e| e.to_string())?;
    let server_name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    let seconds = u64::try_from(now.unix_timestamp()).unwrap_or(0);
    let at = UnixTime::since_unix_epoch(StdDuration::from_secs(seconds));
    verifier
        .verify_server_cert(leaf, intermediates, &server_name, &[], at)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// SHA-256 of a DER certificate as colon-separated upper-case hex, as `openssl x509
/// -fingerprint -sha256` prints it.
pub fn sha256_fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    digest
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// SHA-256 fingerprint of the served leaf certificate, for logs.
pub fn fingerprint(key: &CertifiedKey) -> String {
    key.cert
        .first()
        .map(|leaf| sha256_fingerprint(leaf))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_colon_separated_sha256() {
        let fp = sha256_fingerprint(b"abc");
        assert_eq!(fp.len(), 32 * 3 - 1);
        assert!(fp.starts_with("BA:78:16:BF"), "{fp}");
    }
}
