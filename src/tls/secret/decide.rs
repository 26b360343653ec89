//! The pure decision: given what the Secret holds, the policy and the time, what (if
//! anything) must be written. No I/O and no fresh keys: a write is a [`Plan`], and
//! [`Plan::issue`] generates exactly the keys it names, only once the caller writes it.

use time::{Duration, OffsetDateTime};

use super::material::{Ca, compose_bundle, key_public, parse_bundle};
use super::{CA_CRT, CA_KEY, Policy, TLS_CRT, TLS_KEY, TlsMaterial};
use crate::tls::{self, CertError, CertPair, load_pem, missing_names, verifies};

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
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// It is fine until `next_due`, when it must be looked at again.
    Keep { next_due: OffsetDateTime },
    /// Write what `plan` issues.
    Write { plan: Plan, reason: WriteReason },
}

/// A write, decided but not yet issued: the Secret's keys that stay as they are, and what
/// must be generated. Holds no key that was not already in the Secret.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    /// What is written, but for what `issue` adds: `ca.crt` without a new CA, and for a
    /// new serving certificate `ca.key` already the key that signs it.
    pub(super) base: TlsMaterial,
    pub(super) issues: Issue,
    /// The time the decision was made for: what is issued starts then.
    pub(super) at: OffsetDateTime,
}

/// What a [`Plan`] generates.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Issue {
    /// One serving certificate, signed with `ca.key` by its CA certificate `ca_pem`.
    Serving {
        ca_pem: String,
        ca_not_after: OffsetDateTime,
    },
    /// A new CA, which becomes `ca.key`, and one serving certificate it signs.
    CaAndServing,
    /// A new CA only, which joins as `ca-next.key`; the serving certificate stays.
    NextCa,
}

impl Plan {
    /// Generates what the plan names (one serving certificate, one CA, or one of each)
    /// and returns the Secret's new contents.
    pub fn issue(self, policy: &Policy) -> Result<TlsMaterial, CertError> {
        let Plan { mut base, issues, at } = self;
        let serving = |ca: &CertPair, ca_not_after: OffsetDateTime| {
            let not_after = (at + policy.validity()).min(ca_not_after);
            tls::sign_serving_cert(ca, &policy.service, &policy.namespace, at, not_after)
        };
        let new_ca = || tls::generate_ca(&policy.service, &policy.namespace, policy.ca_validity_days(), at);
        let (ca, signed) = match issues {
            Issue::Serving { ca_pem, ca_not_after } => {
                let key_pem = String::from_utf8_lossy(base.ca_key.as_deref().unwrap_or_default()).into_owned();
                let signer = CertPair {
                    cert_pem: ca_pem,
                    key_pem,
                };
                (None, Some(serving(&signer, ca_not_after)?))
            }
            Issue::CaAndServing => {
                let ca = new_ca()?;
                let signed = serving(&ca, at + Duration::days(i64::from(policy.ca_validity_days())))?;
                base.ca_key = Some(ca.key_pem.clone().into_bytes());
                (Some(ca), Some(signed))
            }
            Issue::NextCa => {
                let ca = new_ca()?;
                base.next_ca_key = Some(ca.key_pem.clone().into_bytes());
                (Some(ca), None)
            }
        };
        if let Some(ca) = ca {
            base.ca_crt.extend_from_slice(ca.cert_pem.as_bytes());
        }
        if let Some(signed) = signed {
            base.tls_crt = signed.cert_pem.into_bytes();
            base.tls_key = signed.key_pem.into_bytes();
        }
        Ok(base)
    }
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

/// Decides what the Secret holding `current` needs at `now`. `None` means there is no
/// Secret.
pub fn decide(current: Option<&TlsMaterial>, policy: &Policy, now: OffsetDateTime) -> Decision {
    let write = |base: TlsMaterial, issue: Issue, reason: WriteReason| Decision::Write {
        plan: Plan {
            base,
            issues: issue,
            at: now,
        },
        reason,
    };
    let Some(material) = current else {
        return write(TlsMaterial::default(), Issue::CaAndServing, WriteReason::Create);
    };
    let bundle = parse_bundle(&material.ca_crt);
    let find = |key: Option<Vec<u8>>| key.and_then(|key| bundle.iter().position(|ca| ca.info.public_key == key));
    let active = find(key_public(material.ca_key.as_ref())).filter(|&i| bundle[i].info.not_after > now);
    let next = find(key_public(material.next_ca_key.as_ref()))
        .filter(|&i| Some(i) != active && bundle[i].info.not_after > now);
    let active_fresh = active.filter(|&i| now < policy.ca_rotate_at(bundle[i].info.not_after));
    // A new serving certificate from bundle CA `ca`, whose key becomes `ca.key`.
    let serving_from = |ca: usize| Issue::Serving {
        ca_pem: bundle[ca].pem.clone(),
        ca_not_after: bundle[ca].info.not_after,
    };

    let leaf = match check_leaf(material, &bundle, policy, now) {
        Ok(leaf) => leaf,
        Err(why) => {
            // Nothing servable to protect: issue now, from the best CA at hand.
            let (issue, ca_key, next_ca_key) = match (active_fresh, next) {
                (Some(a), _) => (
                    serving_from(a),
                    material.ca_key.clone(),
                    next.and(material.next_ca_key.clone()),
                ),
                (None, Some(n)) => (serving_from(n), material.next_ca_key.clone(), None),
                (None, None) => (Issue::CaAndServing, None, None),
            };
            let keep: Vec<usize> = (0..bundle.len()).collect();
            let base = TlsMaterial {
                ca_crt: compose_bundle(&bundle, &keep, now),
                ca_key,
                next_ca_key,
                ..TlsMaterial::default()
            };
            return write(base, issue, WriteReason::Replace(why));
        }
    };
    let renew_at = policy.renew_at(leaf.not_after);

    // A rotation in progress: switch once the new CA has been published long enough.
    if let Some(n) = next {
        let switch_at = policy.ca_switch_at(bundle[n].info.not_before);
        if now < switch_at {
            // Renewal waits for the switch (the overlap is far shorter than the renewal
            // period); an expiring certificate is replaced from the new CA right away.
            return Decision::Keep {
                next_due: switch_at.min(leaf.not_after),
            };
        }
        let base = TlsMaterial {
            // Same bytes as published in phase 1 (order kept): no caBundle change.
            ca_crt: compose_bundle(&bundle, &[n, leaf.issuer], now),
            ca_key: material.next_ca_key.clone(),
            ..TlsMaterial::default()
        };
        return write(base, serving_from(n), WriteReason::SwitchCa);
    }

    match active_fresh {
        Some(a) => {
            if now < renew_at && leaf.issuer == a {
                return Decision::Keep {
                    next_due: renew_at.min(policy.ca_rotate_at(bundle[a].info.not_after)),
                };
            }
            let reason = if leaf.issuer == a {
                WriteReason::Renew {
                    not_after: leaf.not_after,
                }
            } else {
                WriteReason::Reissue
            };
            let base = TlsMaterial {
                // The old certificate's CA stays while replicas may still serve it.
                ca_crt: compose_bundle(&bundle, &[a, leaf.issuer], now),
                ca_key: material.ca_key.clone(),
                ..TlsMaterial::default()
            };
            write(base, serving_from(a), reason)
        }
        None => {
            let why = match active {
                Some(a) => format!("the CA expires at {}", bundle[a].info.not_after),
                None if now < renew_at => {
                    // No key to renew with, but nothing to renew yet either.
                    return Decision::Keep { next_due: renew_at };
                }
                None => format!("no usable {CA_KEY} for a CA in {CA_CRT} to renew with"),
            };
            let mut keep = vec![leaf.issuer];
            keep.extend(active);
            let base = TlsMaterial {
                tls_crt: material.tls_crt.clone(),
                tls_key: material.tls_key.clone(),
                ca_crt: compose_bundle(&bundle, &keep, now),
                ca_key: material.ca_key.clone(),
                next_ca_key: None,
            };
            write(base, Issue::NextCa, WriteReason::IntroduceCa { why })
        }
    }
}
