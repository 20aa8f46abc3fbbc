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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use actix::prelude::*;
use sea_orm::DatabaseConnection;

mod breakage;

use super::alerts::{self, AlertBook, AlertNotice, RateLimit};
use super::book::{
    Balance, BudgetStatus, Granted, KeyShare, Lapsed, Limits, PassedOver, QuotaBook, RateDecision,
    Seed, Settled,
};
use super::decision::Decision;
use super::end_users::{EndUserHold, EndUserStatus};
use super::handle::QuotaError;
use super::messages::{
    AddCredit, Admitted, CheckRate, EnterCall, GetBalance, GetEndUser, GetStatus, LeaveCall,
    RateAndReserve, Release, ReservationMeta, Reserve, Settle, SettleReply, UpdateLimits,
};
use super::registry::RegistryInner;
use super::seed::SeedSource;
use super::share::local_share;
use super::shared::expiry;
use super::shared::{RedisQuota, SharedQuota, SharedStore};
use super::store::{Close, Closed, QuotaAnswer, QuotaStore, Reservation, StoreReply};
use crate::clock::SharedClock;
use crate::config::{AlertsConfig, StoreErrorPolicy};
use crate::directory::RateMode;
use crate::ids::{EventId, ReservationId, TenantId};
use crate::ledger::{AttemptStatus, LedgerHandle, UsageEvent, UsageKind};
use crate::money::Nanos;
use crate::pricing::Usage;
use crate::telemetry::metrics::{
    Metric, OTHER_TENANTS, as_gauge_u64, counter_add, gauge_set, ratio, signed_difference, zero,
};

/// How often expired reservations are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// An actor with no reservations and no message for this long stops.
const IDLE_STOP_MS: u64 = 5 * 60 * 1000;
const MAILBOX_CAPACITY: usize = 4096;

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
    /// Reservations this actor granted whose guards are still open: while
    /// any is, the actor must not stop, or their settles would be lost.
    pub open_holds: Arc<AtomicUsize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Decisions in the configured store: Redis, or without it the book.
    Configured,
    /// Redis failed and the tenant is `local`: the book decides with this replica's share.
    Local,
}

/// Which store makes the next decision.
enum Path {
    Book,
    Closed,
    Redis { rejoin: bool },
}

pub struct TenantActor {
    tenant: TenantId,
    /// The tenant's metric label (bounded by `TenantLabels`).
    label: String,
    /// The tenant's own limits (the book holds a share of them in `Local` mode).
    limits: Limits,
    /// The store without Redis, and the stand-in when Redis fails.
    book: QuotaBook,
    /// The store when replicas share the tenant.
    redis: Option<RedisQuota>,
    clock: SharedClock,
    ledger: LedgerHandle,
    db: DatabaseConnection,
    price_version: String,
    last_active_ms: u64,
    registry: Weak<RegistryInner>,
    alerts: AlertBook,
    alerts_config: Arc<AlertsConfig>,
    mode: Mode,
    replicas: u32,
    /// The last ledger seed: the base of this replica's share in `Local` mode.
    seed: Seed,
    /// Closes Redis did not take; retried until it does.
    pending: Vec<Close>,
    /// Committed and reserved in Redis at the last settle (for the gauges).
    shared_totals: Option<(Nanos, Nanos)>,
    reconcile_interval_ms: u64,
    last_reconcile_ms: u64,
    /// A breakage booking is under way.
    booking_breakage: bool,
    /// When to ask Redis next for grants due.
    next_shared_breakage_ms: u64,
    /// When the gauges were last published (their budget period is that month's).
    published_ms: Option<u64>,
    /// The book's own reservation ids when it is the only store.
    next_id: u64,
    /// Guards of this actor's reservations not yet closed (any store's).
    open_holds: Arc<AtomicUsize>,
    /// When the last hold this actor granted expires: past it, a guard still
    /// open holds nothing (its late settle changes nothing, on any actor).
    last_expiry_ms: u64,
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
            open_holds,
        } = deps;
        let now = clock.now_ms();
        let source = SeedSource {
            ledger: ledger.clone(),
            db: db.clone(),
            tenant: tenant.clone(),
            calendar: limits.calendar.clone(),
        };
        let redis =
            shared.map(|store| RedisQuota::new(store.tenant(&tenant), limits.clone(), source));
        let alerts = AlertBook::new(&limits.alert_thresholds_percent);
        // Its drift panel reads 0 until the first reconcile measures one.
        if redis.is_some() && label != OTHER_TENANTS {
            zero(Metric::QuotaDriftNanos, &[("tenant", label.as_str())]);
        }
        TenantActor {
            tenant,
            label,
            book: QuotaBook::new(limits.clone(), Nanos::ZERO, now),
            redis,
            limits,
            clock,
            ledger,
            db,
            price_version,
            last_active_ms: now,
            registry,
            alerts,
            alerts_config,
            mode: Mode::Configured,
            replicas,
            seed: Seed::default(),
            pending: Vec::new(),
            shared_totals: None,
            reconcile_interval_ms,
            last_reconcile_ms: now,
            booking_breakage: false,
            next_shared_breakage_ms: 0,
            published_ms: None,
            next_id: 0,
            open_holds,
            last_expiry_ms: 0,
        }
    }

    /// The occurrence of the tenant's budget period that `at_ms` falls in.
    fn budget_window(&self, at_ms: u64) -> crate::calendar::Window {
        self.limits.calendar.window(self.limits.period, at_ms)
    }

    fn seed_source(&self) -> SeedSource {
        SeedSource {
            ledger: self.ledger.clone(),
            db: self.db.clone(),
            tenant: self.tenant.clone(),
            calendar: self.limits.calendar.clone(),
        }
    }

    fn shared(&self) -> Option<&SharedQuota> {
        self.redis.as_ref().map(RedisQuota::quota)
    }

    fn path(&self) -> Path {
        let Some(quota) = self.shared() else {
            return Path::Book;
        };
        match (self.mode, quota.health().is_up()) {
            // A Redis back empty decides nothing until the holds it lost have
            // settled (`shared/epoch.rs`); no replica's share is safer meanwhile.
            (Mode::Configured, true) if quota.paused() => Path::Closed,
            (Mode::Local, true) if quota.paused() => Path::Book,
            (Mode::Configured, true) => Path::Redis { rejoin: false },
            (Mode::Local, true) => Path::Redis { rejoin: true },
            (Mode::Local, false) => Path::Book,
            // Straight to the policy: a store marked down is not waited for.
            (Mode::Configured, false) => match self.limits.on_store_error {
                StoreErrorPolicy::Local => Path::Redis { rejoin: false },
                StoreErrorPolicy::FailClosed => Path::Closed,
            },
        }
    }

    /// A reservation id no store of this tenant holds.
    fn reservation_id(&mut self) -> ReservationId {
        if self.redis.is_some() {
            // Random, so replicas never pick the same one.
            return ReservationId(rand::random::<u64>() >> 2);
        }
        self.next_id += 1;
        ReservationId(self.next_id)
    }

    /// Asks the store the path picks: on the spot from the book, or through
    /// Redis, falling back as the tenant's policy says when Redis fails.
    fn decide<T: 'static>(
        &mut self,
        now: u64,
        ask: impl Fn(&mut dyn QuotaStore, u64) -> StoreReply<T> + 'static,
        // A reservation Redis may hold although its reply is lost.
        lost: Option<ReservationId>,
    ) -> Decision<Self, QuotaAnswer<T>> {
        let mut redis = match self.path() {
            Path::Book => {
                if self.redis.is_some() {
                    counter_add(Metric::QuotaStoreFallbacksTotal, &[("policy", "local")], 1);
                }
                return Decision::Now(ask(&mut self.book, now).now());
            }
            Path::Closed => {
                return Decision::Now(self.fall_back(None, now).and(Err(QuotaError::StoreDown)));
            }
            Path::Redis { rejoin } => match &self.redis {
                Some(redis) if rejoin => redis.rejoining(),
                Some(redis) => redis.clone(),
                None => return Decision::Now(Err(QuotaError::Unavailable)),
            },
        };
        let StoreReply::Pending(step) = ask(&mut redis, now) else {
            return Decision::Now(Err(QuotaError::Unavailable));
        };
        let source = self.seed_source();
        let policy = self.limits.on_store_error;
        let asked = async move {
            match step.await {
                Ok(verdict) => Ok(verdict),
                Err(_) => Err(match policy {
                    StoreErrorPolicy::Local => Some(source.load(now).await),
                    StoreErrorPolicy::FailClosed => None,
                }),
            }
        };
        Decision::later(
            asked
                .into_actor(self)
                .map(move |asked, act, _ctx| match asked {
                    Ok(verdict) => {
                        if act.mode == Mode::Local {
                            act.rejoined();
                        }
                        verdict
                    }
                    Err(seed) => {
                        if let Some(id) = lost {
                            // The script may have run with its reply lost: release it once Redis answers.
                            act.pending.push(Close {
                                id,
                                charged: Nanos::ZERO,
                                tokens: 0,
                            });
                        }
                        act.fall_back(seed, now)?;
                        ask(&mut act.book, now).now()
                    }
                }),
        )
    }

    /// Onto the book with this replica's share (`seed`), or refused (`None`: `fail_closed`).
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
        self.book.share_keys(Some(KeyShare {
            seed: self.seed.clone(),
            replicas: self.replicas,
        }));
        self.mode = Mode::Local;
        tracing::warn!(tenant = %self.tenant, replicas = self.replicas, "Serving the tenant from this replica's share of its limits until the shared quota store answers.");
        Ok(())
    }

    fn rejoined(&mut self) {
        self.mode = Mode::Configured;
        self.book.set_limits(self.limits.clone());
        self.book.share_keys(None);
        tracing::info!(tenant = %self.tenant, "The tenant's decisions are back on the shared quota store.");
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
        let notice =
            AlertNotice::budget(self.tenant.as_str(), period, threshold, committed, budget);
        let tenant_url = self.limits.alert_webhook_url.as_deref();
        alerts::budget_crossed(&self.alerts_config, tenant_url, &notice);
    }

    /// Budget gauges after every change of committed or reserved money.
    fn publish(&mut self, now: u64) {
        // Tenants folded into `other` share one series: a per-tenant level there would flap.
        if self.label == OTHER_TENANTS {
            return;
        }
        let (committed, reserved) = match (self.mode, self.shared_totals) {
            (Mode::Configured, Some(totals)) if self.redis.is_some() => totals,
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
        for Lapsed { amount, meta, .. } in expired {
            self.record_orphan(meta, amount, now);
        }
        let new_period = self
            .published_ms
            .is_some_and(|at| self.budget_window(at).key != self.budget_window(now).key);
        if new_period {
            // Redis's figures of the period gone: the next settle brings the new one's.
            self.shared_totals = None;
        }
        if any || new_period {
            self.publish(now);
            self.check_alerts(now);
        }
        self.book_breakage(now, ctx);
        if let Some(quota) = self.shared().cloned()
            && quota.health().is_up()
        {
            self.sweep_shared(quota, now, ctx);
        }
        let idle = now.saturating_sub(self.last_active_ms) >= IDLE_STOP_MS;
        // A Redis hold is not in the book: its open guard keeps the actor, until
        // every hold it granted has expired (a guard may never be closed).
        let held = self.open_holds.load(Ordering::Acquire) > 0 && now <= self.last_expiry_ms;
        if idle
            && !held
            && self.book.outstanding() == 0
            && self.pending.is_empty()
            && !self.booking_breakage
        {
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
            end_user: meta.end_user,
            session: meta.session,
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
            cost: meta.cost_nanos.map(Nanos::new),
            plan: meta.plan,
            price_version: self.price_version.clone(),
            latency_ms: 0,
            ttft_ms: None,
            error: Some("reservation expired unsettled".to_owned()),
            cache: None,
            created_at_ms: now,
        });
    }

    /// What follows a close on either store: the gauges, and the thresholds it crossed.
    fn closed(&mut self, closed: &Closed, on_book: bool, now: u64) -> SettleReply {
        if on_book {
            self.publish(now);
            self.check_alerts(now);
        } else if matches!(closed.settled, Settled::Committed { .. }) {
            self.shared_totals = Some((closed.committed, closed.reserved));
            self.publish(now);
            let period = self.budget_window(now).key;
            for threshold in &closed.fired {
                self.fire(*threshold, closed.committed, &period);
            }
        }
        // The book's remaining in `Local` mode is this replica's share.
        let remaining = if on_book {
            self.book.remaining(now)
        } else {
            let spent = closed.committed.saturating_add(closed.reserved);
            self.limits.budget.map(|b| b.saturating_sub(spent))
        };
        SettleReply {
            settled: closed.settled,
            remaining,
        }
    }

    /// Held on the book while Redis was away, settled after it came back:
    /// Redis learns of the spend now.
    fn absorb(
        &mut self,
        close: Close,
        scopes: (crate::ids::KeyId, String),
        now: u64,
        ctx: &mut Context<Self>,
    ) {
        let Some(quota) = self.shared().cloned() else {
            return;
        };
        let (key, feature) = scopes;
        let absorb = async move {
            quota
                .absorb(close.charged, key.as_str(), &feature, close.tokens, now)
                .await
        };
        ctx.spawn(absorb.into_actor(self).map(|result, act, _| {
            if let Err(error) = result {
                tracing::warn!(tenant = %act.tenant, error = %error, "Spend settled locally did not reach the shared store; reconciliation will raise it.");
            }
        }));
    }

    /// Closes a reservation on the store that holds it. A close Redis does
    /// not take is kept and retried: the reservation must not expire into an orphan.
    fn close(
        &mut self,
        close: Close,
        now: u64,
        ctx: &mut Context<Self>,
    ) -> Decision<Self, QuotaAnswer<SettleReply>> {
        let on_book = self.redis.is_none() || self.book.holds(close.id);
        if on_book {
            let scopes = self.book.scopes_of(close.id);
            let closed = QuotaStore::settle(&mut self.book, close, now).now();
            let committed = matches!(
                &closed,
                Ok(Closed {
                    settled: Settled::Committed { .. },
                    ..
                })
            );
            if let Some(scopes) = scopes.filter(|_| committed && self.mode == Mode::Configured) {
                self.absorb(close, scopes, now, ctx);
            }
            return Decision::Now(closed.map(|closed| self.closed(&closed, true, now)));
        }
        let Some(mut redis) = self.redis.clone() else {
            return Decision::Now(Err(QuotaError::Unavailable));
        };
        let StoreReply::Pending(step) = QuotaStore::settle(&mut redis, close, now) else {
            return Decision::Now(Err(QuotaError::Unavailable));
        };
        Decision::later(step.into_actor(self).map(move |result, act, _| {
            let Ok(closed) = result else {
                act.pending.push(close);
                return Err(QuotaError::Unavailable);
            };
            closed.map(|closed| act.closed(&closed, false, now))
        }))
    }
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
            // Its gauges stay as they are, until a new budget period makes them wrong.
            let gauges = self
                .published_ms
                .filter(|_| self.label != OTHER_TENANTS && self.limits.budget.is_some())
                .map(|at| (self.label.clone(), self.budget_window(at).end_ms));
            registry.remove(&self.tenant, &ctx.address(), gauges);
        }
        Running::Stop
    }
}

impl Handler<CheckRate> for TenantActor {
    type Result = Decision<Self, QuotaAnswer<RateDecision>>;

    fn handle(&mut self, _msg: CheckRate, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let decision = self.decide(now, |store, now| store.check_rate(now), None);
        self.passed_over(decision, now)
    }
}

/// The alert-only rate limits an answer let a call pass over.
trait PassedRates {
    fn passed(&self) -> impl Iterator<Item = (RateLimit, PassedOver)>;
}

impl PassedRates for RateDecision {
    fn passed(&self) -> impl Iterator<Item = (RateLimit, PassedOver)> {
        self.over.map(|over| (RateLimit::Rpm, over)).into_iter()
    }
}

impl PassedRates for Granted {
    fn passed(&self) -> impl Iterator<Item = (RateLimit, PassedOver)> {
        self.over_tpm.map(|over| (RateLimit::Tpm, over)).into_iter()
    }
}

impl PassedRates for Admitted {
    fn passed(&self) -> impl Iterator<Item = (RateLimit, PassedOver)> {
        let tokens = self.reservation.as_ref().and_then(|r| r.as_ref().ok());
        self.rate
            .passed()
            .chain(tokens.into_iter().flat_map(Granted::passed))
    }
}

impl TenantActor {
    /// Counts each call an alert-only rate limit let pass, and alerts on the
    /// first of each limit in its minute (the store decided which is first,
    /// for every replica).
    fn passed_over<T: PassedRates + 'static>(
        &self,
        decision: Decision<Self, QuotaAnswer<T>>,
        now: u64,
    ) -> Decision<Self, QuotaAnswer<T>> {
        // Nothing passes over an enforced limit: a shared decision's future stays as it is.
        if self.limits.rate_mode == RateMode::Enforce {
            return decision;
        }
        match decision {
            Decision::Now(answer) => {
                if let Ok(answer) = &answer {
                    self.rates_passed(answer, now);
                }
                Decision::Now(answer)
            }
            Decision::Later(answer) => Decision::later(answer.map(move |answer, act, _| {
                if let Ok(answer) = &answer {
                    act.rates_passed(answer, now);
                }
                answer
            })),
        }
    }

    fn rates_passed(&self, answer: &impl PassedRates, now: u64) {
        for (limit, over) in answer.passed() {
            let labels = [("tenant", self.label.as_str()), ("limit", limit.as_str())];
            counter_add(Metric::RateOverLimitTotal, &labels, 1);
            if !over.first_in_minute {
                continue;
            }
            let per_minute = match limit {
                RateLimit::Rpm => u64::from(self.limits.rpm),
                RateLimit::Tpm => self.limits.tokens.tpm.unwrap_or_default(),
            };
            tracing::warn!(tenant = %self.tenant, limit = limit.as_str(), per_minute, "A call passed over an alert-only rate limit.");
            let notice = AlertNotice::rate(self.tenant.as_str(), limit, per_minute, now);
            let tenant_url = self.limits.alert_webhook_url.as_deref();
            alerts::post(&self.alerts_config, tenant_url, &notice);
        }
    }
}

impl Handler<Reserve> for TenantActor {
    type Result = Decision<Self, QuotaAnswer<Granted>>;

    fn handle(&mut self, msg: Reserve, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let reservation = self.reservation(msg);
        let id = reservation.id;
        let hold = reservation.request.end_user.clone();
        self.after_end_user(hold.as_ref(), now, move |act, now| {
            let decision = act.decide(
                now,
                move |store, now| store.reserve(&reservation, now),
                Some(id),
            );
            let decision = act.passed_over(decision, now);
            act.published(decision, now)
        })
    }
}

impl Handler<RateAndReserve> for TenantActor {
    type Result = Decision<Self, QuotaAnswer<Admitted>>;

    fn handle(&mut self, msg: RateAndReserve, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let reservation = self.reservation(msg.0);
        let id = reservation.id;
        let hold = reservation.request.end_user.clone();
        self.after_end_user(hold.as_ref(), now, move |act, now| {
            let decision = act.decide(
                now,
                move |store, now| store.check_rate_and_reserve(&reservation, now),
                Some(id),
            );
            let decision = act.passed_over(decision, now);
            act.published(decision, now)
        })
    }
}

impl TenantActor {
    fn reservation(&mut self, msg: Reserve) -> Reservation {
        self.last_expiry_ms = self.last_expiry_ms.max(msg.request.expires_at_ms);
        Reservation {
            id: self.reservation_id(),
            request: msg.request,
            meta: msg.meta,
        }
    }

    /// `decide`, once the book knows the request's end user: one it does not
    /// know (new this period, or evicted) is loaded from the ledger first, so
    /// no decision on an end user starts from nothing.
    fn after_end_user<T: 'static>(
        &mut self,
        hold: Option<&EndUserHold>,
        now: u64,
        decide: impl FnOnce(&mut Self, u64) -> Decision<Self, QuotaAnswer<T>> + 'static,
    ) -> Decision<Self, QuotaAnswer<T>> {
        let unknown = match self.path() {
            Path::Book => hold
                .filter(|h| !self.book.end_users().knows(&h.id, h.limits.period))
                .cloned(),
            Path::Closed | Path::Redis { .. } => None,
        };
        let Some(hold) = unknown else {
            return decide(self, now);
        };
        let window = self.book.end_users().window(&hold.limits, now);
        let today = self.book.end_users().today(now);
        let load = self.seed_source().end_user(hold.id.clone(), window, today);
        Decision::later(load.into_actor(self).then(move |loaded, act, _ctx| {
            let now = act.clock.now_ms();
            match loaded {
                Ok(seed) => {
                    act.book.load_end_user(&hold, seed, now);
                    decide(act, now).into_future()
                }
                Err(error) => {
                    tracing::error!(tenant = %act.tenant, error = %error, "Cannot load an end user's spend from the ledger; refusing rather than starting them from zero.");
                    Decision::Now(Err(QuotaError::LedgerUnreadable)).into_future()
                }
            }
        }))
    }

    /// The book's gauges move with every reservation it takes (Redis's with its settles).
    fn published<T>(
        &mut self,
        decision: Decision<Self, QuotaAnswer<T>>,
        now: u64,
    ) -> Decision<Self, QuotaAnswer<T>> {
        if matches!(decision, Decision::Now(Ok(_))) {
            self.publish(now);
        }
        decision
    }
}

impl Handler<Settle> for TenantActor {
    type Result = Decision<Self, QuotaAnswer<SettleReply>>;

    fn handle(&mut self, msg: Settle, ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let close = Close {
            id: msg.id,
            charged: msg.charged,
            tokens: msg.tokens,
        };
        self.close(close, now, ctx)
    }
}

impl Handler<Release> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Release, ctx: &mut Context<Self>) {
        let now = self.touch();
        let close = Close {
            id: msg.id,
            charged: Nanos::ZERO,
            tokens: 0,
        };
        // Nobody waits for a release's reply; the actor does, so the next
        // decision sees the money back.
        if let Decision::Later(released) = self.close(close, now, ctx) {
            ctx.wait(released.map(|_, _, _| ()));
        }
    }
}

impl Handler<EnterCall> for TenantActor {
    type Result = Decision<Self, QuotaAnswer<()>>;

    fn handle(&mut self, msg: EnterCall, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let call = msg.0;
        // An open slot keeps the actor, as a hold does, until it expires.
        self.last_expiry_ms = self.last_expiry_ms.max(call.expires_at_ms);
        self.decide(now, move |store, now| store.enter_call(&call, now), None)
    }
}

impl Handler<LeaveCall> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: LeaveCall, ctx: &mut Context<Self>) {
        let now = self.touch();
        // A slot taken on the book while Redis was away is the book's.
        if self.redis.is_none() || self.book.holds_call(msg.id) {
            self.book.leave_call(msg.id);
            return;
        }
        let Some(mut redis) = self.redis.clone() else {
            return;
        };
        // As with a release, the next decision sees the slot back. A leave
        // Redis does not take is left to the lease's expiry.
        if let StoreReply::Pending(left) = QuotaStore::leave_call(&mut redis, msg.id, &msg.key, now)
        {
            ctx.wait(left.into_actor(self).map(|_, _, _| ()));
        }
    }
}

impl Handler<GetStatus> for TenantActor {
    type Result = Decision<Self, QuotaAnswer<BudgetStatus>>;

    fn handle(&mut self, _msg: GetStatus, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.clock.now_ms();
        let budget = self.limits.budget;
        let decision = self.decide(now, |store, now| store.status(now), None);
        // A local share is this replica's business; the tenant's budget is what it is.
        let tenant_view = move |mut status: BudgetStatus| {
            status.budget = budget;
            status.remaining =
                budget.map(|b| b.saturating_sub(status.committed.saturating_add(status.reserved)));
            status
        };
        match decision {
            Decision::Now(status) => Decision::Now(status.map(tenant_view)),
            Decision::Later(status) => {
                Decision::later(status.map(move |status, _, _| status.map(tenant_view)))
            }
        }
    }
}

impl Handler<GetEndUser> for TenantActor {
    type Result = Decision<Self, QuotaAnswer<EndUserStatus>>;

    fn handle(&mut self, msg: GetEndUser, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let hold = msg.0;
        match self.path() {
            Path::Closed => Decision::Now(Err(QuotaError::StoreDown)),
            Path::Redis { .. } => {
                let Some(quota) = self.shared().cloned() else {
                    return Decision::Now(Err(QuotaError::Unavailable));
                };
                let source = self.seed_source();
                let asked = async move {
                    let window = quota.end_user_window(&hold, now);
                    let (committed, reserved) = match quota.end_user_status(&hold, now).await {
                        Ok((Some(committed), reserved)) => (committed, reserved),
                        // Not started in Redis this period: the ledger has its spend.
                        Ok((None, reserved)) => match source
                            .end_user(hold.id.clone(), window.clone(), quota.local_day(now))
                            .await
                        {
                            Ok(seed) => (seed.committed, reserved),
                            Err(_) => return Err(QuotaError::LedgerUnreadable),
                        },
                        Err(_) => return Err(QuotaError::StoreDown),
                    };
                    Ok(EndUserStatus {
                        committed,
                        reserved,
                        period: window.key,
                    })
                };
                Decision::later(asked.into_actor(self))
            }
            Path::Book => {
                let request_hold = hold.clone();
                self.after_end_user(Some(&request_hold), now, move |act, now| {
                    let status = act.book.end_users().status(&hold.id, &hold.limits, now);
                    Decision::Now(status.ok_or(QuotaError::Unavailable))
                })
            }
        }
    }
}

impl Handler<AddCredit> for TenantActor {
    type Result = Decision<Self, QuotaAnswer<()>>;

    fn handle(&mut self, msg: AddCredit, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let top_up = msg.0;
        // The book stands in for Redis when it fails: it must know every balance too.
        QuotaStore::add_credit(&mut self.book, &top_up);
        self.decide(now, move |store, _| store.add_credit(&top_up), None)
    }
}

impl Handler<GetBalance> for TenantActor {
    type Result = Decision<Self, QuotaAnswer<Balance>>;

    fn handle(&mut self, msg: GetBalance, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let key = msg.0;
        self.decide(now, move |store, now| store.balance(key.clone(), now), None)
    }
}

impl Handler<UpdateLimits> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: UpdateLimits, _ctx: &mut Context<Self>) {
        self.limits = msg.0;
        self.alerts
            .set_thresholds(&self.limits.alert_thresholds_percent);
        if let Some(redis) = &mut self.redis {
            redis.set_limits(self.limits.clone());
        }
        let limits = match self.mode {
            Mode::Local => local_share(&self.limits, &self.seed, self.replicas),
            Mode::Configured => self.limits.clone(),
        };
        QuotaStore::set_limits(&mut self.book, limits);
        let now = self.clock.now_ms();
        self.publish(now);
    }
}
