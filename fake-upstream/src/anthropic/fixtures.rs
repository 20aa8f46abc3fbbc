//! Requests and readers the Messages fake's tests share.

use serde_json::{Value, json};

pub(crate) fn valid_request(model: &str) -> Value {
    json!({
        "model": model,
        "max_tokens": 100,
        "system": [
            {"type": "text", "text": "You are terse."},
            {"type": "text", "text": "Long cached context.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                {"type": "text", "text": "Thanks", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            ]},
        ],
        "tools": [{
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            "cache_control": {"type": "ephemeral"},
        }],
    })
}

pub(crate) fn agent_request(messages: &Value) -> Value {
    let schema = |property: &str| {
        json!({"type": "object", "properties": {property: {"type": "string"},
               "timeout": {"type": "number"}}, "required": [property]})
    };
    json!({
        "model": "claude+agent",
        "max_tokens": 1024,
        "messages": messages,
        "tools": [
            {"type": "web_search_20250305", "name": "web_search"},
            {"name": "Read", "description": "Reads a file", "input_schema": schema("file_path")},
            {"name": "Bash", "description": "Runs a command", "input_schema": schema("command")},
        ],
    })
}

pub(crate) fn sse_events(text: &str) -> Vec<(String, String)> {
    text.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| {
            let mut lines = frame.lines();
            let event = lines
                .next()
                .unwrap()
                .strip_prefix("event: ")
                .unwrap()
                .to_owned();
            let data = lines
                .next()
                .unwrap()
                .strip_prefix("data: ")
                .unwrap()
                .to_owned();
            (event, data)
        })
        .collect()
}

/// The input a stream's `input_json_delta` fragments add up to.
pub(crate) fn tool_input(events: &[(String, String)]) -> Value {
    let json: String = events
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .map(|(_, data)| serde_json::from_str::<Value>(data).unwrap())
        .filter_map(|delta| delta["delta"]["partial_json"].as_str().map(str::to_owned))
        .collect();
    serde_json::from_str(&json).unwrap()
}
