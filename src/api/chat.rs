//! `POST /v1/chat/completions`.

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use tracing::Instrument;

use super::extract::{TenantAuth, read_body};
use super::headers;
use crate::api::headers::{rate_headers, token_headers};
use crate::clock::{elapsed_ms, monotonic};
use crate::error::ApiError;
use crate::ids::RequestId;
use crate::pipeline::chat::OutcomeBody;
use crate::pipeline::{RequestContext, RequestMeter, handle_chat};
use crate::provider::clients::UpstreamClients;
use crate::state::Gateway;
use crate::telemetry::metrics::{Metric, counter_add, observe_ms};

pub async fn chat_completions(
    req: HttpRequest,
    gw: web::Data<Gateway>,
    clients: web::Data<UpstreamClients>,
    auth: TenantAuth,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let started = monotonic();
    let meter = RequestMeter::default();
    let request_id = RequestId::generate();
    let client_request_id = headers::client_request_id(&req);
    let echoed = headers::echoed_request_id(client_request_id.as_deref(), &request_id);
    let span = tracing::info_span!("chat", request_id = %request_id, tenant = %auth.tenant.id);
    let trace = headers::traceparent(&req);
    let trace_id = trace.as_ref().map(|(id, _)| id.clone());
    meter.trace_id.borrow_mut().clone_from(&trace_id);
    let result = async {
        let body = read_body(&req, payload, gw.config.server.body_limit_bytes).await?;
        let ctx = RequestContext {
            tenant: auth.tenant.clone(),
            key: auth.key.clone(),
            feature: headers::feature(&req)?,
            request_id: request_id.clone(),
            client_request_id,
            trace_id,
            traceparent: trace.map(|(_, value)| value),
            complexity: headers::complexity(&req)?,
        };
        handle_chat(&gw.clone().into_inner(), &clients, &ctx, &meter, &body).await
    }
    .instrument(span)
    .await;

    let latency_ms = elapsed_ms(started);
    access_log(&request_id, &auth, &meter, &result, latency_ms);
    let echoed_value = HeaderValue::from_str(&echoed).ok();
    match result {
        Ok(outcome) => {
            let status = if outcome.degraded { "degraded" } else { "ok" };
            // A stream's final status is known when it ends: its relay counts it.
            let streamed = matches!(outcome.body, OutcomeBody::Stream(_));
            observe_request(&meter, (!streamed).then_some(status), latency_ms);
            let mut response = HttpResponse::Ok();
            if let Some(value) = echoed_value {
                response.insert_header((HeaderName::from_static(headers::REQUEST_ID), value));
            }
            response
                .insert_header((headers::PROVIDER, outcome.provider.as_str()))
                .insert_header((headers::MODEL, outcome.model.as_str()));
            if outcome.degraded {
                response.insert_header((headers::DEGRADED, "true"));
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
                    Ok(response.body(body))
                }
                OutcomeBody::Stream(receiver) => {
                    response
                        .content_type("text/event-stream")
                        .insert_header(("cache-control", "no-cache"));
                    let body = futures_util::stream::unfold(receiver, |mut receiver| async move {
                        receiver.recv().await.map(|item| (item, receiver))
                    });
                    Ok(response.streaming(body))
                }
            }
        }
        Err(mut error) => {
            observe_request(&meter, Some(error.code().as_str()), latency_ms);
            if let Some(value) = echoed_value {
                error = error.with_header(HeaderName::from_static(headers::REQUEST_ID), value);
            }
            Err(error)
        }
    }
}

/// Request metrics; `status`, if the request is over, counts it.
fn observe_request(meter: &RequestMeter, status: Option<&str>, latency_ms: u64) {
    let route = meter.route_label();
    if let Some(status) = status {
        counter_add(
            Metric::RequestsTotal,
            &[("route", route.as_str()), ("status", status)],
            1,
        );
    }
    observe_ms(
        Metric::RequestDurationSeconds,
        &[("route", route.as_str())],
        latency_ms,
    );
    let overhead_ms = latency_ms.saturating_sub(meter.upstream_ms.get());
    observe_ms(
        Metric::GatewayOverheadSeconds,
        &[("route", route.as_str())],
        overhead_ms,
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
                OutcomeBody::Stream(_) => "stream".to_owned(),
            };
            tracing::info!(request_id = %request_id, trace_id, tenant = %auth.tenant.id, key = %auth.key.id, route, provider = %outcome.provider, model = %outcome.model, status = "ok", cost, latency_ms, "Request served.");
        }
        Err(error) => {
            tracing::info!(request_id = %request_id, trace_id, tenant = %auth.tenant.id, key = %auth.key.id, route, status = error.code().as_str(), latency_ms, "Request refused.");
        }
    }
}
