//! Every error a client can see: one `ErrorCode` table (status, OpenAI `type`,
//! Anthropic `type`, wire `code`, which is also the metric label) and one
//! `ResponseError` impl that renders OpenAI's envelope, or Anthropic's for the
//! Messages door. This is the only place errors are logged.

use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use bytes::Bytes;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidRequest,
    /// The tier caps end users and the request named none.
    EndUserRequired,
    PayloadTooLarge,
    InvalidApiKey,
    /// A key past its `expires_at`.
    KeyExpired,
    InvalidAdminToken,
    ModelNotFound,
    RouteNotAllowed,
    /// An admin blocked the request's end user.
    EndUserBlocked,
    NotFound,
    Conflict,
    RateLimited,
    /// Tokens per minute, or the daily or monthly token limit.
    TokenLimited,
    /// The tenant has its cap of calls in flight (`max_in_flight`).
    TenantInFlightLimited,
    /// The key has its cap of calls in flight.
    KeyInFlightLimited,
    BudgetExceeded,
    /// The upstream refused the request itself (a 4xx other than 429); passed back as is.
    UpstreamRejected,
    ProviderMisconfigured,
    ProviderUnavailable,
    UpstreamFailed,
    Overloaded,
    QuotaUnavailable,
    Internal,
}

/// One error code: its wire `code` (also the metric label), its status, and
/// its `error.type` in OpenAI's envelope and in Anthropic's.
struct Row {
    code: &'static str,
    status: StatusCode,
    openai: &'static str,
    anthropic: &'static str,
}

const fn row(
    code: &'static str,
    status: StatusCode,
    openai: &'static str,
    anthropic: &'static str,
) -> Row {
    Row {
        code,
        status,
        openai,
        anthropic,
    }
}

// OpenAI's and Anthropic's `error.type` values used more than once.
const INVALID: &str = "invalid_request_error";
const PERMISSION: &str = "permission_error";
const RATE: &str = "rate_limit_error";
const SERVER: &str = "server_error";
const OVERLOADED: &str = "overloaded_error";
const AUTH: &str = "authentication_error";

impl ErrorCode {
    /// The table, one line per code. An upstream refusal carries its real
    /// status; `BAD_REQUEST` is only its fallback. A budget refusal is
    /// Anthropic's `billing_error` (its own type for 402), so its SDKs raise a
    /// status error the caller can tell apart from a malformed request.
    #[rustfmt::skip]
    const fn row(self) -> Row {
        use StatusCode as S;
        match self {
            ErrorCode::InvalidRequest        => row("invalid_request",        S::BAD_REQUEST,           INVALID,                INVALID),
            ErrorCode::EndUserRequired       => row("end_user_required",      S::BAD_REQUEST,           INVALID,                INVALID),
            ErrorCode::PayloadTooLarge       => row("payload_too_large",      S::PAYLOAD_TOO_LARGE,     INVALID,                "request_too_large"),
            ErrorCode::InvalidApiKey         => row("invalid_api_key",        S::UNAUTHORIZED,          INVALID,                AUTH),
            ErrorCode::KeyExpired            => row("key_expired",            S::UNAUTHORIZED,          INVALID,                AUTH),
            ErrorCode::InvalidAdminToken     => row("invalid_admin_token",    S::UNAUTHORIZED,          INVALID,                AUTH),
            ErrorCode::ModelNotFound         => row("model_not_found",        S::NOT_FOUND,             INVALID,                "not_found_error"),
            ErrorCode::RouteNotAllowed       => row("model_not_allowed",      S::FORBIDDEN,             PERMISSION,             PERMISSION),
            ErrorCode::EndUserBlocked        => row("end_user_blocked",       S::FORBIDDEN,             PERMISSION,             PERMISSION),
            ErrorCode::NotFound              => row("not_found",              S::NOT_FOUND,             INVALID,                "not_found_error"),
            ErrorCode::Conflict              => row("conflict",               S::CONFLICT,              INVALID,                INVALID),
            ErrorCode::RateLimited           => row("rate_limit_exceeded",    S::TOO_MANY_REQUESTS,     RATE,                   RATE),
            ErrorCode::TokenLimited          => row("token_limit_exceeded",   S::TOO_MANY_REQUESTS,     RATE,                   RATE),
            ErrorCode::TenantInFlightLimited => row("tenant_in_flight_limit_exceeded", S::TOO_MANY_REQUESTS, RATE,            RATE),
            ErrorCode::KeyInFlightLimited    => row("key_in_flight_limit_exceeded", S::TOO_MANY_REQUESTS, RATE,               RATE),
            ErrorCode::BudgetExceeded        => row("budget_exceeded",        S::PAYMENT_REQUIRED,      "insufficient_quota",   "billing_error"),
            ErrorCode::UpstreamRejected      => row("upstream_rejected",      S::BAD_REQUEST,           INVALID,                INVALID),
            ErrorCode::ProviderMisconfigured => row("provider_misconfigured", S::INTERNAL_SERVER_ERROR, SERVER,                 "api_error"),
            ErrorCode::ProviderUnavailable   => row("provider_unavailable",   S::SERVICE_UNAVAILABLE,   SERVER,                 OVERLOADED),
            ErrorCode::UpstreamFailed        => row("upstream_failed",        S::BAD_GATEWAY,           SERVER,                 "api_error"),
            ErrorCode::Overloaded            => row("overloaded",             S::SERVICE_UNAVAILABLE,   SERVER,                 OVERLOADED),
            ErrorCode::QuotaUnavailable      => row("quota_unavailable",      S::SERVICE_UNAVAILABLE,   SERVER,                 OVERLOADED),
            ErrorCode::Internal              => row("internal_error",         S::INTERNAL_SERVER_ERROR, SERVER,                 "api_error"),
        }
    }

    pub const fn status(self) -> StatusCode {
        self.row().status
    }

    /// OpenAI's `error.type`.
    pub const fn openai_type(self) -> &'static str {
        self.row().openai
    }

    /// Anthropic's `error.type`, for the Messages door.
    pub const fn anthropic_type(self) -> &'static str {
        self.row().anthropic
    }

    /// The wire `error.code`, and the `status` label of metrics.
    pub const fn as_str(self) -> &'static str {
        self.row().code
    }
}

/// An error on its way to the client, with the context its response needs.
/// Boxed: it travels in every `Result` of the request path.
#[derive(Debug)]
pub struct ApiError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    code: ErrorCode,
    message: String,
    param: Option<String>,
    status: Option<StatusCode>,
    retry_after_s: Option<u64>,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The requests/min decision, sent as OpenAI's `x-ratelimit-*` headers.
    rate: Option<crate::tenant::RateDecision>,
    /// An upstream's own error body, returned unchanged (in the door's envelope).
    raw_body: Option<Bytes>,
    wire: Wire,
}

/// Whose envelope the error is rendered in: the door's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    OpenAi,
    Anthropic,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError(Box::new(Inner {
            code,
            message: message.into(),
            param: None,
            status: None,
            retry_after_s: None,
            headers: Vec::new(),
            rate: None,
            raw_body: None,
            wire: Wire::OpenAi,
        }))
    }

    pub fn invalid_request(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::InvalidRequest, message).with_param(param)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::Internal, message)
    }

    #[must_use]
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.0.param = Some(param.into());
        self
    }

    #[must_use]
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.0.retry_after_s = Some(seconds.max(1));
        self
    }

    #[must_use]
    pub fn with_rate(mut self, rate: crate::tenant::RateDecision) -> Self {
        self.0.rate = Some(rate);
        self
    }

    #[must_use]
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.0.headers.push((name, value));
        self
    }

    /// Rendered in Anthropic's envelope, as the Messages door answers.
    #[must_use]
    pub fn in_anthropic_envelope(mut self) -> Self {
        self.0.wire = Wire::Anthropic;
        self
    }

    /// An upstream 4xx passed back with its own status and body.
    pub fn upstream_rejected(status: StatusCode, body: Bytes) -> Self {
        let mut error = ApiError::new(
            ErrorCode::UpstreamRejected,
            "the upstream refused the request",
        );
        error.0.status = Some(status);
        error.0.raw_body = Some(body);
        error
    }

    pub fn code(&self) -> ErrorCode {
        self.0.code
    }

    pub fn message(&self) -> &str {
        &self.0.message
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.0.code.as_str(), self.0.message)
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: EnvelopeBody<'a>,
}

#[derive(Serialize)]
struct EnvelopeBody<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    code: &'static str,
    param: Option<&'a str>,
}

impl ApiError {
    /// The OpenAI envelope for this error, as bytes.
    pub fn envelope_json(&self) -> Vec<u8> {
        let e = &self.0;
        let envelope = Envelope {
            error: EnvelopeBody {
                message: &e.message,
                kind: e.code.openai_type(),
                code: e.code.as_str(),
                param: e.param.as_deref(),
            },
        };
        serde_json::to_vec(&envelope).unwrap_or_else(|_| b"{\"error\":{}}".to_vec())
    }

    /// Anthropic's envelope `{"type": "error", "error": {"type", "message"}}`. An
    /// upstream's body already in it passes unchanged; any other (an OpenAI-kind
    /// upstream's refusal) is rewrapped with the type its status means.
    /// The body the caller gets: in Anthropic's envelope, or OpenAI's (an
    /// upstream's own refusal passed through as it came).
    pub fn wire_body(&self, anthropic: bool) -> Vec<u8> {
        let e = &self.0;
        match (anthropic, &e.raw_body) {
            (true, _) => {
                let status = actix_web::ResponseError::status_code(self);
                self.anthropic_envelope_json(status)
            }
            (false, Some(body)) => body.to_vec(),
            (false, None) => self.envelope_json(),
        }
    }

    pub fn anthropic_envelope_json(&self, status: StatusCode) -> Vec<u8> {
        let e = &self.0;
        let (kind, message) = match &e.raw_body {
            None => (e.code.anthropic_type(), e.message.clone()),
            Some(raw) => {
                let parsed: serde_json::Value =
                    serde_json::from_slice(raw).unwrap_or(serde_json::Value::Null);
                if parsed["type"] == "error" && parsed["error"]["type"].is_string() {
                    return raw.to_vec();
                }
                let message = parsed["error"]["message"]
                    .as_str()
                    .map_or_else(|| String::from_utf8_lossy(raw).into_owned(), str::to_owned);
                (anthropic_type_of_status(status), message)
            }
        };
        let envelope =
            serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
        envelope.to_string().into_bytes()
    }
}

/// The `error.type` Anthropic's API answers a status with.
pub fn anthropic_type_of_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.0.status.unwrap_or_else(|| self.0.code.status())
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        let e = &self.0;
        if status.is_server_error() {
            tracing::error!(code = e.code.as_str(), status = status.as_u16(), message = %e.message, "Request failed.");
        } else if e.code == ErrorCode::UpstreamRejected {
            tracing::warn!(
                code = e.code.as_str(),
                status = status.as_u16(),
                "Upstream refused the request."
            );
        } else {
            tracing::debug!(code = e.code.as_str(), status = status.as_u16(), message = %e.message, "Request refused.");
        }
        let mut response = HttpResponse::build(status);
        response.content_type("application/json");
        if let Some(seconds) = e.retry_after_s {
            response.insert_header(("retry-after", seconds.to_string()));
        }
        if e.code == ErrorCode::BudgetExceeded {
            // OpenAI SDKs retry by status unless told otherwise; a budget refusal is final.
            response.insert_header(("x-should-retry", "false"));
        }
        for (name, value) in &e.headers {
            response.insert_header((name.clone(), value.clone()));
        }
        for header in e.rate.iter().flat_map(crate::api::headers::rate_headers) {
            response.insert_header(header);
        }
        response.body(self.wire_body(e.wire == Wire::Anthropic))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_error_renders_the_openai_envelope_with_402() {
        let error = ApiError::new(ErrorCode::BudgetExceeded, "budget exceeded: remaining 1");
        assert_eq!(error.status_code(), StatusCode::PAYMENT_REQUIRED);
        let body: serde_json::Value = serde_json::from_slice(&error.envelope_json()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"error": {
                "message": "budget exceeded: remaining 1",
                "type": "insufficient_quota",
                "code": "budget_exceeded",
                "param": null
            }})
        );
        let response = error.error_response();
        assert_eq!(response.headers().get("x-should-retry").unwrap(), "false");
    }

    #[test]
    fn the_messages_door_renders_anthropic_s_envelope_and_rewraps_openai_refusals() {
        let error =
            ApiError::new(ErrorCode::BudgetExceeded, "budget exceeded").in_anthropic_envelope();
        let response = error.error_response();
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        assert_eq!(response.headers().get("x-should-retry").unwrap(), "false");
        let body: serde_json::Value =
            serde_json::from_slice(&error.anthropic_envelope_json(StatusCode::PAYMENT_REQUIRED))
                .unwrap();
        assert_eq!(
            body,
            serde_json::json!({"type": "error", "error": {"type": "billing_error", "message": "budget exceeded"}})
        );
        let openai = Bytes::from_static(
            br#"{"error":{"message":"bad tool","type":"invalid_request_error"}}"#,
        );
        let rewrapped: serde_json::Value = serde_json::from_slice(
            &ApiError::upstream_rejected(StatusCode::UNPROCESSABLE_ENTITY, openai)
                .anthropic_envelope_json(StatusCode::UNPROCESSABLE_ENTITY),
        )
        .unwrap();
        assert_eq!(
            rewrapped["error"],
            serde_json::json!({"type": "invalid_request_error", "message": "bad tool"})
        );
        let native = Bytes::from_static(
            br#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#,
        );
        let kept = ApiError::upstream_rejected(StatusCode::BAD_REQUEST, native.clone())
            .anthropic_envelope_json(StatusCode::BAD_REQUEST);
        assert_eq!(kept, native.to_vec());
    }

    #[test]
    fn rate_limit_carries_retry_after() {
        let response = ApiError::new(ErrorCode::RateLimited, "slow down")
            .with_retry_after(3)
            .error_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers().get("retry-after").unwrap(), "3");
    }
}
