//! What the Secret holds: [`TlsMaterial`] and its keys, and the CA bundle read from it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use time::OffsetDateTime;

use crate::tls::{self, CertInfo, CertPair};

/// Secret key of the serving certificate (PEM).
pub const TLS_CRT: &str = "tls.crt";
/// Secret key of the serving certificate's private key (PEM, PKCS#8).
pub const TLS_KEY: &str = "tls.key";
/// Secret key of the trust bundle (PEM CA certificates), what `caBundle` must equal.
pub const CA_CRT: &str = "ca.crt";
/// Secret key of the signing CA's private key (PEM, PKCS#8).
pub const CA_KEY: &str = "ca.key";
/// Secret key of the incoming CA's private key, present only during a CA rotation.
pub const NEXT_CA_KEY: &str = "ca-next.key";
/// The type of a Secret this module creates.
pub const SECRET_TYPE: &str = "kubernetes.io/tls";

/// The contents of the Secret this module manages. `Debug` shows no key material.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsMaterial {
    pub tls_crt: Vec<u8>,
    pub tls_key: Vec<u8>,
    pub ca_crt: Vec<u8>,
    pub ca_key: Option<Vec<u8>>,
    pub next_ca_key: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |key: &Option<Vec<u8>>| key.as_ref().map(|_| "<redacted>");
        f.debug_struct("TlsMaterial")
            .field("tls_crt", &String::from_utf8_lossy(&self.tls_crt))
            .field("tls_key", &"<redacted>")
            .field("ca_crt", &String::from_utf8_lossy(&self.ca_crt))
            .field("ca_key", &redacted(&self.ca_key))
            .field("next_ca_key", &redacted(&self.next_ca_key))
            .finish()
    }
}

impl TlsMaterial {
    /// A serving pair and the single CA that issued it (no CA rotation under way).
    pub fn issued_by(ca: &CertPair, serving: &CertPair) -> TlsMaterial {
        TlsMaterial {
            tls_crt: serving.cert_pem.clone().into_bytes(),
            tls_key: serving.key_pem.clone().into_bytes(),
            ca_crt: ca.cert_pem.clone().into_bytes(),
            ca_key: Some(ca.key_pem.clone().into_bytes()),
            next_ca_key: None,
        }
    }

    /// Reads the keys of [`TLS_CRT`] and friends; absent keys read as empty / `None`.
    pub fn from_secret(secret: &Secret) -> TlsMaterial {
        let data = secret.data.as_ref();
        let get = |key: &str| data.and_then(|d| d.get(key)).map(|v| v.0.clone());
        TlsMaterial {
            tls_crt: get(TLS_CRT).unwrap_or_default(),
            tls_key: get(TLS_KEY).unwrap_or_default(),
            ca_crt: get(CA_CRT).unwrap_or_default(),
            ca_key: get(CA_KEY),
            next_ca_key: get(NEXT_CA_KEY),
        }
    }

    /// Writes these keys into `data`, leaving any other key as it was.
    pub fn apply_to(&self, data: &mut BTreeMap<String, ByteString>) {
        let mut set = |key: &str, value: Option<&Vec<u8>>| match value {
            Some(value) => {
                data.insert(key.to_string(), ByteString(value.clone()));
            }
            None => {
                data.remove(key);
            }
        };
        set(TLS_CRT, Some(&self.tls_crt));
        set(TLS_KEY, Some(&self.tls_key));
        set(CA_CRT, Some(&self.ca_crt));
        set(CA_KEY, self.ca_key.as_ref());
        set(NEXT_CA_KEY, self.next_ca_key.as_ref());
    }
}

/// One CA certificate of the bundle.
pub(super) struct Ca {
    pub pem: String,
    pub der: Vec<u8>,
    pub info: CertInfo,
}

/// The public key of a CA private key (PEM), to find its certificate in the bundle.
pub(super) fn key_public(bytes: Option<&Vec<u8>>) -> Option<Vec<u8>> {
    tls::public_key_of(std::str::from_utf8(bytes?).ok()?).ok()
}

/// The CA certificates in a PEM bundle, in order; anything that is not a readable CA
/// certificate is skipped.
pub(super) fn parse_bundle(pem: &[u8]) -> Vec<Ca> {
    let mut out: Vec<Ca> = Vec::new();
    for der in tls::certificates(pem) {
        let Ok(info) = tls::inspect_cert(&der) else { continue };
        if info.is_ca && !out.iter().any(|ca| ca.der == der.as_ref()) {
            out.push(Ca {
                pem: tls::encode_certificate(&der),
                der: der.to_vec(),
                info,
            });
        }
    }
    out
}

/// The bundle CAs at `keep` (in bundle order, unexpired, without duplicates).
pub(super) fn compose_bundle(bundle: &[Ca], keep: &[usize], now: OffsetDateTime) -> Vec<u8> {
    let mut out = String::new();
    for (index, ca) in bundle.iter().enumerate() {
        if keep.contains(&index) && ca.info.not_after > now {
            out.push_str(&ca.pem);
        }
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and its serving pair, as a fresh Secret holds them.
    fn created() -> TlsMaterial {
        let certs = tls::generate("injector", "mesh", &[], 365).unwrap();
        TlsMaterial::issued_by(&certs.ca, &certs.serving)
    }

    #[test]
    fn debug_output_hides_private_keys() {
        let m = created();
        let shown = format!("{m:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("BEGIN CERTIFICATE"));
    }

    #[test]
    fn secret_round_trip_keeps_other_keys() {
        let m = created();
        let mut data = BTreeMap::from([
            ("other".to_string(), ByteString(b"kept".to_vec())),
            (NEXT_CA_KEY.to_string(), ByteString(b"stale".to_vec())),
        ]);
        m.apply_to(&mut data);
        assert_eq!(data["other"].0, b"kept");
        assert!(!data.contains_key(NEXT_CA_KEY));
        let secret = Secret {
            data: Some(data),
            ..Secret::default()
        };
        assert_eq!(TlsMaterial::from_secret(&secret), m);
    }
}
