//! A chat completion answer as a Messages `message` object: text and
//! tool_use blocks, the stop reason, and the usage in Anthropic's split
//! (`input_tokens` excludes the cache reads that chat counts in its prompt).

use bytes::Bytes;
use serde_json::{Value, json};

/// A chat `finish_reason` as Anthropic's `stop_reason`.
pub fn stop_reason(finish_reason: Option<&str>) -> &'static str {
    match finish_reason {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

/// Chat usage in Anthropic's shape.
pub fn usage(chat_usage: &Value) -> Value {
    let number = |v: &Value| v.as_u64().unwrap_or(0);
    let prompt = number(&chat_usage["prompt_tokens"]);
    let cached = chat_usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .or_else(|| chat_usage["prompt_cache_hit_tokens"].as_u64())
        .unwrap_or(0);
    json!({
        "input_tokens": prompt.saturating_sub(cached),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": number(&chat_usage["completion_tokens"]),
    })
}

/// A tool call's `arguments` as the `input` object; text that is not an
/// object (a model's broken JSON) travels under `_arguments` rather than be lost.
pub fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(input @ Value::Object(_)) => input,
        _ if arguments.trim().is_empty() => json!({}),
        _ => json!({"_arguments": arguments}),
    }
}

/// A complete chat answer as a `message`, known by `id`.
pub fn to_message(chat: &[u8], id: &str) -> Bytes {
    let chat: Value = serde_json::from_slice(chat).unwrap_or_default();
    let choice = &chat["choices"][0];
    let mut content = Vec::new();
    if let Some(text) = choice["message"]["content"]
        .as_str()
        .filter(|t| !t.is_empty())
    {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in choice["message"]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
    {
        content.push(json!({
            "type": "tool_use",
            "id": call["id"],
            "name": call["function"]["name"],
            "input": tool_input(call["function"]["arguments"].as_str().unwrap_or_default()),
        }));
    }
    let message = json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": chat["model"],
        "content": content,
        "stop_reason": stop_reason(choice["finish_reason"].as_str()),
        "stop_sequence": null,
        "usage": usage(&chat["usage"]),
    });
    Bytes::from(message.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_answer_with_a_tool_call_becomes_a_message_with_anthropic_s_usage() {
        let chat = json!({"model": "gpt", "choices": [{"message": {"content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":1}"}}]},
            "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}});
        let message: Value =
            serde_json::from_slice(&to_message(chat.to_string().as_bytes(), "msg_1")).unwrap();
        assert_eq!(message["type"], "message");
        assert_eq!(
            message["content"][0],
            json!({"type": "text", "text": "Let me look."})
        );
        assert_eq!(
            message["content"][1],
            json!({"type": "tool_use", "id": "c1", "name": "lookup", "input": {"q": 1}})
        );
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(
            message["usage"],
            json!({"input_tokens": 6, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4, "output_tokens": 3})
        );
        assert_eq!(stop_reason(Some("length")), "max_tokens");
        assert_eq!(stop_reason(Some("stop")), "end_turn");
        assert_eq!(tool_input("not json"), json!({"_arguments": "not json"}));
    }
}
