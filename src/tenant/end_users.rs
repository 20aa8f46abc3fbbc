//! One tenant's end users in memory: each one's spend in its current budget
//! period and its request bucket, in a map bounded to
//! `billing.end_users_in_memory`. Only an idle end user is evicted (nothing
//! held, its last settle long enough ago that its rows have reached the
//! ledger's writer, its bucket full again), and an end user the map does not
//! know is loaded from the ledger before any decision on it: eviction can
//! never reset a cap. While every end user is busy the map may pass its
//! bound rather than forget one.

use std::collections::{BTreeMap, HashMap};

use crate::calendar::{Calendar, Period, Window};
use crate::config::EndUserLimits;
use crate::money::Nanos;

use super::book::{EndUserTokensLimited, UNITS_PER_REQUEST};
use super::seed::EndUserSeed;
use super::share::share_budget;
use super::tokens::TokenLimitKind;

/// An end user settled less recently than this may be evicted: its last row
/// was handed to the ledger right after its settle, and a reload flushes the
/// ledger before it reads.
pub const EVICT_AFTER_MS: u64 = 1_000;

/// The oldest entries looked at for one eviction: an old busy end user (a
/// long stream) must not make every insertion scan the whole map.
const EVICTION_SCAN: usize = 16;

/// What a request asks of its end user's scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndUserHold {
    pub id: String,
    pub limits: EndUserLimits,
}

#[derive(Debug, Clone)]
struct EndUser {
    /// The period its limits had when its spend was loaded: another one
    /// (an admin's override) sums other days, so it is loaded again.
    period: Period,
    window: Window,
    committed: Nanos,
    /// What the ledger had when it was loaded (a replica's share is cut from it).
    loaded: Nanos,
    reserved: Nanos,
    held: u32,
    bucket_units: u64,
    bucket_at_ms: u64,
    /// The rate its bucket was last filled at.
    rpm: Option<u32>,
    /// Tokens admitted (held included) on the local day that ends at `day_end_ms`.
    day_tokens: u64,
    /// Tokens-per-minute bucket, in `UNITS_PER_TOKEN`; below zero after a call
    /// used more than it held.
    tpm_units: i128,
    tpm_at_ms: u64,
    /// The rate the tokens bucket was last filled at.
    tpm: Option<u64>,
    day_end_ms: u64,
    last_ms: u64,
    seq: u64,
}

/// An end user's period so far, as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndUserStatus {
    pub committed: Nanos,
    pub reserved: Nanos,
    pub period: String,
}

#[derive(Debug)]
pub struct EndUsers {
    capacity: usize,
    calendar: Calendar,
    users: HashMap<String, EndUser>,
    /// Least recently touched first.
    order: BTreeMap<u64, String>,
    next_seq: u64,
}

fn capacity_units(rpm: u32) -> u64 {
    u64::from(rpm.max(1)) * UNITS_PER_REQUEST
}

impl EndUsers {
    pub fn new(capacity: usize, calendar: Calendar) -> EndUsers {
        EndUsers {
            capacity: capacity.max(1),
            calendar,
            users: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
        }
    }

    pub fn set_bounds(&mut self, capacity: usize, calendar: Calendar) {
        self.capacity = capacity.max(1);
        self.calendar = calendar;
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    pub fn committed_of(&self, id: &str) -> Option<Nanos> {
        self.users.get(id).map(|user| user.committed)
    }

    /// Whether decisions on this end user, with limits of this period, can be
    /// made without the ledger.
    pub fn knows(&self, id: &str, period: Period) -> bool {
        self.users.get(id).is_some_and(|user| user.period == period)
    }

    /// The local day key of `now_ms`.
    pub fn today(&self, now_ms: u64) -> String {
        self.calendar.day_key(now_ms)
    }

    /// The window an end user's limits put `now_ms` in.
    pub fn window(&self, limits: &EndUserLimits, now_ms: u64) -> Window {
        self.calendar.window(limits.period, now_ms)
    }

    /// Starts tracking an end user with the spend the ledger has for `window`.
    pub fn load(
        &mut self,
        id: &str,
        limits: &EndUserLimits,
        window: Window,
        seed: EndUserSeed,
        now_ms: u64,
    ) {
        let committed = seed.committed;
        // One tracked under another period keeps what it holds, with the new period's spend.
        if let Some(user) = self.users.get_mut(id) {
            if user.period != limits.period {
                user.period = limits.period;
                user.window = window;
                user.committed = committed;
                user.loaded = committed;
            }
            return;
        }
        let seq = self.bump();
        self.users.insert(
            id.to_owned(),
            EndUser {
                period: limits.period,
                window,
                committed,
                loaded: committed,
                reserved: Nanos::ZERO,
                held: 0,
                bucket_units: capacity_units(limits.rpm.unwrap_or(0)),
                bucket_at_ms: now_ms,
                rpm: limits.rpm,
                day_tokens: seed.tokens_today,
                tpm_units: tpm_capacity(limits.tpm),
                tpm_at_ms: now_ms,
                tpm: limits.tpm,
                day_end_ms: self.calendar.window(Period::Day, now_ms).end_ms,
                last_ms: now_ms,
                seq,
            },
        );
        self.order.insert(seq, id.to_owned());
        self.evict(now_ms);
    }

    fn bump(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// The end user, moved to its current period and bucket level, marked as just seen.
    /// Its period is the one it was loaded with (a close of an older hold
    /// may carry limits of another).
    fn current(&mut self, id: &str, limits: &EndUserLimits, now_ms: u64) -> Option<&mut EndUser> {
        let seq = self.bump();
        let calendar = &self.calendar;
        let user = self.users.get_mut(id)?;
        let window = calendar.window(user.period, now_ms);
        self.order.remove(&user.seq);
        self.order.insert(seq, id.to_owned());
        user.seq = seq;
        user.last_ms = user.last_ms.max(now_ms);
        if user.window.key != window.key {
            // Reservations carry over; what was spent belongs to the period that ended.
            user.window = window;
            user.committed = Nanos::ZERO;
            user.loaded = Nanos::ZERO;
        }
        if let Some(rpm) = limits.rpm {
            let elapsed = now_ms.saturating_sub(user.bucket_at_ms);
            user.bucket_units = user
                .bucket_units
                .saturating_add(elapsed.saturating_mul(u64::from(rpm)))
                .min(capacity_units(rpm));
            user.bucket_at_ms = user.bucket_at_ms.max(now_ms);
        }
        user.rpm = limits.rpm;
        user.tpm = limits.tpm;
        if now_ms >= user.day_end_ms {
            user.day_tokens = 0;
            user.day_end_ms = calendar.window(Period::Day, now_ms).end_ms;
        }
        Some(user)
    }

    /// The budget left to the end user (`None`: no budget), and whether its
    /// rate lets one more request in, without changing either.
    /// `replicas`: while the shared store is down each replica gets its share
    /// of what the end user had left when it was loaded.
    pub fn check(
        &mut self,
        hold: &EndUserHold,
        replicas: Option<u32>,
        now_ms: u64,
    ) -> Option<(Option<Nanos>, Result<(), u64>)> {
        if !self.knows(&hold.id, hold.limits.period) {
            return None;
        }
        let user = self.current(&hold.id, &hold.limits, now_ms)?;
        let remaining = hold.limits.budget.map(|budget| {
            let budget = match replicas {
                Some(n) => share_budget(budget, user.loaded, n),
                None => budget,
            };
            budget.saturating_sub(user.committed.saturating_add(user.reserved))
        });
        let rate = match hold.limits.rpm {
            Some(rpm) if user.bucket_units < UNITS_PER_REQUEST => {
                Err((UNITS_PER_REQUEST - user.bucket_units).div_ceil(u64::from(rpm)))
            }
            _ => Ok(()),
        };
        Some((remaining, rate))
    }

    /// Whether `tokens` more fit the end user's tokens for today.
    pub fn admit_tokens(
        &mut self,
        hold: &EndUserHold,
        tokens: u64,
        now_ms: u64,
    ) -> Result<(), EndUserTokensLimited> {
        let Some(user) = self.current(&hold.id, &hold.limits, now_ms) else {
            return Ok(());
        };
        let refused = |kind, limit, retry_after_ms| EndUserTokensLimited {
            id: hold.id.clone(),
            kind,
            limit,
            needed: tokens,
            retry_after_ms,
        };
        if let Some(limit) = hold.limits.daily_tokens
            && user.day_tokens.saturating_add(tokens) > limit
        {
            let retry = user.day_end_ms.saturating_sub(now_ms);
            return Err(refused(TokenLimitKind::Daily, limit, retry));
        }
        if let Some(tpm) = hold.limits.tpm {
            refill_tpm(user, tpm, now_ms);
            let needed = i128::from(tokens) * UNITS_PER_TOKEN;
            if needed > user.tpm_units {
                let missing = needed - user.tpm_units;
                let retry = u64::try_from(missing / i128::from(tpm.max(1))).unwrap_or(u64::MAX);
                return Err(refused(TokenLimitKind::PerMinute, tpm, retry));
            }
        }
        Ok(())
    }

    /// Holds `amount` and `tokens`, and takes one request from the bucket
    /// (after `check` and `admit_tokens` allowed them).
    pub fn hold(&mut self, hold: &EndUserHold, amount: Nanos, tokens: u64, now_ms: u64) {
        if let Some(user) = self.current(&hold.id, &hold.limits, now_ms) {
            user.day_tokens = user.day_tokens.saturating_add(tokens);
            if let Some(tpm) = hold.limits.tpm {
                refill_tpm(user, tpm, now_ms);
                user.tpm_units -= i128::from(tokens) * UNITS_PER_TOKEN;
            }
            user.reserved = user.reserved.saturating_add(amount);
            user.held += 1;
            if hold.limits.rpm.is_some() {
                user.bucket_units = user.bucket_units.saturating_sub(UNITS_PER_REQUEST);
            }
        }
    }

    /// Takes a held amount out and commits `charged` to the current period;
    /// the tokens held are replaced by those used (`tokens`: held, used).
    pub fn close(
        &mut self,
        id: &str,
        limits: &EndUserLimits,
        amount: Nanos,
        charged: Nanos,
        tokens: (u64, u64),
        now_ms: u64,
    ) {
        let (held_tokens, used) = tokens;
        if let Some(user) = self.current(id, limits, now_ms) {
            // After midnight the day's count started again without what was held before.
            user.day_tokens = user
                .day_tokens
                .saturating_sub(held_tokens)
                .saturating_add(used);
            if let Some(tpm) = limits.tpm {
                // What was held and not used goes back to the bucket (never past full).
                let back = (i128::from(held_tokens) - i128::from(used)) * UNITS_PER_TOKEN;
                user.tpm_units = (user.tpm_units + back).min(tpm_capacity(Some(tpm)));
            }
            user.reserved = user.reserved.saturating_sub(amount);
            user.committed = user.committed.saturating_add(charged);
            user.held = user.held.saturating_sub(1);
        }
    }

    pub fn status(
        &mut self,
        id: &str,
        limits: &EndUserLimits,
        now_ms: u64,
    ) -> Option<EndUserStatus> {
        let user = self.current(id, limits, now_ms)?;
        Some(EndUserStatus {
            committed: user.committed,
            reserved: user.reserved,
            period: user.window.key.clone(),
        })
    }

    /// Drops idle end users, oldest first, until the map is within its bound
    /// or the oldest few are all busy.
    fn evict(&mut self, now_ms: u64) {
        while self.users.len() > self.capacity {
            let idle = self
                .order
                .iter()
                .take(EVICTION_SCAN)
                .find(|(_, id)| self.users.get(*id).is_some_and(|u| idle(u, now_ms)))
                .map(|(seq, id)| (*seq, id.clone()));
            let Some((seq, id)) = idle else { return };
            self.order.remove(&seq);
            self.users.remove(&id);
        }
    }
}

/// Bucket units per token: refilling `tpm` units a millisecond is `tpm` tokens a minute.
const UNITS_PER_TOKEN: i128 = 60_000;

fn tpm_capacity(tpm: Option<u64>) -> i128 {
    i128::from(tpm.unwrap_or(0)) * UNITS_PER_TOKEN
}

fn refill_tpm(user: &mut EndUser, tpm: u64, now_ms: u64) {
    let elapsed = i128::from(now_ms.saturating_sub(user.tpm_at_ms));
    user.tpm_units = (user.tpm_units + elapsed * i128::from(tpm)).min(tpm_capacity(Some(tpm)));
    user.tpm_at_ms = user.tpm_at_ms.max(now_ms);
}

/// Nothing held, settled long enough ago, and a bucket that refilled: forgetting it loses nothing.
fn idle(user: &EndUser, now_ms: u64) -> bool {
    let refilled = user.rpm.is_none_or(|rpm| {
        let elapsed = now_ms.saturating_sub(user.bucket_at_ms);
        user.bucket_units
            .saturating_add(elapsed.saturating_mul(u64::from(rpm)))
            >= capacity_units(rpm)
    });
    let tokens_refilled = user.tpm.is_none_or(|tpm| {
        let elapsed = i128::from(now_ms.saturating_sub(user.tpm_at_ms));
        user.tpm_units + elapsed * i128::from(tpm) >= tpm_capacity(Some(tpm))
    });
    user.held == 0
        && user.reserved == Nanos::ZERO
        && now_ms.saturating_sub(user.last_ms) >= EVICT_AFTER_MS
        && refilled
        && tokens_refilled
}
