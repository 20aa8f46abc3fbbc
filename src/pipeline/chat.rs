//! handle_chat: admission, the first steps of DESIGN.md's numbered flow.
//! Cheapest refusal first (parse, route, tier, cache, rate), then the worst
//! case is reserved, and the attempt loop (`dispatch.rs`) takes the hold. No
//! step awaits the database; a hold's guard releases it if this future is dropped.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::cache_charge::{HitCharge, serve_cached};
use super::context::{RequestContext, RequestMeter};
use super::dispatch::{Dispatch, RESERVATION_MARGIN_MS};
use super::hold::{GrowthStep, Hold};
use super::semantic::{self, Consulted};
use super::stream::ClientBody;
use crate::cache::CacheKey;
use crate::clock::monotonic;
use crate::config::{Config, Price, ProviderKind, Route, Tier};
use crate::error::{ApiError, ErrorCode};
use crate::ledger::Api;
use crate::money::Nanos;
use crate::openai::chat::{ChatRequest, ResponsesBody};
use crate::prompts::Prefix;
use crate::provider::adapters::Adapter;
use crate::provider::clients::UpstreamClients;
use crate::routing::Complexity;
use crate::state::Gateway;
use crate::telemetry::metrics::{Metric, counter_add};
use crate::tenant::end_users::EndUserHold;
use crate::tenant::in_flight::{CALL_MARGIN_MS, CallCaps, CallScope, Crowded};
use crate::tenant::sessions::SessionHold;
use crate::tenant::tokens::{TokenLimitKind, TokenWindow};
use crate::tenant::{
    CallSlot, QuotaError, RateDecision, ReservationMeta, ReserveRequest, TenantHandle,
};
use crate::tokenize::Estimate;

/// A served call: its whole body, or a stream that is being relayed.
pub struct ChatOutcome {
    pub provider: String,
    pub model: String,
    pub rate: RateDecision,
    /// `Some(n)` when `clamp` mode lowered `max_tokens` to `n`.
    pub clamped_max_tokens: Option<u32>,
    /// `hit` or `miss` on a route with caching on.
    pub cache: Option<&'static str>,
    /// The tokens-per-minute window, when the tenant has one.
    pub tokens: Option<TokenWindow>,
    /// Every target failed; this is the route's degraded answer.
    pub degraded: bool,
    /// The body is in the request's own door API (a passthrough), not OpenAI chat.
    pub native: bool,
    pub body: OutcomeBody,
}

pub enum OutcomeBody {
    Complete {
        body: Bytes,
        cost: Nanos,
        remaining: Option<Nanos>,
    },
    Stream {
        body: ClientBody,
        /// The prompt as the gateway counted it: what a translated stream can
        /// report at its start, before the provider's usage arrives at its end.
        prompt_tokens: u64,
    },
}

/// The gates a request that will be paid for passes before its hold: the
/// tenant's rate while it is being limited (its refusals come before any
/// other work), and a ledger with room (a cache hit costs nothing, so only
/// paid requests wait for a full ledger to drain).
async fn paid_gate(gw: &Gateway, tenant: &TenantHandle) -> Result<Option<RateDecision>, ApiError> {
    let limited = if tenant.rate_limited() {
        Some(allowed_rate(tenant).await?)
    } else {
        None
    };
    if !gw.ledger.admit_paid() {
        return Err(ApiError::new(
            ErrorCode::Overloaded,
            "the usage ledger is behind; try again shortly",
        )
        .with_retry_after(1));
    }
    Ok(limited)
}

/// The output limit the request is held at (embeddings generate nothing:
/// only their input is held).
fn output_limit(request: &ChatRequest, ctx: &RequestContext, tier: &Tier, route: &Route) -> u32 {
    if request.generates() {
        wanted_max_tokens(request.max_tokens(), ctx, tier.default_max_tokens, route)
    } else {
        0
    }
}

/// `body` is the caller's, except at the Responses door, which hands over its
/// chat translation with the caller's own bytes as `native`.
pub async fn handle_chat(
    gw: &Arc<Gateway>,
    clients: &UpstreamClients,
    ctx: &RequestContext,
    meter: &RequestMeter,
    body: &[u8],
    native: Option<ResponsesBody>,
) -> Result<ChatOutcome, ApiError> {
    let mut request = parse(ctx.api, body, native)?;
    log_prompt(gw, ctx, request.native().map_or(body, |n| &n.body[..]));
    // One snapshot for the whole request: a reload cannot change its route or prices half-way.
    let live = gw.live();
    let route = resolve_route(&live.config, ctx, request.model(), request.body())?;
    *meter.route.borrow_mut() = Some(route.name.to_string());
    fit_to_route(&mut request, route, &live.config, ctx, meter)?;
    // What the caller sent: a passthrough answers it, so the cache must tell
    // apart bodies whose chat translations are the same.
    let body = request.native().map_or(body, |native| &native.body[..]);
    let on_plan = charged_route(&live.config, ctx, route, gw.clock.now_ms())?;
    let route = on_plan.as_ref().unwrap_or(route);
    let tier = tier_of(&live.config, ctx)?;
    check_choices(&request, tier)?;
    let identified = identified(ctx, &request, tier)?;
    let ctx = identified.as_ref().unwrap_or(ctx);
    let end_user = end_user_hold(ctx, tier)?;
    let prefix = placed(gw, route, ctx, &request);
    let tenant = tenant_of(gw, ctx)?;

    let session = session_hold(ctx, tier);
    let caches = Caches {
        gw,
        clients,
        ctx,
        meter,
        route,
        request: &request,
        tenant: &tenant,
        scopes: (end_user.as_ref(), session.as_ref()),
        plan: plan_of(&live.config, ctx),
        placed: prefix.map(|p| p.digest()),
    };
    // Every await before the upstream call is boxed: each runs once, and
    // inline they sized this future (live until a stream's first token) by
    // their own state.
    let Missed {
        cache_key,
        keep,
        embedding_cost,
        header,
    } = match Box::pin(caches.consult(body)).await? {
        Cached::Served(outcome) => return Ok(outcome),
        Cached::Missed(missed) => missed,
    };
    // Before the rate and any hold: a call over its cap takes nothing.
    let call = Box::pin(enter_call(gw, &tenant, ctx, tier)).await?;
    let limited = Box::pin(paid_gate(gw, &tenant)).await?;
    let max_tokens = output_limit(&request, ctx, tier, route);
    // The request's deadline bounds every attempt and wait; its holds expire after it.
    let deadline = monotonic() + Duration::from_millis(gw.config.server.request_timeout_ms);
    let admission = Admission {
        gw,
        ctx,
        route,
        request: &request,
        tenant: &tenant,
        max_tokens,
        first_step: first_step(&live.config, route, &request, ctx, max_tokens),
        end_user,
        session,
        prefix: prefix.as_ref(),
    };
    let (rate, mut hold, input) = Box::pin(admission.reserve(limited)).await?;
    hold.carry(call);

    let dispatch = Dispatch {
        meter,
        gw,
        live: &live,
        clients,
        ctx,
        route,
        request: &request,
        prefix,
        input,
        rate,
        cache_key,
        keep,
        wanted_max_tokens: max_tokens,
        deadline,
    };
    // Boxed: the attempts' state is live for the whole upstream call anyway,
    // and inline it would make every door's future pass the size clippy bounds.
    let mut outcome = Box::pin(dispatch.run(hold)).await?;
    // What the request cost includes the embedding of its question.
    if let OutcomeBody::Complete { cost, .. } = &mut outcome.body {
        *cost = cost.saturating_add(embedding_cost);
    }
    outcome.cache = outcome.cache.or(header);
    Ok(outcome)
}

/// The actor that decides the request's tenant.
fn tenant_of(gw: &Gateway, ctx: &RequestContext) -> Result<TenantHandle, ApiError> {
    gw.tenants
        .handle(&ctx.tenant)
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// The plan the request's tenant is billed under, if any.
fn plan_of<'a>(config: &'a Config, ctx: &RequestContext) -> Option<&'a crate::config::Plan> {
    config.plans.get(ctx.tenant.plan.as_deref()?)
}

/// The route as this request is priced, where that differs from how it was
/// loaded: at the prices in force now (`effective_from`), then at the
/// tenant's plan's, if it is on one (the targets' `price` stays the cost).
fn charged_route(
    config: &Config,
    ctx: &RequestContext,
    route: &Route,
    now_ms: u64,
) -> Result<Option<Route>, ApiError> {
    let dated = route.as_of(now_ms);
    let Some(name) = &ctx.tenant.plan else {
        return Ok(dated);
    };
    let plan = config
        .plans
        .get(name)
        .ok_or_else(|| ApiError::internal(format!("plans.{name} is not configured")))?;
    Ok(Some(plan.apply(dated.as_ref().unwrap_or(route), now_ms)))
}

/// The request in its door's format.
fn parse(api: Api, body: &[u8], native: Option<ResponsesBody>) -> Result<ChatRequest, ApiError> {
    match (api, native) {
        (Api::Embeddings, _) => ChatRequest::parse_embeddings(body),
        (Api::Responses, Some(native)) => ChatRequest::parse_responses(body, native),
        (Api::Messages, _) => ChatRequest::parse_messages(body),
        (Api::Chat | Api::Responses, _) => ChatRequest::parse_chat(body),
    }
}

/// What the door's field table left for the route: an unknown field (and,
/// at the Messages door, an unknown `anthropic-beta`) passes only where the
/// route forwards unknown fields.
pub(super) fn check_fields(
    request: &ChatRequest,
    route: &Route,
    ctx: &RequestContext,
) -> Result<(), ApiError> {
    request.screen().check(route.unknown_fields)?;
    if request.api() == Api::Messages {
        for (name, value) in &ctx.anthropic_headers {
            if *name == "anthropic-beta" {
                crate::anthropic::fields::check_betas(value, route.unknown_fields)?;
            }
        }
    }
    Ok(())
}

/// What the route decides of the body: an unknown field passes or not, and
/// the provider-run tools it prices go back into the offer, at their bounds.
fn fit_to_route(
    request: &mut ChatRequest,
    route: &Route,
    config: &Config,
    ctx: &RequestContext,
    meter: &RequestMeter,
) -> Result<(), ApiError> {
    check_fields(request, route, ctx)?;
    if let (true, Some(target)) = (request.generates(), route.unpriced_output()) {
        return Err(ApiError::invalid_request(
            "model",
            format!(
                "the route's target `{}/{}` has no output price, so it serves embeddings only",
                target.provider, target.model
            ),
        ));
    }
    if answered_natively(config, route, request) {
        request.admit_server_tools(&route.server_tools)?;
    }
    meter
        .removed_tools
        .borrow_mut()
        .clone_from(&request.screen().removed_tools);
    Ok(())
}

/// Whether every target of the route answers the request in its door's own
/// API: only then can a provider-run tool the route prices leave.
fn answered_natively(config: &Config, route: &Route, request: &ChatRequest) -> bool {
    route.targets.iter().all(|target| {
        config
            .providers
            .get(&target.provider)
            .is_some_and(|provider| Adapter::for_request(provider, request).answers_natively())
    })
}

/// The prompts placed before a generating request's own, if the route or tenant has any.
fn placed<'a>(
    gw: &Gateway,
    route: &'a Route,
    ctx: &'a RequestContext,
    request: &ChatRequest,
) -> Option<Prefix<'a>> {
    if !request.generates() {
        return None;
    }
    let advised = gw.prompt_advisor.breakpoints(ctx.tenant.id.as_str());
    Prefix::of(route, &ctx.tenant, advised)
}

/// The exact cache, then the semantic cache, where the route has them.
struct Caches<'a> {
    gw: &'a Arc<Gateway>,
    clients: &'a UpstreamClients,
    ctx: &'a RequestContext,
    meter: &'a RequestMeter,
    route: &'a Route,
    request: &'a ChatRequest,
    tenant: &'a TenantHandle,
    /// What a hit is held against, where the tenant's plan charges hits.
    scopes: (Option<&'a EndUserHold>, Option<&'a SessionHold>),
    plan: Option<&'a crate::config::Plan>,
    placed: Option<[u8; 32]>,
}

enum Cached {
    Served(ChatOutcome),
    Missed(Missed),
}

/// What the caches leave to a request they did not answer.
struct Missed {
    cache_key: Option<CacheKey>,
    keep: Option<semantic::Keep>,
    /// What embedding the question for the semantic cache charged.
    embedding_cost: Nanos,
    /// `X-Tollgate-Cache` when no exact-cache result says more.
    header: Option<&'static str>,
}

impl<'a> Caches<'a> {
    fn hits(&self) -> HitCharge<'a> {
        HitCharge {
            gw: self.gw,
            ctx: self.ctx,
            route: self.route,
            tenant: self.tenant,
            plan: self.plan,
            end_user: self.scopes.0,
            session: self.scopes.1,
        }
    }

    /// `body`: the caller's own bytes, the exact cache's key.
    async fn consult(&self, body: &[u8]) -> Result<Cached, ApiError> {
        let (gw, ctx, route, request) = (self.gw, self.ctx, self.route, self.request);
        let cache_key =
            (route.cache_ttl_ms > 0 && !request.stream() && !ctx.cache_bypass).then(|| {
                let key = CacheKey::new(
                    ctx.tenant.id.as_str(),
                    ctx.api.as_str(),
                    route.name.as_str(),
                    body,
                );
                match &self.placed {
                    Some(placed) => key.with_placed(placed),
                    None => key,
                }
            });
        if let Some(key) = &cache_key {
            let labels = |result| [("route", route.name.as_str()), ("result", result)];
            if let Some(hit) = gw.cache.get(key, gw.clock.now_ms()) {
                // A hit costs nothing but still counts against the request rate.
                let rate = allowed_rate(self.tenant).await?;
                counter_add(Metric::CacheRequestsTotal, &labels("hit"), 1);
                let body = OutcomeBody::Complete {
                    body: hit.body.clone(),
                    cost: Nanos::ZERO,
                    remaining: None,
                };
                let served = serve_cached(&self.hits(), rate, &hit, None, body).await?;
                return Ok(Cached::Served(served));
            }
            counter_add(Metric::CacheRequestsTotal, &labels("miss"), 1);
        }
        let mut missed = Missed {
            cache_key,
            keep: None,
            embedding_cost: Nanos::ZERO,
            header: None,
        };
        let Some(settings) = route
            .semantic_cache
            .as_ref()
            .filter(|_| request.generates())
        else {
            return Ok(Cached::Missed(missed));
        };
        let hits = self.hits();
        let consult = semantic::Consult {
            gw,
            clients: self.clients,
            ctx,
            meter: self.meter,
            route,
            settings,
            request,
            tenant: self.tenant,
            hits: &hits,
            placed: self.placed,
        };
        match consult.run().await? {
            Consulted::Hit(outcome) => Ok(Cached::Served(outcome)),
            Consulted::Miss { keep, cost, header } => {
                missed.keep = keep;
                missed.embedding_cost = cost;
                missed.header = Some(header);
                Ok(Cached::Missed(missed))
            }
        }
    }
}

/// What reserving a request's worst case needs.
struct Admission<'a> {
    gw: &'a Gateway,
    ctx: &'a RequestContext,
    route: &'a Route,
    request: &'a ChatRequest,
    tenant: &'a TenantHandle,
    max_tokens: u32,
    /// A stream whose hold grows is admitted with this much output held.
    first_step: Option<u32>,
    end_user: Option<EndUserHold>,
    /// The agent run's cap, where the tier has one and the request names a run.
    session: Option<SessionHold>,
    /// Prompts the gateway places first: their tokens are held like the caller's.
    prefix: Option<&'a Prefix<'a>>,
}

impl Admission<'_> {
    /// The rate decision and the hold of the first attempt, with the input
    /// estimate it was reserved at; a stream whose hold grows is sent the
    /// caller's limit while one step of it is held.
    async fn reserve(
        &self,
        limited: Option<RateDecision>,
    ) -> Result<(RateDecision, Hold, Estimate), ApiError> {
        let (rate, mut hold, input) = self.reserve_first(limited).await?;
        if self.first_step.is_some() {
            let step = self.step(hold.request());
            hold.grow_to(self.max_tokens, step);
        }
        Ok((rate, hold, input))
    }

    /// Long texts not counted before are first bounded by their bytes (a
    /// byte-level BPE never yields more tokens than the text has bytes),
    /// which costs nothing; only where that bound changes the decision (a
    /// refusal, a clamp) is the prompt counted exactly and reserved again,
    /// so precision is paid for only near a limit.
    async fn reserve_first(
        &self,
        limited: Option<RateDecision>,
    ) -> Result<(RateDecision, Hold, Estimate), ApiError> {
        let mut bound = self
            .gw
            .estimator
            .bound_for(&self.route.countings, self.request.prompt());
        bound.tokens += self.added_tokens();
        let request = self.reserve_request(bound.tokens);
        let meta = self.meta(&request, request.max_tokens);
        let (rate, reservation) = if let Some(rate) = limited {
            (
                rate,
                self.tenant.reserve(request.clone(), meta.clone()).await,
            )
        } else {
            let admission = self
                .tenant
                .check_rate_and_reserve(request.clone(), meta.clone())
                .await
                .map_err(|e| quota_error(&e))?;
            let Some(reservation) = admission.reservation else {
                return Err(rate_refusal(&admission.rate));
            };
            (admission.rate, reservation)
        };
        let near_a_limit = match &reservation {
            Ok(guard) => guard.granted().clamped,
            Err(
                QuotaError::Refused(_) | QuotaError::TokenLimited(_) | QuotaError::EndUserTokens(_),
            ) => true,
            Err(_) => false,
        };
        if bound.exact || !near_a_limit {
            let reservation = reservation.map_err(|e| budget_error(&e, &rate))?;
            let meta = self.meta(&request, reservation.granted().max_tokens);
            let hold = Hold::new(self.tenant.clone(), request, meta, reservation);
            return Ok((rate, hold, bound));
        }
        if let Ok(guard) = reservation {
            guard.release();
        }
        let exact = Estimate {
            tokens: super::count::exact(self.gw, &self.route.countings, self.request).await
                + self.added_tokens(),
            exact: true,
        };
        let request = self.reserve_request(exact.tokens);
        let reservation = self
            .tenant
            .reserve(request.clone(), self.meta(&request, request.max_tokens))
            .await
            .map_err(|e| budget_error(&e, &rate))?;
        let meta = self.meta(&request, reservation.granted().max_tokens);
        let hold = Hold::new(self.tenant.clone(), request, meta, reservation);
        Ok((rate, hold, exact))
    }

    /// Input beyond the caller's prompt: the prompts the gateway places,
    /// and what each use of a provider-run tool may add.
    fn added_tokens(&self) -> u64 {
        let placed = self.prefix.map_or(0, |prefix| {
            prefix.tokens(&self.gw.estimator, &self.route.countings)
        });
        let tools = self.request.screen().admitted.iter();
        tools.fold(placed, |sum, tool| sum.saturating_add(tool.input_tokens()))
    }

    fn reserve_request(&self, input_tokens: u64) -> ReserveRequest {
        let (input_price, output_price) = crate::routing::worst_prices(self.route, input_tokens);
        let now = self.gw.clock.now_ms();
        ReserveRequest {
            input_tokens,
            input_price,
            output_price,
            max_tokens: self.first_step.unwrap_or(self.max_tokens),
            choices: self.request.choices(),
            expires_at_ms: now + self.gw.config.server.request_timeout_ms + RESERVATION_MARGIN_MS,
            key: self.ctx.key.id.clone(),
            key_budget: self.ctx.key.monthly_budget,
            key_credits: self.ctx.key.on_credits,
            fees: worst_fees(self.route.targets.iter().map(|t| &t.charge), self.request),
            key_period: self.ctx.key.budget_period,
            feature: self.ctx.feature.clone(),
            end_user: self.end_user.clone(),
            session: self.session.clone(),
        }
    }

    /// A growing hold's next step: the output of the first grant again, at
    /// the price tier the prompt reached, with no input and no fees.
    fn step(&self, first: &ReserveRequest) -> GrowthStep {
        let request = ReserveRequest {
            input_tokens: 0,
            fees: Nanos::ZERO,
            ..first.clone()
        };
        let (input_price, output_price) =
            crate::routing::worst_cost_prices(self.route, first.input_tokens);
        let at_cost = ReserveRequest {
            input_price,
            output_price,
            ..request.clone()
        };
        let mut meta = self.meta(&request, request.max_tokens);
        meta.cost_nanos = Some(crate::tenant::book::worst_case(&at_cost, request.max_tokens).get());
        GrowthStep { request, meta }
    }

    /// What a reservation of `request` at `max_tokens` records beside it.
    /// The tenant actor keeps the one it was reserved with: a hold clamped
    /// lower keeps the cost of the unclamped one should it expire.
    fn meta(&self, request: &ReserveRequest, max_tokens: u32) -> ReservationMeta {
        let (input_price, output_price) =
            crate::routing::worst_cost_prices(self.route, request.input_tokens);
        let at_cost = ReserveRequest {
            input_price,
            output_price,
            fees: worst_fees(self.route.targets.iter().map(|t| &t.price), self.request),
            ..request.clone()
        };
        let cost = crate::tenant::book::worst_case(&at_cost, max_tokens);
        ReservationMeta {
            request_id: self.ctx.request_id.clone(),
            key: self.ctx.key.id.clone(),
            feature: self.ctx.feature.clone(),
            end_user: self.ctx.end_user.clone(),
            session: self.ctx.session.clone(),
            api: self.ctx.api,
            route: self.route.name.to_string(),
            client_request_id: self.ctx.client_request_id.clone(),
            trace_id: self.ctx.trace_id.clone(),
            replica: self.gw.replica_id.to_string(),
            plan: self.ctx.tenant.plan.clone(),
            cost_nanos: Some(cost.get()),
        }
    }
}

/// The output a stream is admitted with where its hold grows with it
/// (`billing.stream_step_tokens`): only where every target streams all the
/// output it may bill, so that the relay sees each token it must hold.
fn first_step(
    config: &Config,
    route: &Route,
    request: &ChatRequest,
    ctx: &RequestContext,
    max_tokens: u32,
) -> Option<u32> {
    let step = config.billing.stream_step_tokens;
    if step == 0 || max_tokens <= step || !request.stream() || !request.generates() {
        return None;
    }
    let asks = request.asks_reasoning();
    let counted = reports_hidden_thinking(request, ctx);
    let shown = route.targets.iter().all(|target| {
        // Only Anthropic itself streams its estimate of omitted thinking.
        let anthropic = config
            .providers
            .get(&target.provider)
            .is_some_and(|p| p.kind == ProviderKind::Anthropic);
        !target.price.hidden_output.hides(asks, counted && anthropic)
    });
    shown.then_some(step)
}

/// A Messages request whose thinking is omitted and which asks, with the
/// `thinking-token-count-…` beta, for the estimate of the tokens thought:
/// the stream then says what it bills unseen, and the relay counts it.
fn reports_hidden_thinking(request: &ChatRequest, ctx: &RequestContext) -> bool {
    let omitted = request.native().is_some_and(|n| n.thinking_omitted);
    omitted
        && ctx.anthropic_headers.iter().any(|(name, value)| {
            *name == "anthropic-beta"
                && value
                    .split(',')
                    .any(|beta| beta.trim().starts_with("thinking-token-count-"))
        })
}

/// The most the request's provider-run tools may bill in fees at any of `prices`.
fn worst_fees<'a>(prices: impl Iterator<Item = &'a Price>, request: &ChatRequest) -> Nanos {
    let admitted = &request.screen().admitted;
    prices
        .map(|price| crate::pricing::tool_fees(price, admitted))
        .max()
        .unwrap_or(Nanos::ZERO)
}

/// What the request holds against its end user: the tier's template, with
/// the admin's override for this end user applied (a block refuses it).
pub(super) fn end_user_hold(
    ctx: &RequestContext,
    tier: &Tier,
) -> Result<Option<EndUserHold>, ApiError> {
    let Some(id) = &ctx.end_user else {
        return Ok(None);
    };
    let limits = match (ctx.tenant.end_users.get(id), &tier.end_user) {
        (Some(set), _) if set.blocked => {
            return Err(ApiError::new(
                ErrorCode::EndUserBlocked,
                format!("end user `{id}` is blocked by this tenant's administrator"),
            ));
        }
        (Some(set), template) => set.over(template.as_ref()),
        (None, Some(template)) => template.clone(),
        (None, None) => return Ok(None),
    };
    Ok(Some(EndUserHold {
        id: id.clone(),
        limits,
    }))
}

/// The request's context with its end user (as the tier trusts one) and,
/// where no header named its agent run, the run its body names; `None`:
/// the context as it came.
fn identified(
    ctx: &RequestContext,
    request: &ChatRequest,
    tier: &Tier,
) -> Result<Option<RequestContext>, ApiError> {
    let end_user = super::end_user::identify(ctx, request, tier)?;
    let session = ctx
        .session
        .is_none()
        .then(|| super::end_user::body_session(request))
        .flatten();
    if end_user.is_none() && session.is_none() {
        return Ok(None);
    }
    Ok(Some(RequestContext {
        end_user: end_user.or_else(|| ctx.end_user.clone()),
        session: session.or_else(|| ctx.session.clone()),
        ..ctx.clone()
    }))
}

/// The tier of the request's tenant.
fn tier_of<'a>(config: &'a Config, ctx: &RequestContext) -> Result<&'a Tier, ApiError> {
    config
        .tiers
        .get(&ctx.tenant.tier)
        .ok_or_else(|| ApiError::internal(format!("tiers.{} is not configured", ctx.tenant.tier)))
}

/// What the request holds against its agent run: the tier's cap, where the
/// request names a run.
fn session_hold(ctx: &RequestContext, tier: &Tier) -> Option<SessionHold> {
    let (Some(id), Some(limits)) = (&ctx.session, tier.session) else {
        return None;
    };
    Some(SessionHold {
        id: id.clone(),
        budget: limits.budget,
        idle_ms: limits.idle_ms,
    })
}

/// Opt-in per tenant: prompt text is never logged otherwise.
fn log_prompt(gw: &Gateway, ctx: &RequestContext, body: &[u8]) {
    let tenant = ctx.tenant.id.as_str();
    if gw
        .config
        .telemetry
        .log_prompts_for
        .iter()
        .any(|t| t == tenant)
    {
        tracing::debug!(request_id = %ctx.request_id, tenant, prompt = %String::from_utf8_lossy(body), "Prompt (logging opted in).");
    }
}

/// `n` multiplies what a call can spend: a tier caps it.
fn check_choices(request: &ChatRequest, tier: &Tier) -> Result<(), ApiError> {
    if request.choices() <= tier.max_choices {
        return Ok(());
    }
    Err(ApiError::invalid_request(
        "n",
        format!(
            "`n` may be at most {} on this key's tier (asked for {})",
            tier.max_choices,
            request.choices()
        ),
    ))
}

pub(super) fn resolve_route<'a>(
    config: &'a Config,
    ctx: &RequestContext,
    model: &str,
    request_body: &serde_json::Map<String, serde_json::Value>,
) -> Result<&'a Route, ApiError> {
    let route = config.route(model).ok_or_else(|| {
        ApiError::new(
            ErrorCode::ModelNotFound,
            format!("the model `{model}` does not exist"),
        )
        .with_param("model")
    })?;
    let tier_routes = config
        .tiers
        .get(&ctx.tenant.tier)
        .map_or(&[][..], |tier| tier.routes.as_slice());
    if !ctx.tenant.may_use(tier_routes, &route.name) {
        return Err(ApiError::new(
            ErrorCode::RouteNotAllowed,
            format!("this key may not use the model `{model}`"),
        )
        .with_param("model"));
    }
    let route = pinned(config, ctx, route);
    let Some(classes) = &route.complexity else {
        return Ok(route);
    };
    // Permission to use a complexity route is permission to use what it maps onto.
    let complexity = ctx
        .complexity
        .unwrap_or_else(|| Complexity::estimate(request_body));
    let chosen = match complexity {
        Complexity::Simple => &classes.simple,
        Complexity::Moderate => &classes.moderate,
        Complexity::Complex => &classes.complex,
    };
    config
        .routes
        .get(chosen)
        .ok_or_else(|| ApiError::internal(format!("routes.{chosen} is not configured")))
}

/// The route a pin sends this tenant to instead of `route`. Permission is
/// decided on the route asked for: the pin is the operator's choice. A pin to
/// a route a reload removed answers with the route asked for, loudly.
fn pinned<'a>(config: &'a Config, ctx: &RequestContext, route: &'a Route) -> &'a Route {
    let Some(pin) = ctx.tenant.pin_of(&route.name) else {
        return route;
    };
    if let Some(pinned) = config.routes.get(pin) {
        return pinned;
    }
    tracing::warn!(
        tenant = %ctx.tenant.id,
        route = %route.name,
        pin = %pin,
        "The tenant's route pin names a route that is not configured; the route asked for answers."
    );
    route
}

/// The tenant's rate decision, or the 429 that refuses the request.
pub(super) async fn allowed_rate(tenant: &TenantHandle) -> Result<RateDecision, ApiError> {
    let rate = tenant.check_rate().await.map_err(|e| quota_error(&e))?;
    if rate.allowed {
        Ok(rate)
    } else {
        Err(rate_refusal(&rate))
    }
}

fn rate_refusal(rate: &RateDecision) -> ApiError {
    counter_add(
        Metric::RejectionsTotal,
        &[("kind", "rate_limit_requests")],
        1,
    );
    let error = ApiError::new(
        ErrorCode::RateLimited,
        format!("rate limit reached: {} requests per minute", rate.limit),
    )
    .with_retry_after(rate.retry_after_ms.div_ceil(1000));
    error.with_rate(*rate)
}

pub(super) fn quota_error(error: &QuotaError) -> ApiError {
    match error {
        QuotaError::Refused(refused) => {
            ApiError::new(ErrorCode::BudgetExceeded, refused.to_string())
        }
        QuotaError::TokenLimited(refused) => {
            // A wait past a day (a request larger than a minute's tokens) is not worth retrying.
            let seconds = refused.retry_after_ms.div_ceil(1000).min(86_400 * 31);
            ApiError::new(ErrorCode::TokenLimited, refused.to_string()).with_retry_after(seconds)
        }
        QuotaError::EndUserRate(limited) => {
            ApiError::new(ErrorCode::RateLimited, limited.to_string())
                .with_retry_after(limited.retry_after_ms.div_ceil(1000))
        }
        QuotaError::EndUserTokens(limited) => {
            ApiError::new(ErrorCode::TokenLimited, limited.to_string())
                .with_retry_after(limited.retry_after_ms.div_ceil(1000))
        }
        QuotaError::Unavailable => ApiError::new(
            ErrorCode::QuotaUnavailable,
            "the tenant's budget state is unavailable; try again shortly",
        )
        .with_retry_after(1),
        QuotaError::LedgerUnreadable => ApiError::new(
            ErrorCode::QuotaUnavailable,
            "the usage ledger could not be read to start this budget period; try again shortly",
        )
        .with_retry_after(1),
        QuotaError::StoreDown => ApiError::new(
            ErrorCode::QuotaUnavailable,
            "the shared quota store is unreachable and this tenant's limits fail closed; try again shortly",
        )
        .with_retry_after(1),
        QuotaError::InFlight(crowded) => in_flight_refusal(crowded),
    }
}

/// A call over its tenant's or key's cap on calls in flight: no end of a
/// call in flight can be foreseen, so the caller is asked back in a second.
fn in_flight_refusal(crowded: &Crowded) -> ApiError {
    let code = match crowded.scope {
        CallScope::Tenant => ErrorCode::TenantInFlightLimited,
        CallScope::Key(_) => ErrorCode::KeyInFlightLimited,
    };
    ApiError::new(code, crowded.to_string()).with_retry_after(1)
}

/// The call's slot among its tenant's and key's calls in flight, where the
/// tier, the tenant or the key caps them (`None`: no cap, nothing asked).
/// Its expiry gives it back should this replica die with it.
async fn enter_call(
    gw: &Gateway,
    tenant: &TenantHandle,
    ctx: &RequestContext,
    tier: &Tier,
) -> Result<Option<CallSlot>, ApiError> {
    let caps = CallCaps {
        tenant: ctx.tenant.max_in_flight.or(tier.max_in_flight),
        key: ctx.key.max_in_flight,
    };
    if !caps.any() {
        return Ok(None);
    }
    let expires_at_ms = gw.clock.now_ms() + gw.config.server.request_timeout_ms + CALL_MARGIN_MS;
    match tenant
        .enter_call(ctx.key.id.clone(), caps, expires_at_ms)
        .await
    {
        Ok(slot) => Ok(Some(slot)),
        Err(QuotaError::InFlight(crowded)) => {
            let scope = crowded.scope.label();
            counter_add(Metric::InFlightRefusalsTotal, &[("scope", scope)], 1);
            Err(in_flight_refusal(&crowded))
        }
        Err(error) => Err(quota_error(&error)),
    }
}

fn budget_error(error: &QuotaError, rate: &RateDecision) -> ApiError {
    match error {
        QuotaError::Refused(_) => counter_add(Metric::RejectionsTotal, &[("kind", "budget")], 1),
        QuotaError::TokenLimited(refused) => {
            let kind = match refused.kind {
                TokenLimitKind::PerMinute => "rate_limit_tokens",
                TokenLimitKind::Daily => "daily_tokens",
                TokenLimitKind::Monthly => "monthly_tokens",
            };
            counter_add(Metric::RejectionsTotal, &[("kind", kind)], 1);
        }
        QuotaError::EndUserRate(_) => counter_add(
            Metric::RejectionsTotal,
            &[("kind", "end_user_rate_limit")],
            1,
        ),
        QuotaError::EndUserTokens(_) => counter_add(
            Metric::RejectionsTotal,
            &[("kind", "end_user_daily_tokens")],
            1,
        ),
        QuotaError::Unavailable
        | QuotaError::LedgerUnreadable
        | QuotaError::StoreDown
        | QuotaError::InFlight(_) => {}
    }
    quota_error(error).with_rate(*rate)
}

/// The output limit a request reserves for: its own, else the tenant's or
/// tier's default, never above what any of the route's targets accepts.
fn wanted_max_tokens(
    requested: Option<u32>,
    ctx: &RequestContext,
    tier_default: u32,
    route: &Route,
) -> u32 {
    let wanted = requested
        .or(ctx.tenant.default_max_tokens)
        .unwrap_or(tier_default);
    route
        .max_tokens_ceiling
        .map_or(wanted, |ceiling| wanted.min(ceiling))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::handle_chat;
    use crate::openai::chat::ResponsesBody;
    use crate::pipeline::context::{RequestContext, RequestMeter};
    use crate::pipeline::dispatch::Dispatch;
    use crate::pipeline::hold::Hold;
    use crate::provider::clients::UpstreamClients;
    use crate::state::Gateway;

    /// `handle_chat`'s arguments, at one lifetime, so its future has one type.
    type DoorArgs = (
        &'static Arc<Gateway>,
        &'static UpstreamClients,
        &'static RequestContext,
        &'static RequestMeter,
        &'static [u8],
        Option<ResponsesBody>,
    );

    /// The size of what `handle_chat` returns, without calling it.
    fn door_future_size<F>(door: fn(DoorArgs) -> F) -> usize {
        let _ = door;
        std::mem::size_of::<F>()
    }

    fn run_future_size<F>(_: fn(&'static Dispatch<'static>, Hold) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A call holds its door's future and its attempts' until a stream's
    /// first token: every await before the upstream call is boxed, so neither
    /// is sized by a wait that is over by then (the attempts' took 10,176
    /// bytes with the provider's admission inline).
    #[test]
    fn a_calls_futures_until_its_first_token_stay_small() {
        let door = door_future_size(|(gw, clients, ctx, meter, body, native)| {
            handle_chat(gw, clients, ctx, meter, body, native)
        });
        assert!(door <= 6 * 1024, "the door's future takes {door} bytes");
        let run = run_future_size(Dispatch::run);
        assert!(run <= 6 * 1024, "the attempts' future takes {run} bytes");
    }
}
