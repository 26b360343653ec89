//! Self-managed webhook TLS for cluster mode (`serve` without `--tls-cert/--tls-key`).
//!
//! The CA and serving certificate live in one Secret (`--tls-secret`, type
//! `kubernetes.io/tls`, in `--namespace`) that every replica reads:
//!
//! | key | holds |
//! |---|---|
//! | `tls.crt` / `tls.key` | the serving certificate (SANs `S`, `S.N`, `S.N.svc`, `S.N.svc.cluster.local`) and its key |
//! | `ca.crt` | the trust bundle: the CA(s) the API server must trust, exactly what goes in `caBundle` |
//! | `ca.key` | the key of the CA that signs serving certificates, so any replica can renew |
//! | `ca-next.key` | only during a CA rotation: the key of the CA about to take over |
//!
//! **Start.** GET the Secret. If it is missing, or its serving certificate is unusable
//! (unreadable, key mismatch, expired, SANs not covering the Service, not chaining to
//! `ca.crt`) or due for renewal, a new one is issued (with the existing CA when its key is
//! there and it has life left, else a new CA) and written: POST when absent (a 409
//! AlreadyExists means another replica won: re-GET and use its Secret), PUT carrying the
//! read `resourceVersion` otherwise (a 409 Conflict means someone wrote in between: re-GET
//! and decide again). Then every webhook of `--webhook-config` gets `caBundle = ca.crt`
//! (PATCHed only when different; a missing configuration is logged and retried).
//!
//! **Run.** Every replica polls the Secret ([`BootstrapConfig::poll_interval`]); when
//! `tls.crt`/`tls.key` change it validates them and swaps them into the [`CertStore`] (a bad
//! pair keeps the current certificate and counts `tls_reloads{result="error"}`). When the
//! Secret needs work (missing, unusable, renewal due, `caBundle` not yet in sync) or a full
//! check is due ([`BootstrapConfig::check_interval`], and at the computed renewal time), it
//! does what start does. A deleted Secret is recreated from the last good contents, so the
//! CA (and `caBundle`) stay the same.
//!
//! **Renewal** keeps the CA: clients trusting the current `caBundle` verify the new
//! certificate. **CA rotation** (only when the CA has less than
//! `validity + 2 × renew-before` days left, 425 of its 3650 by default, or when there is no
//! usable CA key) happens in two phases so that there is no moment when a served
//! certificate is not trusted:
//!
//! 1. *introduce*: a new CA is generated and appended to `ca.crt` (its key in
//!    `ca-next.key`); the serving certificate does not change. `caBundle` then holds both
//!    CAs, so certificates from either verify.
//! 2. *switch*, at least [`BootstrapConfig::ca_overlap`] later and only once `caBundle`
//!    is confirmed to hold the new CA (or no webhook configuration is managed): a serving
//!    certificate signed by the new CA is issued and `ca.key` becomes the new key. The old
//!    CA stays in `ca.crt` until the next renewal, for replicas that have not reloaded yet.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use serde_json::json;
use time::{Duration, OffsetDateTime};
use tokio::task::JoinHandle;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::cli::ServeArgs;
use crate::metrics::Metrics;
use crate::tls::{
    self, CLOCK_SKEW, CertError, CertInfo, CertPair, TlsError, fingerprint, load_pem, missing_names, verifies,
};
use crate::tls::{CertStore, Offer, Reloader, TlsSource};

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

/// How often a replica re-reads the Secret to pick up certificates written by another.
pub const DEFAULT_POLL_INTERVAL: StdDuration = StdDuration::from_secs(10);
/// How often the Secret and the webhook configuration's `caBundle` are fully checked
/// (besides the computed renewal time), repairing drift such as a reset `caBundle`.
pub const DEFAULT_CHECK_INTERVAL: StdDuration = StdDuration::from_secs(10 * 60);
/// How long a new CA is published in `ca.crt`/`caBundle` before it signs anything.
pub const DEFAULT_CA_OVERLAP: StdDuration = StdDuration::from_secs(24 * 60 * 60);

const FIELD_MANAGER: &str = "envoy-injector";
/// Writes that lose an optimistic-concurrency race before giving up (until the next check).
const MAX_WRITE_ATTEMPTS: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(
        "expected --cert-renew-before-days between 1 and --cert-validity-days - 1 ({max}), found {found}",
        max = validity.saturating_sub(1)
    )]
    RenewBeforeDays { found: u32, validity: u32 },
    #[error("expected --tls-secret to name a Secret, found an empty string")]
    EmptySecretName,
    #[error("expected poll and check intervals of at least 1ms, found {name} = {found:?}")]
    Interval { name: &'static str, found: StdDuration },
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("cannot {action} Secret {secret}: {source}")]
    Api {
        action: &'static str,
        /// `namespace/name`.
        secret: String,
        source: Box<kube::Error>,
    },
    #[error(
        "expected to settle Secret {secret} within {attempts} writes, found it changed by someone else \
         before each of them (409 Conflict)"
    )]
    Contended { secret: String, attempts: usize },
    #[error("expected Secret {secret} to hold a servable certificate, found: {source}")]
    Load { secret: String, source: Box<TlsError> },
}

/// What the bootstrap manages and how often it looks.
#[derive(Debug, Clone)]
pub struct BootstrapConfig {
    /// Namespace of the Secret and of the Service.
    pub namespace: String,
    /// `--tls-secret`.
    pub secret_name: String,
    /// `--webhook-config`; `None` (the flag set to "") manages no `caBundle`.
    pub webhook_config: Option<String>,
    /// `--service`.
    pub service: String,
    /// `--cert-validity-days` (the CA gets ten times as long).
    pub validity_days: u32,
    /// `--cert-renew-before-days`.
    pub renew_before_days: u32,
    /// Secret re-read period (reload of certificates written by another replica).
    pub poll_interval: StdDuration,
    /// Full check period (Secret and `caBundle`), besides the computed renewal time.
    pub check_interval: StdDuration,
    /// Minimum time a new CA sits in `caBundle` before it signs the serving certificate.
    pub ca_overlap: StdDuration,
}

impl BootstrapConfig {
    pub fn from_args(args: &ServeArgs) -> BootstrapConfig {
        BootstrapConfig {
            namespace: args.namespace.clone(),
            secret_name: args.self_tls.tls_secret.clone(),
            webhook_config: (!args.self_tls.webhook_config.is_empty()).then(|| args.self_tls.webhook_config.clone()),
            service: args.self_tls.service.clone(),
            validity_days: args.self_tls.cert_validity_days,
            renew_before_days: args.self_tls.cert_renew_before_days,
            poll_interval: DEFAULT_POLL_INTERVAL,
            check_interval: DEFAULT_CHECK_INTERVAL,
            ca_overlap: DEFAULT_CA_OVERLAP,
        }
    }

    /// Checks the flags; the error names the flag, what it accepts and what it got.
    pub fn validate(&self) -> Result<(), BootstrapError> {
        tls::check_dns_label("--service", &self.service)?;
        tls::check_dns_label("--namespace", &self.namespace)?;
        if self.secret_name.is_empty() {
            return Err(BootstrapError::EmptySecretName);
        }
        // At least 2: a renewal needs at least one day before expiry and one after issue.
        tls::check_days("--cert-validity-days", self.validity_days, 2, tls::MAX_DAYS)?;
        if self.renew_before_days == 0 || self.renew_before_days >= self.validity_days {
            return Err(BootstrapError::RenewBeforeDays {
                found: self.renew_before_days,
                validity: self.validity_days,
            });
        }
        for (name, found) in [
            ("poll_interval", self.poll_interval),
            ("check_interval", self.check_interval),
        ] {
            if found < StdDuration::from_millis(1) {
                return Err(BootstrapError::Interval { name, found });
            }
        }
        Ok(())
    }

    /// The certificate policy these settings describe.
    pub fn policy(&self) -> Policy {
        Policy {
            service: self.service.clone(),
            namespace: self.namespace.clone(),
            validity_days: self.validity_days,
            renew_before_days: self.renew_before_days,
            ca_overlap: Duration::try_from(self.ca_overlap).unwrap_or(Duration::MAX),
        }
    }
}

// ------------------------------------------------------------------ pure decisions

/// The certificate policy: whom the certificate is for, how long it lives, when to renew.
#[derive(Debug, Clone)]
pub struct Policy {
    pub service: String,
    pub namespace: String,
    pub validity_days: u32,
    pub renew_before_days: u32,
    /// Minimum time a new CA is published before it signs.
    pub ca_overlap: Duration,
}

impl Policy {
    /// The DNS names the serving certificate must cover.
    pub fn names(&self) -> Vec<String> {
        tls::service_dns_names(&self.service, &self.namespace)
    }

    pub fn validity(&self) -> Duration {
        Duration::days(i64::from(self.validity_days))
    }

    pub fn renew_before(&self) -> Duration {
        Duration::days(i64::from(self.renew_before_days))
    }

    /// Validity of a CA made here, in days.
    pub fn ca_validity_days(&self) -> u32 {
        self.validity_days.saturating_mul(tls::CA_VALIDITY_FACTOR)
    }

    /// When a serving certificate expiring at `not_after` is renewed.
    pub fn renew_at(&self, not_after: OffsetDateTime) -> OffsetDateTime {
        not_after.saturating_sub(self.renew_before())
    }

    /// When a CA expiring at `not_after` starts being replaced: once it can no longer sign
    /// a full-length certificate that is itself renewed on time, with a renewal period
    /// to spare for the two-phase rotation.
    pub fn ca_rotate_at(&self, not_after: OffsetDateTime) -> OffsetDateTime {
        not_after
            .saturating_sub(self.validity())
            .saturating_sub(self.renew_before())
            .saturating_sub(self.renew_before())
    }

    /// When an incoming CA issued with `not_before` may start signing.
    pub fn ca_switch_at(&self, not_before: OffsetDateTime) -> OffsetDateTime {
        not_before.saturating_add(CLOCK_SKEW).saturating_add(self.ca_overlap)
    }
}

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

/// Why the Secret is (re)written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteReason {
    /// There was no Secret (and nothing remembered): new CA and certificate.
    Create,
    /// The Secret disappeared: written again from the last good contents.
    Recreate,
    /// The serving certificate cannot be used as is (the text says why); replaced now.
    Replace(String),
    /// The serving certificate is due for renewal (same CA).
    Renew { not_after: OffsetDateTime },
    /// The serving certificate was not signed by the signing CA; reissued by it.
    Reissue,
    /// CA rotation phase 1: a new CA joins `ca.crt`, the serving certificate stays.
    IntroduceCa { why: String },
    /// CA rotation phase 2: the published new CA signs a new serving certificate.
    SwitchCa,
}

impl std::fmt::Display for WriteReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteReason::Create => f.write_str("no Secret yet: generated a CA and a serving certificate"),
            WriteReason::Recreate => f.write_str("the Secret was deleted: recreated it with the same certificates"),
            WriteReason::Replace(why) => write!(f, "the serving certificate is unusable ({why}): issued a new one"),
            WriteReason::Renew { not_after } => write!(
                f,
                "the serving certificate expires at {not_after}, within the renewal period: renewed it with the same CA"
            ),
            WriteReason::Reissue => {
                f.write_str("the serving certificate was not signed by the current CA: reissued it with the current CA")
            }
            WriteReason::IntroduceCa { why } => write!(
                f,
                "CA rotation, phase 1 ({why}): published a new CA next to the current one; it signs once \
                 caBundle carries it"
            ),
            WriteReason::SwitchCa => {
                f.write_str("CA rotation, phase 2: the new CA is published; issued a serving certificate signed by it")
            }
        }
    }
}

/// What to do with the Secret.
#[derive(Debug)]
pub enum Decision {
    /// It is fine until `next_due`, when it must be looked at again.
    Keep { next_due: OffsetDateTime },
    /// Write `material`.
    Write { material: TlsMaterial, reason: WriteReason },
}

/// One CA certificate of the bundle.
struct Ca {
    pem: String,
    der: Vec<u8>,
    info: CertInfo,
}

/// A CA private key and its public key.
struct CaKey {
    pem: String,
    public: Vec<u8>,
}

fn parse_key(bytes: Option<&Vec<u8>>) -> Option<CaKey> {
    let pem = std::str::from_utf8(bytes?).ok()?.to_string();
    let public = tls::public_key_of(&pem).ok()?;
    Some(CaKey { pem, public })
}

/// The CA certificates in a PEM bundle, in order; anything that is not a readable CA
/// certificate is skipped.
fn parse_bundle(pem: &[u8]) -> Vec<Ca> {
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

/// A usable serving certificate: when it expires and which bundle CA it chains to.
struct Leaf {
    not_after: OffsetDateTime,
    issuer: usize,
}

/// Checks the serving certificate; `Err` says why it cannot be served.
fn check_leaf(material: &TlsMaterial, bundle: &[Ca], policy: &Policy, now: OffsetDateTime) -> Result<Leaf, String> {
    if material.tls_crt.is_empty() {
        return Err(format!("no {TLS_CRT}"));
    }
    // Loading checks the PEM and that the key matches; what it loaded is the chain.
    let served = load_pem(&material.tls_crt, &material.tls_key, TLS_CRT, TLS_KEY).map_err(|e| e.to_string())?;
    let Some((leaf, intermediates)) = served.cert.split_first() else {
        return Err(format!("no certificate in {TLS_CRT}"));
    };
    let info = tls::inspect_cert(leaf).map_err(|e| e.to_string())?;
    let names = policy.names();
    let missing = missing_names(&info.dns_names, &names);
    if !missing.is_empty() {
        return Err(format!("its DNS names {:?} do not cover {:?}", info.dns_names, missing));
    }
    if now >= info.not_after {
        return Err(format!("it expired at {}", info.not_after));
    }
    if bundle.is_empty() {
        return Err(format!("{CA_CRT} holds no readable CA certificate"));
    }
    // Any name would do: coverage is checked above; this checks chain, time and usage.
    let name = &names[2];
    let mut last_error = String::new();
    for (index, ca) in bundle.iter().enumerate() {
        match verifies(leaf, intermediates, &ca.der, name, now) {
            Ok(()) => {
                return Ok(Leaf {
                    not_after: info.not_after,
                    issuer: index,
                });
            }
            Err(e) => last_error = e,
        }
    }
    Err(format!(
        "it does not verify against any CA in {CA_CRT} (last error: {last_error})"
    ))
}

/// The bundle CAs at `keep` (in bundle order, unexpired, without duplicates), then `add`.
fn compose_bundle(bundle: &[Ca], keep: &[usize], add: Option<&str>, now: OffsetDateTime) -> Vec<u8> {
    let mut out = String::new();
    for (index, ca) in bundle.iter().enumerate() {
        if keep.contains(&index) && ca.info.not_after > now {
            out.push_str(&ca.pem);
        }
    }
    if let Some(add) = add {
        out.push_str(add);
    }
    out.into_bytes()
}

fn issue(
    policy: &Policy,
    ca_pem: &str,
    ca_not_after: OffsetDateTime,
    ca_key: &str,
    now: OffsetDateTime,
) -> Result<CertPair, CertError> {
    let not_after = (now + policy.validity()).min(ca_not_after);
    let ca = CertPair {
        cert_pem: ca_pem.to_string(),
        key_pem: ca_key.to_string(),
    };
    tls::sign_serving_cert(&ca, &policy.service, &policy.namespace, now, not_after)
}

fn new_ca(policy: &Policy, now: OffsetDateTime) -> Result<(CertPair, OffsetDateTime), CertError> {
    let ca = tls::generate_ca(&policy.service, &policy.namespace, policy.ca_validity_days(), now)?;
    let not_after = now + Duration::days(i64::from(policy.ca_validity_days()));
    Ok((ca, not_after))
}

/// Decides what the Secret holding `current` needs at `now` (pure but for fresh keys).
/// `None` means there is no Secret.
pub fn decide(current: Option<&TlsMaterial>, policy: &Policy, now: OffsetDateTime) -> Result<Decision, CertError> {
    let Some(material) = current else {
        let (ca, ca_not_after) = new_ca(policy, now)?;
        let serving = issue(policy, &ca.cert_pem, ca_not_after, &ca.key_pem, now)?;
        return Ok(Decision::Write {
            material: TlsMaterial::issued_by(&ca, &serving),
            reason: WriteReason::Create,
        });
    };
    let bundle = parse_bundle(&material.ca_crt);
    let find = |key: &Option<CaKey>| {
        key.as_ref()
            .and_then(|key| bundle.iter().position(|ca| ca.info.public_key == key.public))
    };
    let active_key = parse_key(material.ca_key.as_ref());
    let active = find(&active_key).filter(|&i| bundle[i].info.not_after > now);
    let next_key = parse_key(material.next_ca_key.as_ref());
    let next = find(&next_key).filter(|&i| Some(i) != active && bundle[i].info.not_after > now);
    let active_fresh = active.filter(|&i| now < policy.ca_rotate_at(bundle[i].info.not_after));

    let leaf = match check_leaf(material, &bundle, policy, now) {
        Ok(leaf) => leaf,
        Err(why) => {
            // Nothing servable to protect: issue now, from the best CA at hand.
            let (signer_pem, signer_not_after, signer_key, add, ca_key, next_ca_key) = match (active_fresh, next) {
                (Some(a), _) => (
                    bundle[a].pem.clone(),
                    bundle[a].info.not_after,
                    active_key.as_ref().map(|k| k.pem.clone()).unwrap_or_default(),
                    None,
                    material.ca_key.clone(),
                    next.and(material.next_ca_key.clone()),
                ),
                (None, Some(n)) => (
                    bundle[n].pem.clone(),
                    bundle[n].info.not_after,
                    next_key.as_ref().map(|k| k.pem.clone()).unwrap_or_default(),
                    None,
                    material.next_ca_key.clone(),
                    None,
                ),
                (None, None) => {
                    let (ca, not_after) = new_ca(policy, now)?;
                    let key = ca.key_pem.clone();
                    (
                        ca.cert_pem.clone(),
                        not_after,
                        key.clone(),
                        Some(ca.cert_pem),
                        Some(key.into_bytes()),
                        None,
                    )
                }
            };
            let serving = issue(policy, &signer_pem, signer_not_after, &signer_key, now)?;
            let keep: Vec<usize> = (0..bundle.len()).collect();
            return Ok(Decision::Write {
                material: TlsMaterial {
                    tls_crt: serving.cert_pem.into_bytes(),
                    tls_key: serving.key_pem.into_bytes(),
                    ca_crt: compose_bundle(&bundle, &keep, add.as_deref(), now),
                    ca_key,
                    next_ca_key,
                },
                reason: WriteReason::Replace(why),
            });
        }
    };
    let renew_at = policy.renew_at(leaf.not_after);

    // A rotation in progress: switch once the new CA has been published long enough.
    if let (Some(n), Some(key)) = (next, next_key.as_ref()) {
        let switch_at = policy.ca_switch_at(bundle[n].info.not_before);
        if now < switch_at {
            // Renewal waits for the switch (the overlap is far shorter than the renewal
            // period); an expiring certificate is replaced from the new CA right away.
            return Ok(Decision::Keep {
                next_due: switch_at.min(leaf.not_after),
            });
        }
        let serving = issue(policy, &bundle[n].pem, bundle[n].info.not_after, &key.pem, now)?;
        return Ok(Decision::Write {
            material: TlsMaterial {
                tls_crt: serving.cert_pem.into_bytes(),
                tls_key: serving.key_pem.into_bytes(),
                // Same bytes as published in phase 1 (order kept): no caBundle change.
                ca_crt: compose_bundle(&bundle, &[n, leaf.issuer], None, now),
                ca_key: material.next_ca_key.clone(),
                next_ca_key: None,
            },
            reason: WriteReason::SwitchCa,
        });
    }

    match (active_fresh, active_key.as_ref()) {
        (Some(a), Some(key)) => {
            if now < renew_at && leaf.issuer == a {
                return Ok(Decision::Keep {
                    next_due: renew_at.min(policy.ca_rotate_at(bundle[a].info.not_after)),
                });
            }
            let reason = if leaf.issuer == a {
                WriteReason::Renew {
                    not_after: leaf.not_after,
                }
            } else {
                WriteReason::Reissue
            };
            let serving = issue(policy, &bundle[a].pem, bundle[a].info.not_after, &key.pem, now)?;
            Ok(Decision::Write {
                material: TlsMaterial {
                    tls_crt: serving.cert_pem.into_bytes(),
                    tls_key: serving.key_pem.into_bytes(),
                    // The old certificate's CA stays while replicas may still serve it.
                    ca_crt: compose_bundle(&bundle, &[a, leaf.issuer], None, now),
                    ca_key: material.ca_key.clone(),
                    next_ca_key: None,
                },
                reason,
            })
        }
        _ => {
            let why = match active {
                Some(a) => format!("the CA expires at {}", bundle[a].info.not_after),
                None if now < renew_at => {
                    // No key to renew with, but nothing to renew yet either.
                    return Ok(Decision::Keep { next_due: renew_at });
                }
                None => format!("no usable {CA_KEY} for a CA in {CA_CRT} to renew with"),
            };
            let (ca, _) = new_ca(policy, now)?;
            let mut keep = vec![leaf.issuer];
            keep.extend(active);
            Ok(Decision::Write {
                material: TlsMaterial {
                    tls_crt: material.tls_crt.clone(),
                    tls_key: material.tls_key.clone(),
                    ca_crt: compose_bundle(&bundle, &keep, Some(&ca.cert_pem), now),
                    ca_key: material.ca_key.clone(),
                    next_ca_key: Some(ca.key_pem.into_bytes()),
                },
                reason: WriteReason::IntroduceCa { why },
            })
        }
    }
}

// ------------------------------------------------------------------ the API side

/// How a `caBundle` sync went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SyncOutcome {
    /// No webhook configuration is managed (`--webhook-config ""`).
    Unmanaged,
    /// Every webhook's `caBundle` equals the bundle.
    Synced,
    /// The webhook configuration does not exist (yet).
    Absent,
    /// Could not read or patch it; retried later.
    Failed,
}

impl SyncOutcome {
    /// Whether a CA that is in the bundle may start signing: nothing can call the webhook
    /// with an older `caBundle` once it is synced, unmanaged or absent.
    fn allows_switch(self) -> bool {
        self != SyncOutcome::Failed
    }
}

/// The result of one reconcile.
struct Reconciled {
    secret: Secret,
    /// When the Secret needs looking at again (renewal, rotation).
    next_due: OffsetDateTime,
    /// False when something was left for later (`caBundle` not synced, CA switch waiting).
    complete: bool,
}

/// Keeps the Secret, the webhook configuration's `caBundle` and a [`CertStore`] in step.
pub struct TlsBootstrap {
    config: BootstrapConfig,
    policy: Policy,
    secrets: Api<Secret>,
    webhooks: Option<(Api<MutatingWebhookConfiguration>, String)>,
    /// Swaps the Secret's `tls.crt`/`tls.key` into the store when they change.
    reloader: Reloader,
    /// The last usable contents seen or written: a deleted Secret is recreated from them.
    last_good: Option<TlsMaterial>,
    /// The bundle last confirmed in every webhook's `caBundle`.
    synced_bundle: Option<Vec<u8>>,
    /// The last `caBundle` problem logged, to log each distinct one once.
    sync_problem: Option<String>,
    /// When the next full check is due.
    next_full_check: OffsetDateTime,
}

impl TlsBootstrap {
    /// Checks `config`; makes no API call.
    pub fn new(
        client: kube::Client,
        config: BootstrapConfig,
        metrics: Metrics,
    ) -> Result<TlsBootstrap, BootstrapError> {
        config.validate()?;
        let secrets = Api::namespaced(client.clone(), &config.namespace);
        let webhooks = config.webhook_config.clone().map(|name| (Api::all(client), name));
        Ok(TlsBootstrap {
            policy: config.policy(),
            config,
            secrets,
            webhooks,
            reloader: Reloader::new(metrics),
            last_good: None,
            synced_bundle: None,
            sync_problem: None,
            next_full_check: OffsetDateTime::now_utc(),
        })
    }

    fn secret_ref(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.secret_name)
    }

    /// Makes sure the Secret holds a usable certificate (creating or renewing it), syncs
    /// `caBundle`, and returns a store serving the Secret's certificate.
    pub async fn bootstrap(&mut self) -> Result<Arc<CertStore>, BootstrapError> {
        let current = self.get().await?;
        let reconciled = self.reconcile(current, true).await?;
        self.schedule(&reconciled, OffsetDateTime::now_utc());
        let material = TlsMaterial::from_secret(&reconciled.secret);
        let (cert_source, key_source) = self.sources();
        let key = load_pem(&material.tls_crt, &material.tls_key, &cert_source, &key_source).map_err(|source| {
            BootstrapError::Load {
                secret: self.secret_ref(),
                source: Box::new(source),
            }
        })?;
        info!(
            secret = %self.secret_ref(),
            fingerprint = %fingerprint(&key),
            "serving certificate loaded from the Secret (SHA-256)"
        );
        self.reloader.started_with(material.tls_crt, material.tls_key);
        Ok(Arc::new(CertStore::new(key)))
    }

    /// Polls the Secret until `shutdown` completes: reloads `store` when the certificate
    /// changes, renews, rotates and syncs `caBundle` when due.
    pub async fn run(mut self, store: Arc<CertStore>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut failures: u32 = 0;
        let mut retry_at: Option<OffsetDateTime> = None;
        let mut read_error: Option<String> = None;
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(self.config.poll_interval) => {}
            }
            let current = match self.get().await {
                Ok(current) => {
                    read_error = None;
                    current
                }
                Err(err) => {
                    let message = err.to_string();
                    if read_error.as_deref() != Some(message.as_str()) {
                        warn!(error = %message, "cannot read the TLS Secret; keeping the current certificate");
                        read_error = Some(message);
                    }
                    continue;
                }
            };
            if let Some(secret) = &current {
                self.reload(&store, &TlsMaterial::from_secret(secret));
            }
            let now = OffsetDateTime::now_utc();
            if retry_at.is_some_and(|at| now < at) {
                continue;
            }
            let full = now >= self.next_full_check;
            if !full && !self.needs_work(current.as_ref(), now) {
                continue;
            }
            match self.reconcile(current, full).await {
                Ok(reconciled) => {
                    self.reload(&store, &TlsMaterial::from_secret(&reconciled.secret));
                    self.schedule(&reconciled, now);
                    if reconciled.complete {
                        failures = 0;
                        retry_at = None;
                    } else {
                        failures = failures.saturating_add(1);
                        retry_at = Some(now + self.backoff(failures));
                    }
                }
                Err(err) => {
                    failures = failures.saturating_add(1);
                    let delay = self.backoff(failures);
                    warn!(error = %err, retry_in = ?delay, "cannot reconcile the TLS Secret; keeping the current certificate");
                    retry_at = Some(now + delay);
                }
            }
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        let factor = 1u32 << failures.min(16);
        let delay = self
            .config
            .poll_interval
            .saturating_mul(factor)
            .min(self.config.check_interval);
        Duration::try_from(delay).unwrap_or(Duration::MAX)
    }

    fn schedule(&mut self, reconciled: &Reconciled, now: OffsetDateTime) {
        let check = Duration::try_from(self.config.check_interval).unwrap_or(Duration::MAX);
        self.next_full_check = now.saturating_add(check).min(reconciled.next_due);
    }

    /// Whether the polled Secret needs a reconcile before the next full check.
    fn needs_work(&self, current: Option<&Secret>, now: OffsetDateTime) -> bool {
        let Some(secret) = current else { return true };
        let material = TlsMaterial::from_secret(secret);
        if self.webhooks.is_some() && self.synced_bundle.as_deref() != Some(material.ca_crt.as_slice()) {
            return true;
        }
        !matches!(decide(Some(&material), &self.policy, now), Ok(Decision::Keep { .. }))
    }

    fn sources(&self) -> (String, String) {
        let secret = self.secret_ref();
        (
            format!("Secret {secret} key {TLS_CRT}"),
            format!("Secret {secret} key {TLS_KEY}"),
        )
    }

    /// Swaps the Secret's certificate into `store` when it changed; each distinct change
    /// counts once in `tls_reloads`.
    fn reload(&mut self, store: &CertStore, material: &TlsMaterial) {
        let (cert_source, key_source) = self.sources();
        match self
            .reloader
            .offer(store, &material.tls_crt, &material.tls_key, &cert_source, &key_source)
        {
            Offer::Unchanged => {}
            Offer::Served { fingerprint } => info!(
                secret = %self.secret_ref(),
                fingerprint = %fingerprint,
                "serving certificate reloaded from the Secret; new connections use it"
            ),
            Offer::Kept(err) => warn!(
                secret = %self.secret_ref(),
                error = %err,
                "cannot use the changed certificate in the Secret; keeping the current certificate"
            ),
        }
    }

    fn api_error(&self, action: &'static str, source: kube::Error) -> BootstrapError {
        BootstrapError::Api {
            action,
            secret: self.secret_ref(),
            source: Box::new(source),
        }
    }

    async fn get(&self) -> Result<Option<Secret>, BootstrapError> {
        self.secrets
            .get_opt(&self.config.secret_name)
            .await
            .map_err(|source| self.api_error("read", source))
    }

    /// Settles the Secret (writing it when needed, re-reading after lost races) and
    /// syncs `caBundle` (always when `full`, else only when the bundle changed).
    async fn reconcile(&mut self, mut current: Option<Secret>, full: bool) -> Result<Reconciled, BootstrapError> {
        for _ in 0..MAX_WRITE_ATTEMPTS {
            let now = OffsetDateTime::now_utc();
            let material = match &current {
                Some(secret) => Some(TlsMaterial::from_secret(secret)),
                None => self.last_good.clone(),
            };
            let (target, reason) = match decide(material.as_ref(), &self.policy, now)? {
                Decision::Keep { next_due } => match (&current, material) {
                    (Some(secret), Some(material)) => {
                        let outcome = self.sync_if_needed(&material.ca_crt, full).await;
                        self.last_good = Some(material);
                        return Ok(Reconciled {
                            secret: secret.clone(),
                            next_due,
                            complete: outcome != SyncOutcome::Failed && outcome != SyncOutcome::Absent,
                        });
                    }
                    (_, material) => (material.unwrap_or_default(), WriteReason::Recreate),
                },
                Decision::Write { material, reason } => (material, reason),
            };
            if reason == WriteReason::SwitchCa {
                // Publish before use: the new CA is already in ca.crt; make sure caBundle
                // carries it before anything it signed can be served.
                let published = current
                    .as_ref()
                    .map(|s| TlsMaterial::from_secret(s).ca_crt)
                    .unwrap_or_default();
                let outcome = self.sync_ca_bundle(&published).await;
                if !outcome.allows_switch() {
                    info!(
                        secret = %self.secret_ref(),
                        "CA rotation: waiting for caBundle to carry the new CA before switching to it"
                    );
                    if let Some(secret) = current {
                        return Ok(Reconciled {
                            secret,
                            next_due: now,
                            complete: false,
                        });
                    }
                }
            }
            let written = match &current {
                None => self.create(&target).await,
                Some(secret) => self.replace(secret, &target).await,
            };
            match written {
                Ok(secret) => {
                    self.log_write(&reason, &target);
                    let bundle_changed = self.synced_bundle.as_deref() != Some(target.ca_crt.as_slice());
                    let outcome = if bundle_changed || full {
                        self.sync_ca_bundle(&target.ca_crt).await
                    } else {
                        SyncOutcome::Synced
                    };
                    let next_due = match decide(Some(&target), &self.policy, now)? {
                        Decision::Keep { next_due } => next_due,
                        Decision::Write { .. } => now,
                    };
                    self.last_good = Some(target);
                    return Ok(Reconciled {
                        secret,
                        next_due,
                        complete: outcome != SyncOutcome::Failed && outcome != SyncOutcome::Absent,
                    });
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    info!(
                        secret = %self.secret_ref(),
                        reason = %status.reason,
                        "another replica wrote the TLS Secret first; re-reading it"
                    );
                    current = self.get().await?;
                }
                Err(source) => {
                    let action = if current.is_some() { "update" } else { "create" };
                    return Err(self.api_error(action, source));
                }
            }
        }
        Err(BootstrapError::Contended {
            secret: self.secret_ref(),
            attempts: MAX_WRITE_ATTEMPTS,
        })
    }

    fn log_write(&self, reason: &WriteReason, target: &TlsMaterial) {
        let leaf = tls::first_certificate(&target.tls_crt)
            .map(|der| (tls::sha256_fingerprint(&der), tls::inspect_cert(&der).ok()));
        let cas = parse_bundle(&target.ca_crt)
            .iter()
            .map(|ca| tls::sha256_fingerprint(&ca.der))
            .collect::<Vec<_>>();
        info!(
            secret = %self.secret_ref(),
            reason = %reason,
            fingerprint = %leaf.as_ref().map(|l| l.0.as_str()).unwrap_or(""),
            not_after = %leaf.as_ref().and_then(|l| l.1.as_ref()).map(|i| i.not_after.to_string()).unwrap_or_default(),
            ca_bundle = ?cas,
            "TLS Secret written"
        );
    }

    async fn create(&self, target: &TlsMaterial) -> Result<Secret, kube::Error> {
        let mut data = BTreeMap::new();
        target.apply_to(&mut data);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(self.config.secret_name.clone()),
                namespace: Some(self.config.namespace.clone()),
                labels: Some(BTreeMap::from([
                    ("app.kubernetes.io/name".to_string(), "envoy-injector".to_string()),
                    ("app.kubernetes.io/managed-by".to_string(), "envoy-injector".to_string()),
                ])),
                ..ObjectMeta::default()
            },
            type_: Some(SECRET_TYPE.to_string()),
            data: Some(data),
            ..Secret::default()
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        self.secrets.create(&params, &secret).await
    }

    /// PUT of the read Secret with our keys changed: its `resourceVersion` makes the API
    /// server refuse it (409) if anyone wrote since; other keys, labels and type are kept.
    async fn replace(&self, current: &Secret, target: &TlsMaterial) -> Result<Secret, kube::Error> {
        let mut updated = current.clone();
        target.apply_to(updated.data.get_or_insert_with(BTreeMap::new));
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        self.secrets.replace(&self.config.secret_name, &params, &updated).await
    }

    async fn sync_if_needed(&mut self, bundle: &[u8], full: bool) -> SyncOutcome {
        if !full && self.synced_bundle.as_deref() == Some(bundle) {
            return SyncOutcome::Synced;
        }
        self.sync_ca_bundle(bundle).await
    }

    /// Sets `caBundle = bundle` on every webhook of the configuration that differs, in one
    /// strategic-merge PATCH (webhooks merge by name) guarded by the read
    /// `resourceVersion`. Never fails the caller: problems are logged once and retried.
    async fn sync_ca_bundle(&mut self, bundle: &[u8]) -> SyncOutcome {
        let Some((api, name)) = &self.webhooks else {
            self.synced_bundle = Some(bundle.to_vec());
            return SyncOutcome::Unmanaged;
        };
        let (api, name) = (api.clone(), name.clone());
        let config = match api.get_opt(&name).await {
            Ok(Some(config)) => config,
            Ok(None) => {
                self.sync_problem(format!(
                    "MutatingWebhookConfiguration {name} does not exist (yet); its caBundle will be set once it does"
                ));
                return SyncOutcome::Absent;
            }
            Err(err) => {
                self.sync_problem(format!(
                    "cannot read MutatingWebhookConfiguration {name} to sync its caBundle: {err}"
                ));
                return SyncOutcome::Failed;
            }
        };
        let webhooks = config.webhooks.unwrap_or_default();
        let stale: Vec<String> = webhooks
            .iter()
            .filter(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle))
            .map(|w| w.name.clone())
            .collect();
        if webhooks.is_empty() {
            debug!(webhook_config = %name, "the MutatingWebhookConfiguration has no webhooks; no caBundle to sync");
        }
        if !stale.is_empty() {
            let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
            let patch = json!({
                "metadata": { "resourceVersion": config.metadata.resource_version },
                "webhooks": stale
                    .iter()
                    .map(|w| json!({ "name": w, "clientConfig": { "caBundle": encoded } }))
                    .collect::<Vec<_>>(),
            });
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            if let Err(err) = api.patch(&name, &params, &Patch::Strategic(patch)).await {
                self.sync_problem(format!(
                    "cannot patch the caBundle of MutatingWebhookConfiguration {name} (webhooks {stale:?}): {err}"
                ));
                return SyncOutcome::Failed;
            }
            info!(webhook_config = %name, webhooks = ?stale, "caBundle set to the Secret's ca.crt");
        }
        if let Some(problem) = self.sync_problem.take() {
            info!(webhook_config = %name, previous = %problem, "caBundle is in sync again");
        }
        self.synced_bundle = Some(bundle.to_vec());
        SyncOutcome::Synced
    }

    fn sync_problem(&mut self, message: String) {
        if self.sync_problem.as_deref() == Some(message.as_str()) {
            debug!(problem = %message, "caBundle still not in sync; will retry");
        } else {
            warn!(problem = %message, "caBundle not in sync; will retry");
            self.sync_problem = Some(message);
        }
    }
}

/// A running bootstrap: the store the server serves from, kept current by a background
/// task that stops when this is dropped.
pub struct RunningBootstrap {
    store: Arc<CertStore>,
    task: JoinHandle<()>,
}

impl RunningBootstrap {
    pub fn store(&self) -> Arc<CertStore> {
        self.store.clone()
    }

    /// The source for `server::start`.
    pub fn tls_source(&self) -> TlsSource {
        TlsSource::Store(self.store.clone())
    }
}

impl Drop for RunningBootstrap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Bootstraps the certificate (see the module docs) and starts keeping it current.
pub async fn start(
    client: kube::Client,
    config: BootstrapConfig,
    metrics: Metrics,
) -> Result<RunningBootstrap, BootstrapError> {
    let mut bootstrap = TlsBootstrap::new(client, config, metrics)?;
    let store = bootstrap.bootstrap().await?;
    let task = tokio::spawn(
        bootstrap
            .run(store.clone(), std::future::pending())
            .instrument(info_span!("tls_bootstrap")),
    );
    Ok(RunningBootstrap { store, task })
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    use super::*;

    const SERVICE: &str = "injector";
    const NAMESPACE: &str = "mesh";

    fn policy() -> Policy {
        Policy {
            service: SERVICE.into(),
            namespace: NAMESPACE.into(),
            validity_days: 365,
            renew_before_days: 30,
            ca_overlap: Duration::hours(24),
        }
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    fn ca(days: u32, issued: OffsetDateTime) -> CertPair {
        tls::generate_ca(SERVICE, NAMESPACE, days, issued).unwrap()
    }

    fn leaf(ca: &CertPair, issued: OffsetDateTime, days: i64) -> CertPair {
        tls::sign_serving_cert(ca, SERVICE, NAMESPACE, issued, issued + Duration::days(days)).unwrap()
    }

    /// Whether the serving certificate of `m` verifies for every Service name against
    /// `bundle` (PEM, one or more CAs) at `at`.
    fn trusted(m: &TlsMaterial, bundle: &[u8], at: OffsetDateTime) -> bool {
        let leaf = CertificateDer::from_pem_slice(&m.tls_crt).unwrap();
        let cas = parse_bundle(bundle);
        policy()
            .names()
            .iter()
            .all(|name| cas.iter().any(|ca| verifies(&leaf, &[], &ca.der, name, at).is_ok()))
    }

    fn write(decision: Decision) -> (TlsMaterial, WriteReason) {
        match decision {
            Decision::Write { material, reason } => (material, reason),
            Decision::Keep { next_due } => panic!("expected a write, found Keep until {next_due}"),
        }
    }

    fn keep(decision: Decision) -> OffsetDateTime {
        match decision {
            Decision::Keep { next_due } => next_due,
            Decision::Write { reason, .. } => panic!("expected Keep, found a write: {reason}"),
        }
    }

    fn leaf_not_after(m: &TlsMaterial) -> OffsetDateTime {
        let der = CertificateDer::from_pem_slice(&m.tls_crt).unwrap();
        tls::inspect_cert(&der).unwrap().not_after
    }

    #[test]
    fn expiry_math() {
        let p = policy();
        let t = OffsetDateTime::from_unix_timestamp(2_000_000_000).unwrap();
        assert_eq!(p.renew_at(t), t - Duration::days(30));
        // 365 days of validity plus two renewal periods.
        assert_eq!(p.ca_rotate_at(t), t - Duration::days(425));
        assert_eq!(p.ca_switch_at(t), t + CLOCK_SKEW + Duration::hours(24));
        assert_eq!(p.ca_validity_days(), 3650);
        // Saturates instead of panicking on absurd dates (a certificate may say anything).
        let min = time::PrimitiveDateTime::MIN.assume_utc();
        assert_eq!(p.renew_at(min), min);
        assert_eq!(p.ca_rotate_at(min), min);
    }

    #[test]
    fn no_secret_creates_a_ca_and_a_certificate_for_every_service_name() {
        let (m, reason) = write(decide(None, &policy(), now()).unwrap());
        assert_eq!(reason, WriteReason::Create);
        assert!(trusted(&m, &m.ca_crt, now()));
        assert!(m.next_ca_key.is_none());
        let der = CertificateDer::from_pem_slice(&m.tls_crt).unwrap();
        let info = tls::inspect_cert(&der).unwrap();
        assert_eq!(info.dns_names, policy().names());
        assert!(!info.is_ca);
        // 365 days, give or take the clock-skew backdating of notBefore.
        assert_eq!((info.not_after - now()).whole_days(), 364);
        // ca.key is the key of ca.crt.
        let ca = parse_bundle(&m.ca_crt);
        assert_eq!(ca.len(), 1);
        let key = parse_key(m.ca_key.as_ref()).expect("ca.key is a readable key");
        assert_eq!(ca[0].info.public_key, key.public);
    }

    #[test]
    fn a_fresh_secret_is_kept_until_its_renewal_time() {
        let t = now();
        let ca = ca(3650, t);
        let m = TlsMaterial::issued_by(&ca, &leaf(&ca, t, 365));
        let due = keep(decide(Some(&m), &policy(), t).unwrap());
        assert_eq!(due, policy().renew_at(leaf_not_after(&m)));
    }

    #[test]
    fn renewal_keeps_the_ca_and_its_bundle_bytes() {
        let t = now();
        let ca = ca(3650, t - Duration::days(340));
        let m = TlsMaterial::issued_by(&ca, &leaf(&ca, t - Duration::days(340), 365));
        let (renewed, reason) = write(decide(Some(&m), &policy(), t).unwrap());
        assert!(matches!(reason, WriteReason::Renew { .. }), "{reason}");
        assert_eq!(renewed.ca_crt, m.ca_crt, "same CA, same caBundle");
        assert_eq!(renewed.ca_key, m.ca_key);
        assert_ne!(renewed.tls_crt, m.tls_crt);
        assert!(
            trusted(&renewed, &m.ca_crt, t),
            "the new certificate verifies against the old ca.crt"
        );
        assert!(leaf_not_after(&renewed) > leaf_not_after(&m) + Duration::days(300));
        keep(decide(Some(&renewed), &policy(), t).unwrap());
    }

    #[test]
    fn unusable_certificates_are_replaced_at_once_from_the_same_ca() {
        let t = now();
        let ca = ca(3650, t);
        let good = TlsMaterial::issued_by(&ca, &leaf(&ca, t, 365));
        let other_service = tls::sign_serving_cert(&ca, "other", NAMESPACE, t, t + Duration::days(365)).unwrap();
        let expired = leaf(&ca, t - Duration::days(400), 365);
        let foreign_ca = self::ca(3650, t);
        let foreign = leaf(&foreign_ca, t, 365);
        let cases: Vec<(&str, TlsMaterial, &str)> = vec![
            (
                "garbage certificate",
                TlsMaterial {
                    tls_crt: b"garbage".to_vec(),
                    ..good.clone()
                },
                "tls.crt",
            ),
            (
                "wrong key",
                TlsMaterial {
                    tls_key: foreign.key_pem.clone().into_bytes(),
                    ..good.clone()
                },
                "key",
            ),
            (
                "other service",
                TlsMaterial::issued_by(&ca, &other_service),
                "do not cover",
            ),
            ("expired", TlsMaterial::issued_by(&ca, &expired), "expired"),
            (
                "signed by a CA not in ca.crt",
                TlsMaterial {
                    tls_crt: foreign.cert_pem.clone().into_bytes(),
                    tls_key: foreign.key_pem.clone().into_bytes(),
                    ..good.clone()
                },
                "does not verify",
            ),
        ];
        for (case, m, expected) in cases {
            let (fixed, reason) = write(decide(Some(&m), &policy(), t).unwrap());
            match &reason {
                WriteReason::Replace(why) => assert!(why.contains(expected), "{case}: {why}"),
                other => panic!("{case}: expected Replace, found {other}"),
            }
            assert_eq!(fixed.ca_crt, good.ca_crt, "{case}: same CA");
            assert!(trusted(&fixed, &good.ca_crt, t), "{case}");
        }
    }

    #[test]
    fn without_a_ca_key_a_valid_certificate_is_kept_and_renewal_rotates_the_ca() {
        let t = now();
        let ca = ca(3650, t - Duration::days(340));
        let mut m = TlsMaterial::issued_by(&ca, &leaf(&ca, t - Duration::days(340), 365));
        m.ca_key = None;
        let due = keep(decide(Some(&m), &policy(), t - Duration::days(300)).unwrap());
        assert_eq!(due, policy().renew_at(leaf_not_after(&m)));
        let (phase1, reason) = write(decide(Some(&m), &policy(), t).unwrap());
        assert!(matches!(reason, WriteReason::IntroduceCa { .. }), "{reason}");
        assert_eq!(phase1.tls_crt, m.tls_crt);
        assert_eq!(parse_bundle(&phase1.ca_crt).len(), 2);
        assert!(phase1.next_ca_key.is_some());
    }

    /// The whole CA rotation: at no point is a certificate served that the caBundle
    /// published before it (the previous ca.crt) does not trust.
    #[test]
    fn ca_rotation_publishes_the_new_ca_before_it_signs() {
        let p = policy();
        let t0 = now();
        // A CA with 400 days left: less than 365 + 2 × 30, so it must be rotated.
        let old_ca = ca(400, t0);
        let m0 = TlsMaterial::issued_by(&old_ca, &leaf(&old_ca, t0, 200));

        // Phase 1: the new CA joins ca.crt, the serving certificate stays.
        let (m1, reason) = write(decide(Some(&m0), &p, t0).unwrap());
        assert!(matches!(reason, WriteReason::IntroduceCa { .. }), "{reason}");
        assert_eq!(
            (m1.tls_crt.clone(), m1.tls_key.clone()),
            (m0.tls_crt.clone(), m0.tls_key.clone())
        );
        assert_eq!(m1.ca_key, m0.ca_key, "the old CA still signs");
        let bundle1 = parse_bundle(&m1.ca_crt);
        assert_eq!(bundle1.len(), 2);
        assert_eq!(bundle1[0].der, parse_bundle(&m0.ca_crt)[0].der, "old CA kept first");
        assert!(trusted(&m1, &m0.ca_crt, t0) && trusted(&m1, &m1.ca_crt, t0));

        // Until the overlap has passed, nothing changes.
        let switch_at = keep(decide(Some(&m1), &p, t0 + Duration::hours(1)).unwrap());
        assert_eq!(switch_at, p.ca_switch_at(bundle1[1].info.not_before));

        // Phase 2: the new CA signs; ca.crt bytes stay those published in phase 1.
        let t2 = switch_at + Duration::minutes(1);
        let (m2, reason) = write(decide(Some(&m1), &p, t2).unwrap());
        assert_eq!(reason, WriteReason::SwitchCa);
        assert_eq!(m2.ca_crt, m1.ca_crt, "no caBundle change at the switch");
        assert_eq!(m2.ca_key, m1.next_ca_key);
        assert!(m2.next_ca_key.is_none());
        assert!(
            trusted(&m2, &m1.ca_crt, t2),
            "the new certificate verifies against the published bundle"
        );
        let new_ca_only = bundle1[1].pem.clone().into_bytes();
        assert!(trusted(&m2, &new_ca_only, t2));
        assert!(!trusted(&m2, &m0.ca_crt, t2), "signed by the new CA, not the old one");

        // Settled: kept until renewal, which then drops the old CA.
        let renew_at = keep(decide(Some(&m2), &p, t2).unwrap());
        assert_eq!(renew_at, p.renew_at(leaf_not_after(&m2)));
        let (m3, reason) = write(decide(Some(&m2), &p, renew_at + Duration::minutes(1)).unwrap());
        assert!(matches!(reason, WriteReason::Renew { .. }), "{reason}");
        assert_eq!(m3.ca_crt, new_ca_only);
    }

    #[test]
    fn an_expiring_certificate_during_the_overlap_is_replaced_from_the_new_ca() {
        let p = policy();
        let t0 = now();
        let old_ca = ca(400, t0 - Duration::days(10));
        let m0 = TlsMaterial::issued_by(&old_ca, &leaf(&old_ca, t0 - Duration::days(10), 11));
        let (m1, _) = write(decide(Some(&m0), &p, t0).unwrap());
        let (m2, reason) = write(decide(Some(&m1), &p, t0 + Duration::days(2)).unwrap());
        assert!(matches!(reason, WriteReason::Replace(_)), "{reason}");
        assert_eq!(m2.ca_key, m1.next_ca_key);
        assert!(trusted(&m2, &m1.ca_crt, t0 + Duration::days(2)));
    }

    #[test]
    fn debug_output_hides_private_keys() {
        let (m, _) = write(decide(None, &policy(), now()).unwrap());
        let shown = format!("{m:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("BEGIN CERTIFICATE"));
    }

    #[test]
    fn secret_round_trip_keeps_other_keys() {
        let (m, _) = write(decide(None, &policy(), now()).unwrap());
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

    #[test]
    fn bad_flags_are_named() {
        let base = BootstrapConfig {
            namespace: NAMESPACE.into(),
            secret_name: "tls".into(),
            webhook_config: None,
            service: SERVICE.into(),
            validity_days: 365,
            renew_before_days: 30,
            poll_interval: DEFAULT_POLL_INTERVAL,
            check_interval: DEFAULT_CHECK_INTERVAL,
            ca_overlap: DEFAULT_CA_OVERLAP,
        };
        base.validate().unwrap();
        let err = |c: BootstrapConfig| c.validate().unwrap_err().to_string();
        let e = err(BootstrapConfig {
            renew_before_days: 365,
            ..base.clone()
        });
        assert!(
            e.contains("--cert-renew-before-days") && e.contains("found 365") && e.contains("364"),
            "{e}"
        );
        let e = err(BootstrapConfig {
            renew_before_days: 0,
            ..base.clone()
        });
        assert!(e.contains("--cert-renew-before-days") && e.contains("found 0"), "{e}");
        let e = err(BootstrapConfig {
            validity_days: 0,
            ..base.clone()
        });
        assert!(e.contains("--cert-validity-days") && e.contains("found 0"), "{e}");
        let e = err(BootstrapConfig {
            service: "Bad_Name".into(),
            ..base.clone()
        });
        assert!(e.contains("--service") && e.contains("Bad_Name"), "{e}");
        let e = err(BootstrapConfig {
            secret_name: String::new(),
            ..base.clone()
        });
        assert!(e.contains("--tls-secret"), "{e}");
    }
}
