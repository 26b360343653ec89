//! The pure decision: given what the Secret holds, the policy and the time, what (if
//! anything) must be written. No I/O; fresh keys are its only side effect.

use time::{Duration, OffsetDateTime};

use super::material::{Ca, CaKey, compose_bundle, parse_bundle, parse_key};
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
#[derive(Debug)]
pub enum Decision {
    /// It is fine until `next_due`, when it must be looked at again.
    Keep { next_due: OffsetDateTime },
    /// Write `material`.
    Write { material: TlsMaterial, reason: WriteReason },
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
