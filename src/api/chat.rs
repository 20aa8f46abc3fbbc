//! The doors' one way through the pipeline: `POST /v1/chat/completions`,
//! `POST /v1/embeddings`, `POST /v1/responses` here, and `POST /v1/messages`
//! from `messages.rs`. A door only translates its wire format to the
//! pipeline's request and the outcome back (`openai/responses.rs` for
//! Responses, `anthropic/` for Messages, unless the answer is already in it).

use std::time::Duration;

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder, web};
use tracing::Instrument;

use super::extract::{TenantAuth, read_body};
use super::headers;
use crate::anthropic;
use crate::api::headers::{rate_headers, token_headers};
use crate::audit::{Audited, Capture};
use crate::clock::{elapsed, monotonic, whole_ms};
use crate::error::ApiError;
use crate::ids::RequestId;
use crate::ledger::Api;
use crate::openai::chat::ResponsesBody;
use crate::openai::responses::{self, Echo, Identity, StreamMapper};
use crate::pipeline::chat::OutcomeBody;
use crate::pipeline::sse::SseSplitter;
use crate::pipeline::stream::ClientBody;
use crate::pipeline::{RequestContext, RequestMeter, handle_chat};
use crate::provider::clients::UpstreamClients;
use crate::state::Gateway;
use crate::stored::{Keep, ResponseStore};
use crate::telemetry::metrics::{Metric, counter_add, observe_duration};
use crate::telemetry::traces::{self, Span, SpanContext, SpanKind};

pub async fn chat_completions(
    req: HttpRequest,
    gw: web::Data<Gateway>,
    clients: web::Data<UpstreamClients>,
    auth: TenantAuth,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    serve(req, gw, clients, auth, payload, Api::Chat).await
}

pub async fn responses(
    req: HttpRequest,
    gw: web::Data<Gateway>,
    clients: web::Data<UpstreamClients>,
    auth: TenantAuth,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    serve(req, gw, clients, auth, payload, Api::Responses).await
}

pub async fn embeddings(
    req: HttpRequest,
    gw: web::Data<Gateway>,
    clients: web::Data<UpstreamClients>,
    auth: TenantAuth,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    serve(req, gw, clients, auth, payload, Api::Embeddings).await
}

pub(super) async fn serve(
    req: HttpRequest,
    gw: web::Data<Gateway>,
    clients: web::Data<UpstreamClients>,
    auth: TenantAuth,
    payload: web::Payload,
    api: Api,
) -> Result<HttpResponse, ApiError> {
    let started = monotonic();
    let meter = RequestMeter::default();
    let request_id = RequestId::generate();
    let client_request_id = headers::client_request_id(&req);
    let echoed = headers::echoed_request_id(client_request_id.as_deref(), &request_id);
    let span = tracing::info_span!("request", api = api.as_str(), request_id = %request_id, tenant = %auth.tenant.id);
    let trace_id = headers::traceparent(&req).map(|(id, _)| id);
    meter.trace_id.borrow_mut().clone_from(&trace_id);
    let (trace, started_ns) = (request_span(&gw, &req), traces::now_unix_ns());
    let mut door = Door::Same;
    let mut audit = None;
    let mut keep = None;
    let result = async {
        let body = read_body(&req, payload, gw.config.server.body_limit_bytes).await?;
        if auth.tenant.audit_payloads {
            audit = Some(Capture::new(
                &gw.audit,
                &gw.clock,
                &auth,
                api,
                &request_id,
                body.clone(),
            ));
        }
        let (body, native) = match api {
            Api::Responses => {
                let now_ms = gw.clock.now_ms();
                let expanded = gw
                    .responses
                    .expand(auth.tenant.id.as_str(), body, now_ms)
                    .await?;
                keep = expanded.keep;
                let translation = responses::translate(expanded.request, expanded.body)?;
                let identity = Identity {
                    id: format!("resp_{request_id}"),
                    created_at: gw.clock.now_ms() / 1000,
                };
                door = Door::Responses(identity, translation.echo);
                // The caller's body rides along for a provider that speaks Responses.
                let native = ResponsesBody {
                    native: translation.native,
                    original: translation.original,
                    gap: translation.gap,
                    screen: translation.screen,
                    asks_reasoning: translation.asks_reasoning,
                    client_session: translation.client_session,
                    untranslated: translation.untranslated,
                };
                (bytes::Bytes::from(translation.chat), Some(native))
            }
            Api::Messages => {
                door = Door::Messages {
                    id: format!("msg_{request_id}"),
                };
                (body, None)
            }
            Api::Chat | Api::Embeddings => (body, None),
        };
        let mut ctx = request_context(&req, &auth, api, request_id.clone())?;
        ctx.span.clone_from(&trace);
        let gw = gw.clone().into_inner();
        handle_chat(&gw, &clients, &ctx, &meter, &body, native).await
    }
    .instrument(span)
    .await;

    let latency = elapsed(started);
    access_log(&request_id, &auth, &meter, &result, whole_ms(latency));
    if let Some(context) = trace {
        let span = request_span_of(context, started_ns, api, &auth, &meter, &result);
        gw.tracer.record(span);
    }
    let answer = Answer {
        echoed: HeaderValue::from_str(&echoed).ok(),
        door,
        audit,
        stored: keep.map(|keep| (gw.responses.clone(), keep)),
    };
    respond(result, &meter, latency, answer).await
}

/// What the answer carries beside the outcome: the request id echoed, the
/// door's format, and the audit capture of an opted-in tenant's call.
struct Answer {
    echoed: Option<HeaderValue>,
    door: Door,
    audit: Option<Capture>,
    /// Where a Responses answer is kept, unless the caller sent `store: false`.
    stored: Option<(ResponseStore, Keep)>,
}

/// The HTTP answer to a request the pipeline finished, in its door's format.
async fn respond(
    result: Result<crate::pipeline::ChatOutcome, ApiError>,
    meter: &RequestMeter,
    latency: Duration,
    answer: Answer,
) -> Result<HttpResponse, ApiError> {
    match result {
        Ok(outcome) => {
            let status = if outcome.degraded { "degraded" } else { "ok" };
            // A stream's final status is known when it ends: its relay counts it.
            let streamed = matches!(outcome.body, OutcomeBody::Stream { .. });
            observe_request(meter, (!streamed).then_some(status), latency);
            let response = outcome_headers(&outcome, meter, answer.echoed.clone());
            Ok(answer_body(response, outcome, answer).await)
        }
        Err(mut error) => {
            observe_request(meter, Some(error.code().as_str()), latency);
            if let Some(audit) = answer.audit {
                let status = actix_web::ResponseError::status_code(&error).as_u16();
                let anthropic = matches!(answer.door, Door::Messages { .. });
                audit.finish(status, None, error.wire_body(anthropic).into(), false);
            }
            if let Some(value) = answer.echoed {
                error = error.with_header(HeaderName::from_static(headers::REQUEST_ID), value);
            }
            Err(error)
        }
    }
}

/// The headers every answer carries: who served it, how, and what is left.
fn outcome_headers(
    outcome: &crate::pipeline::ChatOutcome,
    meter: &RequestMeter,
    echoed: Option<HeaderValue>,
) -> HttpResponseBuilder {
    let mut response = HttpResponse::Ok();
    if let Some(value) = echoed {
        response.insert_header((HeaderName::from_static(headers::REQUEST_ID), value));
    }
    response
        .insert_header((headers::PROVIDER, outcome.provider.as_str()))
        .insert_header((headers::MODEL, outcome.model.as_str()));
    if outcome.degraded {
        response.insert_header((headers::DEGRADED, "true"));
    }
    let removed = meter.removed_tools.borrow().join(", ");
    if !removed.is_empty() {
        response.insert_header((headers::REMOVED_TOOLS, removed));
    }
    if let Some(cache) = outcome.cache {
        response.insert_header((headers::CACHE, cache));
    }
    if let Some(max_tokens) = outcome.clamped_max_tokens {
        response.insert_header((headers::MAX_TOKENS_CLAMPED, max_tokens.to_string()));
    }
    for header in rate_headers(&outcome.rate) {
        response.insert_header(header);
    }
    for header in outcome.tokens.iter().flat_map(token_headers) {
        response.insert_header(header);
    }
    response
}

/// The answer's body in its door's format: whole (stored and audited before
/// it is answered) or streamed (stored and audited as it passes).
async fn answer_body(
    mut response: HttpResponseBuilder,
    outcome: crate::pipeline::ChatOutcome,
    answer: Answer,
) -> HttpResponse {
    let Answer {
        door,
        audit,
        stored,
        ..
    } = answer;
    match outcome.body {
        OutcomeBody::Complete {
            body,
            cost,
            remaining,
        } => {
            response.content_type("application/json");
            response.insert_header((headers::COST, cost.to_string()));
            if let Some(remaining) = remaining {
                response.insert_header((headers::BUDGET_REMAINING, remaining.to_string()));
            }
            let body = door.complete(&body, outcome.native);
            // Stored before it is answered: the next turn may name it at once.
            if let Some((store, keep)) = stored
                && let Ok(response) = serde_json::from_slice::<serde_json::Value>(&body)
            {
                store.save(&keep, &response).await;
            }
            if let Some(audit) = audit {
                audit.finish(200, outcome.cache, body.clone(), false);
            }
            response.body(body)
        }
        OutcomeBody::Stream {
            body,
            prompt_tokens,
        } => {
            response
                .content_type("text/event-stream")
                .insert_header(("cache-control", "no-cache"));
            let door = if outcome.native { Door::Same } else { door };
            let mut events = door.stream(body, prompt_tokens);
            if let Some((store, keep)) = stored {
                events = crate::stored::relay(events, store, keep);
            }
            match audit {
                Some(audit) => response.streaming(Audited::new(events, audit, outcome.cache)),
                None => response.streaming(events),
            }
        }
    }
}

/// The request's span, when traces are exported: under the caller's
/// `traceparent` if it sent one.
fn request_span(gw: &Gateway, req: &HttpRequest) -> Option<SpanContext> {
    if !gw.tracer.enabled() {
        return None;
    }
    let caller = headers::traceparent(req);
    let parent = caller.as_ref().and_then(|(trace_id, value)| {
        let span_id = value.split('-').nth(2)?;
        Some((trace_id.as_str(), span_id))
    });
    Some(SpanContext::request(parent))
}

/// The finished request as a server span with the GenAI attributes (never
/// the prompt or the answer).
fn request_span_of(
    context: SpanContext,
    started_ns: u64,
    api: Api,
    auth: &TenantAuth,
    meter: &RequestMeter,
    result: &Result<crate::pipeline::ChatOutcome, ApiError>,
) -> Span {
    let route = meter.route_label();
    let operation = traces::operation_name(api);
    let mut span = Span {
        context,
        name: format!("{operation} {route}"),
        kind: SpanKind::Server,
        start_unix_ns: started_ns,
        end_unix_ns: traces::now_unix_ns(),
        attributes: Vec::with_capacity(12),
        error: result.as_ref().err().map(|e| e.code().as_str().to_owned()),
    };
    span.text("gen_ai.operation.name", operation)
        .text("gen_ai.request.model", route.clone())
        .text("tollgate.tenant", auth.tenant.id.to_string())
        .text("tollgate.key", auth.key.id.to_string())
        .text("tollgate.route", route);
    if let Ok(outcome) = result {
        span.text("gen_ai.response.model", outcome.model.clone())
            .text("gen_ai.provider.name", outcome.provider.clone());
        if let OutcomeBody::Complete { cost, .. } = &outcome.body {
            span.int("tollgate.charge_nanos", cost.get());
        }
    }
    if let Some((input, output)) = meter.usage.get() {
        span.int("gen_ai.usage.input_tokens", input)
            .int("gen_ai.usage.output_tokens", output);
    }
    span
}

/// Who is asking, as the pipeline reads it from the request's headers.
pub(super) fn request_context(
    req: &HttpRequest,
    auth: &TenantAuth,
    api: Api,
    request_id: RequestId,
) -> Result<RequestContext, ApiError> {
    let trace = headers::traceparent(req);
    Ok(RequestContext {
        tenant: auth.tenant.clone(),
        key: auth.key.clone(),
        feature: headers::feature(req)?,
        end_user_header: headers::end_user(req),
        end_user: None,
        session: headers::session(req),
        api,
        request_id,
        client_request_id: headers::client_request_id(req),
        trace_id: trace.as_ref().map(|(id, _)| id.clone()),
        traceparent: trace.map(|(_, value)| value),
        span: None,
        cache_bypass: headers::cache_bypass(req)?,
        complexity: headers::complexity(req)?,
        anthropic_headers: match api {
            Api::Messages => headers::anthropic(req),
            Api::Chat | Api::Responses | Api::Embeddings => Vec::new(),
        },
    })
}

/// Request metrics; `status`, if the request is over, counts it.
pub(super) fn observe_request(meter: &RequestMeter, status: Option<&str>, latency: Duration) {
    let route = meter.route_label();
    if let Some(status) = status {
        counter_add(
            Metric::RequestsTotal,
            &[("route", route.as_str()), ("status", status)],
            1,
        );
    }
    let labels = [("route", route.as_str())];
    observe_duration(Metric::RequestDurationSeconds, &labels, latency);
    observe_duration(
        Metric::GatewayOverheadSeconds,
        &labels,
        meter.overhead(latency),
    );
}

/// One line per request: who, which route and provider, the outcome, the latency.
/// Never the key, never the prompt.
fn access_log(
    request_id: &RequestId,
    auth: &TenantAuth,
    meter: &RequestMeter,
    result: &Result<crate::pipeline::ChatOutcome, ApiError>,
    latency_ms: u64,
) {
    let route = meter.route_label();
    let trace_id = meter.trace_id.borrow().clone().unwrap_or_default();
    match result {
        Ok(outcome) => {
            let cost = match &outcome.body {
                OutcomeBody::Complete { cost, .. } => cost.to_string(),
                OutcomeBody::Stream { .. } => "stream".to_owned(),
            };
            tracing::info!(request_id = %request_id, trace_id, tenant = %auth.tenant.id, key = %auth.key.id, route, provider = %outcome.provider, model = %outcome.model, status = "ok", cost, latency_ms, "Request served.");
        }
        Err(error) => {
            // The reason names a field or a limit, never the prompt.
            tracing::info!(request_id = %request_id, trace_id, tenant = %auth.tenant.id, key = %auth.key.id, route, status = error.code().as_str(), reason = error.message(), latency_ms, "Request refused.");
        }
    }
}

/// How a door's answer leaves: as the pipeline's (OpenAI chat, or already in
/// the door's API), or translated.
enum Door {
    Same,
    Responses(Identity, Echo),
    Messages { id: String },
}

type Chunk = Result<bytes::Bytes, std::io::Error>;

/// A door's stream mapper: one chat SSE event's `data` in, the door's events out.
type DataMapper = Box<dyn FnMut(&[u8]) -> Vec<u8>>;

impl Door {
    /// `native`: the body is already in the door's API.
    fn complete(&self, body: &bytes::Bytes, native: bool) -> bytes::Bytes {
        match self {
            _ if native => body.clone(),
            Door::Same => body.clone(),
            Door::Responses(identity, echo) => responses::to_response(body, identity, echo),
            Door::Messages { id } => anthropic::response::to_message(body, id),
        }
    }

    fn stream(
        self,
        receiver: ClientBody,
        prompt_tokens: u64,
    ) -> std::pin::Pin<Box<dyn futures_util::Stream<Item = Chunk>>> {
        let chunks = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        });
        let mut on_data: DataMapper = match self {
            Door::Same => return Box::pin(chunks),
            Door::Responses(identity, echo) => {
                let mut mapper = StreamMapper::new(identity, echo);
                Box::new(move |data| mapper.on_data(data))
            }
            Door::Messages { id } => {
                let mut mapper = anthropic::stream::StreamMapper::new(id, prompt_tokens);
                Box::new(move |data| mapper.on_data(data))
            }
        };
        let mut splitter = SseSplitter::default();
        Box::pin(futures_util::StreamExt::map(chunks, move |chunk| {
            let bytes = chunk?;
            splitter.push(&bytes);
            let mut out = Vec::new();
            while let Some(event) = splitter.next_event() {
                if let Some(data) = sse_data(&event) {
                    out.extend(on_data(&data));
                }
            }
            Ok(bytes::Bytes::from(out))
        }))
    }
}

/// The joined `data:` lines of one SSE event.
fn sse_data(event: &[u8]) -> Option<Vec<u8>> {
    let mut data: Option<Vec<u8>> = None;
    for line in event.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(rest) = line.strip_prefix(b"data:") {
            let joined = data.get_or_insert_with(Vec::new);
            if !joined.is_empty() {
                joined.push(b'\n');
            }
            joined.extend_from_slice(rest.strip_prefix(b" ").unwrap_or(rest));
        }
    }
    data
}
