//! One chat stream event as a door's stream mapper reads it (Responses,
//! Messages): `[DONE]`, an error chunk (a broken stream), or a chunk's
//! first choice: its text, tool-call deltas and finish reason, and usage.

use serde::Deserialize;
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

/// A chunk as read: the containers typed, so a chunk costs no map per
/// object (every event of a stream through the Responses and Messages
/// doors is read here), the leaves as values, so an odd one is ignored as
/// it was. Fields not named here are skipped unread.
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    model: Value,
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<ChoiceDelta>,
    #[serde(default)]
    finish_reason: Option<Value>,
}

#[derive(Deserialize)]
struct ChoiceDelta {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Value>,
}

/// The event in one SSE event's `data`; `None` if it is not a JSON chunk (skipped).
pub fn read(data: &[u8]) -> Option<ChatEvent> {
    if data.trim_ascii() == b"[DONE]" {
        return Some(ChatEvent::Done);
    }
    let chunk = serde_json::from_slice::<Chunk>(data).ok()?;
    if let Some(error) = chunk.error {
        return Some(ChatEvent::Error(error));
    }
    let choice = chunk.choices.and_then(|choices| choices.into_iter().next());
    let (delta, finish_reason) = choice.map_or((None, None), |c| (c.delta, c.finish_reason));
    let (content, tool_calls) = delta.map_or((None, None), |d| (d.content, d.tool_calls));
    let text = match content {
        Some(Value::String(text)) if !text.is_empty() => Some(text),
        _ => None,
    };
    let tool_calls = match tool_calls {
        Some(Value::Array(calls)) => calls,
        _ => Vec::new(),
    };
    let finish_reason = match finish_reason {
        Some(Value::String(reason)) => Some(reason),
        _ => None,
    };
    Some(ChatEvent::Chunk(Delta {
        model: chunk.model,
        usage: chunk.usage.filter(|u| !u.is_null()),
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

    #[test]
    fn odd_or_null_parts_of_a_chunk_are_read_as_absent() {
        let Some(ChatEvent::Chunk(delta)) = read(
            br#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":null,"tool_calls":null},"finish_reason":null}],"usage":null}"#,
        ) else {
            panic!("a chunk of nulls")
        };
        assert_eq!(delta.model, "m");
        assert!(delta.text.is_none() && delta.tool_calls.is_empty());
        assert!(delta.finish_reason.is_none() && delta.usage.is_none());
        let Some(ChatEvent::Chunk(delta)) =
            read(br#"{"choices":[{"delta":{"content":7},"finish_reason":1}],"choices_extra":{}}"#)
        else {
            panic!("odd leaves")
        };
        assert!(delta.text.is_none() && delta.finish_reason.is_none());
        assert!(matches!(
            read(br#"{"choices":null}"#),
            Some(ChatEvent::Chunk(_))
        ));
        assert!(matches!(
            read(br#"{"choices":[{"delta":null}]}"#),
            Some(ChatEvent::Chunk(_))
        ));
    }
}
