//! Whether the shared quota store answers. The first call that fails or
//! times out marks it down; from then on tenants go straight to their
//! `on_store_error` policy without waiting, and a prober marks it up again
//! once Redis answers, so recovery needs no restart.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::telemetry::metrics::{Metric, counter_add, gauge_set};

#[derive(Debug)]
pub struct StoreHealth {
    up: AtomicBool,
    /// Bumped on every recovery: a tenant that served locally rejoins once per outage.
    recoveries: AtomicU64,
}

impl Default for StoreHealth {
    fn default() -> Self {
        gauge_set(Metric::QuotaStoreUp, &[], 1.0);
        // With a shared store its failure counters start at 0, so the first one is an increase.
        counter_add(Metric::QuotaStoreErrorsTotal, &[], 0);
        for policy in ["local", "fail_closed"] {
            counter_add(Metric::QuotaStoreFallbacksTotal, &[("policy", policy)], 0);
        }
        StoreHealth {
            up: AtomicBool::new(true),
            recoveries: AtomicU64::new(0),
        }
    }
}

impl StoreHealth {
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    pub fn recoveries(&self) -> u64 {
        self.recoveries.load(Ordering::Acquire)
    }

    pub fn mark_down(&self, error: &str) {
        counter_add(Metric::QuotaStoreErrorsTotal, &[], 1);
        if self.up.swap(false, Ordering::AcqRel) {
            gauge_set(Metric::QuotaStoreUp, &[], 0.0);
            tracing::error!(error = %error, "The shared quota store is unreachable; tenants follow their on_store_error policy.");
        }
    }

    pub fn mark_up(&self) {
        if !self.up.swap(true, Ordering::AcqRel) {
            self.recoveries.fetch_add(1, Ordering::AcqRel);
            gauge_set(Metric::QuotaStoreUp, &[], 1.0);
            tracing::info!("The shared quota store answers again; tenants rejoin it.");
        }
    }
}
