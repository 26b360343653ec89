//! The one certificate-and-key type: what issuing returns and what a source serves.

use super::inspect::sha256_fingerprint;
use super::pem::first_certificate;

/// A PEM certificate (chain, leaf first) and its PEM private key. `Debug` never shows
/// the key.
#[derive(Clone, PartialEq, Eq)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl CertPair {
    /// SHA-256 fingerprint of the leaf, for logs; empty when there is no readable leaf.
    pub fn fingerprint(&self) -> String {
        first_certificate(self.cert_pem.as_bytes())
            .map(|der| sha256_fingerprint(&der))
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for CertPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertPair")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_key() {
        let pair = CertPair {
            cert_pem: "cert".into(),
            key_pem: "-----BEGIN PRIVATE KEY-----".into(),
        };
        let shown = format!("{pair:?}");
        assert!(!shown.contains("PRIVATE KEY") && shown.contains("cert"), "{shown}");
    }
}
