//! A route's degraded answer: when every target failed, the configured text
//! comes back as an ordinary assistant message (a complete body, or a short
//! stream), marked by `X-Tollgate-Degraded`. It costs nothing and reserves
//! nothing, but gets a `degraded` ledger row like any other answer.

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::chat::OutcomeBody;
use super::stream::ClientBody;
use crate::money::Nanos;

/// The answer in OpenAI's shape, as a complete body or as a stream.
pub fn body(
    text: &str,
    model: &str,
    id: &str,
    created_s: u64,
    stream: Option<bool>,
) -> OutcomeBody {
    let id = format!("chatcmpl-{id}");
    let zero_usage = json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0});
    let Some(include_usage) = stream else {
        let body = json!({
            "id": id,
            "object": "chat.completion",
            "created": created_s,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": null},
                "logprobs": null,
                "finish_reason": "stop",
            }],
            "usage": zero_usage,
        });
        return OutcomeBody::Complete {
            body: Bytes::from(body.to_string()),
            cost: Nanos::ZERO,
            remaining: None,
        };
    };
    let chunk = |choices: Value, usage: Option<&Value>| {
        let mut chunk = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created_s,
            "model": model,
            "choices": choices,
        });
        if let Some(usage) = usage {
            chunk["usage"] = usage.clone();
        }
        Bytes::from(format!("data: {chunk}\n\n"))
    };
    let mut events = vec![
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]),
            None,
        ),
        chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            None,
        ),
    ];
    if include_usage {
        events.push(chunk(json!([]), Some(&zero_usage)));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    OutcomeBody::Stream {
        body: canned(events),
        prompt_tokens: 0,
    }
}

/// A stream whose every event is known now.
pub(super) fn canned(events: Vec<Bytes>) -> ClientBody {
    let (tx, rx) = mpsc::channel(events.len().max(1));
    for event in events {
        // The channel holds every event: sending cannot wait or fail while `rx` lives.
        let _ = tx.try_send(Ok(event));
    }
    rx
}
