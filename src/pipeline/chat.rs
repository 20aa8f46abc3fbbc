//! handle_chat: the numbered flow of DESIGN.md for a non-streaming call.
//! Cheapest refusal first; no step awaits the database; every upstream
//! attempt is recorded; the reservation is settled with the real cost or
//! released (its guard releases it if this future is dropped).

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use bytes::Bytes;

use super::context::{RequestContext, RequestMeter};
use super::degraded;
use crate::clock::{elapsed_ms, monotonic};
use crate::config::{Config, Route, Target};
use crate::error::{ApiError, ErrorCode};
use crate::ids::EventId;
use crate::ledger::{AttemptStatus, UsageKind};
use crate::money::Nanos;
use crate::openai::chat::ChatRequest;
use crate::pricing::{self, Usage};
use crate::provider::actor::{Permit, Verdict};
use crate::provider::adapters::Adapter;
use crate::provider::adapters::openai::{self, ResponseUsage};
use crate::provider::call::CallError;
use crate::provider::call::{self, CallHeaders, Opened, UpstreamBody, UpstreamReply};
use crate::provider::classify::{Class, classify_error, classify_status};
use crate::provider::clients::UpstreamClients;
use crate::provider::retry::RetryPolicy;
use crate::routing::{self, Complexity};
use crate::state::{Gateway, Live};
use crate::telemetry::metrics::{Metric, counter_add, observe_ms};
use crate::tenant::tokens::{TokenLimitKind, TokenWindow};
use crate::tenant::{
    QuotaError, RateDecision, ReservationGuard, ReservationMeta, ReserveRequest, TenantHandle,
};

use super::record::{self, AttemptRow};
use super::stream::{ClientBody, Relay};
use crate::cache::{CacheKey, CachedResponse};

/// The provider and model a degraded answer is recorded under.
const DEGRADED_PROVIDER: &str = "tollgate";
const DEGRADED_MODEL: &str = "degraded";

/// Extra time past the request deadline before an unsettled reservation counts as orphaned.
const RESERVATION_MARGIN_MS: u64 = 30_000;

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
    pub body: OutcomeBody,
}

pub enum OutcomeBody {
    Complete {
        body: Bytes,
        cost: Nanos,
        remaining: Option<Nanos>,
    },
    Stream(ClientBody),
}

pub async fn handle_chat(
    gw: &Arc<Gateway>,
    clients: &UpstreamClients,
    ctx: &RequestContext,
    meter: &RequestMeter,
    body: &[u8],
) -> Result<ChatOutcome, ApiError> {
    let request = ChatRequest::parse(body)?;
    if gw
        .config
        .telemetry
        .log_prompts_for
        .iter()
        .any(|t| t == ctx.tenant.id.as_str())
    {
        // Opt-in per tenant: prompt text is never logged otherwise.
        tracing::debug!(request_id = %ctx.request_id, tenant = %ctx.tenant.id, prompt = %String::from_utf8_lossy(body), "Prompt (logging opted in).");
    }
    // One snapshot for the whole request: a reload cannot change its route or prices half-way.
    let live = gw.live();
    let route = resolve_route(&live.config, ctx, request.model(), request.body())?;
    *meter.route.borrow_mut() = Some(route.name.to_string());
    let tier = live.config.tiers.get(&ctx.tenant.tier).ok_or_else(|| {
        ApiError::internal(format!("tiers.{} is not configured", ctx.tenant.tier))
    })?;
    let tenant = gw
        .tenants
        .handle(&ctx.tenant)
        .map_err(|e| ApiError::internal(e.to_string()))?;

    let cache_key = (route.cache_ttl_ms > 0 && !request.stream())
        .then(|| CacheKey::new(ctx.tenant.id.as_str(), route.name.as_str(), body));
    if let Some(key) = &cache_key {
        let labels = |result| [("route", route.name.as_str()), ("result", result)];
        if let Some(hit) = gw.cache.get(key, gw.clock.now_ms()) {
            // A hit costs nothing but still counts against the request rate.
            let rate = allowed_rate(&tenant).await?;
            counter_add(Metric::CacheRequestsTotal, &labels("hit"), 1);
            return Ok(serve_from_cache(gw, ctx, route, rate, hit).await);
        }
        counter_add(Metric::CacheRequestsTotal, &labels("miss"), 1);
    }
    // While the tenant is being rate limited its refusals come before any other work.
    let limited = if tenant.rate_limited() {
        Some(allowed_rate(&tenant).await?)
    } else {
        None
    };

    // A cache hit costs nothing, so only paid requests wait for a full ledger to drain.
    if !gw.ledger.admit_paid() {
        return Err(ApiError::new(
            ErrorCode::Overloaded,
            "the usage ledger is behind; try again shortly",
        )
        .with_retry_after(1));
    }

    let input_tokens = gw.estimator.estimate_for(&route.countings, request.body());
    let (input_price, output_price) = route.worst_prices(input_tokens);
    let max_tokens = wanted_max_tokens(request.max_tokens(), ctx, tier.default_max_tokens, route);
    let now = gw.clock.now_ms();
    let reserve = ReserveRequest {
        input_tokens,
        input_price,
        output_price,
        max_tokens,
        expires_at_ms: now + gw.config.server.request_timeout_ms + RESERVATION_MARGIN_MS,
        key: ctx.key.id.clone(),
        key_budget: ctx.key.monthly_budget,
        feature: ctx.feature.clone(),
    };
    let meta = ReservationMeta {
        request_id: ctx.request_id.clone(),
        key: ctx.key.id.clone(),
        feature: ctx.feature.clone(),
        route: route.name.to_string(),
        client_request_id: ctx.client_request_id.clone(),
        trace_id: ctx.trace_id.clone(),
        replica: gw.replica_id.to_string(),
    };
    let (rate, reservation) = if let Some(rate) = limited {
        (rate, tenant.reserve(reserve, meta).await)
    } else {
        let admission = tenant
            .check_rate_and_reserve(reserve, meta)
            .await
            .map_err(|e| quota_error(&e))?;
        let Some(reservation) = admission.reservation else {
            return Err(rate_refusal(&admission.rate));
        };
        (admission.rate, reservation)
    };
    let reservation = reservation.map_err(|e| budget_error(&e, &rate))?;

    let dispatch = Dispatch {
        meter,
        gw,
        live: &live,
        clients,
        ctx,
        route,
        request: &request,
        input_tokens,
        rate,
        cache_key,
    };
    dispatch.run(reservation).await
}

/// A cache hit: no upstream call, no reservation, no charge; still a ledger row.
async fn serve_from_cache(
    gw: &Gateway,
    ctx: &RequestContext,
    route: &Route,
    rate: RateDecision,
    hit: CachedResponse,
) -> ChatOutcome {
    let mut row = AttemptRow::new(&hit.provider, &hit.model, 0, 0);
    row.status = AttemptStatus::CacheHit;
    row.usage = hit.usage;
    row.usage_kind = UsageKind::Reported;
    record::record(gw, ctx, route.name.as_str(), Nanos::ZERO, row).await;
    ChatOutcome {
        provider: hit.provider,
        model: hit.model,
        rate,
        clamped_max_tokens: None,
        cache: Some("hit"),
        tokens: None,
        degraded: false,
        body: OutcomeBody::Complete {
            body: hit.body,
            cost: Nanos::ZERO,
            remaining: None,
        },
    }
}

fn resolve_route<'a>(
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
    let in_tier = config
        .tiers
        .get(&ctx.tenant.tier)
        .is_some_and(|tier| tier.routes.contains(&route.name));
    let in_allow_list = ctx
        .tenant
        .allowed_routes
        .as_ref()
        .is_none_or(|allowed| allowed.contains(&route.name));
    if !(in_tier && in_allow_list) {
        return Err(ApiError::new(
            ErrorCode::RouteNotAllowed,
            format!("this key may not use the model `{model}`"),
        )
        .with_param("model"));
    }
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

/// The tenant's rate decision, or the 429 that refuses the request.
async fn allowed_rate(tenant: &TenantHandle) -> Result<RateDecision, ApiError> {
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
    with_rate_headers(error, rate)
}

fn quota_error(error: &QuotaError) -> ApiError {
    match error {
        QuotaError::Refused(refused) => {
            ApiError::new(ErrorCode::BudgetExceeded, refused.to_string())
        }
        QuotaError::TokenLimited(refused) => {
            // A wait past a day (a request larger than a minute's tokens) is not worth retrying.
            let seconds = refused.retry_after_ms.div_ceil(1000).min(86_400 * 31);
            ApiError::new(ErrorCode::TokenLimited, refused.to_string()).with_retry_after(seconds)
        }
        QuotaError::Unavailable => ApiError::new(
            ErrorCode::QuotaUnavailable,
            "the tenant's budget state is unavailable; try again shortly",
        )
        .with_retry_after(1),
        QuotaError::StoreDown => ApiError::new(
            ErrorCode::QuotaUnavailable,
            "the shared quota store is unreachable and this tenant's limits fail closed; try again shortly",
        )
        .with_retry_after(1),
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
        QuotaError::Unavailable | QuotaError::StoreDown => {}
    }
    with_rate_headers(quota_error(error), rate)
}

fn header(name: &'static str, value: &dyn std::fmt::Display) -> Option<(HeaderName, HeaderValue)> {
    let value = HeaderValue::from_str(&value.to_string()).ok()?;
    Some((HeaderName::from_static(name), value))
}

/// OpenAI's `x-ratelimit-*-tokens` headers.
pub fn token_headers(window: &TokenWindow) -> Vec<(HeaderName, HeaderValue)> {
    [
        header("x-ratelimit-limit-tokens", &window.limit),
        header("x-ratelimit-remaining-tokens", &window.remaining),
        header(
            "x-ratelimit-reset-tokens",
            &format_args!("{}ms", window.reset_ms),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// OpenAI's `x-ratelimit-*-requests` headers.
pub fn rate_headers(rate: &RateDecision) -> Vec<(HeaderName, HeaderValue)> {
    [
        header("x-ratelimit-limit-requests", &rate.limit),
        header("x-ratelimit-remaining-requests", &rate.remaining),
        header(
            "x-ratelimit-reset-requests",
            &format_args!("{}ms", rate.reset_ms),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn with_rate_headers(mut error: ApiError, rate: &RateDecision) -> ApiError {
    for (name, value) in rate_headers(rate) {
        error = error.with_header(name, value);
    }
    error
}

struct Dispatch<'a> {
    cache_key: Option<CacheKey>,
    meter: &'a RequestMeter,
    gw: &'a Arc<Gateway>,
    /// The snapshot `route` was taken from; its providers serve this request.
    live: &'a Live,
    clients: &'a UpstreamClients,
    ctx: &'a RequestContext,
    route: &'a Route,
    request: &'a ChatRequest,
    input_tokens: u64,
    rate: RateDecision,
}

impl Dispatch<'_> {
    /// Tries the route's targets in order, per DESIGN's table: retryable
    /// failures move on, a refused request or a local misconfiguration ends here.
    #[expect(
        clippy::too_many_lines,
        reason = "one failover loop; its arms mirror DESIGN's table"
    )]
    async fn run(&self, reservation: ReservationGuard) -> Result<ChatOutcome, ApiError> {
        let max_tokens = reservation.granted().max_tokens;
        let reserved = reservation.granted().amount;
        let token_window = reservation.granted().tokens;
        let mut attempt_number = 0u32;
        let mut missing_envs = Vec::new();
        let mut last_failure: Option<String> = None;
        let mut skipped = Vec::new();
        let mut last_failed_provider: Option<String> = None;
        let deadline =
            monotonic() + Duration::from_millis(self.gw.config.server.request_timeout_ms);

        let targets = routing::order(&self.route.targets, routing::random_roll);
        for (index, target) in targets.into_iter().enumerate() {
            let Some(provider) = self.live.config.providers.get(&target.provider) else {
                continue;
            };
            if let Some(env) = provider.missing_key_env() {
                missing_envs.push(env.to_owned());
                continue;
            }
            let Some(handle) = self.live.providers.get(&target.provider) else {
                continue;
            };
            // Retries stay on this provider while its policy, its retry budget and the
            // request's deadline allow; then the next target.
            handle.retry_budget().deposit();
            let mut tries_here = 0u32;
            loop {
                tries_here += 1;
                let permit = match handle.admit().await {
                    Ok(permit) => permit,
                    Err(skip) => {
                        skipped.push(format!("{}: {skip}", target.provider));
                        break;
                    }
                };
                let adapter = Adapter::for_provider(provider);
                let sent_max_tokens = provider
                    .max_tokens_ceiling
                    .map_or(max_tokens, |ceiling| max_tokens.min(ceiling));
                let tenant = provider
                    .tenant_id_as
                    .map(|field| (field, self.ctx.tenant.id.as_str()));
                let body = match adapter.build_body(
                    self.request,
                    &target.model,
                    sent_max_tokens,
                    tenant,
                ) {
                    Ok(body) => body,
                    Err(error) => {
                        // The request cannot be expressed for this provider: the caller's to fix.
                        permit.finish(Verdict::Abandoned);
                        reservation.release();
                        return Err(error);
                    }
                };
                attempt_number += 1;
                let event_id = record::reserve(
                    self.gw,
                    self.ctx,
                    self.route.name.as_str(),
                    reserved,
                    target,
                    attempt_number,
                )
                .await;
                let headers = CallHeaders {
                    traceparent: self.ctx.traceparent.as_deref(),
                };
                let started = monotonic();
                let client = self.clients.get(provider.connect_timeout_ms);
                let result = if self.request.stream() {
                    call::open_stream(&client, provider, body, &headers).await
                } else {
                    call::post_chat(&client, provider, body, &headers)
                        .await
                        .map(Opened::Complete)
                };
                let latency_ms = elapsed_ms(started);
                let result = read_complete(adapter, result, &target.model);
                self.meter.add_upstream_ms(latency_ms);
                let class = match &result {
                    Ok(Opened::Complete(reply)) => classify_status(reply.status),
                    Ok(Opened::Stream { .. }) => Class::Success,
                    Err(error) => classify_error(error),
                };
                observe_attempt(target, class, latency_ms);

                let mut row = AttemptRow::new(
                    target.provider.as_str(),
                    &target.model,
                    attempt_number,
                    latency_ms,
                );
                row.event_id = event_id;
                if let Ok(Opened::Complete(reply)) = &result {
                    row.upstream_status = Some(reply.status.as_u16());
                }
                let success_status = if index == 0 {
                    AttemptStatus::Ok
                } else {
                    AttemptStatus::FallbackOk
                };
                match (class, result) {
                    (Class::Success, Ok(opened)) => {
                        if let Some(failed) = &last_failed_provider {
                            let labels = [
                                ("route", self.route.name.as_str()),
                                ("from", failed.as_str()),
                                ("to", target.provider.as_str()),
                            ];
                            counter_add(Metric::FallbacksTotal, &labels, 1);
                        }
                        row.status = success_status;
                        let body = match opened {
                            Opened::Complete(reply) => {
                                permit.finish(Verdict::Healthy);
                                self.settle(reservation, row, reply, target).await
                            }
                            Opened::Stream {
                                first,
                                body,
                                ttft_ms,
                            } => {
                                let labels = [
                                    ("provider", target.provider.as_str()),
                                    ("model", target.model.as_str()),
                                ];
                                observe_ms(Metric::UpstreamTtftSeconds, &labels, ttft_ms);
                                let stream = StreamStart {
                                    event_id,
                                    permit,
                                    first,
                                    body,
                                    ttft_ms,
                                    started,
                                };
                                self.relay(
                                    reservation,
                                    stream,
                                    target,
                                    provider,
                                    success_status,
                                    attempt_number,
                                )
                            }
                        };
                        return Ok(ChatOutcome {
                            degraded: false,
                            cache: self.cache_key.map(|_| "miss"),
                            tokens: token_window,
                            provider: target.provider.to_string(),
                            model: target.model.clone(),
                            rate: self.rate,
                            clamped_max_tokens: reservation_clamp(
                                max_tokens,
                                self.request,
                                self.ctx,
                                &self.live.config,
                                self.route,
                            ),
                            body,
                        });
                    }
                    (Class::GiveBack, Ok(Opened::Complete(reply))) => {
                        permit.finish(Verdict::Healthy);
                        row.status = AttemptStatus::ClientError;
                        row.error = Some(snippet(&reply.body));
                        self.record_attempt(reserved, row);
                        reservation.release();
                        let status = StatusCode::from_u16(reply.status.as_u16())
                            .unwrap_or(StatusCode::BAD_REQUEST);
                        return Err(ApiError::upstream_rejected(status, reply.body));
                    }
                    (Class::Local, Err(error)) => {
                        permit.finish(Verdict::Abandoned);
                        row.status = AttemptStatus::LocalError;
                        row.error = Some(error.to_string());
                        self.record_attempt(reserved, row);
                        reservation.release();
                        return Err(ApiError::new(
                            ErrorCode::ProviderMisconfigured,
                            error.to_string(),
                        ));
                    }
                    (_, result) => {
                        permit.finish(Verdict::Failed);
                        let retry_after_s = match &result {
                            Ok(Opened::Complete(reply)) => reply.retry_after_s,
                            _ => None,
                        };
                        let message = match result {
                            Ok(Opened::Complete(reply)) => {
                                format!("{} answered {}", target.provider, reply.status.as_u16())
                            }
                            Ok(Opened::Stream { .. }) => {
                                format!("{}: unexpected stream", target.provider)
                            }
                            Err(error) => format!("{}: {error}", target.provider),
                        };
                        tracing::warn!(provider = %target.provider, request_id = %self.ctx.request_id, error = %message, "Upstream attempt failed; failing over.");
                        row.error = Some(message.clone());
                        self.record_attempt(reserved, row);
                        last_failure = Some(message);
                        last_failed_provider = Some(target.provider.to_string());
                        let policy = handle.retry_policy();
                        if tries_here < policy.max_attempts {
                            let delay = policy.delay(
                                tries_here + 1,
                                retry_after_s,
                                RetryPolicy::random_jitter(),
                            );
                            let in_time = monotonic() + delay < deadline;
                            if in_time && handle.retry_budget().withdraw() {
                                actix_rt::time::sleep(delay).await;
                                continue;
                            }
                        }
                        break;
                    }
                }
            }
        }
        reservation.release();
        let unconfigured = attempt_number == 0 && skipped.is_empty() && !missing_envs.is_empty();
        let error = self.exhausted(attempt_number, &missing_envs, &skipped, last_failure);
        match &self.route.degraded_answer {
            // A route with no configured provider is an operator's mistake: say so, loudly.
            Some(text) if !unconfigured => {
                Ok(self.degraded(text, attempt_number + 1, &error).await)
            }
            _ => Err(error),
        }
    }

    /// The row of an attempt journaled by `record::reserve`.
    fn record_attempt(&self, reserved: Nanos, row: AttemptRow) {
        record::record_attempt(self.gw, self.ctx, self.route.name.as_str(), reserved, row);
    }

    async fn degraded(&self, text: &str, attempt: u32, error: &ApiError) -> ChatOutcome {
        let mut row = AttemptRow::new(DEGRADED_PROVIDER, DEGRADED_MODEL, attempt, 0);
        row.status = AttemptStatus::Degraded;
        row.error = Some(error.to_string());
        record::record(
            self.gw,
            self.ctx,
            self.route.name.as_str(),
            Nanos::ZERO,
            row,
        )
        .await;
        tracing::warn!(route = %self.route.name, request_id = %self.ctx.request_id, error = %error, "Every target failed; serving the route's degraded answer.");
        let stream = self.request.stream().then(|| self.request.include_usage());
        let created_s = self.gw.clock.now_ms() / 1000;
        ChatOutcome {
            provider: DEGRADED_PROVIDER.to_owned(),
            model: DEGRADED_MODEL.to_owned(),
            rate: self.rate,
            clamped_max_tokens: None,
            cache: None,
            tokens: None,
            degraded: true,
            body: degraded::body(
                text,
                self.request.model(),
                self.ctx.request_id.as_str(),
                created_s,
                stream,
            ),
        }
    }

    fn exhausted(
        &self,
        attempts: u32,
        missing_envs: &[String],
        skipped: &[String],
        last_failure: Option<String>,
    ) -> ApiError {
        let route = &self.route.name;
        if attempts == 0 && skipped.is_empty() && !missing_envs.is_empty() {
            return ApiError::new(
                ErrorCode::ProviderUnavailable,
                format!(
                    "no provider of route `{route}` is configured: set {}",
                    missing_envs.join(" or ")
                ),
            );
        }
        if attempts == 0 {
            return ApiError::new(
                ErrorCode::ProviderUnavailable,
                format!(
                    "every provider of route `{route}` is unavailable ({})",
                    skipped.join("; ")
                ),
            )
            .with_retry_after(1);
        }
        ApiError::new(
            ErrorCode::UpstreamFailed,
            format!(
                "every target of route `{route}` failed; last error: {}",
                last_failure.unwrap_or_default()
            ),
        )
    }

    async fn settle(
        &self,
        reservation: ReservationGuard,
        mut row: AttemptRow,
        reply: UpstreamReply,
        target: &Target,
    ) -> OutcomeBody {
        let reported = reply
            .usage
            .unwrap_or_else(|| openai::parse_usage(&reply.body));
        let (usage, usage_kind) = match reported {
            ResponseUsage::Reported(usage) => (usage, UsageKind::Reported),
            ResponseUsage::Missing { completion_text } => (
                Usage {
                    prompt_tokens: self.input_tokens,
                    completion_tokens: self.gw.estimator.count_completion(&completion_text),
                    ..Usage::default()
                },
                UsageKind::Estimated,
            ),
        };
        let cost = pricing::charge(&target.price, &usage);
        let reserved = reservation.granted().amount;
        row.usage = usage;
        row.usage_kind = usage_kind;
        let remaining = record::settle(
            self.gw,
            self.ctx,
            self.route.name.as_str(),
            reservation,
            cost,
            &mut row,
        )
        .await;
        record::meter(self.gw, self.ctx, &usage, row.charged);
        if let Some(key) = self.cache_key {
            let cached = CachedResponse {
                body: reply.body.clone(),
                provider: row.provider.clone(),
                model: row.model.clone(),
                usage,
            };
            let expires = self
                .gw
                .clock
                .now_ms()
                .saturating_add(self.route.cache_ttl_ms);
            self.gw.cache.put(key, cached, expires);
        }
        self.record_attempt(reserved, row);
        OutcomeBody::Complete {
            body: reply.body,
            cost,
            remaining,
        }
    }

    fn relay(
        &self,
        reservation: ReservationGuard,
        stream: StreamStart,
        target: &Target,
        provider: &crate::config::Provider,
        success_status: AttemptStatus,
        attempt: u32,
    ) -> OutcomeBody {
        let relay = Relay {
            gw: self.gw.clone(),
            ctx: self.ctx.clone(),
            route: self.route.name.to_string(),
            target: target.clone(),
            provider: provider.clone(),
            success_status,
            attempt,
            input_tokens: self.input_tokens,
            translator: Adapter::for_provider(provider)
                .translator(&target.model, self.request.include_usage()),
            reservation,
            event_id: stream.event_id,
            permit: stream.permit,
            started: stream.started,
            ttft_ms: stream.ttft_ms,
        };
        OutcomeBody::Stream(relay.spawn(stream.first, stream.body))
    }
}

/// A stream whose first chunk arrived: from here on there is no failover.
struct StreamStart {
    /// The attempt's journal reserve.
    event_id: EventId,
    permit: Permit,
    first: Bytes,
    body: UpstreamBody,
    ttft_ms: u64,
    started: std::time::Instant,
}

fn observe_attempt(target: &Target, class: Class, latency_ms: u64) {
    let outcome = match class {
        Class::Success => "ok",
        Class::Retryable => "retryable",
        Class::GiveBack => "rejected",
        Class::Local => "local_error",
    };
    let labels = [
        ("provider", target.provider.as_str()),
        ("model", target.model.as_str()),
        ("outcome", outcome),
    ];
    observe_ms(Metric::UpstreamDurationSeconds, &labels, latency_ms);
    let attempt_labels = [("provider", target.provider.as_str()), ("outcome", outcome)];
    counter_add(Metric::UpstreamAttemptsTotal, &attempt_labels, 1);
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

/// The lowered `max_tokens` when `clamp` mode changed what the caller would have sent.
fn reservation_clamp(
    granted_max_tokens: u32,
    request: &ChatRequest,
    ctx: &RequestContext,
    config: &Config,
    route: &Route,
) -> Option<u32> {
    let tier_default = config.tiers.get(&ctx.tenant.tier)?.default_max_tokens;
    let wanted = wanted_max_tokens(request.max_tokens(), ctx, tier_default, route);
    (granted_max_tokens < wanted).then_some(granted_max_tokens)
}

/// A complete answer in OpenAI's shape: a success mapped with its usage (a
/// malformed one counts as a failed attempt), a refusal's body as OpenAI's envelope.
fn read_complete(
    adapter: Adapter,
    result: Result<Opened, CallError>,
    model: &str,
) -> Result<Opened, CallError> {
    match result {
        Ok(Opened::Complete(mut reply)) if reply.status.is_success() => {
            let (body, usage) = adapter
                .read_success(reply.body, model)
                .map_err(CallError::Body)?;
            reply.body = body;
            reply.usage = Some(usage);
            Ok(Opened::Complete(reply))
        }
        Ok(Opened::Complete(mut reply)) => {
            reply.body = adapter.error_body(reply.body);
            Ok(Opened::Complete(reply))
        }
        other => other,
    }
}

/// The start of an upstream error body, for the ledger (never the prompt).
fn snippet(body: &Bytes) -> String {
    let text = String::from_utf8_lossy(body);
    text.chars().take(500).collect()
}
