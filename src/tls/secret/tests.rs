//! The pure part: the policy's expiry math, and the decision's scenarios (creation,
//! renewal, replacement of unusable certificates, the two-phase CA rotation), checked by
//! verifying what would be served.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use time::{Duration, OffsetDateTime};

use super::decide::Issue;
use super::material::{key_public, parse_bundle};
use super::{Decision, Policy, TlsMaterial, WriteReason, decide};
use crate::tls::{self, CLOCK_SKEW, CertPair, verifies};

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

/// Issues a write decision's plan.
fn write(decision: Decision) -> (TlsMaterial, WriteReason) {
    match decision {
        Decision::Write { plan, reason } => (plan.issue(&policy()).unwrap(), reason),
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
    let (m, reason) = write(decide(None, &policy(), now()));
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
    let key = key_public(m.ca_key.as_ref()).expect("ca.key is a readable key");
    assert_eq!(ca[0].info.public_key, key);
}

#[test]
fn a_fresh_secret_is_kept_until_its_renewal_time() {
    let t = now();
    let ca = ca(3650, t);
    let m = TlsMaterial::issued_by(&ca, &leaf(&ca, t, 365));
    let due = keep(decide(Some(&m), &policy(), t));
    assert_eq!(due, policy().renew_at(leaf_not_after(&m)));
}

#[test]
fn renewal_keeps_the_ca_and_its_bundle_bytes() {
    let t = now();
    let ca = ca(3650, t - Duration::days(340));
    let m = TlsMaterial::issued_by(&ca, &leaf(&ca, t - Duration::days(340), 365));
    let (renewed, reason) = write(decide(Some(&m), &policy(), t));
    assert!(matches!(reason, WriteReason::Renew { .. }), "{reason}");
    assert_eq!(renewed.ca_crt, m.ca_crt, "same CA, same caBundle");
    assert_eq!(renewed.ca_key, m.ca_key);
    assert_ne!(renewed.tls_crt, m.tls_crt);
    assert!(
        trusted(&renewed, &m.ca_crt, t),
        "the new certificate verifies against the old ca.crt"
    );
    assert!(leaf_not_after(&renewed) > leaf_not_after(&m) + Duration::days(300));
    keep(decide(Some(&renewed), &policy(), t));
}

/// Deciding generates nothing (the same Secret gives the same plan, twice); issuing a
/// renewal makes exactly one certificate and no CA.
#[test]
fn a_renewal_decision_issues_one_certificate_and_only_when_issued() {
    let t = now();
    let ca = ca(3650, t - Duration::days(340));
    let m = TlsMaterial::issued_by(&ca, &leaf(&ca, t - Duration::days(340), 365));
    let decision = decide(Some(&m), &policy(), t);
    assert_eq!(decision, decide(Some(&m), &policy(), t), "no fresh key in a decision");
    let Decision::Write { plan, reason } = decision else {
        panic!("expected a renewal, found {decision:?}")
    };
    assert!(matches!(reason, WriteReason::Renew { .. }), "{reason}");
    assert!(matches!(plan.issues, Issue::Serving { .. }), "{:?}", plan.issues);
    let renewed = plan.issue(&policy()).unwrap();
    assert_eq!(tls::certificates(&renewed.tls_crt).count(), 1);
    assert_ne!(renewed.tls_crt, m.tls_crt);
    assert_eq!(
        (&renewed.ca_crt, &renewed.ca_key, &renewed.next_ca_key),
        (&m.ca_crt, &m.ca_key, &None),
        "no new CA"
    );
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
        let (fixed, reason) = write(decide(Some(&m), &policy(), t));
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
    let due = keep(decide(Some(&m), &policy(), t - Duration::days(300)));
    assert_eq!(due, policy().renew_at(leaf_not_after(&m)));
    let (phase1, reason) = write(decide(Some(&m), &policy(), t));
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
    let (m1, reason) = write(decide(Some(&m0), &p, t0));
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
    let switch_at = keep(decide(Some(&m1), &p, t0 + Duration::hours(1)));
    assert_eq!(switch_at, p.ca_switch_at(bundle1[1].info.not_before));

    // Phase 2: the new CA signs; ca.crt bytes stay those published in phase 1.
    let t2 = switch_at + Duration::minutes(1);
    let (m2, reason) = write(decide(Some(&m1), &p, t2));
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
    let renew_at = keep(decide(Some(&m2), &p, t2));
    assert_eq!(renew_at, p.renew_at(leaf_not_after(&m2)));
    let (m3, reason) = write(decide(Some(&m2), &p, renew_at + Duration::minutes(1)));
    assert!(matches!(reason, WriteReason::Renew { .. }), "{reason}");
    assert_eq!(m3.ca_crt, new_ca_only);
}

#[test]
fn an_expiring_certificate_during_the_overlap_is_replaced_from_the_new_ca() {
    let p = policy();
    let t0 = now();
    let old_ca = ca(400, t0 - Duration::days(10));
    let m0 = TlsMaterial::issued_by(&old_ca, &leaf(&old_ca, t0 - Duration::days(10), 11));
    let (m1, _) = write(decide(Some(&m0), &p, t0));
    let (m2, reason) = write(decide(Some(&m1), &p, t0 + Duration::days(2)));
    assert!(matches!(reason, WriteReason::Replace(_)), "{reason}");
    assert_eq!(m2.ca_key, m1.next_ca_key);
    assert!(trusted(&m2, &m1.ca_crt, t0 + Duration::days(2)));
}
