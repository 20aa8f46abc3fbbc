//! The hold of the attempt in flight. Every attempt that leaves the gateway
//! is covered by a reservation of the tenant: an attempt the provider did not
//! bill (connection refused, a 429 or 5xx answer) hands its hold to the next
//! attempt; an attempt that may have been billed consumes it, and the next
//! attempt needs a new one, reserved in the tenant's one atomic step. No hold,
//! no attempt.
//!
//! A stream whose models show all they bill is held one step of output at a
//! time (`billing.stream_step_tokens`): the upstream is sent the caller's
//! limit, and the relay asks for the next step (`Growth`) before what it has
//! passed on comes within a step of what is held.

use crate::money::Nanos;
use crate::tenant::TenantHandle;
use crate::tenant::{
    CallSlot, Granted, QuotaError, ReservationGuard, ReservationMeta, ReserveRequest,
};

pub struct Hold {
    tenant: TenantHandle,
    /// What every renewal asks for: the first grant's output limit, so a clamp
    /// applied at admission stays the limit every attempt is sent with.
    request: ReserveRequest,
    meta: ReservationMeta,
    guard: Option<ReservationGuard>,
    /// The last grant, kept after its guard is consumed.
    granted: Granted,
    /// Where the hold grows with the stream: the output limit sent upstream
    /// (the caller's), and what each further step reserves.
    grows: Option<(u32, Box<GrowthStep>)>,
    /// The call's slot among the tenant's and key's calls in flight, where
    /// they are capped: it goes with the hold to the stream relay, and is
    /// given back when whichever has it last drops it.
    call: Option<CallSlot>,
}

/// What one more step of a growing hold reserves, and records beside it.
#[derive(Clone)]
pub struct GrowthStep {
    pub request: ReserveRequest,
    pub meta: ReservationMeta,
}

/// What a relay needs to grow its stream's hold.
pub struct Growth {
    pub tenant: TenantHandle,
    pub step: GrowthStep,
    /// The output limit sent upstream: past it nothing more is held.
    pub limit: u32,
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
            grows: None,
            call: None,
        }
    }

    /// Keeps the call's slot for as long as the call lasts.
    pub fn carry(&mut self, call: Option<CallSlot>) {
        self.call = call;
    }

    /// The call's slot, for the stream relay that outlives the attempt loop.
    pub fn take_call(&mut self) -> Option<CallSlot> {
        self.call.take()
    }

    /// Sends the upstream `limit` while the hold covers only its first step,
    /// unless that step was clamped: then the clamp is the limit sent.
    pub fn grow_to(&mut self, limit: u32, step: GrowthStep) {
        if !self.granted.clamped && limit > self.granted.max_tokens {
            self.grows = Some((limit, Box::new(step)));
        }
    }

    /// The output limit the upstream is sent.
    pub fn sent_max_tokens(&self) -> u32 {
        self.grows
            .as_ref()
            .map_or(self.granted.max_tokens, |(limit, _)| *limit)
    }

    /// What the stream relay needs to grow this hold, if it grows.
    pub fn growth(&self) -> Option<Growth> {
        self.grows.as_ref().map(|(limit, step)| Growth {
            tenant: self.tenant.clone(),
            step: (**step).clone(),
            limit: *limit,
        })
    }

    pub fn granted(&self) -> &Granted {
        &self.granted
    }

    /// What the hold reserves (its output limit as granted).
    pub fn request(&self) -> &ReserveRequest {
        &self.request
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
        if self.granted.clamped {
            self.grows = None;
        }
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
