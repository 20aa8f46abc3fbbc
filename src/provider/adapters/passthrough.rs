//! A request that arrived in its provider's own API: the Messages door to
//! an `anthropic` provider. The caller's bytes go upstream with only `model`
//! and `max_tokens` (the held limit) rewritten, so `cache_control`, thinking
//! and server tools reach Anthropic exactly as sent. The answer comes back
//! unchanged and is read only for what billing needs: the usage of a whole
//! message; a stream's text (counted against the hold), usage and end. When
//! the relay ends a stream itself it ends it as Anthropic would.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::anthropic::{self, AnthropicMapError, StreamMapper};
use super::{Ending, Relayed, Translated};
use crate::openai::splice;
use crate::pricing::Usage;
use crate::prompts::{Prefix, place};

/// The upstream body: the caller's, with the target's model, the held output
/// limit, where the provider takes one the tenant as `metadata.user_id`, and
/// the gateway's prompts first in `system`.
pub fn build_body(
    native: &[u8],
    model: &str,
    max_tokens: u32,
    user: Option<&str>,
    prefix: Option<&Prefix<'_>>,
) -> Bytes {
    let model_json = Value::from(model).to_string();
    let max_tokens_json = max_tokens.to_string();
    let metadata_json = user.map(|user| json!({ "user_id": user }).to_string());
    let mut set = vec![
        ("model", model_json.as_str()),
        ("max_tokens", max_tokens_json.as_str()),
    ];
    if let Some(metadata) = &metadata_json {
        set.push(("metadata", metadata.as_str()));
    }
    match prefix {
        Some(prefix) => from_values(native, &set, |body| place::anthropic_system(body, prefix)),
        None => rewrite(native, &set),
    }
}

/// The caller's body with each `(key, JSON value)` of `set` in place: spliced
/// into its bytes, or written from parsed values when the splice cannot
/// rewrite it (an escaped key).
pub(super) fn rewrite(native: &[u8], set: &[(&str, &str)]) -> Bytes {
    match splice::set_members(native, set) {
        Some(body) => Bytes::from(body),
        None => from_values(native, set, |_| {}),
    }
}

/// The caller's body parsed, with `set` in place, then changed by `place`.
pub(super) fn from_values(
    native: &[u8],
    set: &[(&str, &str)],
    place: impl FnOnce(&mut Map<String, Value>),
) -> Bytes {
    let mut body: Map<String, Value> = serde_json::from_slice(native).unwrap_or_default();
    for (key, value) in set {
        if let Ok(value) = serde_json::from_str(value) {
            body.insert((*key).to_owned(), value);
        }
    }
    place(&mut body);
    // serde_json cannot fail to write a Map of Values.
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// The usage of a complete answer, which passes on unchanged.
pub fn read_usage(body: &[u8]) -> Result<Usage, AnthropicMapError> {
    anthropic::read_usage(body)
}

/// Anthropic's events, forwarded as they came, read for billing.
#[derive(Debug)]
pub struct EventRelay {
    /// Reads usage, the end and upstream errors; its chat chunks are dropped.
    mapper: StreamMapper,
    /// The content block started and not yet stopped, which a cut must close.
    open_block: Option<u64>,
}

impl EventRelay {
    pub fn new(model: &str) -> EventRelay {
        EventRelay {
            mapper: StreamMapper::new(model),
            open_block: None,
        }
    }

    /// `event` is one complete SSE event without its terminating blank line.
    pub fn on_event(&mut self, event: &[u8]) -> Translated {
        let mut bytes = Vec::with_capacity(event.len() + 2);
        bytes.extend_from_slice(event);
        bytes.extend_from_slice(b"\n\n");
        let (name, data) = super::event_fields(event);
        if data.is_empty() {
            return Translated::Events(vec![Relayed {
                bytes: Some(Bytes::from(bytes)),
                content: String::new(),
                usage: None,
                unseen_tokens: 0,
            }]);
        }
        if let Err(error) = self.mapper.on_event(&name, &data) {
            return Translated::Broken(error.to_string());
        }
        let parsed: Value = serde_json::from_str(&data).unwrap_or_default();
        let kind = if name.is_empty() {
            parsed["type"].as_str().unwrap_or_default()
        } else {
            name.as_str()
        };
        match kind {
            "content_block_start" => self.open_block = parsed["index"].as_u64(),
            "content_block_stop" => self.open_block = None,
            _ => {}
        }
        let relayed = Relayed {
            bytes: Some(Bytes::from(bytes)),
            content: generated_text(&parsed["delta"]).to_owned(),
            usage: self.mapper.usage(),
            unseen_tokens: estimated_thinking(&parsed["delta"]),
        };
        if self.mapper.is_finished() {
            Translated::Done(vec![relayed])
        } else {
            Translated::Events(vec![relayed])
        }
    }

    /// The events that end a stream the relay ended: at the hold, as a
    /// `max_tokens` stop with the usage charged; broken, as an `error` event.
    /// A finished stream already passed on its `message_stop`.
    pub fn ending(&self, end: &Ending<'_>) -> Bytes {
        let mut out = String::new();
        match end {
            Ending::Done => {}
            Ending::Cut {
                input_tokens,
                output_tokens,
            } => {
                if let Some(index) = self.open_block {
                    push_event(
                        &mut out,
                        "content_block_stop",
                        &json!({"type": "content_block_stop", "index": index}),
                    );
                }
                push_event(
                    &mut out,
                    "message_delta",
                    &json!({"type": "message_delta",
                            "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
                            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}),
                );
                push_event(&mut out, "message_stop", &json!({"type": "message_stop"}));
            }
            Ending::Broken(reason) => push_event(
                &mut out,
                "error",
                &json!({"type": "error", "error": {"type": "api_error",
                        "message": format!("the upstream stream broke: {reason}")}}),
            ),
        }
        Bytes::from(out)
    }
}

/// The generated text of a content_block_delta: what counts against the hold.
fn generated_text(delta: &Value) -> &str {
    let field = match delta["type"].as_str() {
        Some("text_delta") => "text",
        Some("input_json_delta") => "partial_json",
        Some("thinking_delta") => "thinking",
        _ => return "",
    };
    delta[field].as_str().unwrap_or_default()
}

/// What a `thinking_delta` says the hidden thinking grew by: with the
/// `thinking-token-count-…` beta and `display: "omitted"`, Anthropic streams
/// a running estimate of tokens it thinks but does not show.
fn estimated_thinking(delta: &Value) -> u64 {
    if delta["type"].as_str() != Some("thinking_delta") {
        return 0;
    }
    delta["estimated_tokens"].as_u64().unwrap_or(0)
}

fn push_event(out: &mut String, name: &str, data: &Value) {
    out.push_str("event: ");
    out.push_str(name);
    out.push_str("\ndata: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_model_and_max_tokens_change_in_the_caller_s_bytes() {
        let native = br#"{"model":"claude","max_tokens":9000,"system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}"#;
        let body = build_body(native, "claude-x", 100, None, None);
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            r#"{"model":"claude-x","max_tokens":100,"system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}"#
        );
        let escaped = br#"{"mod\u0065l":"claude","max_tokens":9000,"messages":[]}"#;
        let body: Value =
            serde_json::from_slice(&build_body(escaped, "claude-x", 100, Some("t-1"), None))
                .unwrap();
        assert_eq!(
            (body["model"].clone(), body["max_tokens"].clone()),
            (json!("claude-x"), json!(100))
        );
        assert_eq!(body["metadata"]["user_id"], "t-1");
    }

    #[test]
    fn events_pass_unchanged_and_a_cut_ends_as_anthropic_ends_at_max_tokens() {
        let mut relay = EventRelay::new("claude-x");
        let start = br#"event: message_start
data: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":7,"output_tokens":1}}}"#;
        let Translated::Events(relayed) = relay.on_event(start) else {
            panic!("message_start")
        };
        assert_eq!(
            &relayed[0].bytes.as_ref().unwrap()[..start.len()],
            &start[..]
        );
        assert_eq!(relayed[0].usage.unwrap().prompt_tokens, 7);
        relay.on_event(
            br#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        );
        let Translated::Events(delta) = relay.on_event(
            br#"event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
        ) else {
            panic!("delta")
        };
        assert_eq!(delta[0].content, "hmm");
        let ending = relay.ending(&Ending::Cut {
            input_tokens: 7,
            output_tokens: 10,
        });
        let text = std::str::from_utf8(&ending).unwrap();
        let kinds: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            kinds,
            ["content_block_stop", "message_delta", "message_stop"]
        );
        assert!(text.contains(r#""stop_reason":"max_tokens""#), "{text}");
        let broken = relay.ending(&Ending::Broken("gone"));
        assert!(broken.starts_with(b"event: error\n"));
        assert!(matches!(
            relay.on_event(b"event: message_stop\ndata: {\"type\":\"message_stop\"}"),
            Translated::Done(_)
        ));
    }
}
