//! Certificates for the webhook: a CA plus a serving certificate for the Service
//! (`certs` command), and a throwaway self-signed pair for `serve --standalone`.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};
use time::{Duration, OffsetDateTime};

/// Longest serving-certificate validity `--days` accepts; the CA gets ten times as long.
pub const MAX_DAYS: u32 = 36_500;

/// Backdating `not_before` tolerates clocks that lag behind the one that issued: every
/// certificate made here has `not_before = issued - CLOCK_SKEW`.
pub const CLOCK_SKEW: Duration = Duration::hours(1);

/// Validity of the standalone self-signed certificate.
const SELF_SIGNED_DAYS: u32 = 365;

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
    #[error("expected --days between 1 and {MAX_DAYS}, found {found}")]
    InvalidDays { found: u32 },
    #[error("cannot generate the {what}: {source}")]
    Generate { what: &'static str, source: rcgen::Error },
    #[error("expected {what} to be {expected}, found {found}")]
    Unusable {
        what: String,
        expected: &'static str,
        found: String,
    },
}

/// PEM output of [`generate`]: what `certs` writes to `ca.crt`, `tls.crt` and `tls.key`.
#[derive(Debug, Clone)]
pub struct ServiceCerts {
    /// The self-signed CA, for the webhook configuration's `caBundle`.
    pub ca_cert_pem: String,
    /// The serving certificate chain (the leaf; the CA is the trust anchor, not sent).
    pub cert_pem: String,
    /// The serving certificate's private key (PKCS#8).
    pub key_pem: String,
}

/// A self-signed certificate and its key, kept in memory.
#[derive(Debug, Clone)]
pub struct SelfSigned {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: Vec<u8>,
}

/// The DNS names the API server may use for Service `service` in `namespace`.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// Generates a CA (valid `10 × days`) and a serving certificate it signs (valid `days`)
/// for the Service's DNS names plus `extra_sans` (IP literals become IP SANs).
pub fn generate(service: &str, namespace: &str, extra_sans: &[String], days: u32) -> Result<ServiceCerts, CertError> {
    check_label("--service", service)?;
    check_label("--namespace", namespace)?;
    if days == 0 || days > MAX_DAYS {
        return Err(CertError::InvalidDays { found: days });
    }
    let mut sans = Vec::new();
    for name in service_dns_names(service, namespace) {
        sans.push(dns_san(&name)?);
    }
    for extra in extra_sans {
        let san = parse_san(extra)?;
        if !sans.contains(&san) {
            sans.push(san);
        }
    }

    let now = OffsetDateTime::now_utc();
    let (ca_cert, issuer) = build_ca(service, namespace, days * 10, now)?;
    let serving = sign_serving(
        &issuer,
        service,
        namespace,
        sans,
        now,
        now + Duration::days(i64::from(days)),
    )?;

    Ok(ServiceCerts {
        ca_cert_pem: ca_cert.pem(),
        cert_pem: serving.cert_pem,
        key_pem: serving.key_pem,
    })
}

/// Issues a serving certificate (fresh key) for `sans`, valid from `now` (backdated by
/// the clock skew) until `not_after`.
fn sign_serving(
    issuer: &Issuer<'_, KeyPair>,
    service: &str,
    namespace: &str,
    sans: Vec<SanType>,
    now: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<CertAndKey, CertError> {
    let key = KeyPair::generate().map_err(|source| CertError::Generate {
        what: "serving key",
        source,
    })?;
    let mut params = serving_params(format!("{service}.{namespace}.svc"), sans, now, not_after);
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, issuer).map_err(|source| CertError::Generate {
        what: "serving certificate",
        source,
    })?;
    Ok(CertAndKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Parameters of a TLS serving leaf (not a CA) for `sans`, valid from `now` (backdated
/// by the clock skew) until `not_after`.
fn serving_params(
    common_name: String,
    sans: Vec<SanType>,
    now: OffsetDateTime,
    not_after: OffsetDateTime,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = now - CLOCK_SKEW;
    params.not_after = not_after;
    params
}

/// A CA valid for `ca_days` from `now` (backdated by the clock skew).
fn build_ca(
    service: &str,
    namespace: &str,
    ca_days: u32,
    now: OffsetDateTime,
) -> Result<(rcgen::Certificate, Issuer<'static, KeyPair>), CertError> {
    let key = KeyPair::generate().map_err(|source| CertError::Generate { what: "CA key", source })?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{service}.{namespace} webhook CA"));
    // Path length 0: this CA signs serving certificates only, never another CA.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now - CLOCK_SKEW;
    params.not_after = now + Duration::days(i64::from(ca_days));
    let cert = params.self_signed(&key).map_err(|source| CertError::Generate {
        what: "CA certificate",
        source,
    })?;
    Ok((cert, Issuer::new(params, key)))
}

/// A self-signed serving certificate for `localhost`, `127.0.0.1` and `::1`, for
/// `serve --standalone` when no certificate files are given.
pub fn self_signed_localhost() -> Result<SelfSigned, CertError> {
    let key = KeyPair::generate().map_err(|source| CertError::Generate {
        what: "self-signed key",
        source,
    })?;
    let sans = vec![
        dns_san("localhost")?,
        SanType::IpAddress(IpAddr::from([127, 0, 0, 1])),
        SanType::IpAddress(IpAddr::from([0, 0, 0, 0, 0, 0, 0, 1])),
    ];
    let now = OffsetDateTime::now_utc();
    // Not a CA: clients that trust it directly as an anchor reject CA certs used as leaves.
    let params = serving_params(
        "envoy-injector standalone".to_string(),
        sans,
        now,
        now + Duration::days(i64::from(SELF_SIGNED_DAYS)),
    );
    let cert = params.self_signed(&key).map_err(|source| CertError::Generate {
        what: "self-signed certificate",
        source,
    })?;
    Ok(SelfSigned {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().to_vec(),
    })
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

/// A PEM certificate and its PEM private key. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct CertAndKey {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for CertAndKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAndKey")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

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

/// Generates a webhook CA for `service.namespace`, valid `ca_days` from `now`.
pub fn generate_ca(service: &str, namespace: &str, ca_days: u32, now: OffsetDateTime) -> Result<CertAndKey, CertError> {
    check_label("--service", service)?;
    check_label("--namespace", namespace)?;
    if ca_days == 0 || ca_days > MAX_DAYS * 10 {
        return Err(CertError::InvalidDays { found: ca_days });
    }
    let (cert, issuer) = build_ca(service, namespace, ca_days, now)?;
    Ok(CertAndKey {
        cert_pem: cert.pem(),
        key_pem: issuer.key().serialize_pem(),
    })
}

/// Issues a serving certificate (with a fresh key) for the Service's DNS names, signed by
/// an existing CA (`ca_cert_pem` + `ca_key_pem`, as kept in a Secret), valid from `now`
/// until `not_after`.
pub fn sign_serving_cert(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    service: &str,
    namespace: &str,
    now: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<CertAndKey, CertError> {
    check_label("--service", service)?;
    check_label("--namespace", namespace)?;
    if not_after <= now {
        return Err(CertError::Unusable {
            what: "the serving certificate's notAfter".to_string(),
            expected: "later than now",
            found: format!("{not_after} (now is {now})"),
        });
    }
    let key = KeyPair::from_pem(ca_key_pem).map_err(|e| CertError::Unusable {
        what: "the CA key".to_string(),
        expected: "a PEM PKCS#8 private key",
        found: format!("an unreadable key ({e})"),
    })?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, key).map_err(|e| CertError::Unusable {
        what: "the CA certificate".to_string(),
        expected: "a PEM X.509 CA certificate",
        found: format!("an unreadable certificate ({e})"),
    })?;
    let mut sans = Vec::new();
    for name in service_dns_names(service, namespace) {
        sans.push(dns_san(&name)?);
    }
    sign_serving(&issuer, service, namespace, sans, now, not_after)
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

/// Checks that `value` (the value of `flag`) is a DNS label, as Service and namespace
/// names are.
pub fn check_dns_label(flag: &'static str, value: &str) -> Result<(), CertError> {
    check_label(flag, value)
}

fn check_label(flag: &'static str, value: &str) -> Result<(), CertError> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(CertError::InvalidName {
            flag,
            found: value.to_string(),
        })
    }
}

fn parse_san(value: &str) -> Result<SanType, CertError> {
    match value.parse::<IpAddr>() {
        Ok(ip) => Ok(SanType::IpAddress(ip)),
        Err(_) => dns_san(value),
    }
}

fn dns_san(name: &str) -> Result<SanType, CertError> {
    let invalid = || CertError::InvalidSan {
        found: name.to_string(),
    };
    let body = name.strip_prefix("*.").unwrap_or(name);
    let labels_ok = !body.is_empty()
        && name.len() <= 253
        && body.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !labels_ok {
        return Err(invalid());
    }
    name.try_into().map(SanType::DnsName).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::RootCertStore;
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

    use super::*;

    fn verify(ca_pem: &str, cert_pem: &str, name: &str, at: OffsetDateTime) -> Result<(), rustls::Error> {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
        let leaf = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        let name = ServerName::try_from(name.to_string()).unwrap();
        let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(at.unix_timestamp() as u64));
        verifier.verify_server_cert(&leaf, &[], &name, &[], at).map(|_| ())
    }

    #[test]
    fn serving_cert_is_valid_for_every_service_name_and_extra_san() {
        let extra = vec![
            "webhook.example.com".to_string(),
            "10.0.0.7".to_string(),
            "::1".to_string(),
        ];
        let certs = generate("injector", "mesh", &extra, 30).unwrap();
        let now = OffsetDateTime::now_utc();
        for name in [
            "injector",
            "injector.mesh",
            "injector.mesh.svc",
            "injector.mesh.svc.cluster.local",
            "webhook.example.com",
            "10.0.0.7",
            "::1",
        ] {
            verify(&certs.ca_cert_pem, &certs.cert_pem, name, now)
                .unwrap_or_else(|e| panic!("certificate should be valid for {name}: {e}"));
        }
        assert!(verify(&certs.ca_cert_pem, &certs.cert_pem, "other.mesh.svc", now).is_err());
        assert!(verify(&certs.ca_cert_pem, &certs.cert_pem, "10.0.0.8", now).is_err());
    }

    #[test]
    fn serving_cert_expires_after_days() {
        let certs = generate("injector", "mesh", &[], 30).unwrap();
        let now = OffsetDateTime::now_utc();
        let host = "injector.mesh.svc";
        verify(&certs.ca_cert_pem, &certs.cert_pem, host, now + Duration::days(29)).unwrap();
        assert!(verify(&certs.ca_cert_pem, &certs.cert_pem, host, now + Duration::days(31)).is_err());
    }

    fn validity_days(pem: &str) -> i64 {
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let validity = cert.validity();
        (validity.not_after.timestamp() - validity.not_before.timestamp() - CLOCK_SKEW.whole_seconds()) / 86_400
    }

    #[test]
    fn ca_lasts_ten_times_the_serving_days_and_may_sign() {
        let certs = generate("injector", "mesh", &[], 30).unwrap();
        assert_eq!(validity_days(&certs.cert_pem), 30);
        assert_eq!(validity_days(&certs.ca_cert_pem), 300);
        let der = CertificateDer::from_pem_slice(certs.ca_cert_pem.as_bytes()).unwrap();
        let (_, ca) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert!(ca.is_ca());
        let usage = ca.key_usage().unwrap().expect("CA has a key usage extension").value;
        assert!(usage.key_cert_sign());
    }

    #[test]
    fn key_matches_certificate() {
        let certs = generate("injector", "mesh", &[], 1).unwrap();
        let cert = CertificateDer::from_pem_slice(certs.cert_pem.as_bytes()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(certs.key_pem.as_bytes()).unwrap();
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(vec![cert], key, &provider).unwrap();
    }

    #[test]
    fn bad_inputs_say_what_was_expected() {
        let err = generate("Injector", "mesh", &[], 1).unwrap_err().to_string();
        assert!(err.contains("--service") && err.contains("\"Injector\""), "{err}");
        let err = generate("injector", "mesh_ns", &[], 1).unwrap_err().to_string();
        assert!(err.contains("--namespace") && err.contains("mesh_ns"), "{err}");
        let err = generate("injector", "mesh", &["bad host".into()], 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--san") && err.contains("bad host"), "{err}");
        let err = generate("injector", "mesh", &[], 0).unwrap_err().to_string();
        assert!(err.contains("--days") && err.contains("found 0"), "{err}");
        let err = generate("injector", "mesh", &[], MAX_DAYS + 1).unwrap_err().to_string();
        assert!(err.contains("--days"), "{err}");
    }

    #[test]
    fn self_signed_localhost_is_trusted_as_its_own_anchor() {
        let pair = self_signed_localhost().unwrap();
        let now = OffsetDateTime::now_utc();
        for name in ["localhost", "127.0.0.1", "::1"] {
            verify(&pair.cert_pem, &pair.cert_pem, name, now)
                .unwrap_or_else(|e| panic!("self-signed cert should be valid for {name}: {e}"));
        }
    }

    #[test]
    fn fingerprint_is_colon_separated_sha256() {
        let fp = sha256_fingerprint(b"abc");
        assert_eq!(fp.len(), 32 * 3 - 1);
        assert!(fp.starts_with("BA:78:16:BF"), "{fp}");
    }
}
