//! Streaming answers of the OpenAI fake: chat completions' SSE chunks, with scripted
//! pacing (`chunks-N`, `chunk-delay-Nms`, `ttft-Nms`) and faults after N
//! content chunks (`cut-after-N` drops the connection, `hang-after-N` stops
//! sending, `malformed-after-N` sends a broken line and ends without
//! `[DONE]`). A stream dropped before its end counts as cancelled. An
//! `agent` answer (`Script`) replaces the canned words with its text or its
//! tool call, the faults counting its chunks alike. The pacing and faults
//! (`StreamPlan`) are the Responses stream's too.

use std::io;
use std::sync::Arc;

use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::stream;
use serde_json::{Value, json};

use crate::agent::Turn;
use crate::http::sleep_ms;
use crate::model_string::{self, MAX_DELAY_MS, number};
use crate::sse::{self, Watch, halves};
use crate::stats::FakeStats;

const DEFAULT_CHUNKS: u32 = 5;
/// A real cut happens after the earlier chunks left; without a pause the
/// server would drop them, unflushed, with the connection.
const CUT_FLUSH_MS: u64 = 50;
const WORDS: [&str; 8] = [
    "This", "is", "a", "streamed", "reply", "from", "the", "fake.",
];

/// A fault injected after this many content chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    Cut(u32),
    Hang(u32),
    Malformed(u32),
    /// A Responses stream ends with `response.failed`, its usage reported
    /// (a chat stream has no such event and ignores it).
    Failed(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamPlan {
    pub chunks: u32,
    pub chunk_delay_ms: u64,
    pub ttft_ms: u64,
    pub fault: Option<Fault>,
}

impl StreamPlan {
    pub fn parse(model: &str) -> StreamPlan {
        let mut plan = StreamPlan {
            chunks: DEFAULT_CHUNKS,
            chunk_delay_ms: 0,
            ttft_ms: 0,
            fault: None,
        };
        let count = |text: &str| number(text).and_then(|n| u32::try_from(n).ok());
        for segment in model_string::segments(model) {
            if let Some(n) = segment.strip_prefix("chunks-").and_then(count) {
                plan.chunks = n;
            } else if let Some(ms) = segment
                .strip_prefix("chunk-delay-")
                .and_then(model_string::millis)
            {
                plan.chunk_delay_ms = ms;
            } else if let Some(ms) = segment.strip_prefix("ttft-").and_then(model_string::millis) {
                plan.ttft_ms = ms;
            } else if let Some(n) = segment.strip_prefix("cut-after-").and_then(count) {
                plan.fault = Some(Fault::Cut(n));
            } else if let Some(n) = segment.strip_prefix("hang-after-").and_then(count) {
                plan.fault = Some(Fault::Hang(n));
            } else if let Some(n) = segment.strip_prefix("malformed-after-").and_then(count) {
                plan.fault = Some(Fault::Malformed(n));
            } else if let Some(n) = segment.strip_prefix("failed-after-").and_then(count) {
                plan.fault = Some(Fault::Failed(n));
            }
        }
        plan
    }

    /// The `cut-after-N` fault: the error that drops the connection, once the chunks before
    /// it had time to leave.
    pub async fn cut(&self) -> io::Error {
        sleep_ms(self.chunk_delay_ms.max(CUT_FLUSH_MS)).await;
        io::Error::other("fake upstream: cut-after")
    }

    /// The `hang-after-N` fault: nothing more for as long as any delay may last.
    pub async fn hang() {
        sleep_ms(MAX_DELAY_MS).await;
    }
}

/// The content of content chunk `i`.
pub fn chunk_text(i: u32) -> String {
    let word = WORDS[usize::try_from(i).unwrap_or(0) % WORDS.len()];
    format!("{word} ")
}

/// What a stream says after its first chunk: the canned words, or an agent's turn.
pub(crate) struct Script {
    /// The first chunk's delta.
    first: Value,
    /// The content chunks' deltas; `None`: `chunks-N` canned words.
    deltas: Option<Vec<Value>>,
    finish_reason: &'static str,
}

impl Script {
    /// The canned reply, paced by the model string.
    pub fn canned() -> Script {
        Script {
            first: json!({"role": "assistant", "content": ""}),
            deltas: None,
            finish_reason: "stop",
        }
    }

    /// An agent's turn: its text a word per chunk, or its tool call opened in the first chunk
    /// and its arguments sent in two fragments, as OpenAI streams them.
    pub fn of(turn: &Turn, call_id: &str) -> Script {
        match turn {
            Turn::Canned => Script::canned(),
            Turn::Text(text) => Script {
                deltas: Some(
                    text.split_inclusive(' ')
                        .map(|word| json!({"content": word}))
                        .collect(),
                ),
                ..Script::canned()
            },
            Turn::Call(call) => {
                let arguments = call.arguments();
                let (head, tail) = halves(&arguments);
                let fragment = |part: &str| json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]});
                Script {
                    first: json!({"role": "assistant", "content": null, "tool_calls": [{
                        "index": 0, "id": call_id, "type": "function",
                        "function": {"name": call.name, "arguments": ""}}]}),
                    deltas: Some(vec![fragment(head), fragment(tail)]),
                    finish_reason: "tool_calls",
                }
            }
        }
    }

    /// How many content chunks follow the first.
    fn len(&self, plan: &StreamPlan) -> u32 {
        self.deltas.as_ref().map_or(plan.chunks, |deltas| {
            u32::try_from(deltas.len()).unwrap_or(u32::MAX)
        })
    }

    fn delta(&self, i: u32) -> Value {
        let at = usize::try_from(i).unwrap_or(usize::MAX);
        match self.deltas.as_ref().and_then(|deltas| deltas.get(at)) {
            Some(delta) => delta.clone(),
            None => json!({"content": chunk_text(i)}),
        }
    }
}

enum Step {
    First,
    Content(u32),
    Finish,
    Usage,
    Done,
    End,
}

struct State {
    plan: StreamPlan,
    script: Script,
    step: Step,
    base: Value,
    usage: Option<Value>,
    include_usage: bool,
    watch: Watch,
}

fn chunk(base: &Value, choices: Value) -> Value {
    let mut value = base.clone();
    if let Some(object) = value.as_object_mut() {
        object.insert("choices".to_owned(), choices);
    }
    value
}

/// The fields every chunk of one stream repeats.
pub(crate) fn chunk_base(id: &str, created: u64, model: &str) -> Value {
    json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model})
}

pub(crate) fn response(
    plan: StreamPlan,
    script: Script,
    request: &Value,
    base: Value,
    usage: Option<Value>,
    stats: Arc<FakeStats>,
) -> HttpResponse {
    let include_usage = request
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let initial = State {
        plan,
        script,
        step: Step::First,
        base,
        usage,
        include_usage,
        watch: Watch::start(stats),
    };
    let body = stream::unfold(initial, |mut state| async move {
        let item = next(&mut state).await?;
        Some((item, state))
    });
    sse::ok().streaming(body)
}

async fn next(state: &mut State) -> Option<Result<Bytes, io::Error>> {
    loop {
        match state.step {
            Step::First => {
                sleep_ms(state.plan.ttft_ms).await;
                state.step = Step::Content(0);
                let choices =
                    json!([{"index": 0, "delta": state.script.first, "finish_reason": null}]);
                return Some(Ok(sse::data(&chunk(&state.base, choices))));
            }
            Step::Content(i) => {
                match state.plan.fault {
                    Some(Fault::Cut(n)) if i == n => {
                        state.step = Step::End;
                        return Some(Err(state.plan.cut().await));
                    }
                    Some(Fault::Hang(n)) if i == n => {
                        StreamPlan::hang().await;
                        state.step = Step::End;
                        continue;
                    }
                    Some(Fault::Malformed(n)) if i == n => {
                        state.step = Step::End;
                        state.watch.finished = true;
                        return Some(Ok(Bytes::from_static(b"data: {\"id\": oops\n\n")));
                    }
                    _ => {}
                }
                if i >= state.script.len(&state.plan) {
                    state.step = Step::Finish;
                    continue;
                }
                if i > 0 {
                    sleep_ms(state.plan.chunk_delay_ms).await;
                }
                state.step = Step::Content(i + 1);
                let choices =
                    json!([{"index": 0, "delta": state.script.delta(i), "finish_reason": null}]);
                return Some(Ok(sse::data(&chunk(&state.base, choices))));
            }
            Step::Finish => {
                state.step = Step::Usage;
                let choices =
                    json!([{"index": 0, "delta": {}, "finish_reason": state.script.finish_reason}]);
                return Some(Ok(sse::data(&chunk(&state.base, choices))));
            }
            Step::Usage => {
                state.step = Step::Done;
                if let (true, Some(usage)) = (state.include_usage, state.usage.take()) {
                    let mut value = chunk(&state.base, json!([]));
                    if let Some(object) = value.as_object_mut() {
                        object.insert("usage".to_owned(), usage);
                    }
                    return Some(Ok(sse::data(&value)));
                }
            }
            Step::Done => {
                state.step = Step::End;
                state.watch.finished = true;
                return Some(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
            }
            Step::End => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pacing_and_faults() {
        let plan = StreamPlan::parse("m+chunks-9+chunk-delay-5ms+ttft-300ms+cut-after-3");
        assert_eq!(
            plan,
            StreamPlan {
                chunks: 9,
                chunk_delay_ms: 5,
                ttft_ms: 300,
                fault: Some(Fault::Cut(3))
            }
        );
        assert_eq!(StreamPlan::parse("ok").chunks, DEFAULT_CHUNKS);
        assert_eq!(
            StreamPlan::parse("hang-after-2").fault,
            Some(Fault::Hang(2))
        );
    }
}
