//! The one retry backoff of the process: exponential, capped, with optional jitter.
//!
//! Every retry loop uses it: failed reconciles (per object), the owned-object watch, the
//! Lease set-up, the self-managed TLS Secret. kube-runtime's watchers keep their own
//! `default_backoff()`; this is for what we retry ourselves.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// `base` after the first failure, doubling per consecutive failure, never above `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exponential {
    pub base: Duration,
    pub max: Duration,
}

impl Exponential {
    pub const fn new(base: Duration, max: Duration) -> Exponential {
        Exponential { base, max }
    }

    /// The delay after `failures` consecutive failures (0 and 1 → `base`).
    pub fn delay(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(31);
        self.base.saturating_mul(1u32 << exponent).min(self.max)
    }

    /// [`Exponential::delay`] less up to a half, at random ("equal jitter"): many objects
    /// failing together (an API server answering 429/5xx) retry spread out, not in a storm.
    pub fn jittered(&self, failures: u32) -> Duration {
        let delay = self.delay(failures);
        let half = delay / 2;
        // A fresh RandomState is randomly keyed: enough randomness for spreading retries,
        // without another crate.
        let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let fraction = (random >> 11) as f64 / (1u64 << 53) as f64;
        half + half.mul_f64(fraction)
    }
}

/// A failure streak as a stream backoff (kube-runtime's `Backoff`): [`Exponential::delay`]
/// of the errors seen so far. [`kube::runtime::utils::Backoff::reset`] is deliberately a
/// no-op: kube's watcher yields an `Ok(Init)` before every (re)list, *before* the list can
/// fail, so resetting on every `Ok` (what `StreamBackoff` does) would pin the delay at its
/// minimum while, say, a CRD is missing. A streak ends instead after `quiet` without an
/// error (choose it longer than `max`).
#[derive(Debug, Clone)]
pub struct Streak {
    policy: Exponential,
    quiet: Duration,
    failures: u32,
    last_failure: Option<tokio::time::Instant>,
}

impl Streak {
    pub fn new(policy: Exponential, quiet: Duration) -> Streak {
        Streak {
            policy,
            quiet,
            failures: 0,
            last_failure: None,
        }
    }
}

impl Iterator for Streak {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = tokio::time::Instant::now();
        if self
            .last_failure
            .is_some_and(|last| now.duration_since(last) > self.quiet)
        {
            self.failures = 0;
        }
        self.last_failure = Some(now);
        self.failures = self.failures.saturating_add(1);
        Some(self.policy.delay(self.failures))
    }
}

impl kube::runtime::utils::Backoff for Streak {
    fn reset(&mut self) {}
}

/// A run of consecutive failures of one recurring operation (an accept, a file read),
/// so that it is logged once when it starts and once when it ends, not once per retry.
#[derive(Debug, Default)]
pub struct Episode {
    failures: u32,
    started: Option<std::time::Instant>,
}

impl Episode {
    /// Records one failure; true when it starts a new episode (log it then).
    pub fn fail(&mut self) -> bool {
        self.failures = self.failures.saturating_add(1);
        if self.started.is_none() {
            self.started = Some(std::time::Instant::now());
            return true;
        }
        false
    }

    /// Consecutive failures so far (0 outside an episode): the input of
    /// [`Exponential::delay`].
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Records a success; when it ends an episode, returns how many failures it had and
    /// how long it lasted (log it then).
    pub fn recover(&mut self) -> Option<(u32, Duration)> {
        let started = self.started.take()?;
        let failures = std::mem::take(&mut self.failures);
        Some((failures, started.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Exponential = Exponential::new(Duration::from_secs(1), Duration::from_secs(300));

    #[test]
    fn doubles_then_caps() {
        assert_eq!(POLICY.delay(0), Duration::from_secs(1));
        assert_eq!(POLICY.delay(1), Duration::from_secs(1));
        assert_eq!(POLICY.delay(2), Duration::from_secs(2));
        assert_eq!(POLICY.delay(3), Duration::from_secs(4));
        assert_eq!(POLICY.delay(9), Duration::from_secs(256));
        assert_eq!(POLICY.delay(10), Duration::from_secs(300));
        assert_eq!(POLICY.delay(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn jitter_stays_between_half_and_the_whole_delay_and_varies() {
        let seen: std::collections::BTreeSet<Duration> = (0..64).map(|_| POLICY.jittered(4)).collect();
        for delay in &seen {
            assert!(
                (Duration::from_secs(4)..=Duration::from_secs(8)).contains(delay),
                "{delay:?} outside [4s, 8s]"
            );
        }
        assert!(seen.len() > 1, "64 jittered delays were all {seen:?}");
    }

    #[test]
    fn an_episode_is_reported_at_its_start_and_its_end_only() {
        let mut episode = Episode::default();
        assert_eq!(episode.recover(), None, "no episode without a failure");
        assert!(episode.fail(), "the first failure starts an episode");
        assert!(!episode.fail());
        assert!(!episode.fail());
        assert_eq!(episode.failures(), 3);
        assert_eq!(episode.recover().map(|(n, _)| n), Some(3));
        assert_eq!(episode.recover(), None, "ended once");
        assert_eq!(episode.failures(), 0);
        assert!(episode.fail(), "a later failure starts a new episode");
    }

    #[tokio::test(start_paused = true)]
    async fn a_streak_grows_through_resets_and_restarts_after_a_quiet_period() {
        use kube::runtime::utils::Backoff as _;
        let quiet = Duration::from_secs(600);
        let mut streak = Streak::new(POLICY, quiet);
        assert_eq!(streak.next(), Some(Duration::from_secs(1)));
        // The watcher's `Ok(Init)` before each relist resets the StreamBackoff: ignored.
        streak.reset();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(streak.next(), Some(Duration::from_secs(2)));
        streak.reset();
        tokio::time::advance(POLICY.max).await;
        assert_eq!(
            streak.next(),
            Some(Duration::from_secs(4)),
            "a max-length wait is still the same streak"
        );
        tokio::time::advance(quiet + Duration::from_secs(1)).await;
        assert_eq!(
            streak.next(),
            Some(Duration::from_secs(1)),
            "a new streak after a quiet period"
        );
    }
}
