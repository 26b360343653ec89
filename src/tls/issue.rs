//! Issuing certificates with rcgen: the webhook CA, serving leaves it signs, and the
//! standalone self-signed leaf.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};
use time::{Duration, OffsetDateTime};

use super::names::{check_dns_label, dns_san, parse_san, service_dns_names};
use super::{CertError, CertPair};

/// Longest serving-certificate validity `--days` accepts; the CA gets ten times as long.
pub const MAX_DAYS: u32 = 36_500;

/// A CA made here lives this many times as long as the serving certificates it is made
/// for, so it signs many renewals before it has to be rotated.
pub const CA_VALIDITY_FACTOR: u32 = 10;

/// Backdating `not_before` tolerates clocks that lag behind the one that issued: every
/// certificate made here has `not_before = issued - CLOCK_SKEW`.
pub const CLOCK_SKEW: Duration = Duration::hours(1);

/// Validity of the standalone self-signed certificate.
const SELF_SIGNED_DAYS: u32 = 365;

/// What [`generate_ca`]'s days are: only `serve`'s self-managed path asks for a CA
/// alone, deriving its validity from this flag.
const CA_DAYS: &str = "the CA validity in days (ten times --cert-validity-days)";

/// Output of [`generate`]: the CA (`ca.crt`, and the key that signed the leaf) and the
/// serving pair (`tls.crt`, `tls.key`).
#[derive(Debug, Clone)]
pub struct ServiceCerts {
    /// The self-signed CA; its certificate is the webhook configuration's `caBundle`.
    pub ca: CertPair,
    /// The serving certificate (the leaf; the CA is the trust anchor, not sent) and its
    /// PKCS#8 key.
    pub serving: CertPair,
}

/// Checks that `found` days (from `what`, a flag) lie within `min..=max`.
pub fn check_days(what: &'static str, found: u32, min: u32, max: u32) -> Result<(), CertError> {
    if (min..=max).contains(&found) {
        Ok(())
    } else {
        Err(CertError::InvalidDays { what, min, max, found })
    }
}

/// Generates a CA (valid [`CA_VALIDITY_FACTOR`] × `days`) and a serving certificate it
/// signs (valid `days`) for the Service's DNS names plus `extra_sans` (IP literals become
/// IP SANs).
pub fn generate(service: &str, namespace: &str, extra_sans: &[String], days: u32) -> Result<ServiceCerts, CertError> {
    check_dns_label("--service", service)?;
    check_dns_label("--namespace", namespace)?;
    check_days("--days", days, 1, MAX_DAYS)?;
    let mut sans = service_sans(service, namespace)?;
    for extra in extra_sans {
        let san = parse_san(extra)?;
        if !sans.contains(&san) {
            sans.push(san);
        }
    }

    let now = OffsetDateTime::now_utc();
    let (ca, issuer) = build_ca(service, namespace, days * CA_VALIDITY_FACTOR, now)?;
    let serving = sign_serving(
        &issuer,
        service,
        namespace,
        sans,
        now,
        now + Duration::days(i64::from(days)),
    )?;
    Ok(ServiceCerts { ca, serving })
}

/// Generates a webhook CA for `service.namespace`, valid `ca_days` from `now`.
pub fn generate_ca(service: &str, namespace: &str, ca_days: u32, now: OffsetDateTime) -> Result<CertPair, CertError> {
    check_dns_label("--service", service)?;
    check_dns_label("--namespace", namespace)?;
    check_days(CA_DAYS, ca_days, 1, MAX_DAYS * CA_VALIDITY_FACTOR)?;
    Ok(build_ca(service, namespace, ca_days, now)?.0)
}

/// Issues a serving certificate (with a fresh key) for the Service's DNS names, signed by
/// an existing CA (as kept in a Secret), valid from `now` until `not_after`.
pub fn sign_serving_cert(
    ca: &CertPair,
    service: &str,
    namespace: &str,
    now: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<CertPair, CertError> {
    check_dns_label("--service", service)?;
    check_dns_label("--namespace", namespace)?;
    if not_after <= now {
        return Err(CertError::Unusable {
            what: "the serving certificate's notAfter".to_string(),
            expected: "later than now",
            found: format!("{not_after} (now is {now})"),
        });
    }
    let key = KeyPair::from_pem(&ca.key_pem).map_err(|e| CertError::Unusable {
        what: "the CA key".to_string(),
        expected: "a PEM PKCS#8 private key",
        found: format!("an unreadable key ({e})"),
    })?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, key).map_err(|e| CertError::Unusable {
        what: "the CA certificate".to_string(),
        expected: "a PEM X.509 CA certificate",
        found: format!("an unreadable certificate ({e})"),
    })?;
    let sans = service_sans(service, namespace)?;
    sign_serving(&issuer, service, namespace, sans, now, not_after)
}

/// A self-signed serving certificate for `localhost`, `127.0.0.1` and `::1`, for
/// `serve --standalone` when no certificate files are given.
pub fn self_signed_localhost() -> Result<CertPair, CertError> {
    let key = generate_key("self-signed key")?;
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
    Ok(CertPair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn service_sans(service: &str, namespace: &str) -> Result<Vec<SanType>, CertError> {
    service_dns_names(service, namespace)
        .iter()
        .map(|name| dns_san(name))
        .collect()
}

fn generate_key(what: &'static str) -> Result<KeyPair, CertError> {
    KeyPair::generate().map_err(|source| CertError::Generate { what, source })
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
) -> Result<CertPair, CertError> {
    let key = generate_key("serving key")?;
    let mut params = serving_params(format!("{service}.{namespace}.svc"), sans, now, not_after);
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, issuer).map_err(|source| CertError::Generate {
        what: "serving certificate",
        source,
    })?;
    Ok(CertPair {
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

/// A CA valid for `ca_days` from `now` (backdated by the clock skew), and the issuer
/// that signs with it.
fn build_ca(
    service: &str,
    namespace: &str,
    ca_days: u32,
    now: OffsetDateTime,
) -> Result<(CertPair, Issuer<'static, KeyPair>), CertError> {
    let key = generate_key("CA key")?;
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
    let pair = CertPair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    };
    Ok((pair, Issuer::new(params, key)))
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    use super::*;
    use crate::tls::inspect::verifies;

    fn verify(ca_pem: &str, cert_pem: &str, name: &str, at: OffsetDateTime) -> Result<(), String> {
        let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap();
        let leaf = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        verifies(&leaf, &[], &ca, name, at)
    }

    #[test]
    fn serving_cert_is_valid_for_every_service_name_and_extra_san() {
        let extra = vec![
            "webhook.example.com".to_string(),
            "10.0.0.7".to_string(),
            "::1".to_string(),
        ];
        let certs = generate("injector", "mesh", &extra, 30).unwrap();
        let (ca, leaf) = (&certs.ca.cert_pem, &certs.serving.cert_pem);
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
            verify(ca, leaf, name, now).unwrap_or_else(|e| panic!("certificate should be valid for {name}: {e}"));
        }
        assert!(verify(ca, leaf, "other.mesh.svc", now).is_err());
        assert!(verify(ca, leaf, "10.0.0.8", now).is_err());
    }

    #[test]
    fn serving_cert_expires_after_days() {
        let certs = generate("injector", "mesh", &[], 30).unwrap();
        let (ca, leaf) = (&certs.ca.cert_pem, &certs.serving.cert_pem);
        let now = OffsetDateTime::now_utc();
        let host = "injector.mesh.svc";
        verify(ca, leaf, host, now + Duration::days(29)).unwrap();
        assert!(verify(ca, leaf, host, now + Duration::days(31)).is_err());
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
        assert_eq!(validity_days(&certs.serving.cert_pem), 30);
        assert_eq!(validity_days(&certs.ca.cert_pem), 300);
        let der = CertificateDer::from_pem_slice(certs.ca.cert_pem.as_bytes()).unwrap();
        let (_, ca) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert!(ca.is_ca());
        let usage = ca.key_usage().unwrap().expect("CA has a key usage extension").value;
        assert!(usage.key_cert_sign());
    }

    #[test]
    fn key_matches_certificate() {
        let certs = generate("injector", "mesh", &[], 1).unwrap();
        let cert = CertificateDer::from_pem_slice(certs.serving.cert_pem.as_bytes()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(certs.serving.key_pem.as_bytes()).unwrap();
        rustls::sign::CertifiedKey::from_der(vec![cert], key, &crate::tls::provider()).unwrap();
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

    /// `certs` has `--days`, `serve` has `--cert-validity-days`: a CA alone is only made
    /// for `serve`, so its error must not send the user to a flag `serve` does not have.
    #[test]
    fn generate_ca_names_the_serve_flag() {
        let now = OffsetDateTime::now_utc();
        let err = generate_ca("injector", "mesh", 0, now).unwrap_err().to_string();
        assert!(
            err.contains("--cert-validity-days") && !err.contains("--days") && err.contains("found 0"),
            "{err}"
        );
        let max = MAX_DAYS * CA_VALIDITY_FACTOR;
        generate_ca("injector", "mesh", max, now).unwrap();
        let err = generate_ca("injector", "mesh", max + 1, now).unwrap_err().to_string();
        assert!(err.contains(&format!("between 1 and {max}")), "{err}");
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
}
