//! A provider account's calls in flight across the fleet
//! (`providers.<name>.fleet_max_concurrency`). Each call the provider admits
//! takes a lease in one set of leases shared by every replica through Redis
//! (`tenant/shared/leases.rs`: one script takes it only under the cap), so
//! the replicas together never have more than the cap in flight at the
//! account. A lease expires after its request's deadline: one a replica
//! took and died with is given back then. A provider that is full across
//! the fleet is skipped like one with no free slot. Without a shared store
//! the cap bounds each replica's own slots instead (`ProviderHandle::start`).

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
}

/// Whether a call may take one of the fleet's slots.
pub enum Leased {
    Taken(String),
    Full,
    /// The store did not answer: the replica's own slots bound the call.
    Unknown,
}

impl FleetLimit {
    pub fn new(store: SharedStore, provider: &ProviderName, cap: u32, clock: SharedClock) -> Self {
        FleetLimit {
            provider: provider.clone(),
            store,
            key: fleet_key(provider),
            cap,
            clock,
        }
    }

    /// A lease for a call that may last `time_left`, unless the fleet is full.
    pub async fn lease(&self, time_left: Duration) -> Leased {
        let now = self.clock.now_ms();
        let left_ms = u64::try_from(time_left.as_millis()).unwrap_or(u64::MAX);
        let expires_at = now.saturating_add(left_ms).saturating_add(LEASE_MARGIN_MS);
        let id = uuid::Uuid::new_v4().simple().to_string();
        let sets = [(self.key.clone(), Some(self.cap))];
        match self.store.lease(&sets, &id, expires_at, now).await {
            Ok(None) => Leased::Taken(id),
            Ok(Some(_)) => {
                let labels = [("provider", self.provider.as_str())];
                counter_add(Metric::FleetFullTotal, &labels, 1);
                Leased::Full
            }
            Err(error) => {
                tracing::warn!(key = %self.key, error = %error, "The fleet's concurrency for this provider is unknown; the call is bounded by this replica's slots alone.");
                Leased::Unknown
            }
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

/// A call's lease: its drop tells the provider's actor, which gives it back.
pub struct FleetLease {
    pub(super) addr: Addr<ProviderActor>,
    pub(super) id: String,
}

impl Drop for FleetLease {
    fn drop(&mut self) {
        self.addr.do_send(LeaseEnded {
            id: std::mem::take(&mut self.id),
        });
    }
}
