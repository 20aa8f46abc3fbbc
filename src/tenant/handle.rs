//! TenantHandle: the typed front of one TenantActor. Handlers call these
//! methods and never see `Addr` or `MailboxError`. A reservation comes back
//! inside a `ReservationGuard` that releases it on drop unless settled, which
//! covers a handler future dropped when the client disconnects.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use actix::MailboxError;

use super::actor::TenantActor;
use super::book::{
    Balance, BudgetStatus, EndUserRateLimited, EndUserTokensLimited, Granted, RateDecision,
    Refusal, Refused, ReserveRequest, Settled,
};
use super::end_users::{EndUserHold, EndUserStatus};
use super::in_flight::{Call, CallCaps, CallId, Crowded};
use super::messages::{
    AddCredit, Admitted, CheckRate, EnterCall, GetBalance, GetEndUser, GetStatus, LeaveCall,
    RateAndReserve, Release, ReservationMeta, Reserve, Settle, SettleReply,
};
use super::registry::{RunningActor, TenantRegistry};
use super::store::CreditAdded;
use super::tokens::TokenRefusal;
use crate::directory::TenantRecord;
use crate::ids::KeyId;
use crate::money::Nanos;

#[derive(Debug, Clone, thiserror::Error)]
pub enum QuotaError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    TokenLimited(#[from] TokenRefusal),
    #[error(transparent)]
    EndUserRate(#[from] EndUserRateLimited),
    #[error(transparent)]
    EndUserTokens(#[from] EndUserTokensLimited),
    #[error("the tenant's quota state is unavailable")]
    Unavailable,
    /// A budget period the store has not started (a tenant's month, an end
    /// user's window) could not be read from the ledger: no decision starts from nothing.
    #[error("the ledger could not be read to start a budget period")]
    LedgerUnreadable,
    /// The shared quota store is unreachable and the tenant is `fail_closed`.
    #[error("the shared quota store is unreachable")]
    StoreDown,
    /// The tenant or the key has its cap of calls in flight.
    #[error(transparent)]
    InFlight(#[from] Crowded),
}

#[derive(Clone)]
pub struct TenantHandle {
    running: RunningActor,
    registry: TenantRegistry,
    /// Shared with the request's context: every reservation's guard holds a
    /// handle for as long as its call (a stream's whole life), and a copy of
    /// the record (its names, routes and maps) in each would cost that much per call.
    tenant: Arc<TenantRecord>,
}

/// The rate decision, and the reservation when the rate allowed one.
pub struct RateAndHold {
    pub rate: RateDecision,
    pub reservation: Option<Result<ReservationGuard, QuotaError>>,
}

impl TenantHandle {
    pub(super) fn new(
        running: RunningActor,
        registry: TenantRegistry,
        tenant: Arc<TenantRecord>,
    ) -> Self {
        TenantHandle {
            running,
            registry,
            tenant,
        }
    }

    /// Sends `msg`; if the actor stopped (idle, or failed to load) since the
    /// lookup, starts a fresh one and tries once more.
    async fn call<M>(&self, msg: M) -> Result<M::Result, QuotaError>
    where
        M: actix::Message + Clone + Send + 'static,
        M::Result: Send,
        TenantActor: actix::Handler<M>,
    {
        self.call_on(msg).await.map(|(reply, _)| reply)
    }

    /// `call`, and the actor that answered: a reservation's guard must
    /// close it on the actor that granted it.
    async fn call_on<M>(&self, msg: M) -> Result<(M::Result, RunningActor), QuotaError>
    where
        M: actix::Message + Clone + Send + 'static,
        M::Result: Send,
        TenantActor: actix::Handler<M>,
    {
        match self.running.addr.send(msg.clone()).await {
            Ok(reply) => Ok((reply, self.running.clone())),
            Err(MailboxError::Closed | MailboxError::Timeout) => {
                let running = self.fresh_actor()?;
                let reply = running
                    .addr
                    .send(msg)
                    .await
                    .map_err(|_| QuotaError::Unavailable)?;
                Ok((reply, running))
            }
        }
    }

    fn fresh_actor(&self) -> Result<RunningActor, QuotaError> {
        self.registry
            .running_actor(&self.tenant)
            .map_err(|_| QuotaError::Unavailable)
    }

    pub async fn check_rate(&self) -> Result<RateDecision, QuotaError> {
        let rate = self.call(CheckRate).await??;
        self.running
            .rate_limited
            .store(!rate.allowed, Ordering::Relaxed);
        Ok(rate)
    }

    /// Whether the tenant's last rate check refused: while it is limited, its
    /// requests take the rate check alone first, so a refusal costs no
    /// token count.
    pub fn rate_limited(&self) -> bool {
        self.running.rate_limited.load(Ordering::Relaxed)
    }

    /// The rate check and, if it allows the request, the reservation, in one
    /// decision of the tenant's actor.
    pub async fn check_rate_and_reserve(
        &self,
        request: ReserveRequest,
        meta: ReservationMeta,
    ) -> Result<RateAndHold, QuotaError> {
        let (admitted, actor) = self
            .call_on(RateAndReserve(Reserve { request, meta }))
            .await?;
        let Admitted { rate, reservation } = admitted?;
        actor.rate_limited.store(!rate.allowed, Ordering::Relaxed);
        Ok(RateAndHold {
            rate,
            reservation: reservation
                .map(|granted| granted.map(|granted| self.guard(granted, &actor))),
        })
    }

    pub async fn reserve(
        &self,
        request: ReserveRequest,
        meta: ReservationMeta,
    ) -> Result<ReservationGuard, QuotaError> {
        let (granted, actor) = self.call_on(Reserve { request, meta }).await?;
        Ok(self.guard(granted?, &actor))
    }

    /// The guard of a reservation `actor` made: counted open on it until closed.
    fn guard(&self, granted: Granted, actor: &RunningActor) -> ReservationGuard {
        actor.open_holds.fetch_add(1, Ordering::AcqRel);
        ReservationGuard {
            handle: TenantHandle {
                running: actor.clone(),
                ..self.clone()
            },
            granted,
            closed: false,
        }
    }

    /// A slot among the calls in flight of the tenant and of `key`, held
    /// until the returned guard drops; past `expires_at_ms` the slot is
    /// given back even if the guard never drops (a replica that died).
    pub async fn enter_call(
        &self,
        key: KeyId,
        caps: CallCaps,
        expires_at_ms: u64,
    ) -> Result<CallSlot, QuotaError> {
        // Random, so replicas sharing the tenant never pick the same one.
        let id = CallId(rand::random::<u64>() >> 2);
        let call = Call {
            id,
            key: key.clone(),
            caps,
            expires_at_ms,
        };
        let (entered, actor) = self.call_on(EnterCall(call)).await?;
        entered?;
        actor.open_holds.fetch_add(1, Ordering::AcqRel);
        Ok(CallSlot {
            running: actor,
            id,
            key,
        })
    }

    pub async fn status(&self) -> Result<BudgetStatus, QuotaError> {
        self.call(GetStatus).await?
    }

    /// An end user's spend in their current period (loaded from the ledger if need be).
    pub async fn end_user(&self, hold: EndUserHold) -> Result<EndUserStatus, QuotaError> {
        self.call(GetEndUser(hold)).await?
    }

    /// Tells the deciding store of a top-up the ledger has written.
    pub async fn add_credit(&self, top_up: CreditAdded) -> Result<(), QuotaError> {
        self.call(AddCredit(top_up)).await?
    }

    /// The tenant's prepaid balance (`None`) or a key's.
    pub async fn balance(&self, key: Option<KeyId>) -> Result<Balance, QuotaError> {
        self.call(GetBalance(key)).await?
    }
}

/// A held reservation. Dropping it unsettled releases it.
#[must_use = "a reservation must be settled or released"]
pub struct ReservationGuard {
    handle: TenantHandle,
    granted: Granted,
    closed: bool,
}

impl ReservationGuard {
    pub fn granted(&self) -> &Granted {
        &self.granted
    }

    /// Commits the real cost; the rest of the reservation is released. The
    /// settle is sent now, not when the reply is awaited, so the actor sees
    /// it before any later decision of this caller's.
    pub fn settle(
        mut self,
        charged: Nanos,
        tokens: u64,
    ) -> impl Future<Output = Result<SettleReply, QuotaError>> + 'static {
        let msg = Settle {
            id: self.granted.id,
            charged,
            tokens,
        };
        // Once the settle is sent the actor applies it even if this future is dropped.
        let reply = self.handle.running.addr.send(msg);
        // Counted closed only once queued, so the actor never stops before it.
        self.close();
        let handle = self.handle.clone();
        async move {
            match reply.await {
                Ok(settled) => settled,
                // An actor stops with a guard open only once every hold it
                // granted has expired: any actor finds this one closed.
                Err(_) => handle
                    .fresh_actor()?
                    .addr
                    .send(msg)
                    .await
                    .map_err(|_| QuotaError::Unavailable)?,
            }
        }
    }

    /// Gives the whole reservation back (nothing was spent).
    pub fn release(mut self) {
        self.send_release();
        self.close();
    }

    /// No longer open: its actor may stop once idle.
    fn close(&mut self) {
        self.closed = true;
        self.handle
            .running
            .open_holds
            .fetch_sub(1, Ordering::AcqRel);
    }

    fn send_release(&self) {
        let release = Release {
            id: self.granted.id,
        };
        let addr = &self.handle.running.addr;
        if addr.connected() {
            addr.do_send(release);
        } else if let Ok(fresh) = self.handle.fresh_actor() {
            fresh.addr.do_send(release);
        }
    }
}

impl Drop for ReservationGuard {
    fn drop(&mut self) {
        if !self.closed {
            self.send_release();
            self.close();
        }
    }
}

/// A call's slot among the calls in flight: given back when it drops, on
/// every path a call can end by (answered, failed, its caller gone).
#[must_use = "a call's slot is given back when its guard drops"]
pub struct CallSlot {
    /// The actor that opened it: its open slot keeps the actor running.
    running: RunningActor,
    id: CallId,
    key: KeyId,
}

impl Drop for CallSlot {
    fn drop(&mut self) {
        self.running.addr.do_send(LeaveCall {
            id: self.id,
            key: self.key.clone(),
        });
        self.running.open_holds.fetch_sub(1, Ordering::AcqRel);
    }
}

impl From<Refusal> for QuotaError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Budget(refused) => QuotaError::Refused(refused),
            Refusal::Tokens(refused) => QuotaError::TokenLimited(refused),
            Refusal::EndUserRate(limited) => QuotaError::EndUserRate(limited),
            Refusal::EndUserTokens(limited) => QuotaError::EndUserTokens(limited),
            // The actor loads an end user before it asks; one it could not load is unavailable.
            Refusal::EndUserUnknown(_) => QuotaError::Unavailable,
        }
    }
}

/// Whether a settle actually committed the charge (it did not if the
/// reservation had already expired and been committed as orphaned).
pub fn committed(reply: &SettleReply) -> bool {
    matches!(reply.settled, Settled::Committed { .. })
}
