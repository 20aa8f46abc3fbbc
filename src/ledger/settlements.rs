//! Settlements that finish after their response. With quotas in Redis the
//! commit is a round trip to the store, and the caller needs none of its
//! answer: the row is journaled (`settling`) before the response, so a kill
//! loses nothing, and the budget left is known from the admission. A stop
//! first turns detaching off, then waits for the detached ones, while the
//! workers they run on still serve.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

#[derive(Default)]
pub struct Settlements {
    draining: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
}

/// One detached settlement; dropping it (done, or its worker stopped) counts it out.
pub struct Ticket(Arc<Settlements>);

impl Settlements {
    /// A ticket to finish a settlement after its response, unless a stop began.
    pub fn detach(self: &Arc<Self>) -> Option<Ticket> {
        // Counted before the flag is read: `finish` sets the flag before it
        // reads the count, so it sees every ticket handed out before it.
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if self.draining.load(Ordering::SeqCst) {
            self.count_out();
            return None;
        }
        Some(Ticket(self.clone()))
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Settles inline from now on and waits, at most `limit`, for the
    /// detached settlements to finish. Returns how many had not.
    pub async fn finish(&self, limit: Duration) -> usize {
        self.draining.store(true, Ordering::SeqCst);
        self.quiet(limit).await
    }

    /// Waits, at most `limit`, until no detached settlement is running.
    /// Returns how many still were.
    pub async fn quiet(&self, limit: Duration) -> usize {
        let all_done = async {
            loop {
                let idle = self.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self.in_flight() == 0 {
                    return;
                }
                idle.await;
            }
        };
        let _ = tokio::time::timeout(limit, all_done).await;
        self.in_flight()
    }

    fn count_out(&self) {
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.count_out();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stop_waits_for_the_detached_settlements_and_detaches_no_more() {
        let settlements = Arc::new(Settlements::default());
        let ticket = settlements.detach().expect("detaching is on before a stop");
        let waiter = settlements.clone();
        let finished = tokio::spawn(async move { waiter.finish(Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!finished.is_finished(), "the stop waits for the ticket out");
        assert!(settlements.detach().is_none(), "a stop settles inline");
        drop(ticket);
        assert_eq!(finished.await.ok(), Some(0));
    }

    #[tokio::test]
    async fn a_stop_gives_up_on_a_settlement_after_its_limit() {
        let settlements = Arc::new(Settlements::default());
        let _stuck = settlements.detach();
        assert_eq!(settlements.finish(Duration::from_millis(20)).await, 1);
    }
}
