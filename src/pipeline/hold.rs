//! The hold of the attempt in flight. Every attempt that leaves the gateway
//! is covered by a reservation of the tenant: an attempt the provider did not
//! bill (connection refused, a 429 or 5xx answer) hands its hold to the next
//! attempt; an attempt that may have been billed consumes it, and the next
//! attempt needs a new one, reserved in the tenant's one atomic step. No hold,
//! no attempt.

use crate::money::Nanos;
use crate::tenant::TenantHandle;
use crate::tenant::{Granted, QuotaError, ReservationGuard, ReservationMeta, ReserveRequest};

pub struct Hold {
    tenant: TenantHandle,
    /// What every renewal asks for: the first grant's output limit, so a clamp
    /// applied at admission stays the limit every attempt is sent with.
    request: ReserveRequest,
    meta: ReservationMeta,
    guard: Option<ReservationGuard>,
    /// The last grant, kept after its guard is consumed.
    granted: Granted,
}

impl Hold {
    pub fn new(
        tenant: TenantHandle,
        mut request: ReserveRequest,
        meta: ReservationMeta,
        guard: ReservationGuard,
    ) -> Hold {
        let granted = *guard.granted();
        request.max_tokens = granted.max_tokens;
        Hold {
            tenant,
            request,
            meta,
            guard: Some(guard),
            granted,
        }
    }

    pub fn granted(&self) -> &Granted {
        &self.granted
    }

    /// The hold at the providers' prices: a row charged the hold costs this.
    pub fn cost(&self) -> Option<Nanos> {
        self.meta.cost_nanos.map(Nanos::new)
    }

    /// The amount the attempt in flight is covered by.
    pub fn amount(&self) -> Nanos {
        self.granted.amount
    }

    /// Hands the reservation over to be settled (a finished attempt's).
    pub fn take(&mut self) -> Option<ReservationGuard> {
        self.guard.take()
    }

    /// The tokens the hold admitted against the token limits.
    pub fn held_tokens(&self) -> u64 {
        self.request
            .input_tokens
            .saturating_add(self.request.output_tokens(self.granted.max_tokens))
    }

    /// A new hold for the next attempt after the last one was consumed; an
    /// error means the budget cannot cover another attempt.
    pub async fn renew(&mut self, expires_at_ms: u64) -> Result<(), QuotaError> {
        if self.guard.is_some() {
            return Ok(());
        }
        let mut request = self.request.clone();
        request.expires_at_ms = expires_at_ms;
        let guard = self.tenant.reserve(request, self.meta.clone()).await?;
        self.granted = *guard.granted();
        self.guard = Some(guard);
        Ok(())
    }

    /// Gives back a hold no attempt will use.
    pub fn release(&mut self) {
        if let Some(guard) = self.guard.take() {
            guard.release();
        }
    }
}
