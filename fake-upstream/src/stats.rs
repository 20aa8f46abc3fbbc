//! Counters and the capture log of the fake upstream: written by the server's workers, read by
//! tests and the demo through `RunningFake::stats` while the server keeps running.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::Value;

/// Beyond this many, requests are still counted but no longer captured, so a long load run
/// cannot grow the fake's memory without bound. Tests stay far below it.
const MAX_CAPTURED: usize = 10_000;

/// One chat request as the fake received it.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedRequest {
    pub path: String,
    /// Lower-cased names, sorted by name; repeated headers keep their order.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body; an unparsable body is kept verbatim as a JSON string.
    pub body: Value,
}

impl CapturedRequest {
    /// The first value of a header (name matched case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// Shared counters of one fake upstream instance.
#[derive(Debug, Default)]
pub struct FakeStats {
    inner: Mutex<Inner>,
    streams_started: AtomicU64,
    streams_cancelled: AtomicU64,
    streams_completed: AtomicU64,
    connections: AtomicU64,
    http2_requests: AtomicU64,
    /// Requests being answered now (from arrival until the handler returns:
    /// a non-streaming answer's delay included), and the most at once.
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
}

/// One request being answered: counted in flight until dropped.
pub(crate) struct Answering<'a>(&'a FakeStats);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Default)]
struct Inner {
    requests: u64,
    by_model: HashMap<String, u64>,
    captured: Vec<CapturedRequest>,
}

/// 1-based positions of a request, returned when it is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ordinals {
    /// Among all chat requests of this instance.
    pub request: u64,
    /// Among the requests for the same `model` string (0 when the body names no model).
    pub for_model: u64,
}

impl FakeStats {
    /// TCP connections accepted: how often a client could not reuse a kept-alive one.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests that arrived over HTTP/2.
    pub fn http2_requests(&self) -> u64 {
        self.http2_requests.load(Ordering::SeqCst)
    }

    pub(crate) fn http2_request(&self) {
        self.http2_requests.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn connection_accepted(&self) {
        self.connections.fetch_add(1, Ordering::SeqCst);
    }

    /// A request arrived: counted in flight until the returned guard drops.
    pub(crate) fn answering(&self) -> Answering<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        Answering(self)
    }

    /// Requests being answered right now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests this fake was answering at once.
    pub fn peak_in_flight(&self) -> u64 {
        self.peak_in_flight.load(Ordering::SeqCst)
    }

    /// Streaming answers begun.
    pub fn streams_started(&self) -> u64 {
        self.streams_started.load(Ordering::SeqCst)
    }

    /// Streaming answers dropped by the client before their end.
    pub fn streams_cancelled(&self) -> u64 {
        self.streams_cancelled.load(Ordering::SeqCst)
    }

    /// Streaming answers sent to their end (`[DONE]`, or a scripted fault's end).
    pub fn streams_completed(&self) -> u64 {
        self.streams_completed.load(Ordering::SeqCst)
    }

    pub(crate) fn stream_completed(&self) {
        self.streams_completed.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn stream_started(&self) {
        self.streams_started.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn stream_cancelled(&self) {
        self.streams_cancelled.fetch_add(1, Ordering::SeqCst);
    }

    /// Chat requests received, failures and unparsable bodies included.
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    /// Chat requests whose body carried exactly this `model` string.
    pub fn requests_for_model(&self, model: &str) -> u64 {
        self.lock().by_model.get(model).copied().unwrap_or(0)
    }

    /// Chat requests in arrival order (the first 10 000 of them).
    pub fn captured(&self) -> Vec<CapturedRequest> {
        self.lock().captured.clone()
    }

    pub(crate) fn record(&self, request: CapturedRequest, model: Option<&str>) -> Ordinals {
        let mut inner = self.lock();
        inner.requests = inner.requests.saturating_add(1);
        let for_model = model.map_or(0, |model| {
            let count = inner.by_model.entry(model.to_owned()).or_insert(0);
            *count = count.saturating_add(1);
            *count
        });
        if inner.captured.len() < MAX_CAPTURED {
            inner.captured.push(request);
        }
        Ordinals {
            request: inner.requests,
            for_model,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The guarded data stays consistent even if a holder panicked: every update is a
        // single saturating step.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(body: Value) -> CapturedRequest {
        CapturedRequest {
            path: "/v1/chat/completions".to_owned(),
            headers: vec![("x-trace".to_owned(), "1".to_owned())],
            body,
        }
    }

    #[test]
    fn counts_per_model_and_in_total() {
        let stats = FakeStats::default();
        let first = stats.record(request(json!({"model": "a"})), Some("a"));
        let second = stats.record(request(json!({"model": "b"})), Some("b"));
        let third = stats.record(request(json!({"model": "a"})), Some("a"));
        let unparsable = stats.record(request(json!("{oops")), None);
        assert_eq!(
            first,
            Ordinals {
                request: 1,
                for_model: 1
            }
        );
        assert_eq!(
            second,
            Ordinals {
                request: 2,
                for_model: 1
            }
        );
        assert_eq!(
            third,
            Ordinals {
                request: 3,
                for_model: 2
            }
        );
        assert_eq!(
            unparsable,
            Ordinals {
                request: 4,
                for_model: 0
            }
        );
        assert_eq!(stats.requests(), 4);
        assert_eq!(stats.requests_for_model("a"), 2);
        assert_eq!(stats.requests_for_model("zzz"), 0);
        let captured = stats.captured();
        assert_eq!(captured.len(), 4);
        assert_eq!(captured[1].body, json!({"model": "b"}));
        assert_eq!(captured[0].header("X-Trace"), Some("1"));
    }

    #[test]
    fn requests_in_flight_and_their_peak_are_counted() {
        let stats = FakeStats::default();
        let first = stats.answering();
        let second = stats.answering();
        assert_eq!(stats.in_flight(), 2);
        drop(first);
        drop(second);
        let _third = stats.answering();
        assert_eq!(stats.in_flight(), 1);
        assert_eq!(stats.peak_in_flight(), 2);
    }
}
