//! PEM in and out: certificate blocks to DER and back, and a certificate chain plus key
//! into the [`CertifiedKey`] rustls serves.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::TlsError;

/// The first CERTIFICATE block of `pem` (the leaf of a chain), if it reads.
pub fn first_certificate(pem: &[u8]) -> Option<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem).next().and_then(Result::ok)
}

/// Every readable CERTIFICATE block of `pem`, in order, stopping at the first that is not.
pub fn certificates(pem: &[u8]) -> impl Iterator<Item = CertificateDer<'static>> + '_ {
    CertificateDer::pem_slice_iter(pem).map_while(Result::ok)
}

/// A DER certificate as one PEM CERTIFICATE block (64-column base64, as openssl writes).
pub fn encode_certificate(der: &[u8]) -> String {
    let body = base64_simd::STANDARD.encode_to_string(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Parses a PEM certificate chain and private key; `cert_source`/`key_source` name them
/// in errors (a path, a Secret key, or what generated them).
pub fn load_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_source: &str,
    key_source: &str,
) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertPem {
            source_name: cert_source.to_string(),
            message: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            source_name: cert_source.to_string(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
        let found = match e {
            rustls::pki_types::pem::Error::NoItemsFound => "no private key block".to_string(),
            other => format!("malformed PEM: {other}"),
        };
        TlsError::BadKey {
            source_name: key_source.to_string(),
            found,
        }
    })?;
    // Checks the key type is usable and that it matches the leaf's public key.
    CertifiedKey::from_der(chain, key, &super::provider()).map_err(|source| match source {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => TlsError::KeyMismatch {
            cert_source: cert_source.to_string(),
            key_source: key_source.to_string(),
        },
        source => TlsError::Rejected {
            cert_source: cert_source.to_string(),
            key_source: key_source.to_string(),
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_through_the_rustls_reader() {
        let pair = crate::tls::self_signed_localhost().unwrap();
        let der = first_certificate(pair.cert_pem.as_bytes()).unwrap();
        let encoded = encode_certificate(&der);
        assert_eq!(first_certificate(encoded.as_bytes()).unwrap(), der);
        assert_eq!(certificates(format!("{encoded}{encoded}").as_bytes()).count(), 2);
    }
}
