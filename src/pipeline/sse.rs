//! Server-sent events from an OpenAI-compatible upstream: split the byte
//! stream into events, and read what billing needs from each (content
//! deltas, usage, the `[DONE]` mark) without changing the event's bytes.

use bytes::{Bytes, BytesMut};
use serde::Deserialize;

use crate::pricing::Usage;
use crate::provider::adapters::openai::RawUsage;

/// Splits arbitrary byte chunks into complete events (text up to a blank line).
#[derive(Debug, Default)]
pub struct SseSplitter {
    buffer: BytesMut,
}

impl SseSplitter {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next complete event, without its terminating blank line.
    pub fn next_event(&mut self) -> Option<Bytes> {
        let (end, delimiter) = find_delimiter(&self.buffer)?;
        let event = self.buffer.split_to(end).freeze();
        let _ = self.buffer.split_to(delimiter);
        Some(event)
    }

    /// Bytes of an event not yet terminated.
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }
}

fn find_delimiter(buffer: &[u8]) -> Option<(usize, usize)> {
    for i in 0..buffer.len() {
        if buffer[i..].starts_with(b"\n\n") {
            return Some((i, 2));
        }
        if buffer[i..].starts_with(b"\r\n\r\n") {
            return Some((i, 4));
        }
    }
    None
}

/// What one event means for the relay.
#[derive(Debug, PartialEq, Eq)]
pub enum Inspected {
    /// `data: [DONE]`.
    Done,
    Chunk {
        /// Generated text of the deltas (content, reasoning, tool arguments): what
        /// the relay counts against the hold and estimates a broken stream by.
        content: String,
        usage: Option<Usage>,
        /// No choices, only usage: the chunk `stream_options.include_usage` adds.
        usage_only: bool,
    },
    /// The upstream reported an error inside the stream.
    Error(String),
    /// Comments, `event:` lines without data, keep-alives: forwarded as they are.
    Other,
    /// A data line that is not JSON: the stream is broken.
    Malformed,
}

#[derive(Deserialize)]
struct RawChunk {
    choices: Option<Vec<RawChoice>>,
    usage: Option<RawUsage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawChoice {
    delta: Option<RawDelta>,
}

#[derive(Deserialize)]
struct RawDelta {
    content: Option<String>,
    /// DeepSeek's and vLLM's reasoning text: output the provider bills.
    reasoning_content: Option<String>,
    tool_calls: Option<Vec<RawToolCall>>,
}

#[derive(Deserialize)]
struct RawToolCall {
    function: Option<RawFunction>,
}

#[derive(Deserialize)]
struct RawFunction {
    arguments: Option<String>,
}

impl RawDelta {
    /// Every piece of generated text in the delta: content, reasoning, tool arguments.
    fn push_text(&self, out: &mut String) {
        for text in [&self.content, &self.reasoning_content]
            .into_iter()
            .flatten()
        {
            out.push_str(text);
        }
        for call in self.tool_calls.iter().flatten() {
            if let Some(arguments) = call.function.as_ref().and_then(|f| f.arguments.as_ref()) {
                out.push_str(arguments);
            }
        }
    }
}

pub fn inspect(event: &[u8]) -> Inspected {
    let mut data = Vec::new();
    for line in event.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(rest) = line.strip_prefix(b"data:") {
            if !data.is_empty() {
                data.push(b'\n');
            }
            data.extend_from_slice(rest.strip_prefix(b" ").unwrap_or(rest));
        }
    }
    if data.is_empty() {
        return Inspected::Other;
    }
    if data.trim_ascii() == b"[DONE]" {
        return Inspected::Done;
    }
    let Ok(chunk) = serde_json::from_slice::<RawChunk>(&data) else {
        return Inspected::Malformed;
    };
    if let Some(error) = chunk.error {
        return Inspected::Error(error.to_string());
    }
    let choices = chunk.choices.unwrap_or_default();
    let mut content = String::new();
    for delta in choices.iter().filter_map(|c| c.delta.as_ref()) {
        delta.push_text(&mut content);
    }
    let usage = chunk.usage.as_ref().map(RawUsage::to_usage);
    Inspected::Chunk {
        usage_only: choices.is_empty() && usage.is_some(),
        content,
        usage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_events_across_arbitrary_chunk_boundaries() {
        let mut splitter = SseSplitter::default();
        splitter.push(b"data: {\"a\":1}\n");
        assert_eq!(splitter.next_event(), None);
        splitter.push(b"\ndata: [DO");
        assert_eq!(
            splitter.next_event().unwrap(),
            Bytes::from_static(b"data: {\"a\":1}")
        );
        splitter.push(b"NE]\r\n\r\n");
        assert_eq!(
            splitter.next_event().unwrap(),
            Bytes::from_static(b"data: [DONE]")
        );
        assert_eq!(splitter.pending(), 0);
    }

    #[test]
    fn reads_content_usage_and_done() {
        let content = br#"data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
        assert_eq!(
            inspect(content),
            Inspected::Chunk {
                content: "Hi".into(),
                usage: None,
                usage_only: false
            }
        );
        let usage = br#"data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        let Inspected::Chunk {
            usage: Some(usage),
            usage_only: true,
            ..
        } = inspect(usage)
        else {
            panic!("usage chunk not recognised")
        };
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.cached_tokens,
                usage.completion_tokens
            ),
            (9, 4, 3)
        );
        let tool = br#"data: {"choices":[{"index":0,"delta":{"reasoning_content":"so ","tool_calls":[{"index":0,"function":{"arguments":"{\"q\":1}"}}]}}]}"#;
        let Inspected::Chunk { content, .. } = inspect(tool) else {
            panic!("tool chunk not recognised")
        };
        assert_eq!(content, r#"so {"q":1}"#);
        assert_eq!(inspect(b"data: [DONE]"), Inspected::Done);
        assert_eq!(inspect(b": keep-alive"), Inspected::Other);
        assert_eq!(inspect(b"data: {\"id\": oops"), Inspected::Malformed);
        assert!(matches!(
            inspect(br#"data: {"error":{"message":"x"}}"#),
            Inspected::Error(_)
        ));
    }
}
