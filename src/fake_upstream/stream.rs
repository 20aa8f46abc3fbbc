//! Streaming answers of the fake upstream: OpenAI SSE chunks, with scripted
//! pacing (`chunks-N`, `chunk-delay-Nms`, `ttft-Nms`) and faults after N
//! content chunks (`cut-after-N` drops the connection, `hang-after-N` stops
//! sending, `malformed-after-N` sends a broken line and ends without
//! `[DONE]`). A stream dropped before its end counts as cancelled.

use std::sync::Arc;
use std::time::Duration;

use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::stream;
use serde_json::{Value, json};

use super::scenario::MAX_DELAY_MS;
use super::stats::FakeStats;

const DEFAULT_CHUNKS: u32 = 5;
/// A real cut happens after the earlier chunks left; without a pause the
/// server would drop them, unflushed, with the connection.
pub(super) const CUT_FLUSH_MS: u64 = 50;
const WORDS: [&str; 8] = [
    "This", "is", "a", "streamed", "reply", "from", "the", "fake.",
];

/// A fault injected after this many content chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    Cut(u32),
    Hang(u32),
    Malformed(u32),
    /// A Responses stream ends with `response.failed`, its usage reported
    /// (a chat stream has no such event and ignores it).
    Failed(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StreamPlan {
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
        let ms = |s: &str| s.strip_suffix("ms").and_then(|n| n.parse::<u64>().ok());
        for segment in model.split('+') {
            if let Some(n) = segment.strip_prefix("chunks-").and_then(|n| n.parse().ok()) {
                plan.chunks = n;
            } else if let Some(n) = segment.strip_prefix("chunk-delay-").and_then(ms) {
                plan.chunk_delay_ms = n.min(MAX_DELAY_MS);
            } else if let Some(n) = segment.strip_prefix("ttft-").and_then(ms) {
                plan.ttft_ms = n.min(MAX_DELAY_MS);
            } else if let Some(n) = segment
                .strip_prefix("cut-after-")
                .and_then(|n| n.parse().ok())
            {
                plan.fault = Some(Fault::Cut(n));
            } else if let Some(n) = segment
                .strip_prefix("hang-after-")
                .and_then(|n| n.parse().ok())
            {
                plan.fault = Some(Fault::Hang(n));
            } else if let Some(n) = segment
                .strip_prefix("malformed-after-")
                .and_then(|n| n.parse().ok())
            {
                plan.fault = Some(Fault::Malformed(n));
            } else if let Some(n) = segment
                .strip_prefix("failed-after-")
                .and_then(|n| n.parse().ok())
            {
                plan.fault = Some(Fault::Failed(n));
            }
        }
        plan
    }
}

/// The content of content chunk `i`.
pub fn chunk_text(i: u32) -> String {
    let word = WORDS[usize::try_from(i).unwrap_or(0) % WORDS.len()];
    format!("{word} ")
}

/// Marks the stream cancelled if it is dropped before it finished.
pub(super) struct Watch {
    stats: Arc<FakeStats>,
    /// Set when the stream was sent to its end (or its scripted fault's).
    pub finished: bool,
}

impl Watch {
    /// Counts a stream begun; its drop counts how it ended.
    pub fn start(stats: Arc<FakeStats>) -> Watch {
        stats.stream_started();
        Watch {
            stats,
            finished: false,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.finished {
            self.stats.stream_completed();
        } else {
            self.stats.stream_cancelled();
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
    step: Step,
    base: Value,
    usage: Option<Value>,
    include_usage: bool,
    watch: Watch,
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

fn chunk(base: &Value, choices: Value) -> Value {
    let mut value = base.clone();
    if let Some(object) = value.as_object_mut() {
        object.insert("choices".to_owned(), choices);
    }
    value
}

pub(super) fn response(
    plan: StreamPlan,
    request: &Value,
    model: &str,
    id: &str,
    created: u64,
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
        step: Step::First,
        base: json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model}),
        usage,
        include_usage,
        watch: Watch::start(stats),
    };
    let body = stream::unfold(initial, |mut state| async move {
        let item = next(&mut state).await?;
        Some((item, state))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("cache-control", "no-cache"))
        .streaming(body)
}

pub(super) async fn sleep_ms(ms: u64) {
    if ms > 0 {
        actix_rt::time::sleep(Duration::from_millis(ms)).await;
    }
}

async fn next(state: &mut State) -> Option<Result<Bytes, std::io::Error>> {
    loop {
        match state.step {
            Step::First => {
                sleep_ms(state.plan.ttft_ms).await;
                state.step = Step::Content(0);
                let choices = json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]);
                return Some(Ok(event(&chunk(&state.base, choices))));
            }
            Step::Content(i) => {
                match state.plan.fault {
                    Some(Fault::Cut(n)) if i == n => {
                        sleep_ms(state.plan.chunk_delay_ms.max(CUT_FLUSH_MS)).await;
                        state.step = Step::End;
                        return Some(Err(std::io::Error::other("fake upstream: cut-after")));
                    }
                    Some(Fault::Hang(n)) if i == n => {
                        sleep_ms(MAX_DELAY_MS).await;
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
                if i >= state.plan.chunks {
                    state.step = Step::Finish;
                    continue;
                }
                if i > 0 {
                    sleep_ms(state.plan.chunk_delay_ms).await;
                }
                state.step = Step::Content(i + 1);
                let choices = json!([{"index": 0, "delta": {"content": chunk_text(i)}, "finish_reason": null}]);
                return Some(Ok(event(&chunk(&state.base, choices))));
            }
            Step::Finish => {
                state.step = Step::Usage;
                let choices = json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]);
                return Some(Ok(event(&chunk(&state.base, choices))));
            }
            Step::Usage => {
                state.step = Step::Done;
                if let (true, Some(usage)) = (state.include_usage, state.usage.take()) {
                    let mut value = chunk(&state.base, json!([]));
                    if let Some(object) = value.as_object_mut() {
                        object.insert("usage".to_owned(), usage);
                    }
                    return Some(Ok(event(&value)));
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
