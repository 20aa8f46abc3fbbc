//! One attempt as a value: the hold it leaves under, its journal intent and
//! its ledger row, from `journal` to the one verb that ends it.
//!
//! An attempt is journaled before it is sent (`journal`: if the gateway dies
//! with it in flight, replay writes the intent's row, charged its hold), then
//! sent (`send`), then ended by exactly one of:
//! - `settle`: it succeeded; its hold and row go to settlement (`settle.rs`),
//!   which charges what the answer's usage prices;
//! - `charge_hold`: it may have been billed and reported no usage: charged
//!   its whole hold, and the next attempt needs a hold of its own (`renew`
//!   on `Hold`);
//! - `give_back`: the provider did not bill it: a row at no charge, and the
//!   hold stays for the next attempt;
//! - `end`: the request is over without a further attempt (the caller's
//!   mistake, a local one): a row at no charge, the hold released.
//!
//! Each verb consumes the attempt; one dropped without a verb (a bug) still
//! writes its row, so no attempt ends without one.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::context::RequestContext;
use super::dispatch::Dispatch;
use super::hold::Hold;
use super::record::{self, AttemptRow};
use crate::clock::{elapsed, monotonic, whole_ms};
use crate::config::{Provider, Target};
use crate::ledger::{AttemptStatus, UsageKind};
use crate::money::Nanos;
use crate::provider::adapters::Adapter;
use crate::provider::call::{self, CallError, CallHeaders, Opened};
use crate::provider::classify::{Class, classify_error, classify_status};
use crate::state::Gateway;
use crate::telemetry::metrics::{Metric, counter_add, observe_duration};
use crate::telemetry::traces::{self, Span, SpanContext, SpanKind};
use crate::tenant::ReservationGuard;

/// Where an attempt's rows are written.
#[derive(Clone, Copy)]
pub struct Ledger<'a> {
    pub gw: &'a Gateway,
    pub ctx: &'a RequestContext,
    pub route: &'a str,
}

pub struct Attempt<'a> {
    ledger: Ledger<'a>,
    hold: &'a mut Hold,
    /// `None` once a verb has written or handed it on.
    row: Option<AttemptRow>,
    /// The amount the hold covered when the attempt left.
    reserved: Nanos,
    started: Instant,
}

/// A successful attempt's hold and row, for settlement.
pub struct ToSettle {
    pub guard: ReservationGuard,
    pub row: AttemptRow,
    pub started: Instant,
}

impl<'a> Attempt<'a> {
    /// Journals the attempt's intent (durable before it is sent) under the
    /// hold in place.
    pub async fn journal(
        ledger: Ledger<'a>,
        hold: &'a mut Hold,
        target: &Target,
        number: u32,
    ) -> Attempt<'a> {
        let reserved = hold.amount();
        let mut row = AttemptRow::new(target.provider.as_str(), &target.model, number, 0);
        row.event_id = record::journal_intent(
            ledger.gw,
            ledger.ctx,
            ledger.route,
            (reserved, hold.cost()),
            target,
            number,
        )
        .await;
        Attempt {
            ledger,
            hold,
            row: Some(row),
            reserved,
            started: monotonic(),
        }
    }

    /// Sends `body` to the target and reads a complete answer, timed as
    /// upstream time and classified once.
    pub async fn send(
        &mut self,
        dispatch: &Dispatch<'_>,
        (adapter, provider, target): (Adapter, &Provider, &Target),
        body: Bytes,
    ) -> (Class, Result<Opened, CallError>) {
        self.started = monotonic();
        let number = self.number();
        let result = call(
            dispatch,
            (adapter, provider, target),
            body,
            (number, self.reserved),
        )
        .await;
        let latency = elapsed(self.started);
        let class = match &result {
            Ok(Opened::Complete(reply)) => classify_status(reply.status),
            Ok(Opened::Stream { .. }) => Class::Success,
            Err(error) => classify_error(error),
        };
        observe_attempt(target, class, answered(&result), latency);
        if let Some(row) = &mut self.row {
            row.latency_ms = whole_ms(latency);
            row.upstream_status = answered(&result);
        }
        (class, result)
    }

    /// The attempt's number on this request (1 for the first).
    pub fn number(&self) -> u32 {
        self.row.as_ref().map_or(0, |row| row.number)
    }

    /// The request it is an attempt of, for the log.
    pub fn request_id(&self) -> &str {
        self.ledger.ctx.request_id.as_str()
    }

    /// It succeeded with `status`: its hold and row go to settlement, which
    /// writes the row (`None`: no hold was in place, a broken invariant; the
    /// row is written at no charge).
    pub fn settle(mut self, status: AttemptStatus) -> Option<ToSettle> {
        let mut row = self.row.take()?;
        row.status = status;
        let Some(guard) = self.hold.take() else {
            row.error = Some("an attempt left without a hold".to_owned());
            self.write(row);
            return None;
        };
        Some(ToSettle {
            guard,
            row,
            started: self.started,
        })
    }

    /// It may have been billed and no usage says what: charged its whole
    /// hold, marked `unknown` for reconciliation.
    pub async fn charge_hold(mut self, error: String) {
        let Some(mut row) = self.row.take() else {
            return;
        };
        row.error = Some(error);
        row.cost = self.hold.cost();
        let tokens = self.hold.held_tokens();
        let Some(guard) = self.hold.take() else {
            // invariant: an attempt leaves only under a hold; its row is never lost.
            self.write(row);
            return;
        };
        let amount = guard.granted().amount;
        row.usage_kind = UsageKind::Unknown;
        let labels = [("provider", row.provider.as_str())];
        counter_add(Metric::UnknownOutcomesTotal, &labels, 1);
        let Ledger { gw, ctx, route } = self.ledger;
        record::settle_tokens(gw, ctx, route, guard, amount, tokens, row).await;
    }

    /// The provider did not bill it: a row at no charge; the hold stays for
    /// the next attempt.
    pub fn give_back(mut self, status: AttemptStatus, error: String) {
        if let Some(mut row) = self.row.take() {
            row.status = status;
            row.error = Some(error);
            self.write(row);
        }
    }

    /// The request ends here: a row at no charge, the hold released.
    pub fn end(mut self, status: AttemptStatus, error: String) {
        if let Some(mut row) = self.row.take() {
            row.status = status;
            row.error = Some(error);
            self.write(row);
        }
        self.hold.release();
    }

    fn write(&self, row: AttemptRow) {
        let Ledger { gw, ctx, route } = self.ledger;
        record::record_attempt(gw, ctx, route, self.reserved, row);
    }
}

impl Drop for Attempt<'_> {
    /// An attempt no verb ended is a bug, but never a lost row: written at no
    /// charge, its intent's event id keeping replay from writing another.
    fn drop(&mut self) {
        if let Some(mut row) = self.row.take() {
            tracing::error!(request_id = %self.ledger.ctx.request_id, "An attempt ended without an outcome; recording it.");
            row.status = AttemptStatus::LocalError;
            row.error = Some("the attempt ended without an outcome".to_owned());
            self.write(row);
        }
    }
}

/// One upstream call and its complete answer read, timed as upstream time;
/// with traces on, it is the span `(attempt number, reserved)` describe.
async fn call(
    dispatch: &Dispatch<'_>,
    (adapter, provider, target): (Adapter, &Provider, &Target),
    body: Bytes,
    (number, reserved): (u32, Nanos),
) -> Result<Opened, CallError> {
    let span = dispatch.ctx.span.as_ref().map(SpanContext::child);
    let (started, started_ns) = (monotonic(), traces::now_unix_ns());
    let traceparent = span.as_ref().map(SpanContext::traceparent);
    let url = adapter.url(provider, dispatch.request.api());
    let result = send(dispatch, provider, url, body, traceparent.as_deref()).await;
    let result = read_complete(adapter, result, &target.model);
    dispatch.meter.add_upstream(elapsed(started));
    if let Some(context) = span {
        let span = attempt_span(context, started_ns, target, number, reserved, &result);
        dispatch.gw.tracer.record(span);
    }
    result
}

/// Sends the body to `url`, bounded by the provider's timeouts and the
/// request's deadline; `traceparent`: the attempt's span, when traces are
/// exported (else the caller's goes on unchanged).
async fn send(
    dispatch: &Dispatch<'_>,
    provider: &Provider,
    url: &str,
    body: Bytes,
    traceparent: Option<&str>,
) -> Result<Opened, CallError> {
    let headers = CallHeaders {
        traceparent: traceparent.or(dispatch.ctx.traceparent.as_deref()),
        anthropic: &dispatch.ctx.anthropic_headers,
    };
    let client = dispatch
        .clients
        .get(provider.connect_timeout_ms, provider.tls.as_ref());
    let call = async {
        if dispatch.request.stream() {
            call::open_stream(&client, provider, url, body, &headers).await
        } else {
            call::post(&client, provider, url, body, &headers)
                .await
                .map(Opened::Complete)
        }
    };
    actix_rt::time::timeout(dispatch.time_left(), call)
        .await
        .unwrap_or(Err(CallError::Deadline(
            dispatch.gw.config.server.request_timeout_ms,
        )))
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
