//! One chat stream event as a door's stream mapper reads it (Responses,
//! Messages): `[DONE]`, an error chunk (a broken stream), or a chunk's
//! first choice: its text, tool-call deltas and finish reason, and usage.

use serde_json::Value;

pub enum ChatEvent {
    Done,
    Error(Value),
    Chunk(Delta),
}

/// What a chunk adds; absent parts are `None` or empty.
pub struct Delta {
    pub model: Value,
    pub usage: Option<Value>,
    pub text: Option<String>,
    pub tool_calls: Vec<Value>,
    pub finish_reason: Option<String>,
}

/// The event in one SSE event's `data`; `None` if it is not JSON (skipped).
pub fn read(data: &[u8]) -> Option<ChatEvent> {
    if data.trim_ascii() == b"[DONE]" {
        return Some(ChatEvent::Done);
    }
    let chunk = serde_json::from_slice::<Value>(data).ok()?;
    // Read by shared index only: `IndexMut` on a missing array slot panics.
    if let Some(error) = chunk.get("error") {
        return Some(ChatEvent::Error(error.clone()));
    }
    let choice = &chunk["choices"][0];
    let text = choice["delta"]["content"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    let tool_calls = choice["delta"]["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let finish_reason = choice["finish_reason"].as_str().map(str::to_owned);
    let usage = Some(chunk["usage"].clone()).filter(|u| !u.is_null());
    Some(ChatEvent::Chunk(Delta {
        model: chunk["model"].clone(),
        usage,
        text,
        tool_calls,
        finish_reason,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_done_errors_and_chunks_without_choices() {
        assert!(matches!(read(b" [DONE] "), Some(ChatEvent::Done)));
        assert!(matches!(
            read(br#"{"error":{"message":"x"}}"#),
            Some(ChatEvent::Error(_))
        ));
        assert!(read(b"not json").is_none());
        let Some(ChatEvent::Chunk(delta)) =
            read(br#"{"model":"m","choices":[],"usage":{"prompt_tokens":1}}"#)
        else {
            panic!("usage chunk")
        };
        assert_eq!((delta.text, delta.tool_calls.len()), (None, 0));
        assert_eq!(delta.usage.unwrap()["prompt_tokens"], 1);
        let Some(ChatEvent::Chunk(delta)) = read(
            br#"{"model":"m","choices":[{"delta":{"content":"hi","tool_calls":[{"index":0}]},"finish_reason":"stop"}]}"#,
        ) else {
            panic!("content chunk")
        };
        assert_eq!(delta.text.as_deref(), Some("hi"));
        assert_eq!(
            (delta.tool_calls.len(), delta.finish_reason.as_deref()),
            (1, Some("stop"))
        );
    }
}
