//! TenantHandle: the typed front of one TenantActor. Handlers call these
//! methods and never see `Addr` or `MailboxError`. A reservation comes back
//! inside a `ReservationGuard` that releases it on drop unless settled, which
//! covers a handler future dropped when the client disconnects.

use actix::{Addr, MailboxError};

use super::actor::TenantActor;
use super::book::{BudgetStatus, Granted, RateDecision, Refusal, Refused, ReserveRequest, Settled};
use super::messages::{
    CheckRate, GetStatus, Release, ReservationMeta, Reserve, Settle, SettleReply,
};
use super::registry::TenantRegistry;
use super::tokens::TokenRefusal;
use crate::directory::TenantRecord;
use crate::money::Nanos;

#[derive(Debug, Clone, thiserror::Error)]
pub enum QuotaError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    TokenLimited(#[from] TokenRefusal),
    #[error("the tenant's quota state is unavailable")]
    Unavailable,
    /// The shared quota store is unreachable and the tenant is `fail_closed`.
    #[error("the shared quota store is unreachable")]
    StoreDown,
}

#[derive(Clone)]
pub struct TenantHandle {
    addr: Addr<TenantActor>,
    registry: TenantRegistry,
    tenant: TenantRecord,
}

impl TenantHandle {
    pub(super) fn new(
        addr: Addr<TenantActor>,
        registry: TenantRegistry,
        tenant: TenantRecord,
    ) -> Self {
        TenantHandle {
            addr,
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
        match self.addr.send(msg.clone()).await {
            Ok(reply) => Ok(reply),
            Err(MailboxError::Closed | MailboxError::Timeout) => {
                let addr = self
                    .registry
                    .addr(&self.tenant)
                    .map_err(|_| QuotaError::Unavailable)?;
                addr.send(msg).await.map_err(|_| QuotaError::Unavailable)
            }
        }
    }

    pub async fn check_rate(&self) -> Result<RateDecision, QuotaError> {
        self.call(CheckRate).await?
    }

    pub async fn reserve(
        &self,
        request: ReserveRequest,
        meta: ReservationMeta,
    ) -> Result<ReservationGuard, QuotaError> {
        let granted = self.call(Reserve { request, meta }).await??;
        Ok(ReservationGuard {
            handle: self.clone(),
            granted,
            closed: false,
        })
    }

    pub async fn status(&self) -> Result<BudgetStatus, QuotaError> {
        self.call(GetStatus).await?
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

    /// Commits the real cost; the rest of the reservation is released.
    pub async fn settle(mut self, charged: Nanos, tokens: u64) -> Result<SettleReply, QuotaError> {
        self.closed = true;
        let msg = Settle {
            id: self.granted.id,
            charged,
            tokens,
        };
        // Once the settle is sent the actor applies it even if this future is dropped.
        self.handle
            .addr
            .send(msg)
            .await
            .map_err(|_| QuotaError::Unavailable)?
    }

    /// Gives the whole reservation back (nothing was spent).
    pub fn release(mut self) {
        self.closed = true;
        self.handle.addr.do_send(Release {
            id: self.granted.id,
        });
    }
}

impl Drop for ReservationGuard {
    fn drop(&mut self) {
        if !self.closed {
            self.handle.addr.do_send(Release {
                id: self.granted.id,
            });
        }
    }
}

impl From<Refusal> for QuotaError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Budget(refused) => QuotaError::Refused(refused),
            Refusal::Tokens(refused) => QuotaError::TokenLimited(refused),
        }
    }
}

/// Whether a settle actually committed the charge (it did not if the
/// reservation had already expired and been committed as orphaned).
pub fn committed(reply: &SettleReply) -> bool {
    matches!(reply.settled, Settled::Committed { .. })
}
