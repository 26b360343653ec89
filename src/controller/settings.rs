//! The controller's fixed settings: its name, its resync, its backoff, its concurrency.

use std::time::Duration;

use crate::backoff::Exponential;

/// `reportingController` of the Events and field manager of our writes.
pub const CONTROLLER_NAME: &str = crate::NAME;
/// Requeue after a successful reconcile: the periodic drift check.
pub const RESYNC: Duration = Duration::from_secs(300);
/// Retries of a failed reconcile (per Network) and of the owned-object watch: 1 s,
/// doubling per consecutive failure, at most 5 min (reconciles: jittered, half to whole).
pub const BACKOFF: Exponential = Exponential::new(Duration::from_secs(1), Duration::from_secs(300));
/// A failure streak of the owned-object watch ends after this long without an error.
pub const BACKOFF_QUIET: Duration = Duration::from_secs(600);
/// Reconciles in flight at once. Beyond a few, more only queue up in the client's rate
/// limiter (`--api-qps`); this bounds the memory of reconciles waiting there.
pub const CONCURRENCY: u16 = 32;
/// Requests for one Network closer together than this become one reconcile (trailing
/// edge): the events of a burst fold into one pass, and a new Network still turns Ready
/// well within 200 ms.
pub const DEBOUNCE: Duration = Duration::from_millis(50);
