//! The certificate policy: whom the serving certificate is for, how long it and its CA
//! live, and when each is renewed, rotated or switched.

use time::{Duration, OffsetDateTime};

use crate::tls::{self, CLOCK_SKEW};

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
