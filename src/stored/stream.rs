//! A Responses stream whose final response is stored before the caller
//! reads its last event: a client that sends its next turn the moment the
//! stream ends finds this one stored.

use std::pin::Pin;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, stream};
use serde_json::Value;

use super::{Keep, ResponseStore};

type Chunk = Result<Bytes, std::io::Error>;
type Events = Pin<Box<dyn Stream<Item = Chunk>>>;

/// The events that end a response, carrying it whole.
const FINAL_EVENTS: [&str; 3] = [
    "response.completed",
    "response.incomplete",
    "response.failed",
];

/// Relays `events`, storing the response their final event carries.
pub fn relay(events: Events, store: ResponseStore, keep: Keep) -> Events {
    let state = Watch {
        events,
        store,
        keep,
        pending: Vec::new(),
    };
    Box::pin(stream::unfold(state, |mut watch| async move {
        let chunk = watch.events.next().await?;
        if let Ok(bytes) = &chunk
            && let Some(response) = final_response(&mut watch.pending, bytes)
        {
            watch.store.save(&watch.keep, &response).await;
        }
        Some((chunk, watch))
    }))
}

struct Watch {
    events: Events,
    store: ResponseStore,
    keep: Keep,
    /// The event not yet ended by a blank line.
    pending: Vec<u8>,
}

/// The response of a final event that `bytes` completes, if any; `pending`
/// keeps the event not yet ended by a blank line.
fn final_response(pending: &mut Vec<u8>, bytes: &[u8]) -> Option<Value> {
    pending.extend_from_slice(bytes);
    let mut found = None;
    while let Some(end) = find(pending, b"\n\n") {
        let event: Vec<u8> = pending.drain(..end + 2).collect();
        if let Some(response) = response_of(&event) {
            found = Some(response);
        }
    }
    found
}

/// The `response` of one SSE event, if it is a final one.
fn response_of(event: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(event).ok()?;
    // Only the last event is parsed: the others pass untouched.
    if !FINAL_EVENTS.iter().any(|kind| text.contains(kind)) {
        return None;
    }
    let data: String = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim_start)
        .collect();
    let parsed: Value = serde_json::from_str(&data).ok()?;
    let kind = parsed["type"].as_str()?;
    FINAL_EVENTS
        .contains(&kind)
        .then(|| parsed["response"].clone())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_event_split_across_chunks_yields_its_response_once_whole() {
        let event = b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\"}}\n\n";
        let before = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\"}\n\n";
        let mut pending = Vec::new();
        let mut watch_bytes = |bytes: &[u8]| final_response(&mut pending, bytes);
        assert!(watch_bytes(before).is_none());
        assert!(watch_bytes(&event[..30]).is_none());
        assert_eq!(watch_bytes(&event[30..]).unwrap()["id"], "resp_1");
    }
}
