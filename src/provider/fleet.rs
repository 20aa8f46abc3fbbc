//! A provider account's calls in flight across the fleet
//! (`providers.<name>.fleet_max_concurrency`). Each call the provider admits
//! takes a lease in one set of leases shared by every replica through Redis
//! (`tenant/shared/leases.rs`: one script takes it only under the cap), so
//! the replicas together never have more than the cap in flight at the
//! account. A lease expires after its request's deadline: one a replica
//! took and died with is given back then. A provider that is full across
//! the fleet is skipped like one with no free slot. Without a shared store
//! the cap bounds each replica's own slots instead (`ProviderHandle::start`);
//! while the store does not answer, each replica takes its share of the cap
//! (`storage.replicas`), so together they still stay within it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use actix::Addr;

use super::actor::{LeaseEnded, ProviderActor};
use crate::clock::SharedClock;
use crate::ids::ProviderName;
use crate::telemetry::metrics::{Metric, counter_add};
use crate::tenant::SharedStore;

/// How long a lease outlives its request's deadline: only a dead replica's
/// leases wait that long.
const LEASE_MARGIN_MS: u64 = 5_000;

/// The provider's share of the fleet's concurrency.
pub struct FleetLimit {
    provider: ProviderName,
    store: SharedStore,
    key: String,
    cap: u32,
    clock: SharedClock,
    /// This replica's share of the cap while the store does not answer, and
    /// the calls it admitted on it.
    share: u32,
    on_share: AtomicU32,
}

/// Whether a call may take one of the fleet's slots.
pub enum Leased {
    Taken(String),
    /// The store did not answer: one of this replica's share.
    OnShare,
    Full,
}

impl FleetLimit {
    pub fn new(
        store: SharedStore,
        provider: &ProviderName,
        (cap, replicas): (u32, u32),
        clock: SharedClock,
    ) -> Self {
        FleetLimit {
            provider: provider.clone(),
            store,
            key: fleet_key(provider),
            cap,
            clock,
            // Rounded down, as budgets are shared: the replicas' shares
            // together never pass the cap (a cap below the replica count
            // leaves none: the provider is skipped until the store answers).
            share: cap / replicas.max(1),
            on_share: AtomicU32::new(0),
        }
    }

    /// A lease for a call that may last `time_left`, unless the fleet is full.
    pub async fn lease(&self, time_left: Duration) -> Leased {
        let now = self.clock.now_ms();
        let left_ms = u64::try_from(time_left.as_millis()).unwrap_or(u64::MAX);
        let expires_at = now.saturating_add(left_ms).saturating_add(LEASE_MARGIN_MS);
        let id = uuid::Uuid::new_v4().simple().to_string();
        let sets = [(self.key.clone(), Some(self.cap))];
        let leased = match self.store.lease(&sets, &id, expires_at, now).await {
            Ok(None) => Leased::Taken(id),
            Ok(Some(_)) => Leased::Full,
            Err(error) => {
                tracing::warn!(key = %self.key, error = %error, share = self.share, "The fleet's calls at this provider are unknown; this replica takes its share of the cap.");
                self.take_share()
            }
        };
        if matches!(leased, Leased::Full) {
            let labels = [("provider", self.provider.as_str())];
            counter_add(Metric::FleetFullTotal, &labels, 1);
        }
        leased
    }

    /// One of this replica's share of the cap, if one is left.
    fn take_share(&self) -> Leased {
        let taken = self
            .on_share
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.share).then_some(n + 1)
            });
        if taken.is_ok() {
            Leased::OnShare
        } else {
            Leased::Full
        }
    }

    pub async fn give_back(&self, id: &str) {
        if let Err(error) = self
            .store
            .unlease(std::slice::from_ref(&self.key), id)
            .await
        {
            tracing::debug!(error = %error, "A fleet lease was not given back; it expires.");
        }
    }

    /// Leases in use across the fleet.
    pub async fn in_use(&self) -> Option<u64> {
        self.store.leases(&self.key, self.clock.now_ms()).await.ok()
    }

    pub fn cap(&self) -> u32 {
        self.cap
    }
}

/// The set of a provider's leases: a hash tag of its own, one Cluster slot.
pub fn fleet_key(provider: &ProviderName) -> String {
    format!("tg:{{fleet:{provider}}}:leases")
}

/// A call's place among the fleet's: its drop gives it back (a lease
/// through the provider's actor, which owns the store's side).
pub enum FleetLease {
    Leased {
        addr: Addr<ProviderActor>,
        id: String,
    },
    OnShare(Arc<FleetLimit>),
}

impl Drop for FleetLease {
    fn drop(&mut self) {
        match self {
            FleetLease::Leased { addr, id } => addr.do_send(LeaseEnded {
                id: std::mem::take(id),
            }),
            FleetLease::OnShare(fleet) => {
                let _ = fleet
                    .on_share
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calendar::Calendar;
    use crate::clock::SystemClock;

    #[actix_rt::test]
    async fn while_the_store_does_not_answer_a_replica_takes_only_its_share_of_the_cap() {
        // Nothing listens on the discard port: every call fails at once.
        let store = SharedStore::new("redis://127.0.0.1:9", 1, 200, Calendar::utc()).unwrap();
        let clock: SharedClock = Arc::new(SystemClock);
        let provider = ProviderName::new("p");
        // A cap of 7 over 3 replicas: 2 each, so 6 at most together.
        let fleet = Arc::new(FleetLimit::new(store, &provider, (7, 3), clock));
        let time_left = Duration::from_secs(1);

        let mut admitted = Vec::new();
        for _ in 0..2 {
            assert!(matches!(fleet.lease(time_left).await, Leased::OnShare));
            admitted.push(FleetLease::OnShare(fleet.clone()));
        }
        assert!(matches!(fleet.lease(time_left).await, Leased::Full));
        admitted.pop();
        assert!(matches!(fleet.lease(time_left).await, Leased::OnShare));
    }
}
