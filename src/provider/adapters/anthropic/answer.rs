//! A whole Messages answer in OpenAI's shape, and its usage.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::FALLBACK_ID;
use super::{AnthropicMapError, response_error};
use crate::clock::{Clock, SystemClock};
use crate::pricing::Usage;

/// Anthropic's four input-side counters; `prompt_tokens` in OpenAI terms is their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct AnthropicUsage {
    input: u64,
    cache_creation: u64,
    cache_read: u64,
    output: u64,
    /// `server_tool_use.web_search_requests`: each bills a fee.
    web_searches: u64,
}

impl AnthropicUsage {
    /// Overwrites the counters present in `usage`; a stream's `message_delta` repeats only some.
    pub(super) fn merge(&mut self, usage: &Map<String, Value>) {
        let fields = [
            ("input_tokens", &mut self.input),
            ("cache_creation_input_tokens", &mut self.cache_creation),
            ("cache_read_input_tokens", &mut self.cache_read),
            ("output_tokens", &mut self.output),
        ];
        for (key, slot) in fields {
            if let Some(count) = usage.get(key).and_then(Value::as_u64) {
                *slot = count;
            }
        }
        let searches = usage
            .get("server_tool_use")
            .and_then(|tools| tools.get("web_search_requests"))
            .and_then(Value::as_u64);
        if let Some(count) = searches {
            self.web_searches = count;
        }
    }

    pub(super) fn to_usage(self) -> Usage {
        Usage {
            prompt_tokens: self
                .input
                .saturating_add(self.cache_creation)
                .saturating_add(self.cache_read),
            cached_tokens: self.cache_read,
            cache_write_tokens: self.cache_creation,
            completion_tokens: self.output,
            web_searches: self.web_searches,
        }
    }
}

/// OpenAI's `usage` object for a mapped answer.
pub(super) fn openai_usage(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens.saturating_add(usage.completion_tokens),
        "prompt_tokens_details": { "cached_tokens": usage.cached_tokens },
    })
}

pub(super) fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        // end_turn, stop_sequence, pause_turn and reasons added later.
        _ => "stop",
    }
}

pub(super) fn upstream_error(body: &Map<String, Value>) -> AnthropicMapError {
    let error = body.get("error");
    let text = |key: &str| {
        error
            .and_then(|error| error.get(key))
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned()
    };
    AnthropicMapError::Upstream {
        kind: text("type"),
        message: text("message"),
    }
}

pub(super) fn now_secs() -> u64 {
    // Only stamps `created`; nothing decides on it.
    SystemClock.now_ms() / 1000
}

/// An OpenAI `chat.completion` body and the call's usage, from a Messages API answer.
pub fn map_response(body: &[u8], model: &str) -> Result<(Bytes, Usage), AnthropicMapError> {
    map_response_at(body, model, now_secs())
}

/// [`map_response`] with an explicit `created` (Unix seconds), for exact comparisons.
pub fn map_response_at(
    body: &[u8],
    model: &str,
    created: u64,
) -> Result<(Bytes, Usage), AnthropicMapError> {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
        return Err(response_error("body", "not a JSON object"));
    };
    if body.get("type").and_then(Value::as_str) == Some("error") {
        return Err(upstream_error(&body));
    }
    let Some(content) = body.get("content").and_then(Value::as_array) else {
        return Err(response_error("content", "must be an array"));
    };
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (i, block) in content.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => tool_calls.push(tool_call(block, i)?),
            // thinking, redacted_thinking, server tools: nothing OpenAI's shape can carry.
            _ => {}
        }
    }
    let usage = usage_of(&body)?;
    let mut message = Map::new();
    message.insert("role".to_owned(), Value::from("assistant"));
    let content = if text.is_empty() && !tool_calls.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    message.insert("content".to_owned(), content);
    message.insert("refusal".to_owned(), Value::Null);
    if !tool_calls.is_empty() {
        message.insert("tool_calls".to_owned(), Value::Array(tool_calls));
    }
    let id = body
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or(FALLBACK_ID);
    let stop_reason = body.get("stop_reason").and_then(Value::as_str);
    let out = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(stop_reason),
        }],
        "usage": openai_usage(&usage),
    });
    Ok((Bytes::from(out.to_string()), usage))
}

/// The usage of a Messages API answer passed on unchanged (the Messages
/// door's passthrough), which the call is billed by.
pub fn read_usage(body: &[u8]) -> Result<Usage, AnthropicMapError> {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
        return Err(response_error("body", "not a JSON object"));
    };
    if body.get("type").and_then(Value::as_str) == Some("error") {
        return Err(upstream_error(&body));
    }
    usage_of(&body)
}

pub(super) fn usage_of(body: &Map<String, Value>) -> Result<Usage, AnthropicMapError> {
    let Some(raw_usage) = body.get("usage").and_then(Value::as_object) else {
        // Without usage the call cannot be billed; a silent zero would undercharge.
        return Err(response_error("usage", "missing"));
    };
    let mut counts = AnthropicUsage::default();
    counts.merge(raw_usage);
    Ok(counts.to_usage())
}

pub(super) fn tool_call(block: &Value, index: usize) -> Result<Value, AnthropicMapError> {
    let field = |key: &str| format!("content[{index}].{key}");
    let id = block
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| response_error(field("id"), "must be a string"))?;
    let name = block
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| response_error(field("name"), "must be a string"))?;
    let arguments = block
        .get("input")
        .map_or_else(|| "{}".to_owned(), Value::to_string);
    Ok(json!({
        "id": id,
        "type": "function",
        "function": { "name": name, "arguments": arguments },
    }))
}

// === streaming ===
