//! The Messages fake's successful answers: the canned text, a `tool` scenario's tool use or an
//! `agent`'s turn, with usage from the scenario or counted (through the prompt cache), rendered
//! as a Messages response or as the real API's event sequence.

use serde_json::{Map, Value, json};

use super::prompt_cache::PromptCache;
use super::scenario::Scenario;
use super::validate::server_tool;
use crate::agent::{self, Choice, Conversation, Tool, Turn};
use crate::sse::{self, halves};

pub(super) const REPLY_TEXT: &str = "This is a canned reply from the Tollgate Anthropic fake.";
const DEFAULT_OUTPUT_TOKENS: u64 = 12;
const TOKENS_PER_MESSAGE: u64 = 4;
const BYTES_PER_TOKEN: u64 = 4;

/// `(id, name, input)` of a tool use block.
type ToolUse = (String, String, Value);

/// One successful answer, rendered either as a Messages response or as its SSE stream.
pub(super) struct Reply {
    id: String,
    model: String,
    /// The text block; `None` for an `agent`'s tool use, which comes alone.
    text: Option<String>,
    /// `(id, name, input)` of the tool use, in `tool` scenarios with tools given.
    tool_use: Option<ToolUse>,
    stop_reason: &'static str,
    usage: [u64; 4],
    /// Web searches run, as `usage.server_tool_use` reports them.
    searches: u64,
    /// Omitted thinking: tokens billed, shown only as estimates.
    thinking: u64,
}

/// The estimate's quantum: a `thinking_delta` reports this many tokens more.
const THINKING_QUANTUM: u64 = 64;

/// Whether the request's thinking is on and omitted from the answer.
fn thinking_omitted(request: &Value) -> bool {
    let thinking = &request["thinking"];
    thinking["type"]
        .as_str()
        .is_some_and(|kind| kind != "disabled")
        && thinking["display"].as_str() == Some("omitted")
}

/// The input each search adds when the scenario does not fix the usage.
const SEARCH_INPUT_TOKENS: u64 = 1_000;

/// The searches a reply runs: the scenario's, up to the search tool's own `max_uses`.
fn searches(request: &Value, scenario: &Scenario) -> u64 {
    let tools = request.get("tools").and_then(Value::as_array);
    let search = tools.into_iter().flatten().find(|tool| {
        tool["type"]
            .as_str()
            .is_some_and(|kind| kind.starts_with("web_search_"))
    });
    search.map_or(0, |tool| {
        tool["max_uses"]
            .as_u64()
            .map_or(scenario.searches, |most| scenario.searches.min(most))
    })
}

impl Reply {
    pub fn new(request: &Value, model: &str, scenario: &Scenario, cache: &PromptCache) -> Self {
        let max_tokens = request
            .get("max_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let (text, tool_use) = if scenario.agent {
            agent_content(request, scenario)
        } else {
            scripted_content(request, scenario)
        };
        let default_output = DEFAULT_OUTPUT_TOKENS.min(max_tokens);
        let searches = searches(request, scenario);
        let thinking = if thinking_omitted(request) {
            scenario.thinks
        } else {
            0
        };
        let mut usage = scenario.usage.unwrap_or_else(|| {
            let [input, creation, read] = cache.split(request, estimate_input_tokens(request));
            let results = searches * SEARCH_INPUT_TOKENS;
            [input + results, creation, read, default_output]
        });
        usage[3] += thinking;
        let stop_reason = if tool_use.is_some() {
            "tool_use"
        } else if scenario.usage.is_none() && max_tokens < DEFAULT_OUTPUT_TOKENS {
            "max_tokens"
        } else {
            "end_turn"
        };
        Reply {
            id: format!("msg_fake_{:016x}", fingerprint(&request.to_string())),
            model: model.to_owned(),
            text,
            tool_use,
            stop_reason,
            usage,
            searches,
            thinking,
        }
    }

    fn usage_json(&self) -> Value {
        let [input, cache_creation, cache_read, output] = self.usage;
        let mut usage = json!({
            "input_tokens": input,
            "cache_creation_input_tokens": cache_creation,
            "cache_read_input_tokens": cache_read,
            "output_tokens": output,
        });
        if self.searches > 0 {
            usage["server_tool_use"] = json!({ "web_search_requests": self.searches });
        }
        usage
    }

    /// `message_delta`'s usage: the output so far, and the searches run.
    fn delta_usage(&self) -> Value {
        let mut usage = json!({ "output_tokens": self.usage[3] });
        if self.searches > 0 {
            usage["server_tool_use"] = json!({ "web_search_requests": self.searches });
        }
        usage
    }

    pub fn message(&self) -> Value {
        let thinking = (self.thinking > 0)
            .then(|| json!({ "type": "thinking", "thinking": "", "signature": "fake-signature" }));
        let mut content: Vec<Value> = thinking
            .into_iter()
            .chain(
                self.text
                    .iter()
                    .map(|text| json!({ "type": "text", "text": text })),
            )
            .collect();
        if let Some((id, name, input)) = &self.tool_use {
            content.push(json!({ "type": "tool_use", "id": id, "name": name, "input": input }));
        }
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.stop_reason,
            "stop_sequence": null,
            "usage": self.usage_json(),
        })
    }

    /// The event sequence of the real API: message_start, a text block in word-sized deltas,
    /// an optional tool block with its input in two JSON fragments, message_delta, message_stop.
    pub fn sse(&self) -> String {
        let mut out = String::new();
        let mut start_usage = self.usage_json();
        // The real API reports a token or so of output at the start, the total at the end.
        if let Some(usage) = start_usage.as_object_mut() {
            usage.insert("output_tokens".to_owned(), json!(self.usage[3].min(1)));
        }
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage,
        });
        sse::event(
            &mut out,
            "message_start",
            &json!({ "type": "message_start", "message": message }),
        );
        let first = usize::from(self.thinking > 0);
        if self.thinking > 0 {
            thinking_block(&mut out, self.thinking);
        }
        if let Some(text) = &self.text {
            text_block(&mut out, first, text);
        }
        if let Some((id, name, input)) = &self.tool_use {
            let index = first + usize::from(self.text.is_some());
            tool_use_block(&mut out, index, (id, name, input));
        }
        sse::event(
            &mut out,
            "message_delta",
            &json!({ "type": "message_delta",
                     "delta": { "stop_reason": self.stop_reason, "stop_sequence": null },
                     "usage": self.delta_usage() }),
        );
        sse::event(&mut out, "message_stop", &json!({ "type": "message_stop" }));
        out
    }
}

/// Omitted thinking at index 0: no text, the running estimate of its tokens
/// in quanta, then its signature.
fn thinking_block(out: &mut String, tokens: u64) {
    sse::event(
        out,
        "content_block_start",
        &json!({ "type": "content_block_start", "index": 0,
                 "content_block": { "type": "thinking", "thinking": "" } }),
    );
    sse::event(out, "ping", &json!({ "type": "ping" }));
    let mut left = tokens;
    while left > 0 {
        let step = left.min(THINKING_QUANTUM);
        left -= step;
        sse::event(
            out,
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": 0,
                     "delta": { "type": "thinking_delta", "thinking": "", "estimated_tokens": step } }),
        );
    }
    sse::event(
        out,
        "content_block_delta",
        &json!({ "type": "content_block_delta", "index": 0,
                 "delta": { "type": "signature_delta", "signature": "fake-signature" } }),
    );
    sse::event(
        out,
        "content_block_stop",
        &json!({ "type": "content_block_stop", "index": 0 }),
    );
}

/// A text block at `index`, its text in word-sized deltas; the real API
/// pings after the first block's start.
fn text_block(out: &mut String, index: usize, text: &str) {
    sse::event(
        out,
        "content_block_start",
        &json!({ "type": "content_block_start", "index": index,
                 "content_block": { "type": "text", "text": "" } }),
    );
    if index == 0 {
        sse::event(out, "ping", &json!({ "type": "ping" }));
    }
    for word in text.split_inclusive(' ') {
        sse::event(
            out,
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": index,
                     "delta": { "type": "text_delta", "text": word } }),
        );
    }
    sse::event(
        out,
        "content_block_stop",
        &json!({ "type": "content_block_stop", "index": index }),
    );
}

/// A tool use block at `index`, its input in an empty and two JSON fragments; the first block
/// of a message is followed by the ping.
fn tool_use_block(out: &mut String, index: usize, (id, name, input): (&str, &str, &Value)) {
    sse::event(
        out,
        "content_block_start",
        &json!({ "type": "content_block_start", "index": index, "content_block":
                 { "type": "tool_use", "id": id, "name": name, "input": {} } }),
    );
    if index == 0 {
        sse::event(out, "ping", &json!({ "type": "ping" }));
    }
    let input = input.to_string();
    let (head, tail) = halves(&input);
    for fragment in ["", head, tail] {
        sse::event(
            out,
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": index,
                     "delta": { "type": "input_json_delta", "partial_json": fragment } }),
        );
    }
    sse::event(
        out,
        "content_block_stop",
        &json!({ "type": "content_block_stop", "index": index }),
    );
}

/// The `tool` and `words-N` scenarios' content, else the canned text.
fn scripted_content(request: &Value, scenario: &Scenario) -> (Option<String>, Option<ToolUse>) {
    let first_tool = request
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|tools| tools.first());
    let tool_use = first_tool.filter(|_| scenario.tool).map(|tool| {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("tool");
        let input = sample_input(tool.get("input_schema"));
        (
            format!("toolu_fake_{:016x}", fingerprint(name)),
            name.to_owned(),
            input,
        )
    });
    let text = match (&tool_use, scenario.words) {
        (Some((_, name, _)), _) => format!("I will call the {name} tool."),
        (None, Some(words)) => "word ".repeat(usize::try_from(words).unwrap_or(0)),
        (None, None) => REPLY_TEXT.to_owned(),
    };
    (Some(text), tool_use)
}

/// An `agent` model's content: its tool use alone, or its text.
fn agent_content(request: &Value, scenario: &Scenario) -> (Option<String>, Option<ToolUse>) {
    match agent::turn(&conversation(request)) {
        Turn::Canned => scripted_content(request, scenario),
        Turn::Text(text) => (Some(text), None),
        Turn::Call(call) => {
            // Unique per conversation: agents track their calls by id across turns.
            let id = format!("toolu_fake_{:016x}", fingerprint(&request.to_string()));
            let input = call.arguments_value();
            (None, Some((id, call.name, input)))
        }
    }
}

/// A Messages request as `agent::turn` reads it.
fn conversation(request: &Value) -> Conversation<'_> {
    let tools = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|tool| tool.as_object().is_some_and(|t| server_tool(t).is_none()))
        .filter_map(|tool| {
            Some(Tool {
                name: tool["name"].as_str()?,
                namespace: None,
                schema: tool.get("input_schema"),
                custom: false,
            })
        })
        .collect();
    let choice = match request["tool_choice"]["type"].as_str() {
        Some("none") => Choice::None,
        Some("tool") => request["tool_choice"]["name"]
            .as_str()
            .map_or(Choice::Auto, Choice::Named),
        _ => Choice::Auto,
    };
    let messages = request["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let user_text = agent::last_user_text(messages);
    // Roles alternate, so only the last message can answer the model's calls.
    let tool_result = messages
        .last()
        .filter(|message| message["role"] == "user")
        .and_then(|message| message["content"].as_array())
        .and_then(|blocks| blocks.iter().rev().find(|b| b["type"] == "tool_result"))
        .map(|block| agent::text_of(&block["content"]));
    let formats = [
        &request["output_config"]["format"],
        &request["output_format"],
    ];
    let schema = formats
        .into_iter()
        .find(|format| format["type"] == "json_schema")
        .map(|format| &format["schema"])
        .filter(|schema| schema.is_object());
    Conversation {
        tools,
        choice,
        user_text,
        tool_result,
        schema,
    }
}

/// A deterministic id suffix (FNV-1a), so repeated requests get repeatable ids.
fn fingerprint(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// An input object for the tool's schema: one plausible value per declared property.
fn sample_input(schema: Option<&Value>) -> Value {
    let mut input = Map::new();
    if let Some(properties) = schema
        .and_then(|schema| schema.get("properties"))
        .and_then(Value::as_object)
    {
        for (name, property) in properties {
            let value = match property.get("type").and_then(Value::as_str) {
                Some("integer" | "number") => json!(1),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => match property
                    .get("enum")
                    .and_then(Value::as_array)
                    .and_then(|values| values.first())
                {
                    Some(first) => first.clone(),
                    None => json!("fake"),
                },
            };
            input.insert(name.clone(), value);
        }
    }
    Value::Object(input)
}

/// The bytes of text a block or content carries: texts, tool inputs and
/// tool results (what `estimate_input_tokens` counts).
pub(crate) fn text_bytes(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len(),
        Value::Array(items) => items.iter().map(text_bytes).fold(0, usize::saturating_add),
        Value::Object(block) => ["text", "content"]
            .iter()
            .filter_map(|key| block.get(*key))
            .map(text_bytes)
            .fold(
                block
                    .get("input")
                    .map_or(0, |input| input.to_string().len()),
                usize::saturating_add,
            ),
        _ => 0,
    }
}

/// A crude stand-in for a tokenizer (4 bytes per token plus a per-message overhead) over the
/// system prompt and every text, tool input and tool result in the messages.
fn estimate_input_tokens(request: &Value) -> u64 {
    let messages = request.get("messages").and_then(Value::as_array);
    let mut bytes = request.get("system").map_or(0, text_bytes);
    for message in messages.into_iter().flatten() {
        bytes = bytes.saturating_add(message.get("content").map_or(0, text_bytes));
    }
    let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
    let count = u64::try_from(messages.map_or(0, Vec::len)).unwrap_or(u64::MAX);
    bytes
        .div_ceil(BYTES_PER_TOKEN)
        .saturating_add(count.saturating_mul(TOKENS_PER_MESSAGE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anthropic::fixtures::{agent_request, sse_events, tool_input};
    use crate::anthropic::validate::validate;

    #[test]
    fn default_usage_counts_text() {
        let request = json!({
            "max_tokens": 5,
            "system": "12345678",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "abcd"}]},
                {"role": "assistant", "content": "efgh"},
            ],
        });
        let reply = Reply::new(&request, "m", &Scenario::default(), &PromptCache::default());
        // 16 bytes -> 4 tokens, plus 4 per message; output capped by max_tokens.
        assert_eq!(reply.usage, [12, 0, 0, 5]);
        assert_eq!(reply.stop_reason, "max_tokens");
    }

    fn agent_reply(request: &Value) -> Reply {
        Reply::new(
            request,
            "claude+agent",
            &Scenario::parse("claude+agent"),
            &PromptCache::default(),
        )
    }

    #[test]
    fn agent_uses_the_named_tool_alone() {
        let ask = json!([{"role": "user", "content": [
            {"type": "text", "text": "Run `ls` with bash."}]}]);
        let reply = agent_reply(&agent_request(&ask)).message();
        assert_eq!(reply["stop_reason"], "tool_use");
        assert_eq!(reply["content"].as_array().unwrap().len(), 1);
        let tool_use = &reply["content"][0];
        assert_eq!(
            (&tool_use["type"], &tool_use["name"]),
            (&json!("tool_use"), &json!("Bash"))
        );
        assert_eq!(tool_use["input"], json!({"command": "echo tollgate"}));
        assert!(tool_use["id"].as_str().unwrap().starts_with("toolu_fake_"));
        // The first client tool when none is named; server tools are the provider's own.
        let unnamed = json!([{"role": "user", "content": "go"}]);
        let reply = agent_reply(&agent_request(&unnamed)).message();
        assert_eq!(reply["content"][0]["name"], "Read");
        assert_eq!(
            reply["content"][0]["input"],
            json!({"file_path": "tollgate"})
        );
        // Without `agent`, the canned text.
        let mut plain = agent_request(&ask);
        plain["model"] = json!("claude");
        let reply = Reply::new(
            &plain,
            "claude",
            &Scenario::default(),
            &PromptCache::default(),
        );
        assert_eq!(reply.message()["content"][0]["text"], REPLY_TEXT);
    }

    #[test]
    fn agent_answers_a_tool_result_in_text_or_json() {
        let answered = json!([
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "x"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "tollgate"}]},
                {"type": "text", "text": "<system-reminder>Bash</system-reminder>"}]},
        ]);
        let request = agent_request(&answered);
        let reply = agent_reply(&request).message();
        assert_eq!(reply["stop_reason"], "end_turn");
        assert_eq!(
            reply["content"],
            json!([{"type": "text", "text": "Done: tollgate"}])
        );
        let schema = json!({"type": "object", "properties": {"summary": {"type": "string"},
            "files": {"type": "array", "items": {"type": "string"}}}});
        for field in ["output_config", "output_format"] {
            let mut structured = request.clone();
            let format = json!({"type": "json_schema", "schema": schema});
            structured[field] = if field == "output_config" {
                json!({"format": format})
            } else {
                format
            };
            assert_eq!(validate(&structured, true), Ok(()));
            let text = agent_reply(&structured).message()["content"][0]["text"].clone();
            assert_eq!(
                serde_json::from_str::<Value>(text.as_str().unwrap()).unwrap(),
                json!({"summary": "tollgate", "files": []}),
                "{field}"
            );
        }
    }

    #[test]
    fn agent_streams_its_tool_use_alone() {
        let ask = json!([{"role": "user", "content": "read the file"}]);
        let sse = agent_reply(&agent_request(&ask)).sse();
        let events = sse_events(&sse);
        let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        let start: Value = serde_json::from_str(&events[1].1).unwrap();
        assert_eq!(start["index"], 0);
        assert_eq!(start["content_block"]["name"], "Read");
        let delta: Value = serde_json::from_str(&events[7].1).unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
        assert_eq!(tool_input(&events), json!({"file_path": "tollgate"}));
    }
}
