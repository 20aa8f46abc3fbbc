//! The attempt loop: the route's targets in order, each attempt under a hold.
//!
//! 1. For each target: its provider must be configured and admit the call
//!    (breaker, concurrency) before the request's deadline.
//! 2. The hold is in place (`hold.rs`): the first attempt's came from
//!    admission; after an attempt that may have been billed, a new one is
//!    reserved, and if the budget cannot cover it no further attempt leaves.
//! 3. The attempt (`attempt.rs`) is journaled, sent, bounded by the deadline,
//!    and classified once (`provider/classify.rs`).
//! 4. Success: settled with its real cost (`settle.rs`) or relayed as a
//!    stream. A refusal of the request (4xx) or a local misconfiguration ends
//!    the loop. Any other failure gets a row, charged its hold if it may have
//!    been billed, and the provider decides: retry after a wait, or fail over.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use bytes::Bytes;

use super::attempt::{Attempt, Ledger, ToSettle};
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
use crate::ledger::AttemptStatus;
use crate::money::Nanos;
use crate::openai::chat::ChatRequest;
use crate::provider::actor::{ProviderHandle, Verdict};
use crate::provider::adapters::Adapter;
use crate::provider::call::{CallError, Opened};
use crate::provider::classify::{Class, is_provider_refusal, may_have_billed};
use crate::provider::clients::UpstreamClients;
use crate::provider::retry::Next;
use crate::routing;
use crate::state::{Gateway, Live};
use crate::telemetry::metrics::{Metric, counter_add, observe_duration};
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

/// A successful attempt, before it is served.
struct Serving {
    permit: crate::provider::actor::Permit,
    settling: ToSettle,
    opened: Opened,
    /// `ok`, or `fallback_ok` past the first target.
    status: AttemptStatus,
}

/// How one attempt ended, for the loop.
enum AttemptEnd {
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
                // Boxed, as every await before the upstream call: inline, each
                // sized the attempts' future, live until a stream's first token.
                if let Err(error) = Box::pin(hold.renew(self.expires_at_ms())).await {
                    tracing::warn!(request_id = %self.ctx.request_id, error = %error, "No hold for a further attempt; not sending it.");
                    trail.out_of_budget = true;
                    break 'targets;
                }
                tries_here += 1;
                let ended = self
                    .attempt(&mut hold, (target, provider, handle), index, &mut trail)
                    .await;
                match ended {
                    AttemptEnd::Done(result) => return result,
                    AttemptEnd::Skipped => break,
                    AttemptEnd::Failed { retry_after_s } => {
                        match handle.after_failure(tries_here, retry_after_s, self.time_left()) {
                            Next::Retry(delay) => self.back_off(target, delay).await,
                            Next::FailOver => break,
                        }
                    }
                }
            }
        }
        hold.release();
        Box::pin(self.exhausted(&trail)).await
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
        let time_left = self.time_left();
        let admitted = actix_rt::time::timeout(time_left, handle.admit(time_left)).await;
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
        (target, provider, handle): (&Target, &Provider, &ProviderHandle),
        index: usize,
        trail: &mut Trail,
    ) -> AttemptEnd {
        // Boxed: the admission's wait (7 KiB inline) would size this future
        // for the whole upstream call that follows it.
        let Some(permit) = Box::pin(self.admitted(target, handle, trail)).await else {
            return AttemptEnd::Skipped;
        };
        let adapter = Adapter::for_request(provider, self.request);
        let body = match self.body(adapter, hold, target, provider) {
            Ok(body) => body,
            Err(error) => {
                // The request cannot be expressed for this provider: the caller's to fix.
                permit.finish(Verdict::Abandoned);
                hold.release();
                return AttemptEnd::Done(Err(error));
            }
        };
        trail.attempts += 1;
        let ledger = Ledger {
            gw: self.gw,
            ctx: self.ctx,
            route: self.route.name.as_str(),
        };
        let mut attempt = Box::pin(Attempt::journal(ledger, hold, target, trail.attempts)).await;
        let (class, result) = attempt.send(self, (adapter, provider, target), body).await;
        match (class, result) {
            (Class::Success, Ok(opened)) => {
                let status = if index == 0 {
                    AttemptStatus::Ok
                } else {
                    AttemptStatus::FallbackOk
                };
                let Some(settling) = attempt.settle(status) else {
                    // invariant: `run` renews the hold before every attempt.
                    permit.finish(Verdict::Abandoned);
                    let error = ApiError::internal("an attempt left without a hold");
                    return AttemptEnd::Done(Err(error));
                };
                let serving = Serving {
                    permit,
                    settling,
                    opened,
                    status,
                };
                // Boxed, as the failure's path below: the attempt's future is
                // live while the upstream is waited for, and inline the
                // serving (settling a whole answer, handing a stream to its
                // relay) doubled its size for the whole of that wait.
                Box::pin(self.serve(hold, (target, provider), serving, trail)).await
            }
            (Class::GiveBack, Ok(Opened::Complete(reply))) => {
                permit.finish(Verdict::Healthy);
                attempt.end(AttemptStatus::ClientError, snippet(&reply.body));
                let status =
                    StatusCode::from_u16(reply.status.as_u16()).unwrap_or(StatusCode::BAD_REQUEST);
                AttemptEnd::Done(Err(ApiError::upstream_rejected(status, reply.body)))
            }
            (Class::Local, Err(error)) => {
                permit.finish(Verdict::Abandoned);
                attempt.end(AttemptStatus::LocalError, error.to_string());
                let error = ApiError::new(ErrorCode::ProviderMisconfigured, error.to_string());
                AttemptEnd::Done(Err(error))
            }
            (_, result) => {
                permit.finish(Verdict::Failed);
                Box::pin(failed(attempt, target, result, trail)).await
            }
        }
    }

    /// A successful attempt: settled now, or handed to the stream relay.
    async fn serve(
        &self,
        hold: &mut Hold,
        (target, provider): (&Target, &Provider),
        serving: Serving,
        trail: &Trail,
    ) -> AttemptEnd {
        let Serving {
            permit,
            settling:
                ToSettle {
                    guard,
                    row,
                    started,
                },
            opened,
            status,
        } = serving;
        if let Some(failed) = &trail.last_failed_provider {
            let labels = [
                ("route", self.route.name.as_str()),
                ("from", failed.as_str()),
                ("to", target.provider.as_str()),
            ];
            counter_add(Metric::FallbacksTotal, &labels, 1);
        }
        let native = Adapter::for_request(provider, self.request).answers_natively();
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
                let start = settle::StreamStart {
                    event_id: row.event_id,
                    permit,
                    first,
                    body,
                    ttft_ms: whole_ms(ttft),
                    started,
                };
                let stream_hold = settle::Held {
                    guard,
                    growth: hold.growth(),
                    call: hold.take_call(),
                };
                served.relay(stream_hold, start, target, provider, status, row.number)
            }
        };
        AttemptEnd::Done(Ok(self.outcome(target, hold, native, body)))
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

    pub fn time_left(&self) -> Duration {
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

/// A failed attempt another may not repeat: its row, charged its hold if it
/// may have been billed; if not, the hold goes on to the next attempt.
async fn failed(
    attempt: Attempt<'_>,
    target: &Target,
    result: Result<Opened, CallError>,
    trail: &mut Trail,
) -> AttemptEnd {
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
    tracing::warn!(provider = %target.provider, request_id = %attempt.request_id(), error = %message, billed, "Upstream attempt failed.");
    if billed {
        attempt.charge_hold(message.clone()).await;
    } else {
        attempt.give_back(AttemptStatus::UpstreamError, message.clone());
    }
    trail.last_failure = Some(message);
    trail.last_failed_provider = Some(target.provider.to_string());
    AttemptEnd::Failed { retry_after_s }
}

/// The start of an upstream error body, for the ledger (never the prompt).
fn snippet(body: &Bytes) -> String {
    let text = String::from_utf8_lossy(body);
    text.chars().take(500).collect()
}
