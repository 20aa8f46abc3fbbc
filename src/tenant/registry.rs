//! TenantRegistry: tenant id → running TenantActor. Actors start on demand,
//! on the worker thread that first asks for them (or, with
//! `server.tenant_arbiters`, spread over arbiters of their own by a hash of
//! the tenant id), and stop when idle (removing themselves from the registry).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use actix::{Actor, Addr, Arbiter, ArbiterHandle};

use crate::arbiter::OwnedArbiter;
use sea_orm::DatabaseConnection;

use super::actor::{TenantActor, TenantDeps};
use super::book::Limits;
use super::handle::TenantHandle;
use super::messages::UpdateLimits;
use super::shared::SharedStore;
use super::tokens::TokenLimits;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::directory::TenantRecord;
use crate::ids::TenantId;
use crate::ledger::LedgerHandle;
use crate::telemetry::metrics::{Metric, TenantLabels, gauge_set};

/// A running actor, and whether its last rate check refused (shared by the
/// handles, so a limited tenant's requests are refused before any other work).
#[derive(Clone)]
pub(super) struct RunningActor {
    pub addr: Addr<TenantActor>,
    pub rate_limited: Arc<AtomicBool>,
    /// Its reservations' open guards (`TenantDeps::open_holds`).
    pub open_holds: Arc<AtomicUsize>,
}

pub struct RegistryInner {
    actors: Mutex<HashMap<TenantId, RunningActor>>,
    /// Empty with `server.tenant_arbiters = 0`: actors run on their first caller's thread.
    arbiters: Vec<OwnedArbiter>,
    /// For a first caller outside any arbiter, when `arbiters` is empty.
    fallback: OnceLock<OwnedArbiter>,
    clock: SharedClock,
    ledger: LedgerHandle,
    db: DatabaseConnection,
    /// Replaced on reload (tiers, prices); see `set_config`.
    config: RwLock<Arc<Config>>,
    labels: Arc<TenantLabels>,
    shared: Option<SharedStore>,
    /// Budget gauges of stopped actors, by tenant label, with the month they show.
    /// Tenants whose actor stopped, by label: when the period their gauge shows ends.
    resting: Mutex<HashMap<String, u64>>,
}

impl RegistryInner {
    /// Called by a stopping actor; a newer actor for the same tenant is left
    /// alone. `gauges`: the label and month of the budget gauges it leaves.
    pub(super) fn remove(
        &self,
        tenant: &TenantId,
        addr: &Addr<TenantActor>,
        gauges: Option<(String, u64)>,
    ) {
        let mut actors = self.actors.lock().unwrap_or_else(PoisonError::into_inner);
        if actors
            .get(tenant)
            .is_some_and(|current| current.addr == *addr)
        {
            actors.remove(tenant);
            if let Some((label, ends_ms)) = gauges {
                self.resting_gauges().insert(label, ends_ms);
            }
        }
    }

    fn resting_gauges(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.resting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Clone)]
pub struct TenantRegistry {
    inner: Arc<RegistryInner>,
}

/// Whether the tenant's tier exists in the configuration.
#[derive(Debug, thiserror::Error)]
#[error("tiers.{0} is not configured")]
pub struct UnknownTier(pub String);

impl TenantRegistry {
    pub fn new(
        config: Arc<Config>,
        clock: SharedClock,
        ledger: LedgerHandle,
        db: DatabaseConnection,
        labels: Arc<TenantLabels>,
        shared: Option<SharedStore>,
    ) -> TenantRegistry {
        let arbiters = (0..config.server.tenant_arbiters)
            .map(|_| OwnedArbiter::new())
            .collect();
        TenantRegistry {
            inner: Arc::new(RegistryInner {
                actors: Mutex::new(HashMap::new()),
                arbiters,
                fallback: OnceLock::new(),
                clock,
                ledger,
                db,
                config: RwLock::new(config),
                labels,
                shared,
                resting: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Zeroes the budget utilization of tenants whose actor stopped in an
    /// earlier budget period: nobody else would, until their next request.
    pub fn roll_resting_gauges(&self, now_ms: u64) {
        self.inner.resting_gauges().retain(|label, ends_ms| {
            if now_ms < *ends_ms {
                return true;
            }
            gauge_set(
                Metric::BudgetUtilizationRatio,
                &[("tenant", label.as_str())],
                0.0,
            );
            false
        });
    }

    /// A reloaded configuration: tenants started from now on get its tiers;
    /// push them to running ones with `update`.
    pub fn set_config(&self, config: Arc<Config>) {
        *self
            .inner
            .config
            .write()
            .unwrap_or_else(PoisonError::into_inner) = config;
    }

    fn config(&self) -> Arc<Config> {
        self.inner
            .config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The tenants with a running actor.
    pub fn running_tenants(&self) -> Vec<TenantId> {
        self.inner
            .actors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// The limits a tenant's record and tier give it.
    pub fn limits_for(&self, tenant: &TenantRecord) -> Result<Limits, UnknownTier> {
        let config = self.config();
        let tier = config
            .tiers
            .get(&tenant.tier)
            .ok_or_else(|| UnknownTier(tenant.tier.clone()))?;
        let rpm = tenant.rpm_limit.unwrap_or(tier.rpm).max(1);
        // A per-tenant rpm override also bounds the burst, or it would mean nothing.
        let burst = if tenant.rpm_limit.is_some() {
            tier.burst.min(rpm)
        } else {
            tier.burst
        };
        Ok(Limits {
            rpm,
            burst: burst.max(1),
            budget: tenant.monthly_budget,
            period: tenant.budget_period,
            mode: tenant.budget_mode,
            clamp_floor_tokens: config.billing.clamp_floor_tokens,
            feature_budgets: tenant.feature_budgets.clone(),
            feature_periods: tenant.feature_periods.clone(),
            tokens: TokenLimits {
                tpm: tenant.tpm_limit.or(tier.tpm),
                daily: tenant.daily_token_limit.or(tier.daily_tokens),
                monthly: tenant.monthly_token_limit.or(tier.monthly_tokens),
            },
            on_store_error: tenant.on_store_error.unwrap_or(tier.on_store_error),
            calendar: config.calendar.clone(),
            end_users_in_memory: config.billing.end_users_in_memory,
            credits: tenant.on_credits,
            rate_mode: tenant.rate_mode.unwrap_or(tier.rate_mode),
            alert_webhook_url: tenant.alert_webhook_url.clone(),
            alert_thresholds_percent: tenant
                .alert_thresholds_percent
                .clone()
                .unwrap_or_else(|| config.alerts.thresholds_percent.clone()),
        })
    }

    /// The tenant's actor, started if it is not running.
    pub fn handle(&self, tenant: &Arc<TenantRecord>) -> Result<TenantHandle, UnknownTier> {
        let running = self.running_actor(tenant)?;
        Ok(TenantHandle::new(running, self.clone(), Arc::clone(tenant)))
    }

    pub(super) fn running_actor(&self, tenant: &TenantRecord) -> Result<RunningActor, UnknownTier> {
        let mut actors = self
            .inner
            .actors
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = actors.get(&tenant.id).filter(|r| r.addr.connected()) {
            return Ok(running.clone());
        }
        let limits = self.limits_for(tenant)?;
        let open_holds = Arc::new(AtomicUsize::new(0));
        let running = RunningActor {
            addr: self.spawn(tenant.id.clone(), limits, open_holds.clone()),
            rate_limited: Arc::new(AtomicBool::new(false)),
            open_holds,
        };
        actors.insert(tenant.id.clone(), running.clone());
        Ok(running)
    }

    fn spawn(
        &self,
        tenant: TenantId,
        limits: Limits,
        open_holds: Arc<AtomicUsize>,
    ) -> Addr<TenantActor> {
        let arbiter = self.arbiter_for(&tenant);
        let inner = &self.inner;
        let config = self.config();
        let deps = TenantDeps {
            clock: inner.clock.clone(),
            ledger: inner.ledger.clone(),
            db: inner.db.clone(),
            price_version: config.price_version.clone(),
            alerts_config: Arc::new(config.alerts.clone()),
            shared: inner.shared.clone(),
            replicas: config.storage.replicas,
            reconcile_interval_ms: config.storage.reconcile_interval_ms,
            open_holds,
        };
        let registry = Arc::downgrade(&self.inner);
        let label = inner.labels.label(tenant.as_str());
        // The new actor publishes the gauges from now on.
        inner.resting_gauges().remove(&label);
        TenantActor::start_in_arbiter(&arbiter, move |_ctx| {
            TenantActor::new(tenant, label, limits, deps, registry)
        })
    }

    /// Where a new tenant actor runs: with `server.tenant_arbiters = 0`, on the
    /// thread that asks for it (the worker serving the tenant's first request),
    /// so that the requests that worker serves reach it without waking another
    /// thread; otherwise on one of the dedicated arbiters, by a hash of the id.
    fn arbiter_for(&self, tenant: &TenantId) -> ArbiterHandle {
        let arbiters = &self.inner.arbiters;
        if arbiters.is_empty() {
            return Arbiter::try_current().unwrap_or_else(|| {
                let fallback = &self.inner.fallback;
                fallback.get_or_init(OwnedArbiter::new).handle().clone()
            });
        }
        let mut hasher = DefaultHasher::new();
        tenant.hash(&mut hasher);
        let index = usize::try_from(hasher.finish() % arbiters.len() as u64).unwrap_or(0);
        arbiters[index % arbiters.len()].handle().clone()
    }

    /// Pushes changed limits to a running actor; a stopped one reads them on start.
    pub fn update(&self, tenant: &TenantRecord) {
        let Ok(limits) = self.limits_for(tenant) else {
            return;
        };
        let actors = self
            .inner
            .actors
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = actors.get(&tenant.id) {
            running.addr.do_send(UpdateLimits(limits));
        }
    }

    pub fn running(&self) -> usize {
        self.inner
            .actors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
