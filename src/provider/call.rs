//! The worker-side upstream call, on the worker's own `awc::Client`.

use std::time::Duration;

use std::pin::Pin;

use actix_web::http::StatusCode;
use actix_web::http::header::HeaderMap;
use awc::error::{ConnectError, PayloadError, SendRequestError};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use crate::clock::monotonic;

use crate::config::{Provider, ProviderKind};
use crate::provider::adapters::anthropic;
use crate::provider::adapters::openai::ResponseUsage;

/// The largest upstream response body accepted (a long completion with logprobs fits).
const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// A setting is wrong; the message names it.
    #[error("{0}")]
    Local(String),
    /// The whole call took longer than the provider's `timeout_ms`.
    #[error("timed out after {0} ms")]
    Timeout(u64),
    #[error("no connection within {0} ms")]
    ConnectTimeout(u64),
    #[error("no response within {0} ms")]
    FirstByteTimeout(u64),
    /// No connection: nothing of the request was written.
    #[error("connection failed: {0}")]
    Connect(String),
    /// The request left (some or all of it was written) and the exchange
    /// broke before an answer could be read: a garbled response, a reset
    /// stream, a write cut off. The provider may have billed it.
    #[error("the exchange broke after the request was sent: {0}")]
    Broken(String),
    #[error("reading the response failed: {0}")]
    Body(String),
    #[error("no first chunk within {0} ms")]
    FirstTokenTimeout(u64),
    /// The request's own deadline (`server.request_timeout_ms`) passed mid-call.
    #[error("the request's deadline of {0} ms passed")]
    Deadline(u64),
}

/// An upstream response body still arriving.
pub type UpstreamBody = Pin<Box<dyn Stream<Item = Result<Bytes, PayloadError>>>>;

/// A streaming call after its first chunk, or the complete (error) reply.
pub enum Opened {
    Complete(UpstreamReply),
    Stream {
        first: Bytes,
        body: UpstreamBody,
        /// From sending the request to its first chunk.
        ttft: Duration,
    },
}

#[derive(Debug)]
pub struct UpstreamReply {
    pub status: StatusCode,
    pub body: Bytes,
    pub retry_after_s: Option<u64>,
    /// Set once the adapter has read a successful body.
    pub usage: Option<ResponseUsage>,
}

/// Headers the gateway adds to an upstream call besides auth.
#[derive(Debug, Default)]
pub struct CallHeaders<'a> {
    pub traceparent: Option<&'a str>,
    /// The caller's `anthropic-*` headers, for Anthropic upstreams only.
    pub anthropic: &'a [(&'static str, String)],
}

/// A complete call to `url` (the provider's chat, embeddings or responses endpoint):
/// the answer's headers within the first-byte timeout, all of it within the
/// total one.
pub async fn post(
    client: &awc::Client,
    provider: &Provider,
    url: &str,
    body: Bytes,
    headers: &CallHeaders<'_>,
) -> Result<UpstreamReply, CallError> {
    let request = build_request(client, provider, url, headers)?;
    let call = async {
        let first_byte = Duration::from_millis(provider.first_byte_timeout_ms);
        let response = actix_rt::time::timeout(first_byte, request.send_body(body))
            .await
            .map_err(|_| CallError::FirstByteTimeout(provider.first_byte_timeout_ms))?
            .map_err(|e| send_error(provider, e))?;
        read_reply(response).await
    };
    actix_rt::time::timeout(Duration::from_millis(provider.timeout_ms), call)
        .await
        .map_err(|_| CallError::Timeout(provider.timeout_ms))?
}

/// Sends a streaming request and waits for its first chunk (bounded by the
/// provider's first-token timeout), so a slow start can still fail over.
pub async fn open_stream(
    client: &awc::Client,
    provider: &Provider,
    url: &str,
    body: Bytes,
    headers: &CallHeaders<'_>,
) -> Result<Opened, CallError> {
    let started = monotonic();
    let request = build_request(client, provider, url, headers)?;
    let first_token = Duration::from_millis(provider.first_token_timeout_ms);
    let first_byte_ms = provider
        .first_byte_timeout_ms
        .min(provider.first_token_timeout_ms);
    let sent = actix_rt::time::timeout(
        Duration::from_millis(first_byte_ms),
        request.send_body(body),
    )
    .await
    .map_err(|_| {
        if first_byte_ms < provider.first_token_timeout_ms {
            CallError::FirstByteTimeout(first_byte_ms)
        } else {
            CallError::FirstTokenTimeout(first_byte_ms)
        }
    })?;
    let response = sent.map_err(|e| send_error(provider, e))?;
    // The total timeout also bounds the rest of the body, however it trickles in.
    let total = Duration::from_millis(provider.timeout_ms);
    let response =
        response.timeout(total.saturating_sub(monotonic().saturating_duration_since(started)));
    if !response.status().is_success() {
        return read_reply(response).await.map(Opened::Complete);
    }
    // Nothing reads a stream's headers once it is open, and the body keeps
    // its response for the stream's whole life: about 2 KiB a stream.
    let response = response.map_body(|head, payload| {
        head.headers = HeaderMap::new();
        payload
    });
    let mut body: UpstreamBody = Box::pin(response);
    let left = first_token.saturating_sub(monotonic().saturating_duration_since(started));
    match actix_rt::time::timeout(left, body.next()).await {
        Err(_) => Err(CallError::FirstTokenTimeout(
            provider.first_token_timeout_ms,
        )),
        Ok(None) => Err(CallError::Body(
            "the stream ended before its first chunk".to_owned(),
        )),
        Ok(Some(Err(e))) => Err(CallError::Body(e.to_string())),
        Ok(Some(Ok(first))) => Ok(Opened::Stream {
            first,
            body,
            ttft: crate::clock::elapsed(started),
        }),
    }
}

fn build_request(
    client: &awc::Client,
    provider: &Provider,
    url: &str,
    headers: &CallHeaders<'_>,
) -> Result<awc::ClientRequest, CallError> {
    let mut request = client
        .post(url)
        .timeout(Duration::from_millis(provider.timeout_ms))
        .insert_header(("content-type", "application/json"));
    if let Some(key) = &provider.api_key {
        if key.expose().trim().is_empty() {
            return Err(CallError::Local(format!(
                "providers.{}: the API key is empty; check {}",
                provider.name,
                provider.api_key_env.as_deref().unwrap_or("api_key_env")
            )));
        }
        request = match provider.kind {
            ProviderKind::Openai => {
                request.insert_header(("authorization", format!("Bearer {}", key.expose())))
            }
            ProviderKind::Anthropic => {
                let mut request = request;
                for header in anthropic::headers(key.expose(), &provider.anthropic_version) {
                    request = request.insert_header(header);
                }
                request
            }
        };
    }
    for (name, value) in &provider.extra_headers {
        request = request.insert_header((name.as_str(), value.as_str()));
    }
    if provider.kind == ProviderKind::Anthropic {
        // After the configured version: the caller's names the shape of its own body.
        for (name, value) in headers.anthropic {
            request = request.insert_header((*name, value.as_str()));
        }
    }
    if let Some(traceparent) = headers.traceparent {
        request = request.insert_header(("traceparent", traceparent));
    }
    Ok(request)
}

async fn read_reply<S>(mut response: awc::ClientResponse<S>) -> Result<UpstreamReply, CallError>
where
    S: Stream<Item = Result<Bytes, PayloadError>> + Unpin,
{
    let status = response.status();
    let retry_after_s = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let body = response
        .body()
        .limit(MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| CallError::Body(e.to_string()))?;
    Ok(UpstreamReply {
        status,
        body,
        retry_after_s,
        usage: None,
    })
}

fn send_error(provider: &Provider, error: SendRequestError) -> CallError {
    let key_setting = provider.api_key_env.as_deref().unwrap_or("api_key_env");
    match error {
        SendRequestError::Url(e) => CallError::Local(format!(
            "providers.{}: base_url `{}` is not a usable URL ({e}); check base_url",
            provider.name, provider.base_url
        )),
        SendRequestError::Http(e) => CallError::Local(format!(
            "providers.{}: the request could not be built ({e}); check base_url and {key_setting}",
            provider.name
        )),
        SendRequestError::Timeout => CallError::Timeout(provider.timeout_ms),
        SendRequestError::Connect(ConnectError::Timeout) => {
            CallError::ConnectTimeout(provider.connect_timeout_ms)
        }
        SendRequestError::Connect(e) => CallError::Connect(e.to_string()),
        SendRequestError::TunnelNotSupported => CallError::Local(format!(
            "providers.{}: base_url `{}` needs a tunnel the client does not support; check base_url",
            provider.name, provider.base_url
        )),
        // Send, Response, H2, Body, Custom: the connection was up and the
        // request on its way, so nothing says the provider did not bill it.
        other => CallError::Broken(other.to_string()),
    }
}
