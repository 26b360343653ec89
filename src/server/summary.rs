//! The periodic INFO summary of admission traffic. Each request logs at DEBUG only, so
//! INFO volume does not grow with traffic; this says every interval (when there was
//! traffic) how many requests were answered and how, from the metrics that count them.

use std::time::Duration;

use tracing::info;

use crate::metrics::{Metrics, Outcome, OutcomeLabels};
use crate::shutdown::CancellationToken;

/// How often the summary is logged (only when there was traffic since the last one).
pub(crate) const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);

/// Requests per outcome, counted since the process started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub injected: u64,
    pub skipped: u64,
    pub denied: u64,
    pub invalid: u64,
}

impl Totals {
    pub(crate) fn read(metrics: &Metrics) -> Totals {
        let count = |outcome: Outcome| {
            [false, true]
                .into_iter()
                .filter_map(|dry_run| {
                    let labels = OutcomeLabels {
                        outcome: outcome.clone(),
                        dry_run,
                    };
                    metrics.admission_requests.get(&labels).map(|c| c.get())
                })
                .sum()
        };
        Totals {
            injected: count(Outcome::Injected),
            skipped: count(Outcome::Skipped),
            denied: count(Outcome::Denied),
            invalid: count(Outcome::Invalid),
        }
    }

    fn requests(&self) -> u64 {
        self.injected + self.skipped + self.denied + self.invalid
    }

    fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            injected: self.injected.saturating_sub(earlier.injected),
            skipped: self.skipped.saturating_sub(earlier.skipped),
            denied: self.denied.saturating_sub(earlier.denied),
            invalid: self.invalid.saturating_sub(earlier.invalid),
        }
    }
}

/// Logs the summary every `interval` until `stop`, and once more for the last stretch.
pub(crate) async fn run(metrics: Metrics, interval: Duration, stop: CancellationToken) {
    let mut last = Totals::read(&metrics);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    loop {
        let stopping = tokio::select! {
            _ = ticker.tick() => false,
            () = stop.cancelled() => true,
        };
        let now = Totals::read(&metrics);
        let delta = now.since(&last);
        if delta.requests() > 0 {
            info!(
                requests = delta.requests(),
                injected = delta.injected,
                skipped = delta.skipped,
                denied = delta.denied,
                invalid = delta.invalid,
                "admission summary since the last one"
            );
        }
        last = now;
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_dry_runs_and_subtract() {
        let metrics = Metrics::unregistered();
        let count = |outcome: Outcome, dry_run: bool, n: u64| {
            metrics
                .admission_requests
                .get_or_create(&OutcomeLabels { outcome, dry_run })
                .inc_by(n);
        };
        count(Outcome::Injected, false, 3);
        count(Outcome::Injected, true, 2);
        count(Outcome::Denied, false, 1);
        let first = Totals::read(&metrics);
        assert_eq!(
            first,
            Totals {
                injected: 5,
                skipped: 0,
                denied: 1,
                invalid: 0
            }
        );
        count(Outcome::Invalid, false, 4);
        let delta = Totals::read(&metrics).since(&first);
        assert_eq!(delta.requests(), 4);
        assert_eq!(delta.invalid, 4);
    }
}
