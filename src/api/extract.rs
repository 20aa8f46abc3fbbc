//! Extractors whose rejections are `ApiError`s, so a client never sees
//! actix-web's plain-text errors: tenant and admin auth, a size-limited body,
//! and JSON / query / path error handlers.

use std::sync::Arc;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use futures_util::future::{LocalBoxFuture, Ready, ready};

use crate::auth;
use crate::directory::{AuthError, KeyRecord, TenantRecord};
use crate::error::{ApiError, ErrorCode};
use crate::state::Gateway;

fn bearer(req: &HttpRequest) -> Option<String> {
    let value = req.headers().get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
}

fn gateway(req: &HttpRequest) -> Result<web::Data<Gateway>, ApiError> {
    req.app_data::<web::Data<Gateway>>()
        .cloned()
        .ok_or_else(|| ApiError::internal("gateway state missing"))
}

/// A caller authenticated by a tenant API key.
pub struct TenantAuth {
    pub tenant: Arc<TenantRecord>,
    pub key: Arc<KeyRecord>,
}

impl FromRequest for TenantAuth {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let gw = gateway(req);
        let token = bearer(req);
        Box::pin(async move {
            authenticate(
                gw?,
                token,
                "missing API key: send `Authorization: Bearer <key>`",
            )
            .await
        })
    }
}

/// A caller where Anthropic's clients call (the Messages door, `GET
/// /v1/models`): the key in `x-api-key` or as a Bearer token, and refusals in
/// Anthropic's envelope when the request is Anthropic's (the Messages door,
/// or `anthropic-version` sent).
pub struct AnthropicAuth(pub TenantAuth);

impl FromRequest for AnthropicAuth {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let gw = gateway(req);
        let token = req
            .headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .or_else(|| bearer(req));
        let anthropic = is_anthropic(req);
        Box::pin(async move {
            let missing =
                "missing API key: send `x-api-key: <key>` or `Authorization: Bearer <key>`";
            match authenticate(gw?, token, missing).await {
                Ok(auth) => Ok(AnthropicAuth(auth)),
                Err(error) if anthropic => Err(error.in_anthropic_envelope()),
                Err(error) => Err(error),
            }
        })
    }
}

/// Whether a request follows Anthropic's API, so its errors use that envelope.
pub fn is_anthropic(req: &HttpRequest) -> bool {
    req.path().starts_with("/v1/messages") || req.headers().contains_key("anthropic-version")
}

async fn authenticate(
    gw: web::Data<Gateway>,
    token: Option<String>,
    missing: &str,
) -> Result<TenantAuth, ApiError> {
    let Some(token) = token else {
        return Err(ApiError::new(ErrorCode::InvalidApiKey, missing));
    };
    match gw.directory.authenticate(&token).await {
        Ok((key, tenant)) => Ok(TenantAuth { tenant, key }),
        Err(AuthError::Storage) => Err(ApiError::new(
            ErrorCode::QuotaUnavailable,
            "key lookup is unavailable; try again shortly",
        )
        .with_retry_after(1)),
        Err(AuthError::Expired) => Err(ApiError::new(
            ErrorCode::KeyExpired,
            "the API key has expired: ask for a new one",
        )),
        Err(error) => Err(ApiError::new(ErrorCode::InvalidApiKey, error.to_string())),
    }
}

/// A caller holding the admin token.
pub struct AdminAuth;

impl FromRequest for AdminAuth {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let result = gateway(req).and_then(|gw| {
            let Some(expected) = &gw.config.admin_token else {
                return Err(ApiError::new(
                    ErrorCode::InvalidAdminToken,
                    "the admin API is disabled: set TOLLGATE_ADMIN_TOKEN",
                ));
            };
            match bearer(req) {
                Some(token) if auth::tokens_equal(&token, expected) => Ok(AdminAuth),
                _ => Err(ApiError::new(
                    ErrorCode::InvalidAdminToken,
                    "invalid admin token",
                )),
            }
        });
        ready(result)
    }
}

/// Reads the body up to `limit` bytes; beyond it, 413 without reading the rest.
pub async fn read_body(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("the body exceeds {limit} bytes"),
        )
    };
    let declared = req
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::invalid_request("body", format!("reading the body failed: {e}"))
        })?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// JSON bodies are read as JSON whatever their `Content-Type` says: `curl
/// -d` sends a form type, and the body is what decides.
pub fn json_config() -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(64 * 1024)
        .content_type_required(false)
        .content_type(|_| true)
        .error_handler(|error, _req| {
            ApiError::invalid_request("body", format!("invalid JSON body: {error}")).into()
        })
}

pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|error, _req| {
        ApiError::invalid_request("query", format!("invalid query string: {error}")).into()
    })
}

pub fn path_config() -> web::PathConfig {
    web::PathConfig::default().error_handler(|error, _req| {
        ApiError::invalid_request("path", format!("invalid path: {error}")).into()
    })
}
