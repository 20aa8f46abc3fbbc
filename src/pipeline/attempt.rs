//! The attempt loop: the route's targets in order, each attempt under a hold.
//!
//! 1. For each target: its provider must be configured and admit the call
//!    (breaker, concurrency) before the request's deadline.
//! 2. The hold is in place (`hold.rs`): the first attempt's came from
//!    admission; after an attempt that may have been billed, a new one is
//!    reserved, and if the budget cannot cover it no further attempt leaves.
//! 3. The attempt is journaled (its reserve), sent, bounded by the deadline,
//!    and classified once (`provider/classify.rs`).
//! 4. Success: settled with its real cost (`settle.rs`) or relayed as a
//!    stream. A refusal of the request (4xx) or a local misconfiguration ends
//!    the loop. Any other failure gets a row, charged its hold if it may have
//!    been billed, and the provider decides: retry after a wait, or fail over.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use bytes::Bytes;

use super::chat::{ChatOutcome, OutcomeBody};
use super::context::{RequestContext, RequestMeter};
use super::degraded;
use super::hold::Hold;
use super::record::{self, AttemptRow};
use super::settle;
use crate::cache::CacheKey;
use crate::clock::{elapsed, monotonic, whole_ms};
use crate::config::{Provider, Route, Target};
use crate::error::{ApiError, ErrorCode};
use crate::ledger::{AttemptStatus, UsageKind};
use crate::money::Nanos;
use crate::openai::chat::ChatRequest;
use crate::provider::actor::{ProviderHandle, Verdict};
use crate::provider::adapters::Adapter;
use crate::provider::call::{self, CallError, CallHeaders, Opened};
use crate::provider::classify::{
    Class, classify_error, classify_status, is_provider_refusal, may_have_billed,
};
use crate::provider::clients::UpstreamClients;
use crate::provider::retry::Next;
use crate::routing;
use crate::state::{Gateway, Live};
use crate::telemetry::metrics::{Metric, counter_add, observe_duration};
use crate::telemetry::traces::{self, Span, SpanContext, SpanKind};
use crate::tenant::RateDecision;
use crate::tokenize::Estimate;

/// The provider and model a degraded answer is recorded under.
const DEGRADED_PROVIDER: &str = "tollgate";
const DEGRADED_MODEL: &str = "degraded";

/// Extra time past the request deadline before an unsettled reservation counts as orphaned.
pub const RESERVATION_MARGIN_MS: u64 = 30_000;

pub struct Dispatch<'a> {
    pub cache_key: Option<CacheKey>,
    /// Where the semantic cache keeps the answer, on a route that has one.
    pub keep: Option<super::semantic::Keep>,
    pub meter: &'a RequestMeter,
    pub gw: &'a Arc<Gateway>,
    /// The snapshot `route` was taken from; its providers serve this request.
    pub live: &'a Live,
    pub clients: &'a UpstreamClients,
    pub ctx: &'a RequestContext,
    pub route: &'a Route,
    pub request: &'a ChatRequest,
    /// Prompts the gateway places before the request's own (held in `input`).
    pub prefix: Option<crate::prompts::Prefix<'a>>,
    /// The input estimate the holds were reserved at (a bound when not exact).
    pub input: Estimate,
    pub rate: RateDecision,
    /// The output limit the caller would have had without `clamp` mode.
    pub wanted_max_tokens: u32,
    /// When the whole request (every attempt and wait) must be over.
    pub deadline: std::time::Instant,
}

/// What the loop has seen so far, for the final error.
#[derive(Default)]
struct Trail {
    attempts: u32,
    missing_envs: Vec<String>,
    skipped: Vec<String>,
    last_failure: Option<String>,
    last_failed_provider: Option<String>,
    /// The budget could not cover another attempt's hold.
    out_of_budget: bool,
}

/// A successful attempt, before it is settled.
struct Success {
    permit: crate::provider::actor::Permit,
    row: AttemptRow,
    opened: Opened,
    started: std::time::Instant,
    /// `ok`, or `fallback_ok` past the first target.
    status: AttemptStatus,
}

/// How one attempt ended, for the loop.
enum Step {
    /// The request is answered (or refused for good).
    Done(Result<ChatOutcome, ApiError>),
    /// The attempt failed in a way another attempt may not.
    Failed { retry_after_s: Option<u64> },
    /// The provider would not take the call: the next target.
    Skipped,
}

impl Dispatch<'_> {
    /// Tries the route's targets in order, per DESIGN's table.
    pub async fn run(&self, mut hold: Hold) -> Result<ChatOutcome, ApiError> {
        let mut trail = Trail::default();
        let targets = routing::order(&self.route.targets, routing::random_roll);
        'targets: for (index, target) in targets.into_iter().enumerate() {
            let Some(provider) = self.live.config.providers.get(&target.provider) else {
                continue;
            };
            if let Some(env) = provider.missing_key_env() {
                trail.missing_envs.push(env.to_owned());
                continue;
            }
            let Some(handle) = self.live.providers.get(&target.provider) else {
                continue;
            };
            handle.start_request();
            let mut tries_here = 0u32;
            loop {
                if self.time_left().is_zero() {
                    break 'targets;
                }
                if let Err(error) = hold.renew(self.expires_at_ms()).await {
                    tracing::warn!(request_id = %self.ctx.request_id, error = %error, "No hold for a further attempt; not sending it.");
                    trail.out_of_budget = true;
                    break 'targets;
                }
                tries_here += 1;
                let step = self
                    .attempt(&mut hold, target, provider, handle, index, &mut trail)
                    .await;
                match step {
                    Step::Done(result) => return result,
                    Step::Skipped => break,
                    Step::Failed { retry_after_s } => {
                        match handle.after_failure(tries_here, retry_after_s, self.time_left()) {
                            Next::Retry(delay) => self.back_off(target, delay).await,
                            Next::FailOver => break,
                        }
                    }
                }
            }
        }
        hold.release();
        self.exhausted(&trail).await
    }

    /// The provider's permit for one attempt, or why the target is skipped
    /// (in `trail`); the wait for it is counted apart from the gateway's work.
    async fn admitted(
        &self,
        target: &Target,
        handle: &ProviderHandle,
        trail: &mut Trail,
    ) -> Option<crate::provider::actor::Permit> {
        let queued = monotonic();
        let admitted = actix_rt::time::timeout(self.time_left(), handle.admit()).await;
        let queued = elapsed(queued);
        self.meter.add_wait(queued);
        let labels = [("provider", target.provider.as_str())];
        observe_duration(Metric::ProviderQueueWaitSeconds, &labels, queued);
        match admitted {
            Ok(Ok(permit)) => Some(permit),
            Ok(Err(skip)) => {
                trail.skipped.push(format!("{}: {skip}", target.provider));
                None
            }
            Err(_) => {
                let provider = &target.provider;
                let skip = format!("{provider}: the request's deadline passed in its queue");
                trail.skipped.push(skip);
                None
            }
        }
    }

    /// Sleeps `delay` before retrying `target`, counted apart from the gateway's work.
    async fn back_off(&self, target: &Target, delay: Duration) {
        let slept = monotonic();
        actix_rt::time::sleep(delay).await;
        let slept = elapsed(slept);
        self.meter.add_wait(slept);
        let labels = [("provider", target.provider.as_str())];
        observe_duration(Metric::RetryBackoffSeconds, &labels, slept);
    }

    /// One attempt on one target, under the hold in place.
    async fn attempt(
        &self,
        hold: &mut Hold,
        target: &Target,
        provider: &Provider,
        handle: &ProviderHandle,
        index: usize,
        trail: &mut Trail,
    ) -> Step {
        let Some(permit) = self.admitted(target, handle, trail).await else {
            return Step::Skipped;
        };
        let adapter = Adapter::for_request(provider, self.request);
        let body = match self.body(adapter, hold, target, provider) {
            Ok(body) => body,
            Err(error) => {
                // The request cannot be expressed for this provider: the caller's to fix.
                permit.finish(Verdict::Abandoned);
                hold.release();
                return Step::Done(Err(error));
            }
        };
        trail.attempts += 1;
        let reserved = hold.amount();
        let event_id = record::reserve(
            self.gw,
            self.ctx,
            self.route.name.as_str(),
            (reserved, hold.cost()),
            target,
            trail.attempts,
        )
        .await;
        let started = monotonic();
        let result = self
            .call(adapter, provider, target, body, (trail.attempts, reserved))
            .await;
        let latency = elapsed(started);
        let latency_ms = whole_ms(latency);
        let class = match &result {
            Ok(Opened::Complete(reply)) => classify_status(reply.status),
            Ok(Opened::Stream { .. }) => Class::Success,
            Err(error) => classify_error(error),
        };
        observe_attempt(target, class, answered(&result), latency);

        let mut row = AttemptRow::new(
            target.provider.as_str(),
            &target.model,
            trail.attempts,
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
                let success = Success {
                    permit,
                    row,
                    opened,
                    started,
                    status: success_status,
                };
                self.serve(hold, target, provider, success, trail).await
            }
            (Class::GiveBack, Ok(Opened::Complete(reply))) => {
                permit.finish(Verdict::Healthy);
                row.status = AttemptStatus::ClientError;
                row.error = Some(snippet(&reply.body));
                self.record_attempt(reserved, row);
                hold.release();
                let status =
                    StatusCode::from_u16(reply.status.as_u16()).unwrap_or(StatusCode::BAD_REQUEST);
                Step::Done(Err(ApiError::upstream_rejected(status, reply.body)))
            }
            (Class::Local, Err(error)) => {
                permit.finish(Verdict::Abandoned);
                row.status = AttemptStatus::LocalError;
                row.error = Some(error.to_string());
                self.record_attempt(reserved, row);
                hold.release();
                Step::Done(Err(ApiError::new(
                    ErrorCode::ProviderMisconfigured,
                    error.to_string(),
                )))
            }
            (_, result) => {
                permit.finish(Verdict::Failed);
                self.failed(hold, target, row, result, trail).await
            }
        }
    }

    /// A successful attempt: settled now, or handed to the stream relay.
    async fn serve(
        &self,
        hold: &mut Hold,
        target: &Target,
        provider: &Provider,
        success: Success,
        trail: &Trail,
    ) -> Step {
        let Success {
            permit,
            mut row,
            opened,
            started,
            status,
        } = success;
        if let Some(failed) = &trail.last_failed_provider {
            let labels = [
                ("route", self.route.name.as_str()),
                ("from", failed.as_str()),
                ("to", target.provider.as_str()),
            ];
            counter_add(Metric::FallbacksTotal, &labels, 1);
        }
        row.status = status;
        let native = Adapter::for_request(provider, self.request).answers_natively();
        let Some(guard) = hold.take() else {
            // invariant: `run` renews the hold before every attempt.
            return Step::Done(Err(ApiError::internal("an attempt left without a hold")));
        };
        let served = settle::Served {
            gw: self.gw,
            ctx: self.ctx,
            route: self.route,
            request: self.request,
            input: self.input,
            cache_key: self.cache_key,
            keep: self.keep.clone(),
            deadline: self.deadline,
        };
        let body = match opened {
            Opened::Complete(reply) => {
                permit.finish(Verdict::Healthy);
                let (body, usage) = served.complete(guard, row, reply, target, native).await;
                let tokens = (usage.prompt_tokens, usage.completion_tokens);
                self.meter.usage.set(Some(tokens));
                body
            }
            Opened::Stream { first, body, ttft } => {
                let labels = [
                    ("provider", target.provider.as_str()),
                    ("model", target.model.as_str()),
                ];
                observe_duration(Metric::UpstreamTtftSeconds, &labels, ttft);
                let ttft_ms = whole_ms(ttft);
                let start = settle::StreamStart {
                    event_id: row.event_id,
                    permit,
                    first,
                    body,
                    ttft_ms,
                    started,
                };
                let stream_hold = settle::Held {
                    guard,
                    growth: hold.growth(),
                };
                served.relay(stream_hold, start, target, provider, status, row.number)
            }
        };
        Step::Done(Ok(self.outcome(target, hold, native, body)))
    }

    /// A failed attempt another may not repeat: its row, charged its hold if
    /// it may have been billed.
    async fn failed(
        &self,
        hold: &mut Hold,
        target: &Target,
        mut row: AttemptRow,
        result: Result<Opened, CallError>,
        trail: &mut Trail,
    ) -> Step {
        let reserved = hold.amount();
        let retry_after_s = match &result {
            Ok(Opened::Complete(reply)) => reply.retry_after_s,
            _ => None,
        };
        let billed = matches!(&result, Err(error) if may_have_billed(error));
        let message = match result {
            Ok(Opened::Complete(reply)) if is_provider_refusal(reply.status) => format!(
                "{} answered {}: it refused the gateway's own key or account; check providers.{}.api_key_env",
                target.provider,
                reply.status.as_u16(),
                target.provider
            ),
            Ok(Opened::Complete(reply)) => {
                format!("{} answered {}", target.provider, reply.status.as_u16())
            }
            Ok(Opened::Stream { .. }) => format!("{}: unexpected stream", target.provider),
            Err(error) => format!("{}: {error}", target.provider),
        };
        tracing::warn!(provider = %target.provider, request_id = %self.ctx.request_id, error = %message, billed, "Upstream attempt failed.");
        row.error = Some(message.clone());
        if billed {
            self.charge_hold(hold, row).await;
        } else {
            self.record_attempt(reserved, row);
        }
        trail.last_failure = Some(message);
        trail.last_failed_provider = Some(target.provider.to_string());
        Step::Failed { retry_after_s }
    }

    /// The upstream body for this target, with the output limit the hold covers.
    fn body(
        &self,
        adapter: Adapter,
        hold: &Hold,
        target: &Target,
        provider: &Provider,
    ) -> Result<Bytes, ApiError> {
        let max_tokens = hold.sent_max_tokens();
        let sent_max_tokens = provider
            .max_tokens_ceiling
            .map_or(max_tokens, |ceiling| max_tokens.min(ceiling));
        let tenant = provider
            .tenant_id_as
            .map(|field| (field, self.ctx.tenant.id.as_str()));
        let prefix = self.prefix.as_ref();
        adapter.build_body(self.request, &target.model, sent_max_tokens, tenant, prefix)
    }

    /// One upstream call and its complete answer read, timed as upstream time;
    /// with traces on, it is the span `(attempt number, reserved)` describe.
    async fn call(
        &self,
        adapter: Adapter,
        provider: &Provider,
        target: &Target,
        body: Bytes,
        (number, reserved): (u32, Nanos),
    ) -> Result<Opened, CallError> {
        let span = self.ctx.span.as_ref().map(SpanContext::child);
        let (started, started_ns) = (monotonic(), traces::now_unix_ns());
        let traceparent = span.as_ref().map(SpanContext::traceparent);
        let url = adapter.url(provider, self.request.api());
        let result = self.send(provider, url, body, traceparent.as_deref()).await;
        let result = read_complete(adapter, result, &target.model);
        self.meter.add_upstream(elapsed(started));
        if let Some(context) = span {
            let span = attempt_span(context, started_ns, target, number, reserved, &result);
            self.gw.tracer.record(span);
        }
        result
    }

    /// Sends the body to `url`, bounded by the provider's timeouts and the
    /// request's deadline; `traceparent`: the attempt's span, when traces are
    /// exported (else the caller's goes on unchanged).
    async fn send(
        &self,
        provider: &Provider,
        url: &str,
        body: Bytes,
        traceparent: Option<&str>,
    ) -> Result<Opened, CallError> {
        let headers = CallHeaders {
            traceparent: traceparent.or(self.ctx.traceparent.as_deref()),
            anthropic: &self.ctx.anthropic_headers,
        };
        let client = self.clients.get(provider.connect_timeout_ms);
        let call = async {
            if self.request.stream() {
                call::open_stream(&client, provider, url, body, &headers).await
            } else {
                call::post(&client, provider, url, body, &headers)
                    .await
                    .map(Opened::Complete)
            }
        };
        actix_rt::time::timeout(self.time_left(), call)
            .await
            .unwrap_or(Err(CallError::Deadline(
                self.gw.config.server.request_timeout_ms,
            )))
    }

    /// An attempt that reached the provider and ended without a usage report
    /// may have been billed: it is charged its whole hold, marked `unknown`
    /// for reconciliation, and the next attempt needs a hold of its own.
    async fn charge_hold(&self, hold: &mut Hold, mut row: AttemptRow) {
        let tokens = hold.held_tokens();
        row.cost = hold.cost();
        let Some(guard) = hold.take() else {
            // invariant: an attempt leaves only under a hold; its row is never lost.
            self.record_attempt(hold.amount(), row);
            return;
        };
        let amount = guard.granted().amount;
        row.usage_kind = UsageKind::Unknown;
        let labels = [("provider", row.provider.as_str())];
        counter_add(Metric::UnknownOutcomesTotal, &labels, 1);
        let route = self.route.name.as_str();
        record::settle_tokens(self.gw, self.ctx, route, guard, amount, tokens, row).await;
    }

    fn outcome(
        &self,
        target: &Target,
        hold: &Hold,
        native: bool,
        body: OutcomeBody,
    ) -> ChatOutcome {
        let granted = hold.granted();
        ChatOutcome {
            degraded: false,
            native,
            cache: self.cache_key.map(|_| "miss"),
            tokens: granted.tokens,
            provider: target.provider.to_string(),
            model: target.model.clone(),
            rate: self.rate,
            clamped_max_tokens: (hold.sent_max_tokens() < self.wanted_max_tokens)
                .then_some(hold.sent_max_tokens()),
            body,
        }
    }

    fn time_left(&self) -> Duration {
        self.deadline.saturating_duration_since(monotonic())
    }

    /// When a hold taken now expires: after the deadline, with a margin.
    fn expires_at_ms(&self) -> u64 {
        let left_ms = u64::try_from(self.time_left().as_millis()).unwrap_or(u64::MAX);
        self.gw
            .clock
            .now_ms()
            .saturating_add(left_ms)
            .saturating_add(RESERVATION_MARGIN_MS)
    }

    /// The row of an attempt journaled by `record::reserve`.
    fn record_attempt(&self, reserved: Nanos, row: AttemptRow) {
        record::record_attempt(self.gw, self.ctx, self.route.name.as_str(), reserved, row);
    }

    /// Every target failed or none could be tried.
    async fn exhausted(&self, trail: &Trail) -> Result<ChatOutcome, ApiError> {
        let unconfigured =
            trail.attempts == 0 && trail.skipped.is_empty() && !trail.missing_envs.is_empty();
        let error = self.exhausted_error(trail);
        match &self.route.degraded_answer {
            // A route with no configured provider is an operator's mistake: say so, loudly.
            Some(text) if !unconfigured => {
                Ok(self.degraded(text, trail.attempts + 1, &error).await)
            }
            _ => Err(error),
        }
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
            native: false,
            body: degraded::body(
                text,
                self.request.model(),
                self.ctx.request_id.as_str(),
                created_s,
                stream,
            ),
        }
    }

    fn exhausted_error(&self, trail: &Trail) -> ApiError {
        let route = &self.route.name;
        if trail.attempts == 0 && trail.skipped.is_empty() && !trail.missing_envs.is_empty() {
            return ApiError::new(
                ErrorCode::ProviderUnavailable,
                format!(
                    "no provider of route `{route}` is configured: set {}",
                    trail.missing_envs.join(" or ")
                ),
            );
        }
        if trail.attempts == 0 {
            return ApiError::new(
                ErrorCode::ProviderUnavailable,
                format!(
                    "every provider of route `{route}` is unavailable ({})",
                    trail.skipped.join("; ")
                ),
            )
            .with_retry_after(1);
        }
        let mut message = format!(
            "every target of route `{route}` failed; last error: {}",
            trail.last_failure.as_deref().unwrap_or_default()
        );
        if trail.out_of_budget {
            message.push_str("; no further attempt was sent: the budget cannot hold another one");
        }
        ApiError::new(ErrorCode::UpstreamFailed, message)
    }
}

/// The upstream's status, when it answered with a complete reply.
fn answered(result: &Result<Opened, CallError>) -> Option<u16> {
    match result {
        Ok(Opened::Complete(reply)) => Some(reply.status.as_u16()),
        _ => None,
    }
}

/// One attempt as a client span: the provider, the model it was sent as, the
/// hold it went out under, and how the provider answered.
fn attempt_span(
    context: SpanContext,
    started_ns: u64,
    target: &Target,
    number: u32,
    reserved: Nanos,
    result: &Result<Opened, CallError>,
) -> Span {
    let error = match result {
        Ok(Opened::Complete(reply)) if !reply.status.is_success() => {
            Some(format!("status {}", reply.status.as_u16()))
        }
        Ok(_) => None,
        Err(error) => Some(error.to_string()),
    };
    let mut span = Span {
        context,
        name: format!("chat {}", target.model),
        kind: SpanKind::Client,
        start_unix_ns: started_ns,
        end_unix_ns: traces::now_unix_ns(),
        attributes: Vec::with_capacity(6),
        error,
    };
    span.text("gen_ai.operation.name", "chat")
        .text("gen_ai.request.model", target.model.clone())
        .text("gen_ai.provider.name", target.provider.to_string())
        .int("tollgate.attempt", u64::from(number))
        .int("tollgate.reservation_nanos", reserved.get());
    if let Ok(Opened::Complete(reply)) = result {
        span.int(
            "http.response.status_code",
            u64::from(reply.status.as_u16()),
        );
    }
    span
}

/// `answered`: the upstream's status, when it answered with one.
fn observe_attempt(target: &Target, class: Class, answered: Option<u16>, latency: Duration) {
    let outcome = match class {
        Class::Success => "ok",
        // Apart from other retryable failures: a provider's rate limit is
        // capacity to buy or spread, not a fault to page on.
        Class::Retryable if answered == Some(429) => "rate_limited",
        Class::Retryable => "retryable",
        Class::GiveBack => "rejected",
        Class::Local => "local_error",
    };
    let labels = [
        ("provider", target.provider.as_str()),
        ("model", target.model.as_str()),
        ("outcome", outcome),
    ];
    observe_duration(Metric::UpstreamDurationSeconds, &labels, latency);
    let attempt_labels = [("provider", target.provider.as_str()), ("outcome", outcome)];
    counter_add(Metric::UpstreamAttemptsTotal, &attempt_labels, 1);
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
