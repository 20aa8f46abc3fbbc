//! Messages of the TenantActor. Replies are plain data; the handle folds
//! mailbox errors into `QuotaError`.

use actix::Message;

use serde::{Deserialize, Serialize};

use super::book::{Balance, BudgetStatus, Granted, Limits, RateDecision, ReserveRequest, Settled};
use super::end_users::{EndUserHold, EndUserStatus};
use super::handle::QuotaError;
use super::in_flight::{Call, CallId};
use crate::ids::{KeyId, RequestId, ReservationId};
use crate::money::Nanos;

/// Takes one request from the requests/min bucket.
#[derive(Message, Clone, Copy)]
#[rtype(result = "Result<RateDecision, QuotaError>")]
pub struct CheckRate;

/// Who a reservation belongs to, so an orphaned one still gets a full ledger row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReservationMeta {
    pub request_id: RequestId,
    pub key: KeyId,
    pub feature: String,
    /// The end user charged, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_user: Option<String>,
    /// The agent run, if it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The door the request came in by.
    #[serde(default)]
    pub api: crate::ledger::Api,
    pub route: String,
    pub client_request_id: Option<String>,
    pub trace_id: Option<String>,
    /// The replica that reserved, so it can settle its reservations by the
    /// ledger after a restart (see `shared/restart.rs`).
    #[serde(default)]
    pub replica: String,
    /// The tenant's plan, for the row of a reservation that expires unsettled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// The hold at the providers' prices: the cost of a row charged the
    /// hold, beside its charge at the plan's (`None`: the charge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_nanos: Option<u64>,
}

#[derive(Message, Clone)]
#[rtype(result = "Result<Granted, QuotaError>")]
pub struct Reserve {
    pub request: ReserveRequest,
    pub meta: ReservationMeta,
}

/// `CheckRate` and, if the rate allows, `Reserve`: one decision of the actor
/// instead of two round trips to it.
#[derive(Message, Clone)]
#[rtype(result = "Result<Admitted, QuotaError>")]
pub struct RateAndReserve(pub Reserve);

/// The rate decision, and the reservation's when the rate allowed one.
#[derive(Debug)]
pub struct Admitted {
    pub rate: RateDecision,
    pub reservation: Option<Result<Granted, QuotaError>>,
}

#[derive(Message, Clone, Copy)]
#[rtype(result = "Result<SettleReply, QuotaError>")]
pub struct Settle {
    pub id: ReservationId,
    pub charged: Nanos,
    /// Tokens the call really used (prompt + completion), for the token limits.
    pub tokens: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettleReply {
    pub settled: Settled,
    pub remaining: Option<Nanos>,
}

#[derive(Message, Clone, Copy)]
#[rtype(result = "()")]
pub struct Release {
    pub id: ReservationId,
}

#[derive(Message, Clone, Copy)]
#[rtype(result = "Result<BudgetStatus, QuotaError>")]
pub struct GetStatus;

/// One end user's period so far, with the limits the caller resolved for them.
#[derive(Message, Clone)]
#[rtype(result = "Result<EndUserStatus, QuotaError>")]
pub struct GetEndUser(pub EndUserHold);

#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct UpdateLimits(pub Limits);

/// A top-up the ledger has written, for the store that decides.
#[derive(Message, Clone)]
#[rtype(result = "Result<(), QuotaError>")]
pub struct AddCredit(pub super::store::CreditAdded);

/// Opens a call's slot, unless the tenant's or its key's cap on calls in flight is reached.
#[derive(Message, Clone)]
#[rtype(result = "Result<(), QuotaError>")]
pub struct EnterCall(pub Call);

/// Gives a call's slot back.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct LeaveCall {
    pub id: CallId,
    pub key: KeyId,
}

/// The tenant's prepaid balance (`None`) or a key's.
#[derive(Message, Clone)]
#[rtype(result = "Result<Balance, QuotaError>")]
pub struct GetBalance(pub Option<KeyId>);
