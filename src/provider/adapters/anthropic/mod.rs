//! Anthropic Messages API upstreams (`kind = "anthropic"`): the caller's OpenAI chat body is
//! rewritten into a Messages body, and answers (whole or streamed) are rewritten back into
//! OpenAI shapes. Every function is pure except the `created` stamp. `cache_control` objects
//! are copied verbatim and never interpreted, so prompt caching behaves exactly as the caller
//! asked; usage keeps Anthropic's split so cache writes and cache reads are priced separately.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::openai::chat::ChatRequest;
use crate::prompts::{Prefix, place};

/// The API version sent when the provider configures none.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// Used for chunks of a stream that never announced its message id.
const FALLBACK_ID: &str = "chatcmpl-anthropic";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnthropicMapError {
    /// The caller's request cannot be expressed in the Messages API; `field` is an OpenAI path.
    #[error("{field}: {problem}")]
    Request { field: String, problem: String },
    /// The upstream's answer is not shaped like a Messages API answer.
    #[error("anthropic response {field}: {problem}")]
    Response { field: String, problem: String },
    /// The upstream answered with an error (an `error` body or stream event).
    #[error("anthropic error {kind}: {message}")]
    Upstream { kind: String, message: String },
}

impl AnthropicMapError {
    /// The offending field (an OpenAI path for requests), if the error is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Request { field, .. } | Self::Response { field, .. } => Some(field),
            Self::Upstream { .. } => None,
        }
    }
}

fn request_error(field: impl Into<String>, problem: impl Into<String>) -> AnthropicMapError {
    AnthropicMapError::Request {
        field: field.into(),
        problem: problem.into(),
    }
}

fn response_error(field: impl Into<String>, problem: impl Into<String>) -> AnthropicMapError {
    AnthropicMapError::Response {
        field: field.into(),
        problem: problem.into(),
    }
}

// === request ===

/// The Messages API body for one target. OpenAI fields without an Anthropic counterpart
/// (`presence_penalty`, `seed`, a `json_object` format, `logprobs`, …) are dropped; a
/// `json_schema` format is Anthropic's `output_config.format`.
pub fn build_body(
    request: &ChatRequest,
    model: &str,
    max_tokens: u32,
    stream: bool,
) -> Result<Bytes, AnthropicMapError> {
    build_body_as(request, model, max_tokens, stream, None, None)
}

/// As `build_body`, with `metadata.user_id` set to `user` whatever the
/// caller sent, and the gateway's prompts first in `system`.
pub fn build_body_as(
    request: &ChatRequest,
    model: &str,
    max_tokens: u32,
    stream: bool,
    user: Option<&str>,
    prefix: Option<&Prefix<'_>>,
) -> Result<Bytes, AnthropicMapError> {
    let mut body = map_request(request.body(), model, max_tokens, stream)?;
    if let Some(user) = user {
        body.insert("metadata".to_owned(), json!({ "user_id": user }));
    }
    if let Some(prefix) = prefix {
        place::anthropic_system(&mut body, prefix);
    }
    // serde_json cannot fail to write a Map of Values.
    Ok(Bytes::from(
        serde_json::to_vec(&Value::Object(body)).unwrap_or_default(),
    ))
}

fn map_request(
    body: &Map<String, Value>,
    model: &str,
    max_tokens: u32,
    stream: bool,
) -> Result<Map<String, Value>, AnthropicMapError> {
    match body.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(_) => {
            return Err(request_error(
                "n",
                "anthropic returns a single choice; only 1 is supported",
            ));
        }
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err(request_error("messages", "must be an array"));
    };
    let (system, messages) = map_messages(messages)?;
    let mut out = Map::new();
    out.insert("model".to_owned(), Value::from(model));
    out.insert("max_tokens".to_owned(), Value::from(max_tokens));
    if let Some(system) = system {
        out.insert("system".to_owned(), system);
    }
    out.insert("messages".to_owned(), Value::Array(messages));
    if let Some(tools) = map_tools(body.get("tools"))? {
        out.insert("tools".to_owned(), Value::Array(tools));
        // Anthropic refuses a tool_choice without tools, and OpenAI's is meaningless then.
        if let Some(choice) =
            map_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))?
        {
            out.insert("tool_choice".to_owned(), choice);
        }
    }
    if let Some(temperature) = map_temperature(body.get("temperature"))? {
        out.insert("temperature".to_owned(), temperature);
    }
    match body.get("top_p") {
        None | Some(Value::Null) => {}
        Some(top_p @ Value::Number(_)) => {
            out.insert("top_p".to_owned(), top_p.clone());
        }
        Some(_) => return Err(request_error("top_p", "must be a number")),
    }
    if let Some(stop) = map_stop(body.get("stop"))? {
        out.insert("stop_sequences".to_owned(), stop);
    }
    match body.get("user") {
        None | Some(Value::Null) => {}
        Some(Value::String(user)) if user.is_empty() => {}
        Some(Value::String(user)) => {
            out.insert("metadata".to_owned(), json!({ "user_id": user }));
        }
        Some(_) => return Err(request_error("user", "must be a string")),
    }
    if let Some(format) = output_format(body.get("response_format")) {
        out.insert("output_config".to_owned(), json!({ "format": format }));
    }
    if stream {
        out.insert("stream".to_owned(), Value::Bool(true));
    }
    Ok(out)
}

/// Request headers for one call. An empty `version` means [`DEFAULT_VERSION`].
pub fn headers(api_key: &str, version: &str) -> Vec<(&'static str, String)> {
    let version = if version.is_empty() {
        DEFAULT_VERSION
    } else {
        version
    };
    vec![
        ("x-api-key", api_key.to_owned()),
        ("anthropic-version", version.to_owned()),
        ("content-type", "application/json".to_owned()),
    ]
}

mod answer;
mod request;
mod stream;

pub use answer::{map_response, map_response_at, read_usage};
use request::{map_messages, map_stop, map_temperature, map_tool_choice, map_tools, output_format};
pub use stream::StreamMapper;
#[cfg(test)]
mod tests;
