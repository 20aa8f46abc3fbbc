//! A cached answer served, and what it is charged. A hit is free unless the tenant's plan sets
//! `cache_hit_percent`: then it is charged that share of what the answer
//! would be charged on the plan, and that charge is held and settled in the
//! tenant's one decision like any other, so a budget, a key's, an end user's
//! or an agent run's cap refuses a hit that does not fit (402) as it refuses
//! a call.

use crate::cache::CachedResponse;
use crate::config::{Plan, Route};
use crate::error::ApiError;
use crate::money::Nanos;
use crate::state::Gateway;
use crate::tenant::end_users::EndUserHold;
use crate::tenant::sessions::SessionHold;
use crate::tenant::{ReservationGuard, ReservationMeta, ReserveRequest, TenantHandle};

use super::chat::{ChatOutcome, OutcomeBody};
use super::context::RequestContext;
use super::dispatch::RESERVATION_MARGIN_MS;
use super::record::{self, AttemptRow};
use crate::ledger::{AttemptStatus, CacheSource, UsageKind};
use crate::tenant::RateDecision;

/// What a hit needs to be charged: the request's scopes and its plan's rate.
pub struct HitCharge<'a> {
    pub gw: &'a Gateway,
    pub ctx: &'a RequestContext,
    /// The route as the tenant's plan charges it.
    pub route: &'a Route,
    pub tenant: &'a TenantHandle,
    /// The tenant's plan where it charges hits.
    pub plan: Option<&'a Plan>,
    pub end_user: Option<&'a EndUserHold>,
    pub session: Option<&'a SessionHold>,
}

/// A hit's charge, held until its row is written.
pub struct HeldHit {
    pub amount: Nanos,
    pub remaining: Option<Nanos>,
    guard: Option<ReservationGuard>,
}

impl HitCharge<'_> {
    /// The hit's charge: its plan's share of the answer's usage at the
    /// answering target's charge; a target a reload took off the route is
    /// charged at the route's dearest.
    pub fn amount(&self, hit: &CachedResponse) -> Nanos {
        let Some(plan) = self.plan.filter(|plan| plan.cache_hit_ppm > 0) else {
            return Nanos::ZERO;
        };
        let answering = self
            .route
            .targets
            .iter()
            .find(|t| t.provider.as_str() == hit.provider && t.model == hit.model);
        let full = match answering {
            Some(target) => crate::pricing::charge(&target.charge, &hit.usage),
            None => self
                .route
                .targets
                .iter()
                .map(|t| crate::pricing::charge(&t.charge, &hit.usage))
                .max()
                .unwrap_or(Nanos::ZERO),
        };
        plan.cache_hit_charge(full)
    }

    /// Holds `amount` in the tenant's one decision (nothing when it is 0).
    pub async fn hold(&self, amount: Nanos) -> Result<HeldHit, ApiError> {
        if amount == Nanos::ZERO {
            return Ok(HeldHit {
                amount,
                remaining: None,
                guard: None,
            });
        }
        let guard = self
            .tenant
            .reserve(self.request(amount), self.meta())
            .await
            .map_err(|e| super::chat::quota_error(&e))?;
        Ok(HeldHit {
            amount,
            remaining: guard.granted().remaining,
            guard: Some(guard),
        })
    }

    /// A hit holds its charge as a fee: no tokens, no output to clamp.
    fn request(&self, amount: Nanos) -> ReserveRequest {
        let (ctx, now) = (self.ctx, self.gw.clock.now_ms());
        ReserveRequest {
            input_tokens: 0,
            input_price: crate::money::PricePerMTok::from_nanos(Nanos::ZERO),
            output_price: crate::money::PricePerMTok::from_nanos(Nanos::ZERO),
            max_tokens: 0,
            choices: 1,
            expires_at_ms: now + self.gw.config.server.request_timeout_ms + RESERVATION_MARGIN_MS,
            key: ctx.key.id.clone(),
            key_budget: ctx.key.monthly_budget,
            key_period: ctx.key.budget_period,
            key_credits: ctx.key.on_credits,
            feature: ctx.feature.clone(),
            end_user: self.end_user.cloned(),
            fees: amount,
            session: self.session.cloned(),
        }
    }

    fn meta(&self) -> ReservationMeta {
        let ctx = self.ctx;
        ReservationMeta {
            request_id: ctx.request_id.clone(),
            key: ctx.key.id.clone(),
            feature: ctx.feature.clone(),
            end_user: ctx.end_user.clone(),
            session: ctx.session.clone(),
            api: ctx.api,
            route: self.route.name.to_string(),
            client_request_id: ctx.client_request_id.clone(),
            trace_id: ctx.trace_id.clone(),
            replica: self.gw.replica_id.to_string(),
            plan: ctx.tenant.plan.clone(),
            // A hit costs the providers nothing.
            cost_nanos: Some(0),
        }
    }
}

impl HeldHit {
    /// Commits the charge once the hit's row is written.
    pub async fn settle(self) {
        let Some(guard) = self.guard else {
            return;
        };
        match guard.settle(self.amount, 0).await {
            Ok(reply) if crate::tenant::handle::committed(&reply) => {}
            Ok(_) => tracing::warn!(
                "A cache hit's hold had expired before its settle; its row keeps the charge."
            ),
            Err(error) => tracing::warn!(
                %error,
                "A cache hit's settle did not reach the quota store; its row keeps the charge."
            ),
        }
    }
}

/// A cached answer served: no upstream call; a `cache_hit` row with the
/// original usage, naming the row whose answer it is (and, for the semantic
/// cache, how close the question was). Free, unless the tenant's plan
/// charges hits: then its charge is held before the row and settled after.
pub async fn serve_cached(
    hits: &HitCharge<'_>,
    rate: RateDecision,
    hit: &CachedResponse,
    similarity: Option<u32>,
    mut body: OutcomeBody,
) -> Result<ChatOutcome, ApiError> {
    // Boxed: only hits take this path, and its size would be every request's.
    let held = Box::pin(hits.hold(hits.amount(hit))).await?;
    let mut row = AttemptRow::new(&hit.provider, &hit.model, 0, 0);
    row.status = AttemptStatus::CacheHit;
    row.usage = hit.usage;
    row.usage_kind = UsageKind::Reported;
    row.charged = held.amount;
    row.cost = Some(Nanos::ZERO);
    row.cache = Some(CacheSource {
        event_id: hit.source.clone(),
        similarity,
    });
    if let OutcomeBody::Complete {
        cost, remaining, ..
    } = &mut body
    {
        *cost = cost.saturating_add(held.amount);
        *remaining = held.remaining.or(*remaining);
    }
    let route = hits.route.name.as_str();
    record::record(hits.gw, hits.ctx, route, held.amount, row).await;
    held.settle().await;
    Ok(ChatOutcome {
        provider: hit.provider.clone(),
        model: hit.model.clone(),
        rate,
        clamped_max_tokens: None,
        cache: Some(if similarity.is_some() {
            "semantic"
        } else {
            "hit"
        }),
        tokens: None,
        degraded: false,
        native: hit.native,
        body,
    })
}
