//! A Messages stream in OpenAI's chunk shapes, event by event.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::FALLBACK_ID;
use super::answer::now_secs;
use super::answer::{AnthropicUsage, finish_reason, openai_usage, upstream_error};
use super::{AnthropicMapError, response_error};
use crate::pricing::Usage;

/// Turns Anthropic SSE events, fed one at a time, into OpenAI `chat.completion.chunk` JSON
/// strings (without the `data: ` framing). Input usage is known from `message_start`, output
/// usage is final after `message_delta`.
#[derive(Debug, Clone)]
pub struct StreamMapper {
    id: String,
    model: String,
    created: u64,
    usage: Option<AnthropicUsage>,
    /// Anthropic content-block index → OpenAI tool-call index, for `tool_use` blocks.
    tool_blocks: HashMap<u64, u64>,
    finished: bool,
}

impl StreamMapper {
    pub fn new(model: &str) -> Self {
        Self::with_created(model, now_secs())
    }

    /// A mapper stamping `created` (Unix seconds) on every chunk, for exact comparisons.
    pub fn with_created(model: &str, created: u64) -> Self {
        StreamMapper {
            id: FALLBACK_ID.to_owned(),
            model: model.to_owned(),
            created,
            usage: None,
            tool_blocks: HashMap::new(),
            finished: false,
        }
    }

    /// The chunks one event maps to (often none). `event` is the SSE `event:` name; when empty,
    /// the `type` inside `data` is used. Unknown events are ignored, as Anthropic asks.
    pub fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<String>, AnthropicMapError> {
        if event == "ping" {
            return Ok(Vec::new());
        }
        let Ok(Value::Object(data)) = serde_json::from_str::<Value>(data) else {
            let name = if event.is_empty() { "stream" } else { event };
            return Err(response_error(
                format!("{name} event"),
                "data is not a JSON object",
            ));
        };
        let kind = if event.is_empty() {
            data.get("type").and_then(Value::as_str).unwrap_or("")
        } else {
            event
        };
        match kind {
            "message_start" => Ok(self.message_start(&data)),
            "content_block_start" => Ok(self.block_start(&data)),
            "content_block_delta" => self.block_delta(&data),
            "message_delta" => Ok(self.message_delta(&data)),
            "message_stop" => {
                self.finished = true;
                Ok(Vec::new())
            }
            "error" => Err(upstream_error(&data)),
            // ping, content_block_stop, and event types added later.
            _ => Ok(Vec::new()),
        }
    }

    /// The call's usage so far: `None` before `message_start`.
    pub fn usage(&self) -> Option<Usage> {
        self.usage.map(AnthropicUsage::to_usage)
    }

    /// OpenAI's final usage-only chunk (`choices: []`), once usage is known.
    pub fn usage_chunk(&self) -> Option<String> {
        let usage = self.usage()?;
        Some(
            json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": openai_usage(&usage),
            })
            .to_string(),
        )
    }

    /// Whether `message_stop` arrived: a stream that ends without it was cut off.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    fn chunk(&self, delta: &Value, finish_reason: Option<&str>) -> String {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }],
        })
        .to_string()
    }

    fn message_start(&mut self, data: &Map<String, Value>) -> Vec<String> {
        let message = data.get("message");
        if let Some(id) = message.and_then(|m| m.get("id")).and_then(Value::as_str) {
            id.clone_into(&mut self.id);
        }
        let usage = self.usage.get_or_insert_with(AnthropicUsage::default);
        if let Some(raw) = message
            .and_then(|m| m.get("usage"))
            .and_then(Value::as_object)
        {
            usage.merge(raw);
        }
        vec![self.chunk(&json!({ "role": "assistant", "content": "" }), None)]
    }

    fn block_start(&mut self, data: &Map<String, Value>) -> Vec<String> {
        let Some(block) = data.get("content_block") else {
            return Vec::new();
        };
        match block.get("type").and_then(Value::as_str) {
            Some("text") => match block.get("text").and_then(Value::as_str) {
                Some(text) if !text.is_empty() => {
                    vec![self.chunk(&json!({ "content": text }), None)]
                }
                _ => Vec::new(),
            },
            Some("tool_use") => {
                let tool_index = u64::try_from(self.tool_blocks.len()).unwrap_or(u64::MAX);
                let block_index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                self.tool_blocks.insert(block_index, tool_index);
                let id = block.get("id").and_then(Value::as_str).unwrap_or("");
                let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                let call = json!({
                    "index": tool_index,
                    "id": id,
                    "type": "function",
                    "function": { "name": name, "arguments": "" },
                });
                vec![self.chunk(&json!({ "tool_calls": [call] }), None)]
            }
            _ => Vec::new(),
        }
    }

    fn block_delta(&self, data: &Map<String, Value>) -> Result<Vec<String>, AnthropicMapError> {
        let Some(delta) = data.get("delta") else {
            return Ok(Vec::new());
        };
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => match delta.get("text").and_then(Value::as_str) {
                Some(text) if !text.is_empty() => {
                    Ok(vec![self.chunk(&json!({ "content": text }), None)])
                }
                _ => Ok(Vec::new()),
            },
            Some("input_json_delta") => {
                let partial = delta
                    .get("partial_json")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if partial.is_empty() {
                    return Ok(Vec::new());
                }
                let block_index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let Some(tool_index) = self.tool_blocks.get(&block_index) else {
                    return Err(response_error(
                        "content_block_delta.index",
                        format!("no tool_use block {block_index} was started"),
                    ));
                };
                let call = json!({ "index": tool_index, "function": { "arguments": partial } });
                Ok(vec![self.chunk(&json!({ "tool_calls": [call] }), None)])
            }
            // thinking, signature and citation deltas have no OpenAI counterpart.
            _ => Ok(Vec::new()),
        }
    }

    fn message_delta(&mut self, data: &Map<String, Value>) -> Vec<String> {
        if let Some(raw) = data.get("usage").and_then(Value::as_object) {
            self.usage
                .get_or_insert_with(AnthropicUsage::default)
                .merge(raw);
        }
        match data
            .get("delta")
            .and_then(|delta| delta.get("stop_reason"))
            .and_then(Value::as_str)
        {
            Some(reason) => vec![self.chunk(&json!({}), Some(finish_reason(Some(reason))))],
            None => Vec::new(),
        }
    }
}
