//! A successful attempt's settlement: a complete answer is charged its real
//! cost (from the provider's usage, else counted) and cached; a stream is
//! handed to the relay, which settles when it ends.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::chat::OutcomeBody;
use super::context::RequestContext;
use super::record::{self, AttemptRow};
use super::semantic::{self, Keep};
use super::stream::{Relay, StreamSettings};
use crate::cache::{CacheKey, CachedResponse};
use crate::config::{Provider, Route, Target};
use crate::ids::EventId;
use crate::ledger::{AttemptStatus, UsageKind};
use crate::openai::chat::ChatRequest;
use crate::pricing::{self, Usage};
use crate::provider::actor::Permit;
use crate::provider::adapters::Adapter;
use crate::provider::adapters::openai::{self, ResponseUsage};
use crate::provider::call::{UpstreamBody, UpstreamReply};
use crate::state::Gateway;
use crate::telemetry::metrics::{Metric, counter_add};
use crate::tenant::{CallSlot, ReservationGuard};

use super::hold::Growth;
use crate::tokenize::Estimate;

/// What settling a served attempt needs to know of its request.
pub struct Served<'a> {
    pub gw: &'a Arc<Gateway>,
    pub ctx: &'a RequestContext,
    pub route: &'a Route,
    pub request: &'a ChatRequest,
    /// The input estimate the hold was reserved at.
    pub input: Estimate,
    pub cache_key: Option<CacheKey>,
    /// Where the semantic cache keeps the answer, on a route that has one.
    pub keep: Option<Keep>,
    pub deadline: Instant,
}

/// The hold a started stream is relayed under: its guard, and how it grows.
pub struct Held {
    pub guard: ReservationGuard,
    pub growth: Option<Growth>,
    /// The call's slot among the calls in flight, given back when the relay ends.
    pub call: Option<CallSlot>,
}

/// A stream whose first chunk arrived: from here on there is no failover.
pub struct StreamStart {
    /// The attempt's journal reserve.
    pub event_id: EventId,
    pub permit: Permit,
    pub first: Bytes,
    pub body: UpstreamBody,
    pub ttft_ms: u64,
    pub started: Instant,
}

impl Served<'_> {
    /// The prompt's exact count, for a charge made without the provider's
    /// usage: the bound admission may have reserved at would overcharge.
    fn prompt_estimate(&self) -> u64 {
        if self.input.exact {
            return self.input.tokens;
        }
        let countings = &self.route.countings;
        self.gw
            .estimator
            .estimate_for(countings, self.request.prompt())
    }

    /// Charges a complete answer its real cost and caches it when the route
    /// does (`native`: the body is in the door's own API).
    pub async fn complete(
        &self,
        reservation: ReservationGuard,
        mut row: AttemptRow,
        reply: UpstreamReply,
        target: &Target,
        native: bool,
    ) -> (OutcomeBody, Usage) {
        let reported = reply
            .usage
            .unwrap_or_else(|| openai::parse_usage(&reply.body));
        let (usage, usage_kind) = match reported {
            ResponseUsage::Reported(usage) => (usage, UsageKind::Reported),
            // Reasoning and a tool's uses are billed but not in the text:
            // without the provider's word, what may have been billed is the hold.
            ResponseUsage::Missing { .. } if self.request.bills_unseen() => (
                Usage {
                    prompt_tokens: self.prompt_estimate(),
                    completion_tokens: u64::from(reservation.granted().max_tokens)
                        .saturating_mul(u64::from(self.request.choices())),
                    ..Usage::default()
                },
                UsageKind::Unknown,
            ),
            ResponseUsage::Missing { completion_text } => (
                Usage {
                    prompt_tokens: self.prompt_estimate(),
                    completion_tokens: self.gw.estimator.count_completion(&completion_text),
                    ..Usage::default()
                },
                UsageKind::Estimated,
            ),
        };
        let mut cost = pricing::charge(&target.charge, &usage);
        if usage_kind == UsageKind::Unknown {
            cost = cost.max(reservation.granted().amount);
            let labels = [("provider", target.provider.as_str())];
            counter_add(Metric::UnknownOutcomesTotal, &labels, 1);
        }
        row.cost = Some(pricing::charge(&target.price, &usage));
        row.usage = usage;
        row.usage_kind = usage_kind;
        let route = self.route.name.as_str();
        let cached = CachedResponse {
            body: reply.body.clone(),
            provider: row.provider.clone(),
            model: row.model.clone(),
            usage,
            native,
            source: row.event_id.to_string(),
            cost,
        };
        let settled = record::settle(self.gw, self.ctx, route, reservation, cost, row).await;
        record::meter(
            self.gw,
            self.ctx,
            target.provider.as_str(),
            &usage,
            settled.charged,
        );
        self.keep_answer(cached);
        let body = OutcomeBody::Complete {
            body: reply.body,
            cost,
            remaining: settled.remaining,
        };
        (body, usage)
    }

    /// Keeps a bought answer in the caches the route has.
    fn keep_answer(&self, cached: CachedResponse) {
        if let Some(keep) = &self.keep {
            semantic::keep(self.gw, keep.clone(), cached.clone());
        }
        if let Some(key) = self.cache_key {
            let expires = self
                .gw
                .clock
                .now_ms()
                .saturating_add(self.route.cache_ttl_ms);
            self.gw.cache.put(key, cached, expires);
        }
    }

    /// Hands a started stream to the relay, which settles it when it ends.
    pub fn relay(
        &self,
        held: Held,
        stream: StreamStart,
        target: &Target,
        provider: &Provider,
        success_status: AttemptStatus,
        attempt: u32,
    ) -> OutcomeBody {
        let Held {
            guard,
            mut growth,
            call,
        } = held;
        let granted = guard.granted();
        let ceiling = |limit: u32| provider.max_tokens_ceiling.map_or(limit, |c| limit.min(c));
        let choices = u64::from(self.request.choices());
        // The output the hold covers: every choice up to the limit it holds
        // (for a growing hold, its first step; the upstream has the caller's).
        let held_output_tokens = u64::from(ceiling(granted.max_tokens)).saturating_mul(choices);
        if let Some(growth) = &mut growth {
            growth.limit = ceiling(growth.limit);
        }
        let prompt_tokens = self.prompt_estimate();
        let relay = Relay {
            gw: self.gw.clone(),
            ctx: self.ctx.clone(),
            route: self.route.name.to_string(),
            target: target.clone(),
            settings: StreamSettings::of(provider),
            success_status,
            attempt,
            // Charged only if the stream ends without the provider's usage.
            input_tokens: prompt_tokens,
            held_output_tokens,
            choices: self.request.choices(),
            include_usage: self.request.include_usage(),
            bills_unseen: self.request.bills_unseen(),
            deadline: self.deadline,
            translator: Adapter::for_request(provider, self.request)
                .translator(&target.model, self.request.include_usage()),
            reservation: guard,
            growth,
            steps: Vec::new(),
            call,
            event_id: stream.event_id,
            permit: stream.permit,
            started: stream.started,
            ttft_ms: stream.ttft_ms,
        };
        OutcomeBody::Stream {
            body: relay.spawn(stream.first, stream.body),
            prompt_tokens,
        }
    }
}
