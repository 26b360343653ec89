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

/// Whether the serving chain `chain_pem` (leaf first) verifies for `name` at `now` against
/// a CA of `bundle_pem` (a webhook's `caBundle`) that is itself valid then: the API server
/// checks the CA's validity too. `Err` says what was expected and what was found.
pub fn verify_with_bundle(bundle_pem: &[u8], chain_pem: &[u8], name: &str, now: OffsetDateTime) -> Result<(), String> {
    let chain: Vec<CertificateDer<'static>> = super::certificates(chain_pem).collect();
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Err(String::from(
            "expected a PEM serving certificate, found no readable CERTIFICATE block",
        ));
    };
    let cas: Vec<CertificateDer<'static>> = super::certificates(bundle_pem).collect();
    if cas.is_empty() {
        return Err(String::from(
            "expected caBundle to hold PEM CA certificates, found none",
        ));
    }
    // The leaf's own validity first, in words (the verifier's says it in UNIX seconds).
    valid_at(leaf, now, "the serving certificate")?;
    let mut errors = Vec::new();
    for ca in &cas {
        match verifies(leaf, intermediates, ca, name, now) {
            // The API server checks the CA's validity too; the verifier does not.
            Ok(()) => return valid_at(ca, now, "the caBundle CA that signs the serving certificate"),
            Err(err) => errors.push(if err.contains("UnknownIssuer") || err.contains("BadSignature") {
                String::from("it is signed by another CA")
            } else if err.contains("not valid for name") {
                format!("it does not name `{name}`")
            } else {
                err
            }),
        }
    }
    errors.sort();
    errors.dedup();
    Err(format!(
        "expected the serving certificate to verify for `{name}` against caBundle ({} CA(s)), found {}",
        cas.len(),
        errors.join("; ")
    ))
}

/// Whether the DER certificate `der` (named `what` in the error) is valid at `now`.
fn valid_at(der: &[u8], now: OffsetDateTime, what: &str) -> Result<(), String> {
    let info = inspect_cert(der).map_err(|e| e.to_string())?;
    if info.not_after <= now {
        return Err(format!(
            "expected {what} to be valid, found it expired at {}",
            rfc3339(info.not_after)
        ));
    }
    if info.not_before > now {
        return Err(format!(
            "expected {what} to be valid, found it valid only from {}",
            rfc3339(info.not_before)
        ));
    }
    Ok(())
}

/// A time as RFC 3339 in UTC, to the second (`2026-05-01T12:00:00Z`).
pub fn rfc3339(at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
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
    fn a_bundle_verifies_only_its_own_valid_leaves() {
        let now = OffsetDateTime::now_utc();
        let certs = crate::tls::generate("svc", "ns", &[], 30).unwrap();
        let other = crate::tls::generate("svc", "ns", &[], 30).unwrap();
        let (bundle, chain) = (certs.ca.cert_pem.as_bytes(), certs.serving.cert_pem.as_bytes());
        assert_eq!(verify_with_bundle(bundle, chain, "svc.ns.svc", now), Ok(()));
        let two = format!("{}{}", other.ca.cert_pem, certs.ca.cert_pem);
        assert_eq!(verify_with_bundle(two.as_bytes(), chain, "svc.ns.svc", now), Ok(()));
        let err = verify_with_bundle(other.ca.cert_pem.as_bytes(), chain, "svc.ns.svc", now).unwrap_err();
        assert!(
            err.ends_with("against caBundle (1 CA(s)), found it is signed by another CA"),
            "{err}"
        );
        let err = verify_with_bundle(bundle, chain, "other.ns.svc", now).unwrap_err();
        assert!(err.ends_with("found it does not name `other.ns.svc`"), "{err}");
        let leaf = crate::tls::sign_serving_cert(
            &certs.ca,
            "svc",
            "ns",
            now - time::Duration::days(3),
            now - time::Duration::days(1),
        )
        .unwrap();
        let err = verify_with_bundle(bundle, leaf.cert_pem.as_bytes(), "svc.ns.svc", now).unwrap_err();
        assert!(
            err.starts_with("expected the serving certificate to be valid, found it expired at"),
            "{err}"
        );
        let err = verify_with_bundle(b"", chain, "svc.ns.svc", now).unwrap_err();
        assert!(err.contains("found none"), "{err}");
        let past = now - time::Duration::days(40);
        let ca = crate::tls::generate_ca("svc", "ns", 2, past).unwrap();
        let leaf = crate::tls::sign_serving_cert(&ca, "svc", "ns", past, now + time::Duration::days(5)).unwrap();
        let err = verify_with_bundle(ca.cert_pem.as_bytes(), leaf.cert_pem.as_bytes(), "svc.ns.svc", now).unwrap_err();
        assert!(err.contains("expired at"), "{err}");
        assert_eq!(rfc3339(OffsetDateTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn fingerprint_is_colon_separated_sha256() {
        let fp = sha256_fingerprint(b"abc");
        assert_eq!(fp.len(), 32 * 3 - 1);
        assert!(fp.starts_with("BA:78:16:BF"), "{fp}");
    }
}
