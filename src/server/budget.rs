//! The global in-flight body budget: request bodies held in memory at once, across all
//! connections, never exceed `--max-inflight-body-bytes`. A request reserves its body's
//! size before reading it; one that does not fit waits up to [`BUDGET_WAIT`] for room,
//! then is answered 503 with `Retry-After: 1`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a request waits for room in the budget before it is answered 503.
pub(crate) const BUDGET_WAIT: Duration = Duration::from_secs(1);

/// Bodies of unknown length (no `Content-Length`) reserve in steps of this much.
const STEP: usize = 64 * 1024;

pub(crate) struct BodyBudget {
    bytes: Arc<Semaphore>,
    total: usize,
    in_use: Gauge,
}

/// Bytes of the budget held by one request body; given back when dropped.
pub(crate) struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
    in_use: Gauge,
}

/// The budget had no room for the body within [`BUDGET_WAIT`].
#[derive(Debug)]
pub(crate) struct NoRoom;

impl BodyBudget {
    /// `total` is at most [`Semaphore::MAX_PERMITS`] (checked where the flag is read).
    pub(crate) fn new(total: usize, in_use: Gauge) -> BodyBudget {
        BodyBudget {
            bytes: Arc::new(Semaphore::new(total.min(Semaphore::MAX_PERMITS))),
            total,
            in_use,
        }
    }

    /// Reserves `bytes` (0 is fine: an empty reservation to grow later).
    pub(crate) async fn reserve(&self, bytes: usize) -> Result<Reservation, NoRoom> {
        let mut reservation = Reservation {
            permit: None,
            in_use: self.in_use.clone(),
        };
        self.grow(&mut reservation, bytes).await?;
        Ok(reservation)
    }

    /// Makes `reservation` hold at least `bytes`, in [`STEP`]s.
    pub(crate) async fn ensure(&self, reservation: &mut Reservation, bytes: usize) -> Result<(), NoRoom> {
        if bytes <= reservation.bytes() {
            return Ok(());
        }
        let wanted = bytes.next_multiple_of(STEP).min(self.total.max(bytes));
        self.grow(reservation, wanted - reservation.bytes()).await
    }

    async fn grow(&self, reservation: &mut Reservation, more: usize) -> Result<(), NoRoom> {
        if more == 0 {
            return Ok(());
        }
        // A body larger than the whole budget could never fit: refuse at once.
        let count = u32::try_from(more).map_err(|_| NoRoom)?;
        if reservation.bytes() + more > self.total {
            return Err(NoRoom);
        }
        // Room at once is the common case: no timer for it.
        let permit = match self.bytes.clone().try_acquire_many_owned(count) {
            Ok(permit) => permit,
            Err(_) => tokio::time::timeout(BUDGET_WAIT, self.bytes.clone().acquire_many_owned(count))
                .await
                .map_err(|_| NoRoom)?
                .map_err(|_| NoRoom)?,
        };
        match &mut reservation.permit {
            Some(held) => held.merge(permit),
            None => reservation.permit = Some(permit),
        }
        self.in_use.inc_by(more as i64);
        Ok(())
    }
}

impl Reservation {
    /// One permit is one byte.
    fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.in_use.dec_by(self.bytes() as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_waits_for_room_then_gives_up() {
        let gauge = Gauge::default();
        let budget = BodyBudget::new(100, gauge.clone());
        let first = budget.reserve(80).await.unwrap();
        assert_eq!(gauge.get(), 80);
        assert!(budget.reserve(30).await.is_err(), "no room within the wait");
        drop(first);
        assert_eq!(gauge.get(), 0);
        let second = budget.reserve(30).await.unwrap();
        assert_eq!(gauge.get(), 30);
        assert!(budget.reserve(101).await.is_err(), "larger than the whole budget");
        drop(second);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_body_gets_room_freed_meanwhile() {
        let budget = Arc::new(BodyBudget::new(100, Gauge::default()));
        let first = budget.reserve(100).await.unwrap();
        let waiter = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(50).await.is_ok() }
        });
        tokio::time::sleep(BUDGET_WAIT / 2).await;
        drop(first);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_lengths_grow_in_steps_within_the_total() {
        let gauge = Gauge::default();
        let budget = BodyBudget::new(STEP * 3, gauge.clone());
        let mut reservation = budget.reserve(0).await.unwrap();
        budget.ensure(&mut reservation, 10).await.unwrap();
        assert_eq!(gauge.get(), STEP as i64);
        budget.ensure(&mut reservation, STEP + 1).await.unwrap();
        assert_eq!(gauge.get(), 2 * STEP as i64);
        assert!(budget.ensure(&mut reservation, 3 * STEP + 1).await.is_err());
        drop(reservation);
        assert_eq!(gauge.get(), 0);
    }
}
