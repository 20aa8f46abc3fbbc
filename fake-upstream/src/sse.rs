//! Writing server-sent events, as every fake's streaming answers do, and counting how each
//! stream ended.

use std::fmt::Write as _;
use std::sync::Arc;

use actix_web::HttpResponse;
use actix_web::HttpResponseBuilder;
use actix_web::http::header;
use bytes::Bytes;
use serde_json::Value;

use crate::stats::FakeStats;

/// A `200` event stream's head; the caller adds the body (whole, or streamed).
pub(crate) fn ok() -> HttpResponseBuilder {
    let mut builder = HttpResponse::Ok();
    builder
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"));
    builder
}

/// Appends a named event (`event: …`, then its `data: …`), as the Messages and Responses APIs
/// send them.
pub(crate) fn event(out: &mut String, name: &str, data: &Value) {
    // Writing to a String cannot fail.
    let _ = write!(out, "event: {name}\ndata: {data}\n\n");
}

/// An unnamed event, as chat completions' chunks are sent.
pub(crate) fn data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// `text` cut in two near its middle, on a character boundary: a tool call's arguments as
/// the APIs stream them, in fragments.
pub(crate) fn halves(text: &str) -> (&str, &str) {
    let middle = (text.len() / 2..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    text.split_at(middle)
}

/// Marks the stream cancelled if it is dropped before it finished.
pub(crate) struct Watch {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn halves_split_on_a_character_boundary() {
        assert_eq!(halves("{\"a\":1}"), ("{\"a", "\":1}"));
        assert_eq!(halves("aé"), ("a", "é"));
        assert_eq!(halves(""), ("", ""));
    }

    #[test]
    fn events_are_framed_as_the_apis_frame_them() {
        let mut out = String::new();
        event(&mut out, "ping", &json!({"type": "ping"}));
        assert_eq!(out, "event: ping\ndata: {\"type\":\"ping\"}\n\n");
        assert_eq!(data(&json!(1)), Bytes::from_static(b"data: 1\n\n"));
    }
}
