//! What every attempt leaves behind: the settlement of its reservation, its
//! ledger row and its metrics. Shared by complete and streamed calls.

use crate::config::Target;
use crate::ids::EventId;
use crate::ledger::{AttemptStatus, CacheSource, UsageEvent, UsageKind};
use crate::money::Nanos;
use crate::pricing::Usage;
use crate::state::Gateway;
use crate::telemetry::metrics::{Metric, counter_add, observe, ratio};
use crate::tenant::ReservationGuard;

use super::context::RequestContext;

/// The error text of a row replay writes for an attempt that was in flight
/// when the gateway stopped: what reconciliation looks for.
pub const ORPHAN_ERROR: &str = "in flight when the gateway stopped; charged at the reserved amount, reconcile with the provider";

/// One finished attempt, as the ledger sees it.
#[derive(Debug, Clone)]
pub struct AttemptRow {
    /// The id its journal reserve was written under, so replay can match them.
    pub event_id: EventId,
    pub provider: String,
    pub model: String,
    pub number: u32,
    pub status: AttemptStatus,
    pub upstream_status: Option<u16>,
    pub usage: Usage,
    pub usage_kind: UsageKind,
    pub charged: Nanos,
    /// What the call cost at the providers' prices, where its usage priced
    /// it; `None`: the charge (a failed attempt's 0, a hold charged).
    pub cost: Option<Nanos>,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    pub error: Option<String>,
    /// A cache hit's: whose answer it served.
    pub cache: Option<CacheSource>,
}

impl AttemptRow {
    pub fn new(provider: &str, model: &str, number: u32, latency_ms: u64) -> AttemptRow {
        AttemptRow {
            event_id: EventId::generate(),
            provider: provider.to_owned(),
            model: model.to_owned(),
            number,
            status: AttemptStatus::UpstreamError,
            upstream_status: None,
            usage: Usage::default(),
            usage_kind: UsageKind::None,
            charged: Nanos::ZERO,
            cost: None,
            latency_ms,
            ttft_ms: None,
            error: None,
            cache: None,
        }
    }
}

/// Records a row that has no reserve in the journal (a cache hit, a degraded
/// answer); returns once it is durable (`ledger.fsync`).
pub async fn record(
    gw: &Gateway,
    ctx: &RequestContext,
    route: &str,
    reserved: Nanos,
    row: AttemptRow,
) {
    gw.ledger
        .record_durable(event(gw, ctx, route, reserved, row))
        .await;
}

/// Records the row of an attempt whose intent (`journal_intent`, same event id) is
/// already durable. It does not wait for the fsync: if the machine loses power
/// before this row reaches the disk, replay writes the intent's row instead,
/// charged at the reserved amount, so the attempt is never without a row and
/// the budget is never under-charged.
pub fn record_attempt(
    gw: &Gateway,
    ctx: &RequestContext,
    route: &str,
    reserved: Nanos,
    row: AttemptRow,
) {
    gw.ledger.record(event(gw, ctx, route, reserved, row));
}

/// Journals an attempt about to be sent upstream, before it is sent. If the
/// gateway dies before the attempt's own row, replay writes this one: the
/// upstream may have billed the call, so it is charged at the reserved amount.
/// The attempt's row must then carry the returned event id.
pub async fn journal_intent(
    gw: &Gateway,
    ctx: &RequestContext,
    route: &str,
    (reserved, cost): (Nanos, Option<Nanos>),
    target: &Target,
    attempt: u32,
) -> EventId {
    let mut row = AttemptRow::new(target.provider.as_str(), &target.model, attempt, 0);
    row.status = AttemptStatus::Orphaned;
    row.charged = reserved;
    row.cost = cost;
    row.error = Some(ORPHAN_ERROR.to_owned());
    let event_id = row.event_id;
    let orphan = event(gw, ctx, route, reserved, row);
    let deadline_ms = orphan
        .created_at_ms
        .saturating_add(gw.config.server.request_timeout_ms);
    gw.ledger.journal_intent(&orphan, deadline_ms).await;
    event_id
}

fn event(
    gw: &Gateway,
    ctx: &RequestContext,
    route: &str,
    reserved: Nanos,
    row: AttemptRow,
) -> UsageEvent {
    UsageEvent {
        event_id: row.event_id,
        request_id: ctx.request_id.clone(),
        client_request_id: ctx.client_request_id.clone(),
        trace_id: ctx.trace_id.clone(),
        tenant: ctx.tenant.id.clone(),
        key: ctx.key.id.clone(),
        feature: ctx.feature.clone(),
        end_user: ctx.end_user.clone(),
        session: ctx.session.clone(),
        api: ctx.api,
        route: route.to_owned(),
        provider: row.provider,
        model: row.model,
        attempt: row.number,
        status: row.status,
        upstream_status: row.upstream_status,
        usage: row.usage,
        usage_kind: row.usage_kind,
        reserved,
        charged: row.charged,
        cost: row.cost,
        plan: ctx.tenant.plan.clone(),
        // The version current when the row is written: a reload during a call
        // can label its row with the newer table.
        price_version: gw.live().config.price_version.clone(),
        latency_ms: row.latency_ms,
        ttft_ms: row.ttft_ms,
        error: row.error,
        cache: row.cache,
        created_at_ms: gw.clock.now_ms(),
    }
}

/// What a settled attempt left: the budget left, and what its row charged.
#[derive(Debug, Clone, Copy)]
pub struct Settlement {
    pub remaining: Option<Nanos>,
    pub charged: Nanos,
}

/// Settles the attempt's reservation at `cost` through the ledger, which
/// records its row in the same step (`LedgerHandle::settle`): the full cost,
/// or nothing if the reservation had already expired (then its `orphaned`
/// row carries the charge). The row's own usage counts against the token limits.
pub fn settle<'a>(
    gw: &'a Gateway,
    ctx: &'a RequestContext,
    route: &'a str,
    reservation: ReservationGuard,
    cost: Nanos,
    row: AttemptRow,
) -> impl Future<Output = Settlement> + 'a {
    let tokens = row
        .usage
        .prompt_tokens
        .saturating_add(row.usage.completion_tokens);
    settle_tokens(gw, ctx, route, reservation, cost, tokens, row)
}

/// A stream's hold that grew: its first guard and the steps since.
pub struct Holds {
    pub first: ReservationGuard,
    pub steps: Vec<ReservationGuard>,
}

/// `settle` for a hold that grew: the first guard is settled at the whole
/// cost (its row reserved at the sum of them all), then the steps are given
/// back. In that order the budget never shows room the cost has taken.
pub fn settle_holds<'a>(
    gw: &'a Gateway,
    ctx: &'a RequestContext,
    route: &'a str,
    holds: Holds,
    cost: Nanos,
    row: AttemptRow,
) -> impl Future<Output = Settlement> + 'a {
    let tokens = row
        .usage
        .prompt_tokens
        .saturating_add(row.usage.completion_tokens);
    settle_held(gw, ctx, route, holds, cost, tokens, row)
}

/// `settle` with the tokens charged against the token limits given (an
/// attempt with no usage report is charged the tokens it held).
pub fn settle_tokens<'a>(
    gw: &'a Gateway,
    ctx: &'a RequestContext,
    route: &'a str,
    reservation: ReservationGuard,
    cost: Nanos,
    tokens: u64,
    row: AttemptRow,
) -> impl Future<Output = Settlement> + 'a {
    let holds = Holds {
        first: reservation,
        steps: Vec::new(),
    };
    settle_held(gw, ctx, route, holds, cost, tokens, row)
}

async fn settle_held(
    gw: &Gateway,
    ctx: &RequestContext,
    route: &str,
    holds: Holds,
    cost: Nanos,
    tokens: u64,
    mut row: AttemptRow,
) -> Settlement {
    let Holds { first, steps } = holds;
    let reserved = steps.iter().fold(first.granted().amount, |sum, step| {
        sum.saturating_add(step.granted().amount)
    });
    observe(
        Metric::ReservationChargeRatio,
        &[],
        ratio(cost.get(), reserved.get()),
    );
    if cost > reserved {
        counter_add(
            Metric::ReservationOverrunNanosTotal,
            &[],
            cost.get() - reserved.get(),
        );
    }
    row.charged = cost;
    let event = event(gw, ctx, route, reserved, row);
    let (remaining, recorded) = gw.ledger.settle(event, first, tokens).await;
    for step in steps {
        step.release();
    }
    Settlement {
        remaining,
        charged: recorded.charged,
    }
}

/// Token and cost counters of one call; the tenant label is bounded, the
/// feature label only present when `telemetry.feature_labels` is on.
pub fn meter(gw: &Gateway, ctx: &RequestContext, provider: &str, usage: &Usage, charged: Nanos) {
    let tenant = gw.tenant_labels.label(ctx.tenant.id.as_str());
    let uncached = usage
        .prompt_tokens
        .saturating_sub(usage.cached_tokens + usage.cache_write_tokens);
    for (kind, n) in [
        ("prompt", uncached),
        ("cached", usage.cached_tokens),
        ("cache_write", usage.cache_write_tokens),
        ("completion", usage.completion_tokens),
    ] {
        counter_add(
            Metric::TokensTotal,
            &[("tenant", tenant.as_str()), ("type", kind)],
            n,
        );
    }
    if gw.config.telemetry.feature_labels {
        let labels = [
            ("tenant", tenant.as_str()),
            ("feature", ctx.feature.as_str()),
        ];
        counter_add(Metric::CostNanosTotal, &labels, charged.get());
    } else {
        counter_add(
            Metric::CostNanosTotal,
            &[("tenant", tenant.as_str())],
            charged.get(),
        );
    }
    // Per provider too, without the tenant: what its prompt cache is worth.
    for (kind, n) in [
        ("prompt", uncached),
        ("cached", usage.cached_tokens),
        ("cache_write", usage.cache_write_tokens),
    ] {
        counter_add(
            Metric::ProviderPromptTokensTotal,
            &[("provider", provider), ("type", kind)],
            n,
        );
    }
}
