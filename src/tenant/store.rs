//! `QuotaStore`: where a tenant's quota state lives, and the one place its
//! decisions are made. Each decision is one atomic step on the store: on the
//! in-memory `QuotaBook` (one process) a method call under the actor's
//! `&mut`, on Redis (`shared::RedisQuota`, several replicas) one Lua script.
//! The tenant actor asks either store the same questions and reads the same
//! answers, so the budget rule is visibly one rule: which store answers is
//! the actor's choice (by the store's health and the tenant's policy), never
//! what the answer is.

use futures_util::future::LocalBoxFuture;

use super::book::{
    Balance, BudgetStatus, Granted, Limits, QuotaBook, RateDecision, ReserveRequest, Settled,
};
use super::grants::Grant;
use super::handle::QuotaError;
use super::in_flight::{Call, CallId};
use super::messages::{Admitted, ReservationMeta};
use super::shared::StoreFailure;
use crate::ids::{KeyId, ReservationId};
use crate::money::Nanos;

/// A store's answer, or its refusal (`QuotaError`).
pub type QuotaAnswer<T> = Result<T, QuotaError>;

/// A store's reply: decided on the spot (the book), or by a script whose
/// reply is on its way (Redis, which may fail as a store: `StoreFailure`).
pub enum StoreReply<T> {
    Done(QuotaAnswer<T>),
    Pending(LocalBoxFuture<'static, Result<QuotaAnswer<T>, StoreFailure>>),
}

impl<T> StoreReply<T> {
    /// The answer of a reply that cannot wait (the book's).
    pub fn now(self) -> QuotaAnswer<T> {
        match self {
            StoreReply::Done(verdict) => verdict,
            StoreReply::Pending(_) => Err(QuotaError::Unavailable),
        }
    }
}

/// A worst case to hold. The id is the caller's, so a reply lost on the
/// wire can still be released by it.
#[derive(Debug, Clone)]
pub struct Reservation {
    pub id: ReservationId,
    pub request: ReserveRequest,
    /// Who it belongs to: an orphan's ledger row is written from it.
    pub meta: ReservationMeta,
}

/// A held reservation to close: `charged` committed, the rest released.
#[derive(Debug, Clone, Copy)]
pub struct Close {
    pub id: ReservationId,
    pub charged: Nanos,
    /// Tokens the call really used, for the token limits.
    pub tokens: u64,
}

/// How a close ended, and the tenant's totals after it.
#[derive(Debug)]
pub struct Closed {
    pub settled: Settled,
    pub committed: Nanos,
    pub reserved: Nanos,
    /// Alert thresholds (percent) this close crossed first.
    pub fired: Vec<u32>,
}

impl Closed {
    /// A close that moved nothing: the hold was closed before, or lost.
    pub fn unchanged(settled: Settled) -> Closed {
        Closed {
            settled,
            committed: Nanos::ZERO,
            reserved: Nanos::ZERO,
            fired: Vec::new(),
        }
    }
}

pub trait QuotaStore {
    /// The limits the next decisions apply.
    fn set_limits(&mut self, limits: Limits);
    /// Takes one request from the requests/min bucket.
    fn check_rate(&mut self, now_ms: u64) -> StoreReply<RateDecision>;
    /// Holds the worst case against every scope that applies, all or nothing.
    fn reserve(&mut self, reservation: &Reservation, now_ms: u64) -> StoreReply<Granted>;
    /// `check_rate`, then `reserve` if the rate allows: one step for both.
    fn check_rate_and_reserve(
        &mut self,
        reservation: &Reservation,
        now_ms: u64,
    ) -> StoreReply<Admitted>;
    /// Closes a reservation; closing one twice changes nothing.
    fn settle(&mut self, close: Close, now_ms: u64) -> StoreReply<Closed>;
    /// The tenant's period: committed, reserved, what is left.
    fn status(&mut self, now_ms: u64) -> StoreReply<BudgetStatus>;
    /// Adds a top-up the ledger wrote (row `id`); one added before changes nothing.
    fn add_credit(&mut self, top_up: &CreditAdded) -> StoreReply<()>;
    /// The tenant's prepaid balance (`None`) or a key's.
    fn balance(&mut self, key: Option<KeyId>, now_ms: u64) -> StoreReply<Balance>;
    /// Opens a call's slot unless the tenant's or its key's cap is reached.
    fn enter_call(&mut self, call: &Call, now_ms: u64) -> StoreReply<()>;
    /// Gives a call's slot back; giving it back twice changes nothing.
    fn leave_call(&mut self, id: CallId, key: &KeyId, now_ms: u64) -> StoreReply<()>;
}

/// A grant as written to the ledger.
#[derive(Debug, Clone)]
pub struct CreditAdded {
    pub key: Option<KeyId>,
    pub grant: Grant,
}

impl QuotaStore for QuotaBook {
    fn set_limits(&mut self, limits: Limits) {
        QuotaBook::set_limits(self, limits);
    }

    fn check_rate(&mut self, now_ms: u64) -> StoreReply<RateDecision> {
        StoreReply::Done(Ok(QuotaBook::check_rate(self, now_ms)))
    }

    fn reserve(&mut self, reservation: &Reservation, now_ms: u64) -> StoreReply<Granted> {
        StoreReply::Done(
            self.reserve_as(reservation, now_ms)
                .map_err(QuotaError::from),
        )
    }

    fn check_rate_and_reserve(
        &mut self,
        reservation: &Reservation,
        now_ms: u64,
    ) -> StoreReply<Admitted> {
        let rate = QuotaBook::check_rate(self, now_ms);
        let reservation = rate.allowed.then(|| {
            self.reserve_as(reservation, now_ms)
                .map_err(QuotaError::from)
        });
        StoreReply::Done(Ok(Admitted { rate, reservation }))
    }

    fn settle(&mut self, close: Close, now_ms: u64) -> StoreReply<Closed> {
        let settled = QuotaBook::settle(self, close.id, close.charged, close.tokens, now_ms);
        let status = QuotaBook::status(self, now_ms);
        StoreReply::Done(Ok(Closed {
            settled,
            committed: status.committed,
            reserved: status.reserved,
            // The actor's alert book follows the book's committed spend
            // (expiries cross thresholds too).
            fired: Vec::new(),
        }))
    }

    fn status(&mut self, now_ms: u64) -> StoreReply<BudgetStatus> {
        StoreReply::Done(Ok(QuotaBook::status(self, now_ms)))
    }

    fn add_credit(&mut self, top_up: &CreditAdded) -> StoreReply<()> {
        QuotaBook::add_credit(self, top_up.key.as_ref(), top_up.grant.clone());
        StoreReply::Done(Ok(()))
    }

    fn balance(&mut self, key: Option<KeyId>, now_ms: u64) -> StoreReply<Balance> {
        StoreReply::Done(Ok(QuotaBook::balance(self, key.as_ref(), now_ms)))
    }

    fn enter_call(&mut self, call: &Call, now_ms: u64) -> StoreReply<()> {
        StoreReply::Done(QuotaBook::enter_call(self, call, now_ms).map_err(QuotaError::from))
    }

    fn leave_call(&mut self, id: CallId, _key: &KeyId, _now_ms: u64) -> StoreReply<()> {
        QuotaBook::leave_call(self, id);
        StoreReply::Done(Ok(()))
    }
}
