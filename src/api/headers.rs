//! Request labels read from headers, and the gateway's response headers.

use actix_web::HttpRequest;
use actix_web::http::header::{HeaderName, HeaderValue};

use crate::tenant::{RateDecision, TokenWindow};

use crate::error::ApiError;
use crate::ids::{FEATURE_RULE, RequestId, is_valid_feature};
use crate::routing::Complexity;

pub const REQUEST_ID: &str = "x-request-id";
pub const FEATURE: &str = "x-tollgate-feature";
pub const END_USER: &str = "x-tollgate-end-user";
pub const PROVIDER: &str = "x-tollgate-provider";
pub const MODEL: &str = "x-tollgate-model";
pub const COST: &str = "x-tollgate-cost";
pub const BUDGET_REMAINING: &str = "x-tollgate-budget-remaining";
pub const MAX_TOKENS_CLAMPED: &str = "x-tollgate-max-tokens-clamped";
pub const CACHE: &str = "x-tollgate-cache";
pub const DEGRADED: &str = "x-tollgate-degraded";
/// Provider-run tools taken out of the request's offer (they bill per use and no route prices them).
pub const REMOVED_TOOLS: &str = "x-tollgate-removed-tools";
pub const COMPLEXITY: &str = "x-tollgate-complexity";

const MAX_LABEL_LEN: usize = 128;

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// `X-Tollgate-Feature`, default `unknown`. It becomes a ledger column and a
/// report key, so it is limited to a plain alphabet.
pub fn feature(req: &HttpRequest) -> Result<String, ApiError> {
    let Some(value) = header(req, FEATURE)
        .map(str::trim)
        .filter(|v| !v.is_empty())
    else {
        return Ok("unknown".to_owned());
    };
    if is_valid_feature(value) {
        Ok(value.to_owned())
    } else {
        Err(ApiError::invalid_request(
            "X-Tollgate-Feature",
            FEATURE_RULE,
        ))
    }
}

/// `X-Tollgate-End-User`, if sent (checked where the tier is known).
pub fn end_user(req: &HttpRequest) -> Option<String> {
    header(req, END_USER).map(str::to_owned)
}

/// The agent run a request belongs to: `X-Tollgate-Session`, else the id
/// the agents send themselves (Claude Code's `X-Claude-Code-Session-Id`,
/// Codex's `session-id`). Past the end-user length cap it is kept as a
/// stable hash; one with control characters is no id.
pub fn session(req: &HttpRequest) -> Option<String> {
    let id = SESSION_HEADERS
        .iter()
        .filter_map(|name| header(req, name))
        .map(str::trim)
        .find(|id| !id.is_empty())?;
    crate::pipeline::end_user::kept_id(id)
}

/// Where a session id is read, in order.
const SESSION_HEADERS: [&str; 3] = [
    "x-tollgate-session",
    "x-claude-code-session-id",
    "session-id",
];

/// `X-Tollgate-Complexity`: `simple`, `moderate` or `complex`, if sent.
pub fn complexity(req: &HttpRequest) -> Result<Option<Complexity>, ApiError> {
    match header(req, COMPLEXITY)
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        None => Ok(None),
        Some(value) => Complexity::parse(value).map(Some).ok_or_else(|| {
            ApiError::invalid_request(
                "X-Tollgate-Complexity",
                "must be simple, moderate or complex",
            )
        }),
    }
}

/// `X-Tollgate-Cache: bypass`: the answer depends on live data, so no
/// cache may answer it (nor keep its answer for others).
pub fn cache_bypass(req: &HttpRequest) -> Result<bool, ApiError> {
    match header(req, CACHE).map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(false),
        Some(value) if value.eq_ignore_ascii_case("bypass") => Ok(true),
        Some(_) => Err(ApiError::invalid_request(
            "X-Tollgate-Cache",
            "the only value a request may send is `bypass`",
        )),
    }
}

/// The caller's own request id, if it is a sane one.
pub fn client_request_id(req: &HttpRequest) -> Option<String> {
    header(req, REQUEST_ID)
        .filter(|v| {
            !v.is_empty() && v.len() <= MAX_LABEL_LEN && v.bytes().all(|b| b.is_ascii_graphic())
        })
        .map(str::to_owned)
}

/// W3C `traceparent`: `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`.
pub fn traceparent(req: &HttpRequest) -> Option<(String, String)> {
    let value = header(req, "traceparent")?.trim();
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let valid = parts.len() == 4
        && hex(parts[0], 2)
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1].bytes().any(|b| b != b'0');
    valid.then(|| (parts[1].to_ascii_lowercase(), value.to_owned()))
}

/// The caller's `anthropic-version` and `anthropic-beta` (several beta
/// headers joined, as Anthropic reads them), for Anthropic upstreams.
pub fn anthropic(req: &HttpRequest) -> Vec<(&'static str, String)> {
    ["anthropic-version", "anthropic-beta"]
        .into_iter()
        .filter_map(|name| {
            let values: Vec<&str> = req
                .headers()
                .get_all(name)
                .filter_map(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .collect();
            (!values.is_empty()).then(|| (name, values.join(",")))
        })
        .collect()
}

/// The id echoed in `X-Request-Id`: the caller's, else the gateway's own.
pub fn echoed_request_id(client: Option<&str>, own: &RequestId) -> String {
    client.map_or_else(|| own.to_string(), str::to_owned)
}

fn response_header(
    name: &'static str,
    value: &dyn std::fmt::Display,
) -> Option<(HeaderName, HeaderValue)> {
    let value = HeaderValue::from_str(&value.to_string()).ok()?;
    Some((HeaderName::from_static(name), value))
}

/// OpenAI's `x-ratelimit-*-tokens` headers.
pub fn token_headers(window: &TokenWindow) -> Vec<(HeaderName, HeaderValue)> {
    [
        response_header("x-ratelimit-limit-tokens", &window.limit),
        response_header("x-ratelimit-remaining-tokens", &window.remaining),
        response_header(
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
        response_header("x-ratelimit-limit-requests", &rate.limit),
        response_header("x-ratelimit-remaining-requests", &rate.remaining),
        response_header(
            "x-ratelimit-reset-requests",
            &format_args!("{}ms", rate.reset_ms),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}
