//! Settling a reservation with its attempt's row: the ledger's side of "no
//! charge without a row". The tenant actor is told to commit the cost (and
//! release the rest of the hold) only by the ledger, which writes the row in
//! the same step. It runs on the request's worker, like every journal write,
//! so the hot path gains no message to the ledger's own thread.

use super::actor::LedgerHandle;
use super::event::UsageEvent;
use crate::money::Nanos;
use crate::tenant::ReservationGuard;
use crate::tenant::handle::committed;

/// The error text of a row whose reservation had already expired when its
/// attempt settled: its `orphaned` row carries the charge.
pub const SETTLED_AFTER_EXPIRY: &str = "settled after the reservation expired";

impl LedgerHandle {
    /// Commits `event.charged` against the reservation, `tokens` against the
    /// token limits, and records the row. With quotas in a shared store the
    /// row is journaled first (`settling`): the store outlives this process,
    /// so a kill between its commit and the row must not leave the ledger
    /// charging the reserved amount where the store charged the cost. In
    /// memory the quotas are rebuilt from the ledger, so the row after the
    /// commit is enough. Returns the budget left, and the row as recorded.
    pub async fn settle(
        &self,
        mut event: UsageEvent,
        reservation: ReservationGuard,
        tokens: u64,
    ) -> (Option<Nanos>, UsageEvent) {
        if self.shared_quotas {
            self.settling(&event);
        }
        let remaining = match reservation.settle(event.charged, tokens).await {
            Ok(reply) if committed(&reply) => reply.remaining,
            Ok(reply) => {
                event.charged = Nanos::ZERO;
                event.error = Some(SETTLED_AFTER_EXPIRY.to_owned());
                reply.remaining
            }
            // The actor is gone; the ledger is the truth and the next actor loads from it.
            Err(_) => None,
        };
        self.record(event.clone());
        (remaining, event)
    }
}
