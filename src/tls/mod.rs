//! All certificate work, cut by what it does:
//!
//! | module | does |
//! |---|---|
//! | `pem` | PEM in and out, a chain plus key into what rustls serves |
//! | `issue` | the webhook CA, serving leaves it signs, the standalone self-signed leaf |
//! | `inspect` | validity, SANs, public key, chain verification, fingerprints |
//! | `names` | the Service's DNS names, flag checks on names, SAN coverage |
//! | `pair` | [`CertPair`], the one certificate-and-key type |
//! | `reload` | the store rustls serves from, the one reloader, the certificate-file poller |
//! | `source` | [`TlsSource`] and the rustls [`ServerTls`] the webhook listener consumes |
//! | `webhooks` | [`WebhookConfig`]: mutating and validating configurations seen alike (their `caBundle`s) |
//! | [`secret`] | cluster mode's self-managed certificate in a Secret, and its `caBundle` |
//!
//! Every use of rustls here goes through [`provider`], so the process has one crypto
//! provider whichever part asks first.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

mod error;
mod inspect;
mod issue;
mod names;
mod pair;
mod pem;
mod reload;
pub mod secret;
mod source;
mod webhooks;

pub use error::{CertError, TlsError};
pub use inspect::{CertInfo, inspect_cert, public_key_of, rfc3339, sha256_fingerprint, verify_with_bundle};
pub use issue::{CLOCK_SKEW, MAX_DAYS, ServiceCerts, generate, generate_ca, self_signed_localhost, sign_serving_cert};
pub use names::{check_dns_label, service_dns_names};
pub use pair::CertPair;
pub use pem::load_pem;
pub use reload::CertStore;
pub use source::{ServerTls, TlsSource};
pub use webhooks::WebhookConfig;

// Shared between the parts of this module, not used outside it.
pub(crate) use inspect::{fingerprint, verifies};
pub(crate) use issue::{CA_VALIDITY_FACTOR, check_days};
pub(crate) use names::missing_names;
pub(crate) use pem::{certificates, encode_certificate, first_certificate};
pub(crate) use reload::{Offer, Reloader};

/// The process's crypto provider: ring, installed as the process default on first use
/// so that rustls configurations built elsewhere without naming a provider (the kube
/// client's) get the same one. If something installed another default first, that one
/// is used here too.
pub fn provider() -> Arc<CryptoProvider> {
    if let Some(installed) = CryptoProvider::get_default() {
        return installed.clone();
    }
    // Losing a race with another installer is fine: whichever won is the default now.
    let _ = rustls::crypto::ring::default_provider().install_default();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}
