//! The Messages door (Anthropic's API, as Claude Code and the Anthropic SDKs
//! call it): `POST /v1/messages` through the one pipeline (`chat::serve`),
//! `POST /v1/messages/count_tokens` from the gateway's estimator, and
//! Anthropic's 404 for any other path under `/v1/messages/`. Every error
//! leaves in Anthropic's envelope; query strings (`?beta=true`) are ignored.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;

use super::chat::{observe_request, request_context, serve};
use super::extract::{AnthropicAuth, read_body};
use super::headers::rate_headers;
use crate::clock::monotonic;
use crate::error::{ApiError, ErrorCode};
use crate::ids::RequestId;
use crate::ledger::Api;
use crate::pipeline::RequestMeter;
use crate::pipeline::count::{Counted, count_tokens as count};
use crate::provider::clients::UpstreamClients;
use crate::state::Gateway;

pub async fn messages(
    req: HttpRequest,
    gw: web::Data<Gateway>,
    clients: web::Data<UpstreamClients>,
    auth: AnthropicAuth,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    serve(req, gw, clients, auth.0, payload, Api::Messages)
        .await
        .map_err(ApiError::in_anthropic_envelope)
}

pub async fn count_tokens(
    req: HttpRequest,
    gw: web::Data<Gateway>,
    auth: AnthropicAuth,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let started = monotonic();
    let meter = RequestMeter::default();
    let request_id = RequestId::generate();
    let result = async {
        let body = read_body(&req, payload, gw.config.server.body_limit_bytes).await?;
        let ctx = request_context(&req, &auth.0, Api::Messages, request_id.clone())?;
        count(&gw.clone().into_inner(), &ctx, &meter, &body).await
    }
    .await;
    let latency = crate::clock::elapsed(started);
    let latency_ms = crate::clock::whole_ms(latency);
    let status = result.as_ref().map_or_else(|e| e.code().as_str(), |_| "ok");
    observe_request(&meter, Some(status), latency);
    let route = meter.route_label();
    tracing::info!(request_id = %request_id, tenant = %auth.0.tenant.id, key = %auth.0.key.id, route, status, latency_ms, "Tokens counted.");
    let Counted { input_tokens, rate } = result.map_err(ApiError::in_anthropic_envelope)?;
    let mut response = HttpResponse::Ok();
    for header in rate_headers(&rate) {
        response.insert_header(header);
    }
    Ok(response.json(json!({ "input_tokens": input_tokens })))
}

/// Any other path under `/v1/messages/`.
pub async fn unknown() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(ErrorCode::NotFound, "no such endpoint").in_anthropic_envelope())
}
