//! Chat completion chunks → Anthropic's stream events, in order:
//! `message_start`, a `content_block_start`/`_delta`/`_stop` run per text or
//! tool_use block, `message_delta` (stop reason and usage), `message_stop`.
//! Chat reports usage only at its end, so `message_start` carries the
//! gateway's count of the prompt and `message_delta` the provider's real
//! input and output counts (the SDKs take both from it). A chat error chunk
//! (a broken stream) becomes an `error` event.

use std::io::Write as _;

use serde_json::{Value, json};

use super::response::{stop_reason, usage};
use crate::openai::chunk::{self, ChatEvent};
use crate::openai::responses::write_json_string;

#[derive(Debug)]
pub struct StreamMapper {
    id: String,
    /// The prompt as the gateway counted it, for `message_start`.
    input_tokens: u64,
    started: bool,
    finished: bool,
    /// The block being streamed: its index and, for a tool_use, chat's tool index.
    open: Option<(u64, Block)>,
    next_index: u64,
    finish: Option<String>,
    usage: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    Tool(u64),
}

impl StreamMapper {
    pub fn new(id: String, input_tokens: u64) -> StreamMapper {
        StreamMapper {
            id,
            input_tokens,
            started: false,
            finished: false,
            open: None,
            next_index: 0,
            finish: None,
            usage: None,
        }
    }

    /// The events for one chat SSE event's `data` (a chunk, `[DONE]`, or an error).
    pub fn on_data(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        let delta = match chunk::read(data) {
            None => return out,
            Some(ChatEvent::Done) => {
                self.finish(&mut out);
                return out;
            }
            Some(ChatEvent::Error(error)) => {
                let message = error["message"].as_str().unwrap_or("the stream failed");
                let event =
                    json!({"type": "error", "error": {"type": "api_error", "message": message}});
                emit(&mut out, "error", &event);
                self.finished = true;
                return out;
            }
            Some(ChatEvent::Chunk(delta)) => delta,
        };
        if !self.started {
            self.start(&mut out, &delta.model);
        }
        if delta.usage.is_some() {
            self.usage = delta.usage;
        }
        if let Some(text) = &delta.text {
            self.text_delta(&mut out, text);
        }
        for call in &delta.tool_calls {
            self.call_delta(&mut out, call);
        }
        if delta.finish_reason.is_some() {
            self.finish = delta.finish_reason;
        }
        out
    }

    fn start(&mut self, out: &mut Vec<u8>, model: &Value) {
        self.started = true;
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
        });
        emit(
            out,
            "message_start",
            &json!({"type": "message_start", "message": message}),
        );
    }

    /// Opens `block` unless it is the one open, closing that one first.
    fn open(&mut self, out: &mut Vec<u8>, block: Block, content_block: &Value) -> u64 {
        if let Some((index, open)) = self.open
            && open == block
        {
            return index;
        }
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some((index, block));
        emit(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": content_block}),
        );
        index
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((index, _)) = self.open.take() {
            emit(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    fn text_delta(&mut self, out: &mut Vec<u8>, text: &str) {
        let index = if let Some((index, Block::Text)) = self.open {
            index
        } else {
            self.open(out, Block::Text, &json!({"type": "text", "text": ""}))
        };
        emit_text_delta(out, index, text);
    }

    fn call_delta(&mut self, out: &mut Vec<u8>, call: &Value) {
        let tool = call["index"].as_u64().unwrap_or(0);
        let start = json!({"type": "tool_use", "id": call["id"].as_str().unwrap_or_default(),
            "name": call["function"]["name"].as_str().unwrap_or_default(), "input": {}});
        let index = self.open(out, Block::Tool(tool), &start);
        if let Some(partial) = call["function"]["arguments"]
            .as_str()
            .filter(|a| !a.is_empty())
        {
            emit(
                out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": partial}}),
            );
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.finished = true;
        if !self.started {
            self.start(out, &Value::Null);
        }
        self.close(out);
        let usage = self.usage.as_ref().map_or_else(
            || json!({"input_tokens": self.input_tokens, "output_tokens": 0}),
            usage,
        );
        emit(
            out,
            "message_delta",
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": stop_reason(self.finish.as_deref()), "stop_sequence": null},
                    "usage": usage}),
        );
        emit(out, "message_stop", &json!({"type": "message_stop"}));
    }
}

fn emit(out: &mut Vec<u8>, kind: &str, data: &Value) {
    let _ = write!(out, "event: {kind}\ndata: {data}\n\n");
}

/// A text chunk's event, byte for byte what `emit` writes for it, written
/// without building a value: it is most of a stream's events.
fn emit_text_delta(out: &mut Vec<u8>, index: u64, text: &str) {
    let _ = write!(
        out,
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{index},\"delta\":{{\"type\":\"text_delta\",\"text\":"
    );
    write_json_string(out, text);
    out.extend_from_slice(b"}}\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_deltas_event_is_written_as_its_value_would_be() {
        for text in [
            "plain",
            "quote \" backslash \\ newline \n",
            "\u{1} ctrl, é, 😀",
        ] {
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            emit_text_delta(&mut fast, 2, text);
            emit(
                &mut slow,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": 2,
                "delta": {"type": "text_delta", "text": text}}),
            );
            assert_eq!(
                String::from_utf8(fast).unwrap(),
                String::from_utf8(slow).unwrap()
            );
        }
    }

    fn events(chunks: &[&str]) -> Vec<(String, Value)> {
        let mut mapper = StreamMapper::new("msg_1".into(), 9);
        let mut out = Vec::new();
        for data in chunks {
            out.extend(mapper.on_data(data.as_bytes()));
        }
        String::from_utf8(out)
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let data = data.strip_prefix("data: ").unwrap();
                (
                    name.strip_prefix("event: ").unwrap().to_owned(),
                    serde_json::from_str(data).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn text_then_a_tool_call_stream_as_blocks_with_the_usage_at_both_ends() {
        let seen = events(&[
            r#"{"model":"gpt","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}"#,
            r#"{"model":"gpt","choices":[{"index":0,"delta":{"content":"lo"}}]}"#,
            r#"{"model":"gpt","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":""}}]}}]}"#,
            r#"{"model":"gpt","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"model":"gpt","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":4}}"#,
            "[DONE]",
        ]);
        let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(seen[0].1["message"]["usage"]["input_tokens"], 9);
        assert_eq!(seen[5].1["content_block"]["name"], "f");
        assert_eq!(seen[5].1["index"], 1);
        assert_eq!(seen[6].1["delta"]["partial_json"], r#"{"a":1}"#);
        assert_eq!(seen[8].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(seen[8].1["usage"]["input_tokens"], 11);
        assert_eq!(seen[8].1["usage"]["output_tokens"], 4);
    }

    #[test]
    fn a_broken_chat_stream_ends_with_an_error_event() {
        let seen = events(&[
            r#"{"model":"gpt","choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            r#"{"error":{"message":"the upstream stream broke","code":"stream_interrupted"}}"#,
            "[DONE]",
        ]);
        let (kind, data) = seen.last().unwrap();
        assert_eq!(kind, "error");
        assert_eq!(data["error"]["type"], "api_error");
    }
}
