//! QuotaBook: one tenant's quota state and every decision on it, as plain
//! data. Time is a parameter, so tests drive it without a runtime. The
//! invariant: in `strict` mode, committed + reserved never passes a budget
//! through a reservation, in any scope (tenant, key, feature), all or nothing
//! (a real cost above its reservation is still committed: the ledger is the
//! truth).
//!
//! The same rule runs in Redis as Lua (`shared/scripts.rs`, `RESERVE` and
//! `close`): a change to one is a change to the other, and
//! `tests/api/differential.rs` feeds both the same random sequences and
//! compares every answer and balance.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::Serialize;

use crate::calendar::{Calendar, Period};
use crate::config::StoreErrorPolicy;
use crate::directory::{BudgetMode, RateMode};
use crate::ids::{KeyId, ReservationId};
use crate::money::{CostAccumulator, Nanos, PricePerMTok};

use super::alerts::RateLimit;
use super::credits::Credits;
use super::end_users::{EndUserHold, EndUsers};
use super::grants::{self, Grant, GrantState};
use super::in_flight::{Call, CallId, Crowded, InFlight};
use super::messages::ReservationMeta;
use super::seed::EndUserSeed;
use super::sessions::{SessionHold, Sessions};
use super::share::share_budget;
use super::spent::{Spent, Windows};
use super::store::Reservation;
use super::tokens::{TokenLimitKind, TokenLimits, TokenQuota, TokenRefusal, TokenWindow};

/// A token bucket's units per request: refilling `rpm` units per millisecond
/// gives exactly `rpm` requests per minute in integers.
pub const UNITS_PER_REQUEST: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub rpm: u32,
    pub burst: u32,
    pub budget: Option<Nanos>,
    /// What the tenant's budget runs over (default a month).
    pub period: Period,
    pub mode: BudgetMode,
    pub clamp_floor_tokens: u32,
    /// Budgets of single features inside the tenant's, and their periods
    /// (a month where none is given).
    pub feature_budgets: BTreeMap<String, Nanos>,
    pub feature_periods: BTreeMap<String, Period>,
    pub tokens: TokenLimits,
    pub on_store_error: StoreErrorPolicy,
    /// Where end users' budget periods begin.
    pub calendar: Calendar,
    /// End users kept in memory at most (see `end_users.rs`).
    pub end_users_in_memory: usize,
    /// The tenant spends its prepaid balance (top-ups less lifetime spend)
    /// instead of a monthly budget.
    pub credits: bool,
    /// `alert`: a call over `rpm` or `tokens.tpm` passes, flagged.
    pub rate_mode: RateMode,
    /// The tenant's own alert target, beside `[alerts] webhook_url`.
    pub alert_webhook_url: Option<String>,
    /// Percents of the budget that alert: the tenant's, else `[alerts] thresholds_percent`.
    pub alert_thresholds_percent: Vec<u32>,
}

impl Limits {
    /// What a feature's budget runs over (a month where none is given).
    pub fn feature_period(&self, feature: &str) -> Period {
        self.feature_periods
            .get(feature)
            .copied()
            .unwrap_or(Period::Month)
    }
}

/// Where a budget applies inside one tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Tenant,
    Key(KeyId),
    Feature(String),
    EndUser(String),
    /// One agent run's cap.
    Session(String),
    /// The tenant's prepaid balance.
    Credits,
    /// A key's own prepaid balance.
    KeyCredits(KeyId),
}

impl Scope {
    /// A prepaid balance, whose 402 says what is left of it.
    pub fn is_balance(&self) -> bool {
        matches!(self, Scope::Credits | Scope::KeyCredits(_))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Tenant => f.write_str("tenant"),
            Scope::Key(key) => write!(f, "key `{key}`"),
            Scope::Feature(feature) => write!(f, "feature `{feature}`"),
            Scope::EndUser(id) => write!(f, "end user `{id}`"),
            Scope::Session(id) => write!(f, "session `{id}`"),
            Scope::Credits => f.write_str("tenant's credit balance"),
            Scope::KeyCredits(key) => write!(f, "key `{key}`'s credit balance"),
        }
    }
}

/// A tenant's period so far, from the ledger's running totals: what a store starts from.
pub type Seed = crate::ledger::repo::PeriodTotals;

/// Money of one scope: spent in each period, and held by calls in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Totals {
    spent: Spent,
    reserved: Nanos,
}

impl Totals {
    fn remaining(self, budget: Nanos, period: Period) -> Nanos {
        budget.saturating_sub(self.spent.get(period).saturating_add(self.reserved))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// Until the bucket is full again.
    pub reset_ms: u64,
    /// Until the next request would be admitted (0 when allowed).
    pub retry_after_ms: u64,
    /// `rate_mode = "alert"` let it pass with the bucket empty.
    pub over: Option<PassedOver>,
}

/// A call an alert-only rate limit let pass over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassedOver {
    /// The first passed over this limit in its clock minute: the one alerted on.
    pub first_in_minute: bool,
}

/// The clock minute each alert-only limit last let a call pass over it in
/// (Redis keeps the same in the buckets hash, `xr` and `xt`).
#[derive(Debug, Clone, Copy, Default)]
struct RateAlerts {
    rpm: Option<u64>,
    tpm: Option<u64>,
}

impl RateAlerts {
    fn passed(&mut self, limit: RateLimit, now_ms: u64) -> PassedOver {
        let minute = now_ms / 60_000;
        let last = match limit {
            RateLimit::Rpm => &mut self.rpm,
            RateLimit::Tpm => &mut self.tpm,
        };
        let first_in_minute = *last != Some(minute);
        *last = Some(minute);
        PassedOver { first_in_minute }
    }
}

impl RateDecision {
    /// The decision for a bucket left holding `units` (of `UNITS_PER_REQUEST` per request).
    pub fn from_bucket(allowed: bool, units: u64, limits: &Limits) -> RateDecision {
        let rate = u64::from(limits.rpm.max(1));
        let capacity = bucket_capacity(limits);
        let units = units.min(capacity);
        let missing = UNITS_PER_REQUEST.saturating_sub(units);
        RateDecision {
            allowed,
            limit: limits.rpm,
            remaining: u32::try_from(units / UNITS_PER_REQUEST).unwrap_or(u32::MAX),
            reset_ms: (capacity - units).div_ceil(rate),
            retry_after_ms: if allowed { 0 } else { missing.div_ceil(rate) },
            over: None,
        }
    }

    /// A refusal an alert-only limit turns into a pass.
    #[must_use]
    pub fn passed_over(self, over: PassedOver) -> RateDecision {
        RateDecision {
            allowed: true,
            retry_after_ms: 0,
            over: Some(over),
            ..self
        }
    }
}

/// What a request asks to hold: its input at the worst input price plus
/// `choices × max_tokens` at the worst output price, and the scopes it is charged to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveRequest {
    pub input_tokens: u64,
    pub input_price: PricePerMTok,
    pub output_price: PricePerMTok,
    pub max_tokens: u32,
    /// Completions the upstream generates (`n`), each up to `max_tokens`; at least 1.
    pub choices: u32,
    pub expires_at_ms: u64,
    pub key: KeyId,
    /// The key's own budget, if it has one, and what it runs over.
    pub key_budget: Option<Nanos>,
    pub key_period: Period,
    pub feature: String,
    /// The request's end user and the limits their tier gives them.
    pub end_user: Option<EndUserHold>,
    /// The key spends its own prepaid balance.
    pub key_credits: bool,
    /// Fees the call may bill beside its tokens (each use of a provider-run
    /// tool), held once whatever its `choices`.
    pub fees: Nanos,
    /// The agent run it belongs to, where its tier caps one.
    pub session: Option<SessionHold>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub id: ReservationId,
    pub amount: Nanos,
    /// The request's `max_tokens`, or lower in `clamp` mode.
    pub max_tokens: u32,
    pub clamped: bool,
    /// The budget left after this reservation (`None`: no cap).
    pub remaining: Option<Nanos>,
    /// `alert` mode let it pass although it does not fit.
    pub over_budget: bool,
    /// `rate_mode = "alert"` let it pass over the tokens per minute.
    pub over_tpm: Option<PassedOver>,
    /// The tokens-per-minute window after this admission, if the tenant has one.
    pub tokens: Option<TokenWindow>,
}

/// Why a reservation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Budget(#[from] Refused),
    #[error(transparent)]
    Tokens(#[from] TokenRefusal),
    #[error(transparent)]
    EndUserRate(#[from] EndUserRateLimited),
    #[error(transparent)]
    EndUserTokens(#[from] EndUserTokensLimited),
    /// The end user's spend this period is not in memory: the ledger must be read first.
    #[error("end user `{0}` is not loaded")]
    EndUserUnknown(String),
}

/// An end user's tokens per local day, which the tier's template sets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("end user `{id}` has a limit of {limit} {}; this request needs up to {needed}", kind.as_str())]
pub struct EndUserTokensLimited {
    pub id: String,
    /// `Daily` or `PerMinute`.
    pub kind: TokenLimitKind,
    pub limit: u64,
    pub needed: u64,
    /// Until the request would fit: the end user's midnight, or a refilled bucket.
    pub retry_after_ms: u64,
}

/// An end user's requests/min, which the tier's template sets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("end user `{id}` is limited to {rpm} requests per minute; retry in {retry_after_ms} ms")]
pub struct EndUserRateLimited {
    pub id: String,
    pub rpm: u32,
    pub retry_after_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", refused_message(self))]
pub struct Refused {
    /// The scope whose budget refused.
    pub scope: Scope,
    pub remaining: Nanos,
    pub needed: Nanos,
    /// A balance's grants: which ran out, when the next starts.
    pub note: Option<String>,
}

fn refused_message(refused: &Refused) -> String {
    let Refused {
        scope,
        remaining,
        needed,
        note,
    } = refused;
    if scope.is_balance() {
        let note = note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default();
        format!(
            "credit balance exhausted ({scope}): balance {remaining} after calls in flight, this request needs up to {needed}; add credits to go on{note}"
        )
    } else {
        format!(
            "budget exceeded ({scope}): remaining {remaining}, this request needs up to {needed}"
        )
    }
}

/// A prepaid balance and its grants, each with what was drawn from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Balance {
    pub status: BalanceStatus,
    pub grants: Vec<GrantState>,
}

/// A prepaid balance: what its grants allow now (`added`: every started
/// grant, less what expired ones left), spend since the first row, and what
/// calls in flight hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BalanceStatus {
    pub added: Nanos,
    pub spent: Nanos,
    pub reserved: Nanos,
    /// `added − spent − reserved`, at least 0.
    pub balance: Nanos,
}

impl BalanceStatus {
    pub fn new(added: Nanos, spent: Nanos, reserved: Nanos) -> BalanceStatus {
        BalanceStatus {
            added,
            spent,
            reserved,
            balance: added.saturating_sub(spent.saturating_add(reserved)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetStatus {
    pub budget: Option<Nanos>,
    pub committed: Nanos,
    pub reserved: Nanos,
    pub remaining: Option<Nanos>,
    pub period: String,
}

/// How a settle ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Committed `charged`, released the rest of the reservation.
    Committed { reserved: Nanos },
    /// The ticket was already settled or expired (then committed at its reserved
    /// amount); this settle changed nothing.
    AlreadyClosed,
    /// The store has no record of the hold, open or closed: it lost its state
    /// (a Redis restarted empty). The charge was committed to the tenant's
    /// own counters (the hold's key, feature and end user went with it), and
    /// the call's row keeps it: the ledger is the truth.
    Lost,
}

#[derive(Debug, Clone)]
struct Held {
    amount: Nanos,
    expires_at_ms: u64,
    key: KeyId,
    feature: String,
    end_user: Option<EndUserHold>,
    /// The agent run it belongs to, where its tier caps one.
    session: Option<String>,
    /// Tokens admitted against the token limits (input estimate + max_tokens).
    tokens: u64,
    meta: Option<ReservationMeta>,
}

/// What a request may hold once its budgets have had their say.
struct Fit {
    amount: Nanos,
    max_tokens: u32,
    clamped: bool,
    over_budget: bool,
}

/// A replica's share of its keys' budgets while the book stands in for the
/// shared store (see `share.rs`).
#[derive(Debug, Clone, Default)]
pub struct KeyShare {
    /// What the ledger had when the store went away: where the shares start.
    pub seed: Seed,
    pub replicas: u32,
}

/// A reservation committed at its reserved amount because it outlived its expiry.
#[derive(Debug, Clone)]
pub struct Lapsed {
    pub id: ReservationId,
    pub amount: Nanos,
    pub meta: Option<ReservationMeta>,
}

#[derive(Debug)]
pub struct QuotaBook {
    limits: Limits,
    bucket_units: u64,
    bucket_at_ms: u64,
    windows: Windows,
    /// The tenant's own spend, and what calls in flight hold.
    spent: Spent,
    reserved: Nanos,
    keys: HashMap<KeyId, Totals>,
    features: HashMap<String, Totals>,
    held: HashMap<ReservationId, Held>,
    next_id: u64,
    tokens: TokenQuota,
    key_share: Option<KeyShare>,
    end_users: EndUsers,
    sessions: Sessions,
    credits: Credits,
    rate_alerts: RateAlerts,
    /// Calls open at once, against the tenant's and keys' caps.
    in_flight: InFlight,
}

impl QuotaBook {
    /// A book whose tenant has spent `committed` in the current occurrence of every period.
    pub fn new(limits: Limits, committed: Nanos, now_ms: u64) -> QuotaBook {
        let limits_tokens = limits.tokens;
        let end_users = EndUsers::new(limits.end_users_in_memory, limits.calendar.clone());
        let windows = Windows::new(&limits.calendar, now_ms);
        let calendar = limits.calendar.clone();
        let mut spent = Spent::default();
        spent.add(committed);
        QuotaBook {
            bucket_units: bucket_capacity(&limits),
            windows,
            limits,
            bucket_at_ms: now_ms,
            spent,
            reserved: Nanos::ZERO,
            keys: HashMap::new(),
            features: HashMap::new(),
            held: HashMap::new(),
            next_id: 1,
            tokens: TokenQuota::new(limits_tokens, 0, 0, &calendar, now_ms),
            key_share: None,
            end_users,
            sessions: Sessions::default(),
            credits: Credits::default(),
            rate_alerts: RateAlerts::default(),
            in_flight: InFlight::default(),
        }
    }

    /// Opens a call's slot unless the tenant's or its key's cap is reached.
    pub fn enter_call(&mut self, call: &Call, now_ms: u64) -> Result<(), Crowded> {
        self.in_flight.enter(call, now_ms)
    }

    /// Gives a call's slot back; whether this book had it.
    pub fn leave_call(&mut self, id: CallId) -> bool {
        self.in_flight.leave(id)
    }

    pub fn holds_call(&self, id: CallId) -> bool {
        self.in_flight.holds(id)
    }

    /// Calls open on this book.
    pub fn calls_open(&self) -> usize {
        self.in_flight.len()
    }

    /// Tokens already used today and this month, from the ledger.
    pub fn set_token_usage(&mut self, today: u64, this_month: u64, now_ms: u64) {
        self.tokens = TokenQuota::new(
            self.limits.tokens,
            today,
            this_month,
            &self.limits.calendar,
            now_ms,
        );
    }

    /// Spend of keys and features in every period, and token use, reloaded
    /// from the ledger; held reservations stay as they are.
    pub fn reseed(&mut self, seed: &Seed, now_ms: u64) {
        self.windows = Windows::new(&self.limits.calendar, now_ms);
        self.spent = seed.spent_of(None, None);
        for totals in self.keys.values_mut().chain(self.features.values_mut()) {
            totals.spent = Spent::default();
        }
        for key in seed.key_ids() {
            self.keys.entry(key.clone()).or_default().spent = seed.spent_of(Some(key), None);
        }
        for feature in seed.feature_names() {
            let spent = seed.spent_of(None, Some(feature));
            self.features.entry(feature.clone()).or_default().spent = spent;
        }
        self.set_token_usage(seed.tokens_today, seed.tokens_this_month, now_ms);
        self.credits.reload(&seed.credits);
    }

    /// A grant the ledger has just written; one already counted changes nothing.
    pub fn add_credit(&mut self, key: Option<&KeyId>, grant: Grant) -> bool {
        self.credits.add(key, grant)
    }

    /// The tenant's balance (`None`), or a key's, and its grants.
    pub fn balance(&self, key: Option<&KeyId>, now_ms: u64) -> Balance {
        let (spent, reserved) = match key {
            None => (self.spent.lifetime, self.reserved),
            Some(key) => {
                let totals = self.keys.get(key).copied().unwrap_or_default();
                (totals.spent.lifetime, totals.reserved)
            }
        };
        let grants = self.credits.pool(key).map(|p| p.grants().to_vec());
        Balance {
            status: BalanceStatus::new(self.credits.limit(key, now_ms), spent, reserved),
            grants: grants.unwrap_or_default(),
        }
    }

    /// Grants closed by `now_ms` whose breakage is not booked: (key, grant row, what it left).
    pub fn due_breakage(&self, now_ms: u64) -> Vec<(Option<KeyId>, i64, Nanos)> {
        self.credits.due_breakage(now_ms)
    }

    /// A grant's breakage is booked.
    pub fn mark_booked(&mut self, key: Option<&KeyId>, id: i64) {
        self.credits.mark_booked(key, id);
    }

    /// What a balance's grants allow in all at `now_ms`, or this replica's
    /// share of what is left of it while the book stands in for the shared store.
    fn credit_limit(&self, key: Option<&KeyId>, now_ms: u64) -> Nanos {
        let added = self.credits.limit(key, now_ms);
        let Some(share) = &self.key_share else {
            return added;
        };
        let spent = share.seed.spent_of(key, None).lifetime;
        share_budget(added, spent, share.replicas)
    }

    /// Keys' budgets are shared out (`Some`) or whole (`None`).
    pub fn share_keys(&mut self, share: Option<KeyShare>) {
        self.key_share = share;
    }

    /// The key and feature a held reservation is charged to.
    pub fn scopes_of(&self, id: ReservationId) -> Option<(KeyId, String)> {
        let held = self.held.get(&id)?;
        Some((held.key.clone(), held.feature.clone()))
    }

    pub fn holds(&self, id: ReservationId) -> bool {
        self.held.contains_key(&id)
    }

    /// A scope's spend in the current occurrence of `period` (an end user's
    /// in their own period, a balance's over its lifetime).
    pub fn committed_of(&self, scope: &Scope, period: Period) -> Nanos {
        let spent = |totals: Option<&Totals>| totals.map_or(Nanos::ZERO, |t| t.spent.get(period));
        match scope {
            Scope::Tenant => self.spent.get(period),
            Scope::Key(key) => spent(self.keys.get(key)),
            Scope::Feature(f) => spent(self.features.get(f)),
            Scope::EndUser(id) => self.end_users.committed_of(id).unwrap_or(Nanos::ZERO),
            Scope::Session(id) => self.sessions.spent_of(id),
            Scope::Credits => self.spent.lifetime,
            Scope::KeyCredits(key) => self.keys.get(key).map_or(Nanos::ZERO, |t| t.spent.lifetime),
        }
    }

    pub fn token_usage(&self) -> (u64, u64) {
        self.tokens.used()
    }

    pub fn limits(&self) -> Limits {
        self.limits.clone()
    }

    pub fn set_limits(&mut self, limits: Limits) {
        let capacity = bucket_capacity(&limits);
        self.bucket_units = self.bucket_units.min(capacity);
        self.tokens.set_limits(limits.tokens);
        self.end_users
            .set_bounds(limits.end_users_in_memory, limits.calendar.clone());
        self.limits = limits;
    }

    pub fn outstanding(&self) -> usize {
        self.held.len()
    }

    /// Takes one request from the bucket if there is one; with none, an
    /// alert-only limit lets it pass and takes nothing (the bucket is empty).
    pub fn check_rate(&mut self, now_ms: u64) -> RateDecision {
        self.refill(now_ms);
        let allowed = self.bucket_units >= UNITS_PER_REQUEST;
        if allowed {
            self.bucket_units -= UNITS_PER_REQUEST;
        }
        let decision = RateDecision::from_bucket(allowed, self.bucket_units, &self.limits);
        if allowed || self.limits.rate_mode != RateMode::Alert {
            return decision;
        }
        decision.passed_over(self.rate_alerts.passed(RateLimit::Rpm, now_ms))
    }

    fn refill(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.bucket_at_ms);
        let added = elapsed.saturating_mul(u64::from(self.limits.rpm));
        self.bucket_units = self
            .bucket_units
            .saturating_add(added)
            .min(bucket_capacity(&self.limits));
        self.bucket_at_ms = self.bucket_at_ms.max(now_ms);
    }

    /// The scope with the least budget left for this request, among those with a budget.
    fn tightest(
        &self,
        request: &ReserveRequest,
        end_user: Option<Nanos>,
        now_ms: u64,
    ) -> Option<(Scope, Nanos)> {
        let tenant = Totals {
            spent: self.spent,
            reserved: self.reserved,
        };
        let key = self.keys.get(&request.key).copied().unwrap_or_default();
        let mut scopes = Vec::with_capacity(6);
        if let Some(budget) = self.limits.budget {
            scopes.push((Scope::Tenant, tenant.remaining(budget, self.limits.period)));
        }
        if let Some(budget) = request.key_budget {
            let remaining = key.remaining(budget, request.key_period);
            scopes.push((Scope::Key(request.key.clone()), remaining));
        }
        if let Some(budget) = self.limits.feature_budgets.get(&request.feature) {
            let totals = self
                .features
                .get(&request.feature)
                .copied()
                .unwrap_or_default();
            let period = self.limits.feature_period(&request.feature);
            scopes.push((
                Scope::Feature(request.feature.clone()),
                totals.remaining(*budget, period),
            ));
        }
        if let (Some(remaining), Some(hold)) = (end_user, &request.end_user) {
            scopes.push((Scope::EndUser(hold.id.clone()), remaining));
        }
        if let Some(session) = &request.session {
            let remaining = self.sessions.remaining(session);
            scopes.push((Scope::Session(session.id.clone()), remaining));
        }
        // A balance is drawn by everything ever spent, less what calls in flight hold.
        if self.limits.credits {
            let limit = self.credit_limit(None, now_ms);
            scopes.push((Scope::Credits, tenant.remaining(limit, Period::Lifetime)));
        }
        if request.key_credits {
            let limit = self.credit_limit(Some(&request.key), now_ms);
            scopes.push((
                Scope::KeyCredits(request.key.clone()),
                key.remaining(limit, Period::Lifetime),
            ));
        }
        scopes.into_iter().min_by_key(|(_, remaining)| *remaining)
    }

    /// Holds the worst case of a request against every budget that applies,
    /// all or nothing, under the book's next id.
    pub fn reserve(&mut self, request: ReserveRequest, now_ms: u64) -> Result<Granted, Refusal> {
        let id = ReservationId(self.next_id);
        self.next_id += 1;
        self.hold(id, request, None, now_ms)
    }

    /// `reserve` under the caller's id, keeping who it belongs to.
    pub fn reserve_as(
        &mut self,
        reservation: &Reservation,
        now_ms: u64,
    ) -> Result<Granted, Refusal> {
        let meta = Some(reservation.meta.clone());
        self.hold(reservation.id, reservation.request.clone(), meta, now_ms)
    }

    fn hold(
        &mut self,
        id: ReservationId,
        mut request: ReserveRequest,
        meta: Option<ReservationMeta>,
        now_ms: u64,
    ) -> Result<Granted, Refusal> {
        self.roll_period(now_ms);
        if let Some(budget) = request.key_budget {
            request.key_budget =
                Some(self.key_budget_share(&request.key, budget, request.key_period));
        }
        let end_user = self.end_user_check(&request, now_ms)?;
        let fit = self.fit_budgets(&request, end_user, now_ms)?;
        // Tokens are admitted last: a refusal here leaves the money untouched.
        let tokens = request
            .input_tokens
            .saturating_add(request.output_tokens(fit.max_tokens));
        if let Some(hold) = &request.end_user {
            self.end_users.admit_tokens(hold, tokens, now_ms)?;
        }
        let alert_only = self.limits.rate_mode == RateMode::Alert;
        let (window, over_tpm) = self.tokens.admit_over(tokens, now_ms, alert_only)?;
        // Marked only once admitted: nothing after the tokens refuses.
        let over_tpm = over_tpm.then(|| self.rate_alerts.passed(RateLimit::Tpm, now_ms));
        self.place(id, request, fit.amount, tokens, meta, now_ms);
        Ok(Granted {
            id,
            amount: fit.amount,
            max_tokens: fit.max_tokens,
            clamped: fit.clamped,
            remaining: self.remaining(now_ms),
            over_budget: fit.over_budget,
            over_tpm,
            tokens: window,
        })
    }

    /// A key's budget as this replica may spend it: whole, or while the book
    /// stands in for the shared store, its share of what the ledger says is
    /// left, so the replicas together stay within the budget.
    fn key_budget_share(&self, key: &KeyId, budget: Nanos, period: Period) -> Nanos {
        let Some(share) = &self.key_share else {
            return budget;
        };
        let committed = share.seed.spent_of(Some(key), None).get(period);
        share_budget(budget, committed, share.replicas)
    }

    /// The request's worst case against its tightest budget, an overrun
    /// settled by the tenant's mode: `strict` refuses it, `clamp` lowers
    /// `max_tokens` to what the budget affords (refusing below the floor),
    /// `alert` lets it through flagged. It runs before anything is held, so
    /// a refusal leaves the book as it was.
    fn fit_budgets(
        &self,
        request: &ReserveRequest,
        end_user: Option<Nanos>,
        now_ms: u64,
    ) -> Result<Fit, Refused> {
        let mut fit = Fit {
            amount: worst_case(request, request.max_tokens),
            max_tokens: request.max_tokens,
            clamped: false,
            over_budget: false,
        };
        let Some((scope, remaining)) = self.tightest(request, end_user, now_ms) else {
            return Ok(fit);
        };
        if fit.amount <= remaining {
            return Ok(fit);
        }
        let note = match &scope {
            Scope::Credits => self.credits.pool(None),
            Scope::KeyCredits(key) => self.credits.pool(Some(key)),
            _ => None,
        }
        .and_then(|pool| grants::note(pool, now_ms));
        let refused = Refused {
            scope,
            remaining,
            needed: fit.amount,
            note,
        };
        match self.limits.mode {
            BudgetMode::Strict => return Err(refused),
            BudgetMode::Clamp => {
                let floor = self.limits.clamp_floor_tokens;
                let affordable = clamped_max_tokens(request, remaining, floor).ok_or(refused)?;
                fit.max_tokens = affordable;
                fit.amount = worst_case(request, affordable);
                fit.clamped = true;
            }
            BudgetMode::Alert => fit.over_budget = true,
        }
        Ok(fit)
    }

    /// Draws an admitted request's amount from every scope it is charged to
    /// and keeps it under `id`, so its settle or expiry can give back exactly
    /// what it took.
    fn place(
        &mut self,
        id: ReservationId,
        request: ReserveRequest,
        amount: Nanos,
        tokens: u64,
        meta: Option<ReservationMeta>,
        now_ms: u64,
    ) {
        self.reserved = self.reserved.saturating_add(amount);
        let key = self.keys.entry(request.key.clone()).or_default();
        key.reserved = key.reserved.saturating_add(amount);
        let feature = self.features.entry(request.feature.clone()).or_default();
        feature.reserved = feature.reserved.saturating_add(amount);
        if let Some(hold) = &request.end_user {
            self.end_users.hold(hold, amount, tokens, now_ms);
        }
        if let Some(session) = &request.session {
            self.sessions.hold(session, amount, now_ms);
        }
        self.held.insert(
            id,
            Held {
                amount,
                expires_at_ms: request.expires_at_ms,
                key: request.key,
                feature: request.feature,
                end_user: request.end_user,
                session: request.session.map(|session| session.id),
                tokens,
                meta,
            },
        );
    }

    /// The end user's budget left (`None`: no budget), or why the request
    /// cannot go on: its rate, or an end user the book must first load.
    fn end_user_check(
        &mut self,
        request: &ReserveRequest,
        now_ms: u64,
    ) -> Result<Option<Nanos>, Refusal> {
        let Some(hold) = &request.end_user else {
            return Ok(None);
        };
        let replicas = self.key_share.as_ref().map(|share| share.replicas);
        let Some((remaining, rate)) = self.end_users.check(hold, replicas, now_ms) else {
            return Err(Refusal::EndUserUnknown(hold.id.clone()));
        };
        if let (Err(retry_after_ms), Some(rpm)) = (rate, hold.limits.rpm) {
            return Err(EndUserRateLimited {
                id: hold.id.clone(),
                rpm,
                retry_after_ms,
            }
            .into());
        }
        Ok(remaining)
    }

    /// Whether decisions on this request's end user need the ledger first.
    pub fn needs_end_user<'a>(&self, request: &'a ReserveRequest) -> Option<&'a EndUserHold> {
        request
            .end_user
            .as_ref()
            .filter(|hold| !self.end_users.knows(&hold.id, hold.limits.period))
    }

    /// Starts tracking an end user from the ledger's spend in its current period.
    pub fn load_end_user(&mut self, hold: &EndUserHold, seed: EndUserSeed, now_ms: u64) {
        let window = self.end_users.window(&hold.limits, now_ms);
        self.end_users
            .load(&hold.id, &hold.limits, window, seed, now_ms);
    }

    pub fn end_users(&mut self) -> &mut EndUsers {
        &mut self.end_users
    }

    /// Takes a reservation out of every scope, then commits `charged` to
    /// them, and the tokens `used` in place of those held.
    fn close(&mut self, held: &Held, charged: Nanos, used: u64, now_ms: u64) {
        if let Some(id) = &held.session {
            self.sessions.close(id, held.amount, charged);
        }
        if let Some(hold) = &held.end_user {
            let tokens = (held.tokens, used);
            self.end_users
                .close(&hold.id, &hold.limits, held.amount, charged, tokens, now_ms);
        }
        self.reserved = self.reserved.saturating_sub(held.amount);
        self.spent.add(charged);
        self.credits.draw(&held.key, charged, now_ms);
        for totals in [
            self.keys.get_mut(&held.key),
            self.features.get_mut(&held.feature),
        ]
        .into_iter()
        .flatten()
        {
            totals.reserved = totals.reserved.saturating_sub(held.amount);
            totals.spent.add(charged);
        }
    }

    /// Commits the real cost and releases the rest. Settling twice changes nothing.
    pub fn settle(
        &mut self,
        id: ReservationId,
        charged: Nanos,
        used_tokens: u64,
        now_ms: u64,
    ) -> Settled {
        self.roll_period(now_ms);
        let Some(held) = self.held.remove(&id) else {
            return Settled::AlreadyClosed;
        };
        self.close(&held, charged, used_tokens, now_ms);
        self.tokens.settle(held.tokens, used_tokens, now_ms);
        Settled::Committed {
            reserved: held.amount,
        }
    }

    /// Gives a reservation back whole (the request failed before any upstream cost).
    pub fn release(&mut self, id: ReservationId, now_ms: u64) -> bool {
        match self.held.remove(&id) {
            Some(held) => {
                self.close(&held, Nanos::ZERO, 0, now_ms);
                self.tokens.settle(held.tokens, 0, now_ms);
                true
            }
            None => false,
        }
    }

    /// Reservations past their expiry are committed at their reserved amount:
    /// their request died mid-call and the upstream may have charged us, so
    /// releasing them is the one move that could overspend.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Lapsed> {
        self.roll_period(now_ms);
        self.sessions.forget_idle(now_ms);
        let expired: Vec<ReservationId> = self
            .held
            .iter()
            .filter(|(_, held)| held.expires_at_ms <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        let mut committed = Vec::with_capacity(expired.len());
        for id in expired {
            if let Some(held) = self.held.remove(&id) {
                self.close(&held, held.amount, held.tokens, now_ms);
                // As with money: what the upstream may have used counts.
                self.tokens.settle(held.tokens, held.tokens, now_ms);
                committed.push(Lapsed {
                    id,
                    amount: held.amount,
                    meta: held.meta,
                });
            }
        }
        committed.sort_unstable_by_key(|lapsed| lapsed.id);
        committed
    }

    pub fn status(&mut self, now_ms: u64) -> BudgetStatus {
        self.roll_period(now_ms);
        BudgetStatus {
            budget: self.limits.budget,
            committed: self.spent.get(self.limits.period),
            reserved: self.reserved,
            remaining: self.remaining(now_ms),
            period: self.windows.key(self.limits.period).to_owned(),
        }
    }

    /// What the tenant has left: its balance when it is on credits, else its budget's rest.
    pub fn remaining(&self, now_ms: u64) -> Option<Nanos> {
        if self.limits.credits {
            let limit = self.credits.limit(None, now_ms);
            return Some(BalanceStatus::new(limit, self.spent.lifetime, self.reserved).balance);
        }
        let spent = self.spent.get(self.limits.period);
        self.limits
            .budget
            .map(|budget| budget.saturating_sub(spent.saturating_add(self.reserved)))
    }

    /// A day, week or month that began starts from nothing spent, in every
    /// scope; reservations held across the boundary carry over, and are
    /// charged to the period they settle in.
    fn roll_period(&mut self, now_ms: u64) {
        for period in self.windows.roll(&self.limits.calendar, now_ms) {
            self.spent.restart(period);
            for totals in self.keys.values_mut().chain(self.features.values_mut()) {
                totals.spent.restart(period);
            }
        }
    }
}

pub fn bucket_capacity(limits: &Limits) -> u64 {
    u64::from(limits.burst.max(1)) * UNITS_PER_REQUEST
}

pub fn worst_case(request: &ReserveRequest, max_tokens: u32) -> Nanos {
    let mut cost = CostAccumulator::default();
    cost.add(request.input_tokens, request.input_price)
        .add(request.output_tokens(max_tokens), request.output_price);
    cost.total().saturating_add(request.fees)
}

impl ReserveRequest {
    /// The most output tokens the upstream may generate at this per-choice limit.
    pub fn output_tokens(&self, max_tokens: u32) -> u64 {
        u64::from(max_tokens).saturating_mul(u64::from(self.choices.max(1)))
    }
}

/// `clamp` mode: the `max_tokens` `remaining` affords, or `None` below the floor.
pub fn clamped_max_tokens(request: &ReserveRequest, remaining: Nanos, floor: u32) -> Option<u32> {
    let affordable = affordable_tokens(request, remaining);
    if affordable < u64::from(floor) || affordable == 0 {
        return None;
    }
    Some(
        u32::try_from(affordable)
            .unwrap_or(u32::MAX)
            .min(request.max_tokens),
    )
}

/// The most output tokens whose worst case still fits `remaining`.
fn affordable_tokens(request: &ReserveRequest, remaining: Nanos) -> u64 {
    let Some(remaining) = remaining.get().checked_sub(request.fees.get()) else {
        return 0;
    };
    let scaled_remaining = u128::from(remaining) * 1_000_000;
    let input =
        u128::from(request.input_tokens) * u128::from(request.input_price.nanos_per_mtok().get());
    let Some(left) = scaled_remaining.checked_sub(input) else {
        return 0;
    };
    // Each affordable per-choice token is paid `choices` times.
    let output_price = u128::from(request.output_price.nanos_per_mtok().get())
        * u128::from(request.choices.max(1));
    if output_price == 0 {
        return u64::from(request.max_tokens);
    }
    u64::try_from(left / output_price).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
