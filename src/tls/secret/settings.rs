//! The Secret manager's settings: a plain struct the binary fills from the `serve` flags.

use std::time::Duration as StdDuration;

use time::Duration;

use super::ca_bundle::ConfigKind;
use super::{BootstrapError, Policy};
use crate::tls;

/// How often a replica re-reads the Secret to pick up certificates written by another.
pub const DEFAULT_POLL_INTERVAL: StdDuration = StdDuration::from_secs(10);
/// How often the Secret and the webhook configuration's `caBundle` are fully checked
/// (besides the computed renewal time), repairing drift such as a reset `caBundle`.
pub const DEFAULT_CHECK_INTERVAL: StdDuration = StdDuration::from_secs(10 * 60);
/// How long a new CA is published in `ca.crt`/`caBundle` before it signs anything.
pub const DEFAULT_CA_OVERLAP: StdDuration = StdDuration::from_secs(24 * 60 * 60);

/// What the bootstrap manages and how often it looks. Plain data: `serve` fills it from
/// its flags, tests write it out.
#[derive(Debug, Clone)]
pub struct BootstrapConfig {
    /// Namespace of the Secret and of the Service.
    pub namespace: String,
    /// `--tls-secret`.
    pub secret_name: String,
    /// `--webhook-config`: the MutatingWebhookConfiguration whose `caBundle` is managed;
    /// `None` (the flag set to "") manages none.
    pub webhook_config: Option<String>,
    /// `--validating-webhook-config`: the ValidatingWebhookConfiguration whose `caBundle`
    /// is managed; `None` (the flag set to "") manages none.
    pub validating_webhook_config: Option<String>,
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

    /// The webhook configurations whose `caBundle` is managed, mutating first.
    pub(super) fn managed_configs(&self) -> Vec<(ConfigKind, String)> {
        [
            (ConfigKind::Mutating, &self.webhook_config),
            (ConfigKind::Validating, &self.validating_webhook_config),
        ]
        .into_iter()
        .filter_map(|(kind, name)| name.clone().map(|name| (kind, name)))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    const SERVICE: &str = "injector";
    const NAMESPACE: &str = "mesh";

    #[test]
    fn bad_flags_are_named() {
        let base = BootstrapConfig {
            namespace: NAMESPACE.into(),
            secret_name: "tls".into(),
            webhook_config: None,
            validating_webhook_config: None,
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
