//! `RedisQuota`: the shared store behind the `QuotaStore` trait. Every step
//! is one script (`SharedQuota`); a month no replica has seeded yet is seeded
//! from the ledger first, inside the step, so the actor sees the same answers
//! as from the book, which is seeded when the actor starts.

use futures_util::FutureExt;

use super::{Reserved, SharedQuota, StoreFailure, Unseeded, threshold_amount};
use crate::calendar::Period;
use crate::ids::KeyId;
use crate::money::Nanos;
use crate::tenant::book::{Balance, Seed};
use crate::tenant::book::{BudgetStatus, Granted, Limits, RateDecision};
use crate::tenant::handle::QuotaError;
use crate::tenant::in_flight::{Call, CallId};
use crate::tenant::messages::Admitted;
use crate::tenant::seed::SeedSource;
use crate::tenant::store::{
    Close, Closed, CreditAdded, QuotaAnswer, QuotaStore, Reservation, StoreReply,
};

/// One tenant's decisions on Redis.
#[derive(Clone)]
pub struct RedisQuota {
    quota: SharedQuota,
    limits: Limits,
    source: SeedSource,
    /// Spend the book took while Redis was away reaches Redis before it decides again.
    rejoin: bool,
}

impl RedisQuota {
    /// Its settles report the thresholds of `limits.alert_thresholds_percent` they cross.
    pub fn new(quota: SharedQuota, limits: Limits, source: SeedSource) -> RedisQuota {
        RedisQuota {
            quota,
            limits,
            source,
            rejoin: false,
        }
    }

    /// The script-level view, for the upkeep that is Redis's alone (sweeps,
    /// reconciliation, retried settles).
    pub fn quota(&self) -> &SharedQuota {
        &self.quota
    }

    /// This store, raising itself to the ledger before its next step.
    #[must_use]
    pub fn rejoining(&self) -> RedisQuota {
        RedisQuota {
            rejoin: true,
            ..self.clone()
        }
    }

    /// Runs `step` on a copy of this store's state (the future outlives `&self`).
    fn pending<T: 'static, F>(
        &self,
        now_ms: u64,
        step: impl FnOnce(RedisQuota) -> F + 'static,
    ) -> StoreReply<T>
    where
        F: Future<Output = Result<QuotaAnswer<T>, StoreFailure>> + 'static,
    {
        let store = self.clone();
        StoreReply::Pending(
            async move {
                if store.rejoin {
                    let seed = store.source.clone().load(now_ms).await;
                    let seed = seed.map_err(|e| StoreFailure(format!("ledger: {e}")))?;
                    store.quota.raise(&seed, now_ms).await?;
                }
                step(store).await
            }
            .boxed_local(),
        )
    }

    /// Seeds the month from the ledger unless another replica already did.
    async fn seed(&self, now_ms: u64) -> Result<QuotaAnswer<()>, StoreFailure> {
        let seed = match self.ledger_seed(now_ms).await {
            Ok(seed) => seed,
            Err(refused) => return Ok(Err(refused)),
        };
        let thresholds = &self.limits.alert_thresholds_percent;
        let reached = reached(thresholds, self.limits.budget, seed.committed);
        self.quota.seed(&seed, &reached, now_ms).await?;
        Ok(Ok(()))
    }

    /// The tenant's spend and top-ups as the ledger has them; unreadable, the
    /// step is refused rather than started from nothing.
    async fn ledger_seed(&self, now_ms: u64) -> Result<Seed, QuotaError> {
        self.source.clone().load(now_ms).await.map_err(|error| {
            tracing::error!(tenant = %self.source.tenant, error = %error, "Cannot read the tenant's spend from the ledger to seed the shared store; refusing.");
            QuotaError::LedgerUnreadable
        })
    }

    /// Starts the request's end user's window from the ledger unless another replica did.
    async fn seed_end_user(
        &self,
        reservation: &Reservation,
        now_ms: u64,
    ) -> Result<QuotaAnswer<()>, StoreFailure> {
        let Some(hold) = &reservation.request.end_user else {
            return Ok(Err(QuotaError::Unavailable));
        };
        let window = self.quota.end_user_window(hold, now_ms);
        let today = self.quota.local_day(now_ms);
        let loaded = self
            .source
            .clone()
            .end_user(hold.id.clone(), window, today)
            .await;
        let seed = match loaded {
            Ok(seed) => seed,
            Err(error) => {
                tracing::error!(tenant = %self.source.tenant, error = %error, "Cannot read an end user's spend from the ledger to seed the shared store; refusing.");
                return Ok(Err(QuotaError::LedgerUnreadable));
            }
        };
        self.quota.seed_end_user(hold, seed, now_ms).await?;
        Ok(Ok(()))
    }

    /// Starts a day, week or lifetime of the tenant's budgets from the ledger
    /// unless another replica did.
    async fn seed_window(
        &self,
        period: Period,
        now_ms: u64,
    ) -> Result<QuotaAnswer<()>, StoreFailure> {
        match self.ledger_seed(now_ms).await {
            Ok(seed) => self.quota.seed_window(period, &seed, now_ms).await.map(Ok),
            Err(refused) => Ok(Err(refused)),
        }
    }

    /// Starts the tenant's balances from the ledger unless another replica did.
    async fn seed_credit(&self, now_ms: u64) -> Result<QuotaAnswer<()>, StoreFailure> {
        match self.ledger_seed(now_ms).await {
            Ok(seed) => self.quota.seed_credit(&seed).await.map(Ok),
            Err(refused) => Ok(Err(refused)),
        }
    }

    /// A granted or refused reservation; an unseeded month, end user or
    /// balance is seeded, then reserved in (each at most once).
    async fn finish(
        &self,
        mut reserved: Reserved,
        reservation: &Reservation,
        meta: &str,
        now_ms: u64,
    ) -> Result<QuotaAnswer<Granted>, StoreFailure> {
        // The month, up to three windows, the end user and the balances: each at most once.
        for _ in 0..6 {
            let seeded = match reserved {
                Reserved::NeedSeed => self.seed(now_ms).await?,
                Reserved::NeedEndUser => self.seed_end_user(reservation, now_ms).await?,
                Reserved::NeedCredit => self.seed_credit(now_ms).await?,
                Reserved::NeedWindow(period) => self.seed_window(period, now_ms).await?,
                Reserved::Granted(_) | Reserved::Refused(_) => break,
            };
            if let Err(error) = seeded {
                return Ok(Err(error));
            }
            let (id, request) = (reservation.id, &reservation.request);
            reserved = self
                .quota
                .reserve(id, request, &self.limits, meta, now_ms)
                .await?;
        }
        Ok(match reserved {
            Reserved::Granted(granted) => Ok(granted),
            Reserved::Refused(refusal) => Err(refusal.into()),
            Reserved::NeedSeed
            | Reserved::NeedEndUser
            | Reserved::NeedCredit
            | Reserved::NeedWindow(_) => Err(QuotaError::Unavailable),
        })
    }
}

/// Thresholds already reached by the ledger's committed spend.
pub fn reached(thresholds: &[u32], budget: Option<Nanos>, committed: Nanos) -> Vec<u32> {
    let Some(budget) = budget.filter(|b| b.get() > 0) else {
        return Vec::new();
    };
    thresholds
        .iter()
        .copied()
        .filter(|t| committed >= threshold_amount(budget, *t))
        .collect()
}

/// The meta as Redis keeps it beside the reservation.
fn meta_json(reservation: &Reservation) -> String {
    serde_json::to_string(&reservation.meta).unwrap_or_default()
}

impl QuotaStore for RedisQuota {
    fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    fn check_rate(&mut self, now_ms: u64) -> StoreReply<RateDecision> {
        self.pending(now_ms, move |store| async move {
            store.quota.check_rate(&store.limits, now_ms).await.map(Ok)
        })
    }

    fn reserve(&mut self, reservation: &Reservation, now_ms: u64) -> StoreReply<Granted> {
        let reservation = reservation.clone();
        self.pending(now_ms, move |store| async move {
            let meta = meta_json(&reservation);
            let (id, request) = (reservation.id, &reservation.request);
            let reserved = store
                .quota
                .reserve(id, request, &store.limits, &meta, now_ms)
                .await?;
            store.finish(reserved, &reservation, &meta, now_ms).await
        })
    }

    fn check_rate_and_reserve(
        &mut self,
        reservation: &Reservation,
        now_ms: u64,
    ) -> StoreReply<Admitted> {
        let reservation = reservation.clone();
        self.pending(now_ms, move |store| async move {
            let meta = meta_json(&reservation);
            let (id, request) = (reservation.id, &reservation.request);
            let (rate, reserved) = store
                .quota
                .check_rate_and_reserve(id, request, &store.limits, &meta, now_ms)
                .await?;
            let reservation = match reserved {
                Some(reserved) => Some(store.finish(reserved, &reservation, &meta, now_ms).await?),
                None => None,
            };
            Ok(Ok(Admitted { rate, reservation }))
        })
    }

    fn settle(&mut self, close: Close, now_ms: u64) -> StoreReply<Closed> {
        if !self.quota.health().is_up() {
            // Not waited for: the actor keeps the close and retries it.
            let down = StoreFailure("marked down".to_owned());
            return StoreReply::Pending(std::future::ready(Err(down)).boxed_local());
        }
        self.pending(now_ms, move |store| async move {
            let Close {
                id,
                charged,
                tokens,
            } = close;
            let closed = store
                .quota
                .settle(
                    id,
                    charged,
                    tokens,
                    &store.limits,
                    &store.limits.alert_thresholds_percent,
                    now_ms,
                )
                .await?;
            Ok(Ok(closed))
        })
    }

    fn status(&mut self, now_ms: u64) -> StoreReply<BudgetStatus> {
        self.pending(now_ms, move |store| async move {
            let period = store.limits.period;
            let mut totals = store.quota.status(period, now_ms).await?;
            // At most the month, then the window.
            for _ in 0..2 {
                let seeded = match totals {
                    Ok(_) => break,
                    Err(Unseeded::Month) => store.seed(now_ms).await?,
                    Err(Unseeded::Window(period)) => store.seed_window(period, now_ms).await?,
                };
                if let Err(error) = seeded {
                    return Ok(Err(error));
                }
                totals = store.quota.status(period, now_ms).await?;
            }
            let (committed, reserved) = totals.unwrap_or_default();
            let budget = store.limits.budget;
            Ok(Ok(BudgetStatus {
                budget,
                committed,
                reserved,
                remaining: budget.map(|b| b.saturating_sub(committed.saturating_add(reserved))),
                period: store.limits.calendar.window(period, now_ms).key,
            }))
        })
    }

    fn add_credit(&mut self, top_up: &CreditAdded) -> StoreReply<()> {
        let top_up = top_up.clone();
        self.pending(0, move |store| async move {
            store
                .quota
                .add_credit(top_up.key.as_ref(), &top_up.grant)
                .await
                .map(Ok)
        })
    }

    fn enter_call(&mut self, call: &Call, now_ms: u64) -> StoreReply<()> {
        let call = call.clone();
        self.pending(now_ms, move |store| async move {
            let entered = store.quota.enter_call(&call, now_ms).await?;
            Ok(entered.map_err(QuotaError::from))
        })
    }

    fn leave_call(&mut self, id: CallId, key: &KeyId, now_ms: u64) -> StoreReply<()> {
        let key = key.clone();
        self.pending(now_ms, move |store| async move {
            store.quota.leave_call(id, &key).await.map(Ok)
        })
    }

    fn balance(&mut self, key: Option<KeyId>, now_ms: u64) -> StoreReply<Balance> {
        self.pending(now_ms, move |store| async move {
            let mut balance = store.quota.balance(key.as_ref(), now_ms).await?;
            if balance.is_none() {
                if let Err(error) = store.seed_credit(now_ms).await? {
                    return Ok(Err(error));
                }
                balance = store.quota.balance(key.as_ref(), now_ms).await?;
            }
            Ok(Ok(balance.unwrap_or_default()))
        })
    }
}
