//! TenantActor: every quota decision of one tenant on this replica goes
//! through it, one at a time. Without Redis the decisions are made on the
//! in-memory `QuotaBook`, synchronously, so they serialize by construction.
//! With Redis (`shared`) each decision is one atomic script: Redis runs them
//! one at a time for every replica, so replicas agree, and the actor does not
//! hold its next message back while a reply is on its way (see `decision.rs`);
//! the state it keeps (mode, local book, pending settles) changes only in the
//! synchronous parts, between awaits. When Redis fails the tenant's
//! `on_store_error` policy decides: `fail_closed` refuses with 503, `local`
//! continues on the book with this replica's share of the limits (reseeded
//! from the ledger), and the tenant rejoins Redis by itself once it answers.
//!
//! On start the actor loads the period's committed spend from the ledger
//! (after flushing it) before answering anything.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use actix::prelude::*;
use futures_util::future::LocalBoxFuture;
use sea_orm::DatabaseConnection;

use super::alerts::{self, AlertBook, AlertNotice};
use super::book::{BudgetStatus, Granted, Limits, QuotaBook, RateDecision, ReserveRequest, Seed};
use super::decision::Decision;
use super::handle::QuotaError;
use super::messages::{
    Admitted, CheckRate, GetStatus, RateAndReserve, Release, ReservationMeta, Reserve, Settle,
    SettleReply, UpdateLimits,
};
use super::registry::RegistryInner;
use super::seed::SeedSource;
use super::share::{local_share, share_budget};
use super::shared::expiry;
use super::shared::{
    Reserved, SharedQuota, SharedSettled, SharedStore, StoreFailure, threshold_amount,
};
use crate::clock::SharedClock;
use crate::config::{AlertsConfig, StoreErrorPolicy};
use crate::ids::{EventId, ReservationId, TenantId};
use crate::ledger::{AttemptStatus, LedgerHandle, UsageEvent, UsageKind};
use crate::money::Nanos;
use crate::period;
use crate::pricing::Usage;
use crate::telemetry::metrics::{
    Metric, OTHER_TENANTS, as_gauge_u64, counter_add, gauge_set, ratio, signed_difference,
};

/// How often expired reservations are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// An actor with no reservations and no message for this long stops.
const IDLE_STOP_MS: u64 = 5 * 60 * 1000;
const MAILBOX_CAPACITY: usize = 4096;
/// Reservations of the local book beside a shared store get ids from here,
/// so they never collide with the store's.
const LOCAL_IDS: u64 = 1 << 62;

/// What every tenant actor shares.
pub struct TenantDeps {
    pub clock: SharedClock,
    pub ledger: LedgerHandle,
    pub db: DatabaseConnection,
    pub price_version: String,
    pub alerts_config: Arc<AlertsConfig>,
    pub shared: Option<SharedStore>,
    pub replicas: u32,
    pub reconcile_interval_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Decisions in Redis (or, without Redis, in the book).
    Shared,
    /// Redis failed and the tenant is `local`: the book decides with this replica's share.
    Local,
}

/// Where the next decision is made.
enum Path {
    Book,
    Closed,
    Shared { quota: SharedQuota, rejoin: bool },
}

/// How a decision through the shared store ended.
enum Outcome<T> {
    Shared(Result<T, QuotaError>),
    /// The store failed; with the `local` policy, the ledger's seed to continue from.
    Down(Option<Result<Seed, String>>),
}

/// A settle the shared store did not take; retried until it does.
#[derive(Debug, Clone, Copy)]
struct PendingClose {
    id: ReservationId,
    charged: Nanos,
    tokens: u64,
}

pub struct TenantActor {
    tenant: TenantId,
    /// The tenant's metric label (bounded by `TenantLabels`).
    label: String,
    /// The tenant's own limits (the book holds a share of them in `Local` mode).
    limits: Limits,
    book: QuotaBook,
    meta: HashMap<ReservationId, ReservationMeta>,
    clock: SharedClock,
    ledger: LedgerHandle,
    db: DatabaseConnection,
    price_version: String,
    last_active_ms: u64,
    registry: Weak<RegistryInner>,
    alerts: AlertBook,
    alerts_config: Arc<AlertsConfig>,
    shared: Option<SharedQuota>,
    mode: Mode,
    replicas: u32,
    /// The last ledger seed: the base of this replica's share in `Local` mode.
    seed: Seed,
    pending: Vec<PendingClose>,
    /// Committed and reserved in Redis at the last settle (for the gauges).
    shared_totals: Option<(Nanos, Nanos)>,
    reconcile_interval_ms: u64,
    last_reconcile_ms: u64,
    /// When the gauges were last published (their budget period is that month's).
    published_ms: Option<u64>,
}

impl TenantActor {
    pub(super) fn new(
        tenant: TenantId,
        label: String,
        limits: Limits,
        deps: TenantDeps,
        registry: Weak<RegistryInner>,
    ) -> TenantActor {
        let TenantDeps {
            clock,
            ledger,
            db,
            price_version,
            alerts_config,
            shared,
            replicas,
            reconcile_interval_ms,
        } = deps;
        let now = clock.now_ms();
        let shared = shared.map(|store| store.tenant(&tenant));
        let book = QuotaBook::new(limits.clone(), Nanos::ZERO, now);
        TenantActor {
            tenant,
            label,
            book: if shared.is_some() {
                book.first_id(LOCAL_IDS)
            } else {
                book
            },
            limits,
            meta: HashMap::new(),
            clock,
            ledger,
            db,
            price_version,
            last_active_ms: now,
            registry,
            alerts: AlertBook::new(&alerts_config.thresholds_percent),
            alerts_config,
            shared,
            mode: Mode::Shared,
            replicas,
            seed: Seed::default(),
            pending: Vec::new(),
            shared_totals: None,
            reconcile_interval_ms,
            last_reconcile_ms: now,
            published_ms: None,
        }
    }

    fn seed_source(&self) -> SeedSource {
        SeedSource {
            ledger: self.ledger.clone(),
            db: self.db.clone(),
            tenant: self.tenant.clone(),
        }
    }

    fn path(&self) -> Path {
        let Some(quota) = &self.shared else {
            return Path::Book;
        };
        let up = quota.health().is_up();
        match (self.mode, up) {
            (Mode::Shared, true) => Path::Shared {
                quota: quota.clone(),
                rejoin: false,
            },
            (Mode::Local, true) => Path::Shared {
                quota: quota.clone(),
                rejoin: true,
            },
            (Mode::Local, false) => Path::Book,
            // Straight to the policy: a store marked down is not waited for.
            (Mode::Shared, false) => match self.limits.on_store_error {
                StoreErrorPolicy::Local => Path::Shared {
                    quota: quota.clone(),
                    rejoin: false,
                },
                StoreErrorPolicy::FailClosed => Path::Closed,
            },
        }
    }

    /// Runs `shared` through Redis, or `local` on the book, as the store's
    /// state and the tenant's policy say.
    fn decide<T: 'static>(
        &mut self,
        now: u64,
        shared: impl FnOnce(
            SharedQuota,
            SeedSource,
            Limits,
        )
            -> LocalBoxFuture<'static, Result<Result<T, QuotaError>, StoreFailure>>
        + 'static,
        local: impl FnOnce(&mut Self, u64) -> Result<T, QuotaError> + 'static,
        // A reservation `shared` may leave in Redis although its reply is lost.
        lost: Option<ReservationId>,
    ) -> Decision<Self, Result<T, QuotaError>> {
        match self.path() {
            Path::Book => {
                if self.shared.is_some() {
                    counter_add(Metric::QuotaStoreFallbacksTotal, &[("policy", "local")], 1);
                }
                Decision::Now(local(self, now))
            }
            Path::Closed => {
                counter_add(
                    Metric::QuotaStoreFallbacksTotal,
                    &[("policy", "fail_closed")],
                    1,
                );
                Decision::Now(Err(QuotaError::StoreDown))
            }
            Path::Shared { quota, rejoin } => {
                let source = self.seed_source();
                let policy = self.limits.on_store_error;
                let limits = self.limits.clone();
                let future = async move {
                    if rejoin {
                        // Spend made on the local store reaches Redis before Redis decides again.
                        let seed = source.clone().load(now).await;
                        match &seed {
                            Ok(loaded) if quota.raise(loaded, now).await.is_ok() => {}
                            _ => return Outcome::Down(Some(seed)),
                        }
                    }
                    match shared(quota, source.clone(), limits).await {
                        Ok(result) => Outcome::Shared(result),
                        Err(_) => Outcome::Down(match policy {
                            StoreErrorPolicy::Local => Some(source.load(now).await),
                            StoreErrorPolicy::FailClosed => None,
                        }),
                    }
                };
                Decision::wait(future.into_actor(self).map(
                    move |outcome, act, _ctx| match outcome {
                        Outcome::Shared(result) => {
                            if act.mode == Mode::Local {
                                act.rejoined();
                            }
                            result
                        }
                        Outcome::Down(seed) => {
                            if let Some(id) = lost {
                                // The script may have run with its reply lost: release it once Redis answers.
                                act.pending.push(PendingClose {
                                    id,
                                    charged: Nanos::ZERO,
                                    tokens: 0,
                                });
                            }
                            act.fall_back(seed, now)?;
                            local(act, now)
                        }
                    },
                ))
            }
        }
    }

    fn fall_back(
        &mut self,
        seed: Option<Result<Seed, String>>,
        now: u64,
    ) -> Result<(), QuotaError> {
        let Some(seed) = seed else {
            counter_add(
                Metric::QuotaStoreFallbacksTotal,
                &[("policy", "fail_closed")],
                1,
            );
            return Err(QuotaError::StoreDown);
        };
        counter_add(Metric::QuotaStoreFallbacksTotal, &[("policy", "local")], 1);
        if self.mode == Mode::Local {
            return Ok(());
        }
        match seed {
            Ok(seed) => self.seed = seed,
            Err(error) => {
                tracing::error!(tenant = %self.tenant, error = %error, "Cannot reload the tenant's spend from the ledger; its local share starts from the last load.");
            }
        }
        self.book.reseed(&self.seed, now);
        self.book
            .set_limits(local_share(&self.limits, &self.seed, self.replicas));
        self.mode = Mode::Local;
        tracing::warn!(tenant = %self.tenant, replicas = self.replicas, "Serving the tenant from this replica's share of its limits until the shared quota store answers.");
        Ok(())
    }

    fn rejoined(&mut self) {
        self.mode = Mode::Shared;
        self.book.set_limits(self.limits.clone());
        tracing::info!(tenant = %self.tenant, "The tenant's decisions are back on the shared quota store.");
    }

    /// Thresholds already reached by the ledger's committed spend.
    fn reached(thresholds: &[u32], budget: Option<Nanos>, committed: Nanos) -> Vec<u32> {
        let Some(budget) = budget.filter(|b| b.get() > 0) else {
            return Vec::new();
        };
        thresholds
            .iter()
            .copied()
            .filter(|t| committed >= threshold_amount(budget, *t))
            .collect()
    }

    /// Fires the budget thresholds committed spend has newly crossed (book modes).
    fn check_alerts(&mut self, now: u64) {
        let status = self.book.status(now);
        let budget = self.limits.budget;
        for threshold in self
            .alerts
            .crossed(&status.period, status.committed, budget)
        {
            self.fire(threshold, status.committed, &status.period);
        }
    }

    fn fire(&self, threshold: u32, committed: Nanos, period: &str) {
        let Some(budget) = self.limits.budget else {
            return;
        };
        let notice = AlertNotice {
            tenant: self.tenant.to_string(),
            period: period.to_owned(),
            committed,
            budget,
            threshold,
        };
        alerts::fire(&self.alerts_config, notice);
    }

    /// Budget gauges after every change of committed or reserved money.
    fn publish(&mut self, now: u64) {
        // Tenants folded into `other` share one series: a per-tenant level there would flap.
        if self.label == OTHER_TENANTS {
            return;
        }
        let (committed, reserved) = match (self.mode, self.shared_totals) {
            (Mode::Shared, Some(totals)) if self.shared.is_some() => totals,
            _ => {
                let status = self.book.status(now);
                (status.committed, status.reserved)
            }
        };
        self.published_ms = Some(now);
        let labels = [("tenant", self.label.as_str())];
        gauge_set(Metric::ReservedNanos, &labels, as_gauge_u64(reserved.get()));
        if let Some(budget) = self.limits.budget {
            gauge_set(
                Metric::BudgetUtilizationRatio,
                &labels,
                ratio(committed.get(), budget.get()),
            );
        }
    }

    fn touch(&mut self) -> u64 {
        let now = self.clock.now_ms();
        self.last_active_ms = now;
        now
    }

    fn sweep(&mut self, ctx: &mut Context<Self>) {
        let now = self.clock.now_ms();
        let expired = self.book.expire(now);
        let any = !expired.is_empty();
        for (id, amount) in expired {
            let meta = self.meta.remove(&id);
            self.record_orphan(meta, amount, now);
        }
        let new_period = self
            .published_ms
            .is_some_and(|at| period::month_key(at) != period::month_key(now));
        if new_period {
            // Redis's figures of the month gone: the next settle brings the new month's.
            self.shared_totals = None;
        }
        if any || new_period {
            self.publish(now);
            self.check_alerts(now);
        }
        if let Some(quota) = self.shared.clone()
            && quota.health().is_up()
        {
            self.sweep_shared(quota, now, ctx);
        }
        let idle = now.saturating_sub(self.last_active_ms) >= IDLE_STOP_MS;
        if idle && self.book.outstanding() == 0 && self.pending.is_empty() {
            ctx.stop();
        }
    }

    /// Retries settles Redis missed, commits expired shared reservations,
    /// and now and then compares Redis with the ledger.
    fn sweep_shared(&mut self, quota: SharedQuota, now: u64, ctx: &mut Context<Self>) {
        let pending = std::mem::take(&mut self.pending);
        let limits = self.limits.clone();
        let retry = quota.clone();
        let db = self.db.clone();
        let tenant = self.tenant.clone();
        let work = async move {
            let mut missed = Vec::new();
            for close in pending {
                if retry
                    .settle(close.id, close.charged, close.tokens, &limits, &[], now)
                    .await
                    .is_err()
                {
                    missed.push(close);
                }
            }
            // Settles this replica still owed go first: their reservations must not expire.
            let orphaned = if missed.is_empty() {
                expiry::sweep(&retry, &db, &tenant, now)
                    .await
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            (missed, orphaned)
        };
        ctx.spawn(
            work.into_actor(self)
                .map(move |(missed, orphaned), act, _| {
                    act.pending.extend(missed);
                    for orphan in orphaned {
                        act.record_orphan(Some(orphan.meta), orphan.amount, now);
                    }
                }),
        );
        if now.saturating_sub(self.last_reconcile_ms) >= self.reconcile_interval_ms {
            self.last_reconcile_ms = now;
            let source = self.seed_source();
            let reconcile = async move {
                let seed = source.load(now).await.ok()?;
                let before = quota.raise(&seed, now).await.ok()??;
                Some((before, seed.committed))
            };
            ctx.spawn(reconcile.into_actor(self).map(|drift, act, _| {
                if let Some((redis, ledger)) = drift
                    && act.label != OTHER_TENANTS
                {
                    gauge_set(
                        Metric::QuotaDriftNanos,
                        &[("tenant", act.label.as_str())],
                        signed_difference(redis.get(), ledger.get()),
                    );
                    if ledger > redis {
                        tracing::warn!(tenant = %act.tenant, redis = %redis, ledger = %ledger, "The shared store had less committed spend than the ledger; raised to the ledger.");
                    }
                }
            }));
        }
    }

    fn record_orphan(&self, meta: Option<ReservationMeta>, amount: Nanos, now: u64) {
        counter_add(Metric::ReservationsOrphanedTotal, &[], 1);
        let Some(meta) = meta else { return };
        tracing::warn!(tenant = %self.tenant, request_id = %meta.request_id, reserved = %amount, "Reservation expired unsettled; committed at its reserved amount.");
        self.ledger.record(UsageEvent {
            event_id: EventId::orphan_of(&meta.request_id),
            request_id: meta.request_id,
            client_request_id: meta.client_request_id,
            trace_id: meta.trace_id,
            tenant: self.tenant.clone(),
            key: meta.key,
            feature: meta.feature,
            api: meta.api,
            route: meta.route,
            provider: String::new(),
            model: String::new(),
            attempt: 0,
            status: AttemptStatus::Orphaned,
            upstream_status: None,
            usage: Usage::default(),
            usage_kind: UsageKind::None,
            reserved: amount,
            charged: amount,
            price_version: self.price_version.clone(),
            latency_ms: 0,
            ttft_ms: None,
            error: Some("reservation expired unsettled".to_owned()),
            created_at_ms: now,
        });
    }

    fn after_shared_settle(&mut self, settled: &SharedSettled, now: u64) {
        if matches!(settled.settled, super::book::Settled::AlreadyClosed) {
            return;
        }
        self.shared_totals = Some((settled.committed, settled.reserved));
        self.publish(now);
        let month = period::month_key(now);
        for threshold in &settled.fired {
            self.fire(*threshold, settled.committed, &month);
        }
    }

    fn settle_local(&mut self, msg: Settle, now: u64, ctx: &mut Context<Self>) -> SettleReply {
        let meta = self.meta.remove(&msg.id);
        let settled = self.book.settle(msg.id, msg.charged, msg.tokens, now);
        // Held on the local store before Redis came back: Redis learns of the spend now.
        if self.mode == Mode::Shared
            && let (Some(quota), Some(meta)) = (self.shared.clone(), meta)
            && matches!(settled, super::book::Settled::Committed { .. })
        {
            let absorb = async move {
                quota
                    .absorb(
                        msg.charged,
                        meta.key.as_str(),
                        &meta.feature,
                        msg.tokens,
                        now,
                    )
                    .await
            };
            ctx.spawn(absorb.into_actor(self).map(|result, act, _| {
                if let Err(error) = result {
                    tracing::warn!(tenant = %act.tenant, error = %error, "Spend settled locally did not reach the shared store; reconciliation will raise it.");
                }
            }));
        }
        self.publish(now);
        self.check_alerts(now);
        SettleReply {
            settled,
            remaining: self.book.remaining(),
        }
    }

    /// In `Local` mode a key's budget is shared out like the tenant's.
    fn local_key_budget(&self, key: &crate::ids::KeyId, budget: Option<Nanos>) -> Option<Nanos> {
        let budget = budget?;
        if self.mode != Mode::Local {
            return Some(budget);
        }
        let committed = self.seed.keys.get(key).copied().unwrap_or_default();
        Some(share_budget(budget, committed, self.replicas))
    }
}

/// Seeds the tenant's month in Redis from the ledger if no replica has yet.
async fn seed_shared(
    quota: &SharedQuota,
    source: SeedSource,
    limits: &Limits,
    thresholds: &[u32],
    now: u64,
) -> Result<Result<(), QuotaError>, StoreFailure> {
    let Ok(seed) = source.load(now).await else {
        return Ok(Err(QuotaError::Unavailable));
    };
    let reached = TenantActor::reached(thresholds, limits.budget, seed.committed);
    quota.seed(&seed, &reached, now).await?;
    Ok(Ok(()))
}

impl Actor for TenantActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        ctx.run_interval(SWEEP_INTERVAL, Self::sweep);
        let load = self.seed_source().load(self.clock.now_ms());
        // `wait` holds every message until the committed spend is known.
        ctx.wait(load.into_actor(self).map(|result, act, ctx| match result {
            Ok(seed) => {
                let now = act.clock.now_ms();
                act.book.reseed(&seed, now);
                act.seed = seed;
                // Thresholds passed before this actor started were reported by an earlier one.
                let status = act.book.status(now);
                let _ = act
                    .alerts
                    .crossed(&status.period, status.committed, act.limits.budget);
                act.publish(now);
            }
            Err(error) => {
                tracing::error!(tenant = %act.tenant, error = %error, "Cannot load the tenant's committed spend; refusing its requests.");
                ctx.stop();
            }
        }));
    }

    fn stopping(&mut self, ctx: &mut Context<Self>) -> Running {
        if let Some(registry) = self.registry.upgrade() {
            // Its gauges stay as they are, until a new month makes them wrong.
            let gauges = self
                .published_ms
                .filter(|_| self.label != OTHER_TENANTS && self.limits.budget.is_some())
                .map(|at| (self.label.clone(), period::month_key(at)));
            registry.remove(&self.tenant, &ctx.address(), gauges);
        }
        Running::Stop
    }
}

impl Handler<CheckRate> for TenantActor {
    type Result = Decision<Self, Result<RateDecision, QuotaError>>;

    fn handle(&mut self, _msg: CheckRate, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        self.decide(
            now,
            move |quota, _, limits| {
                Box::pin(async move { quota.check_rate(&limits, now).await.map(Ok) })
            },
            |act, now| Ok(act.book.check_rate(now)),
            None,
        )
    }
}

impl Handler<Reserve> for TenantActor {
    type Result = Decision<Self, Result<Granted, QuotaError>>;

    fn handle(&mut self, msg: Reserve, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let plan = self.plan_reserve(msg);
        let id = plan.id;
        let (shared, local) = plan.split();
        self.decide(
            now,
            move |quota, source, limits| Box::pin(shared.run(quota, source, limits, now)),
            move |act, now| local.run(act, now),
            Some(id),
        )
    }
}

impl Handler<RateAndReserve> for TenantActor {
    type Result = Decision<Self, Result<Admitted, QuotaError>>;

    fn handle(&mut self, msg: RateAndReserve, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let plan = self.plan_reserve(msg.0);
        let id = plan.id;
        let (shared, local) = plan.split();
        self.decide(
            now,
            move |quota, source, limits| Box::pin(shared.run_with_rate(quota, source, limits, now)),
            move |act, now| {
                let rate = act.book.check_rate(now);
                let reservation = rate.allowed.then(|| local.run(act, now));
                Ok(Admitted { rate, reservation })
            },
            Some(id),
        )
    }
}

/// One reservation, ready to be decided through Redis or on the book.
struct ReservePlan {
    id: ReservationId,
    request: ReserveRequest,
    meta: ReservationMeta,
    thresholds: Vec<u32>,
    /// The meta as Redis stores it; empty without a shared store.
    meta_json: String,
}

struct SharedReserve {
    id: ReservationId,
    request: ReserveRequest,
    meta_json: String,
    thresholds: Vec<u32>,
}

struct LocalReserve {
    request: ReserveRequest,
    meta: ReservationMeta,
}

impl TenantActor {
    fn plan_reserve(&self, msg: Reserve) -> ReservePlan {
        let Reserve { request, meta } = msg;
        let meta_json = if self.shared.is_some() {
            serde_json::to_string(&meta).unwrap_or_default()
        } else {
            String::new()
        };
        ReservePlan {
            // Below the local book's ids; random, so replicas never pick the same one.
            id: ReservationId(rand::random::<u64>() % LOCAL_IDS),
            request,
            meta,
            thresholds: self.alerts_config.thresholds_percent.clone(),
            meta_json,
        }
    }
}

impl ReservePlan {
    fn split(self) -> (SharedReserve, LocalReserve) {
        (
            SharedReserve {
                id: self.id,
                request: self.request.clone(),
                meta_json: self.meta_json,
                thresholds: self.thresholds,
            },
            LocalReserve {
                request: self.request,
                meta: self.meta,
            },
        )
    }
}

impl SharedReserve {
    async fn run(
        self,
        quota: SharedQuota,
        source: SeedSource,
        limits: Limits,
        now: u64,
    ) -> Result<Result<Granted, QuotaError>, StoreFailure> {
        let reserved = quota
            .reserve(self.id, &self.request, &limits, &self.meta_json, now)
            .await?;
        self.finish(reserved, quota, source, limits, now).await
    }

    /// The rate check and the first attempt in one script.
    async fn run_with_rate(
        self,
        quota: SharedQuota,
        source: SeedSource,
        limits: Limits,
        now: u64,
    ) -> Result<Result<Admitted, QuotaError>, StoreFailure> {
        let (rate, reserved) = quota
            .check_rate_and_reserve(self.id, &self.request, &limits, &self.meta_json, now)
            .await?;
        let Some(reserved) = reserved else {
            return Ok(Ok(Admitted {
                rate,
                reservation: None,
            }));
        };
        let granted = self.finish(reserved, quota, source, limits, now).await?;
        Ok(Ok(Admitted {
            rate,
            reservation: Some(granted),
        }))
    }

    /// A month no replica has seeded yet is seeded from the ledger, then reserved in.
    async fn finish(
        self,
        mut reserved: Reserved,
        quota: SharedQuota,
        source: SeedSource,
        limits: Limits,
        now: u64,
    ) -> Result<Result<Granted, QuotaError>, StoreFailure> {
        if matches!(reserved, Reserved::NeedSeed) {
            if let Err(error) = seed_shared(&quota, source, &limits, &self.thresholds, now).await? {
                return Ok(Err(error));
            }
            reserved = quota
                .reserve(self.id, &self.request, &limits, &self.meta_json, now)
                .await?;
        }
        Ok(match reserved {
            Reserved::Granted(granted) => Ok(granted),
            Reserved::Refused(refusal) => Err(refusal.into()),
            Reserved::NeedSeed => Err(QuotaError::Unavailable),
        })
    }
}

impl LocalReserve {
    fn run(self, act: &mut TenantActor, now: u64) -> Result<Granted, QuotaError> {
        let LocalReserve { mut request, meta } = self;
        request.key_budget = act.local_key_budget(&request.key, request.key_budget);
        let granted = act.book.reserve(request, now)?;
        act.meta.insert(granted.id, meta);
        act.publish(now);
        Ok(granted)
    }
}

impl Handler<Settle> for TenantActor {
    type Result = Decision<Self, Result<SettleReply, QuotaError>>;

    fn handle(&mut self, msg: Settle, ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let Some(quota) = self.shared.clone().filter(|_| !self.book.holds(msg.id)) else {
            return Decision::Now(Ok(self.settle_local(msg, now, ctx)));
        };
        let pending = PendingClose {
            id: msg.id,
            charged: msg.charged,
            tokens: msg.tokens,
        };
        if !quota.health().is_up() {
            // Kept and retried: the reservation must not expire into an orphan.
            self.pending.push(pending);
            return Decision::Now(Err(QuotaError::Unavailable));
        }
        let limits = self.limits.clone();
        let thresholds = self.alerts_config.thresholds_percent.clone();
        let settle = async move {
            quota
                .settle(msg.id, msg.charged, msg.tokens, &limits, &thresholds, now)
                .await
        };
        Decision::wait(settle.into_actor(self).map(move |result, act, _| {
            let Ok(settled) = result else {
                act.pending.push(pending);
                return Err(QuotaError::Unavailable);
            };
            act.after_shared_settle(&settled, now);
            let remaining = act
                .limits
                .budget
                .map(|b| b.saturating_sub(settled.committed.saturating_add(settled.reserved)));
            Ok(SettleReply {
                settled: settled.settled,
                remaining,
            })
        }))
    }
}

impl Handler<Release> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Release, ctx: &mut Context<Self>) {
        let now = self.touch();
        let Some(quota) = self.shared.clone().filter(|_| !self.book.holds(msg.id)) else {
            self.meta.remove(&msg.id);
            self.book.release(msg.id, now);
            self.publish(now);
            return;
        };
        let pending = PendingClose {
            id: msg.id,
            charged: Nanos::ZERO,
            tokens: 0,
        };
        if !quota.health().is_up() {
            self.pending.push(pending);
            return;
        }
        let limits = self.limits.clone();
        let release = async move {
            quota
                .settle(msg.id, Nanos::ZERO, 0, &limits, &[], now)
                .await
        };
        ctx.wait(
            release
                .into_actor(self)
                .map(move |result, act, _| match result {
                    Ok(settled) => act.after_shared_settle(&settled, now),
                    Err(_) => act.pending.push(pending),
                }),
        );
    }
}

impl Handler<GetStatus> for TenantActor {
    type Result = Decision<Self, Result<BudgetStatus, QuotaError>>;

    fn handle(&mut self, _msg: GetStatus, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.clock.now_ms();
        let thresholds = self.alerts_config.thresholds_percent.clone();
        self.decide(
            now,
            move |quota, source, limits| {
                Box::pin(async move {
                    let mut totals = quota.status(now).await?;
                    if totals.is_none() {
                        if let Err(error) =
                            seed_shared(&quota, source, &limits, &thresholds, now).await?
                        {
                            return Ok(Err(error));
                        }
                        totals = quota.status(now).await?;
                    }
                    let (committed, reserved) = totals.unwrap_or_default();
                    Ok(Ok(BudgetStatus {
                        budget: limits.budget,
                        committed,
                        reserved,
                        remaining: limits
                            .budget
                            .map(|b| b.saturating_sub(committed.saturating_add(reserved))),
                        period: period::month_key(now),
                    }))
                })
            },
            |act, now| {
                let mut status = act.book.status(now);
                // A local share is this replica's business; the tenant's budget is what it is.
                status.budget = act.limits.budget;
                status.remaining = act
                    .limits
                    .budget
                    .map(|b| b.saturating_sub(status.committed.saturating_add(status.reserved)));
                Ok(status)
            },
            None,
        )
    }
}

impl Handler<UpdateLimits> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: UpdateLimits, _ctx: &mut Context<Self>) {
        self.limits = msg.0;
        let limits = match self.mode {
            Mode::Local => local_share(&self.limits, &self.seed, self.replicas),
            Mode::Shared => self.limits.clone(),
        };
        self.book.set_limits(limits);
        let now = self.clock.now_ms();
        self.publish(now);
    }
}
