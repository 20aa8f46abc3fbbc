//! Settling a reservation with its attempt's row: the ledger's side of "no
//! charge without a row". The tenant actor is told to commit the cost (and
//! release the rest of the hold) only by the ledger, which writes the row in
//! the same step. It runs on the request's worker, like every journal write,
//! so the hot path gains no message to the ledger's own thread.

use std::time::Duration;

use super::actor::LedgerHandle;
use super::event::UsageEvent;
use crate::money::Nanos;
use crate::telemetry::metrics::{Metric, counter_add};
use crate::tenant::ReservationGuard;
use crate::tenant::book::{Granted, Settled};
use crate::tenant::handle::QuotaError;
use crate::tenant::handle::committed;
use crate::tenant::messages::SettleReply;

/// The error text of a row whose reservation had already expired when its
/// attempt settled: its `orphaned` row carries the charge.
pub const SETTLED_AFTER_EXPIRY: &str = "settled after the reservation expired";

impl LedgerHandle {
    /// Commits `event.charged` against the reservation, `tokens` against the
    /// token limits, and records the row. Returns the budget left, and the
    /// row as recorded.
    ///
    /// With quotas in a shared store the row is journaled first
    /// (`settling`): the store outlives this process, so a kill between its
    /// commit and the row must not leave the ledger charging the reserved
    /// amount where the store charged the cost. That record also lets the
    /// commit finish after the response: the caller waits for no second
    /// round trip to the store, and learns the budget left from its
    /// admission's figure plus what this settle gives back. In memory the
    /// quotas are rebuilt from the ledger, so the row after the commit is
    /// enough, and the commit is a message to the actor, awaited.
    pub async fn settle(
        &self,
        event: UsageEvent,
        reservation: ReservationGuard,
        tokens: u64,
    ) -> (Option<Nanos>, UsageEvent) {
        if !self.shared_quotas {
            let reply = reservation.settle(event.charged, tokens).await;
            return self.record_settled(event, &reply);
        }
        self.settling(&event);
        // Without a journal no `settling` record would stand in for a row lost to a kill.
        let ticket = self
            .journal
            .as_ref()
            .and_then(|_| self.settlements.detach());
        let remaining = after_settle(reservation.granted(), event.charged);
        let reply = reservation.settle(event.charged, tokens);
        let Some(ticket) = ticket else {
            return self.record_settled(event, &reply.await);
        };
        // The row as the call charged it. Should the hold have expired meanwhile,
        // the row written records nothing and its `orphaned` row the charge.
        let recorded = event.clone();
        let ledger = self.clone();
        actix_rt::spawn(async move {
            let _ticket = ticket;
            ledger.record_settled(event, &reply.await);
        });
        (remaining, recorded)
    }

    /// Records the row of a settle the actor answered.
    fn record_settled(
        &self,
        mut event: UsageEvent,
        reply: &Result<SettleReply, QuotaError>,
    ) -> (Option<Nanos>, UsageEvent) {
        let remaining = match reply {
            Ok(reply) if committed(reply) => reply.remaining,
            // The store lost the hold (it restarted empty): never a discount.
            // The row keeps its charge, and the store is seeded from the ledger.
            Ok(reply) if reply.settled == Settled::Lost => {
                counter_add(Metric::QuotaHoldsLostTotal, &[], 1);
                tracing::warn!(tenant = %event.tenant, request_id = %event.request_id, charged = %event.charged, "The quota store had no record of a settled hold; the row keeps its charge.");
                reply.remaining
            }
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

    /// Waits, at most `limit`, for the settlements that finish after their
    /// response: after it, every call answered before it is committed and
    /// its row handed to the ledger. Returns how many were still running.
    pub async fn settled(&self, limit: Duration) -> usize {
        self.settlements.quiet(limit).await
    }

    /// Settles inline from now on, and waits at most `limit` for the
    /// settlements that finish after their response (a stop calls this
    /// while the workers still run). Returns how many did not finish.
    pub async fn finish_settlements(&self, limit: Duration) -> usize {
        self.settlements.finish(limit).await
    }
}

/// The budget left once a hold settles at `charged`, as its admission saw it:
/// what the hold gives back (or takes more) on top of the admission's figure.
fn after_settle(granted: &Granted, charged: Nanos) -> Option<Nanos> {
    let held = granted.amount;
    granted.remaining.map(|remaining| {
        if charged <= held {
            remaining.saturating_add(held.saturating_sub(charged))
        } else {
            remaining.saturating_sub(charged.saturating_sub(held))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ReservationId;

    fn granted(amount: u64, remaining: Option<u64>) -> Granted {
        Granted {
            id: ReservationId(1),
            amount: Nanos::new(amount),
            max_tokens: 16,
            clamped: false,
            remaining: remaining.map(Nanos::new),
            over_budget: false,
            over_tpm: None,
            tokens: None,
        }
    }

    #[test]
    fn the_budget_left_after_a_settle_is_the_admissions_plus_what_it_gives_back() {
        assert_eq!(
            after_settle(&granted(300, Some(700)), Nanos::new(100)),
            Some(Nanos::new(900))
        );
        assert_eq!(
            after_settle(&granted(300, Some(700)), Nanos::new(500)),
            Some(Nanos::new(500))
        );
        assert_eq!(
            after_settle(&granted(300, Some(100)), Nanos::new(900)),
            Some(Nanos::ZERO)
        );
        assert_eq!(after_settle(&granted(300, None), Nanos::new(100)), None);
    }
}
