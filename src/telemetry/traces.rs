//! OTLP trace export (`[telemetry] otlp_endpoint`, off by default): one span
//! per request and a child per upstream attempt, with the OpenTelemetry GenAI
//! attributes and Tollgate's own (`tollgate.*`). The caller's `traceparent`
//! is the request span's parent, and each attempt's span is the parent the
//! upstream sees. No prompt or answer text is ever an attribute.
//!
//! A request never waits on export: finished spans go into a bounded queue
//! that one exporter thread drains in batches, POSTing OTLP/HTTP JSON to
//! `{otlp_endpoint}/v1/traces`. A full queue or a collector that does not
//! answer drops spans, counted in `tollgate_trace_spans_dropped_total`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::sync::mpsc::{self, Receiver, Sender};

use super::metrics::{Metric, counter_add};

/// Spans waiting for the exporter at most; past this they are dropped.
const QUEUE_SPANS: usize = 8192;
/// Spans per export request at most.
const BATCH_SPANS: usize = 512;
/// How long a batch waits to fill before it is sent.
const BATCH_WAIT: Duration = Duration::from_millis(500);

/// What a span's duration was for, in OTLP's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// The caller's request to the gateway.
    Server,
    /// One of the gateway's calls to a provider.
    Client,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AttributeValue {
    Text(String),
    Int(i64),
}

/// Where a span sits in its trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanContext {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    pub parent_span_id: Option<String>,
}

impl SpanContext {
    /// The request's span: under the caller's `traceparent` (trace id, span
    /// id) when it sent one, else the root of a new trace.
    pub fn request(caller: Option<(&str, &str)>) -> SpanContext {
        match caller {
            Some((trace_id, parent)) => SpanContext {
                trace_id: trace_id.to_owned(),
                span_id: random_hex::<8>(),
                parent_span_id: Some(parent.to_owned()),
            },
            None => SpanContext {
                trace_id: random_hex::<16>(),
                span_id: random_hex::<8>(),
                parent_span_id: None,
            },
        }
    }

    /// A new span under this one.
    #[must_use]
    pub fn child(&self) -> SpanContext {
        SpanContext {
            trace_id: self.trace_id.clone(),
            span_id: random_hex::<8>(),
            parent_span_id: Some(self.span_id.clone()),
        }
    }

    /// This span as the W3C `traceparent` of a call it makes (sampled).
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

fn random_hex<const N: usize>() -> String {
    use std::fmt::Write as _;
    let bytes: [u8; N] = rand::random();
    // An all-zero id is invalid in W3C and OTLP.
    let bytes = if bytes.iter().all(|b| *b == 0) {
        [1; N]
    } else {
        bytes
    };
    bytes
        .iter()
        .fold(String::with_capacity(N * 2), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

/// A finished span.
#[derive(Debug, Clone)]
pub struct Span {
    pub context: SpanContext,
    pub name: String,
    pub kind: SpanKind,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub attributes: Vec<(&'static str, AttributeValue)>,
    /// `Some(message)`: the span ended in an error.
    pub error: Option<String>,
}

impl Span {
    pub fn text(&mut self, key: &'static str, value: impl Into<String>) -> &mut Span {
        self.attributes
            .push((key, AttributeValue::Text(value.into())));
        self
    }

    pub fn int(&mut self, key: &'static str, value: u64) -> &mut Span {
        let value = i64::try_from(value).unwrap_or(i64::MAX);
        self.attributes.push((key, AttributeValue::Int(value)));
        self
    }
}

/// The GenAI `gen_ai.operation.name` of a door.
pub fn operation_name(api: crate::ledger::Api) -> &'static str {
    match api {
        crate::ledger::Api::Embeddings => "embeddings",
        crate::ledger::Api::Chat | crate::ledger::Api::Responses | crate::ledger::Api::Messages => {
            "chat"
        }
    }
}

/// The wall clock in ns since the epoch: spans carry absolute times.
pub fn now_unix_ns() -> u64 {
    #[expect(
        clippy::disallowed_methods,
        reason = "a span's timestamps are wall-clock instants, as OTLP wants them"
    )]
    let now = SystemTime::now();
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

/// Where spans go: nowhere (off), or the exporter's queue.
#[derive(Clone, Debug, Default)]
pub struct Tracer {
    queue: Option<Sender<Span>>,
}

impl Tracer {
    pub fn off() -> Tracer {
        Tracer { queue: None }
    }

    /// Starts the exporter thread for `endpoint` (`http://host:4318`).
    pub fn start(endpoint: &str, timeout: Duration) -> Result<Tracer, String> {
        let (queue, spans) = mpsc::channel(QUEUE_SPANS);
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        std::thread::Builder::new()
            .name("tollgate-traces".to_owned())
            .spawn(move || actix_rt::System::new().block_on(export(spans, url, timeout)))
            .map_err(|e| format!("cannot start the trace exporter: {e}"))?;
        Ok(Tracer { queue: Some(queue) })
    }

    pub fn enabled(&self) -> bool {
        self.queue.is_some()
    }

    /// Queues a finished span; a full queue drops it.
    pub fn record(&self, span: Span) {
        let Some(queue) = &self.queue else {
            return;
        };
        if queue.try_send(span).is_err() {
            counter_add(
                Metric::TraceSpansDroppedTotal,
                &[("reason", "queue_full")],
                1,
            );
        }
    }
}

/// Drains the queue in batches until every tracer is gone.
async fn export(mut spans: Receiver<Span>, url: String, timeout: Duration) {
    let client = awc::Client::builder().timeout(timeout).finish();
    let mut batch = Vec::with_capacity(BATCH_SPANS);
    while let Some(first) = spans.recv().await {
        batch.push(first);
        let wait = actix_rt::time::sleep(BATCH_WAIT);
        tokio::pin!(wait);
        while batch.len() < BATCH_SPANS {
            tokio::select! {
                next = spans.recv() => match next {
                    Some(span) => batch.push(span),
                    None => break,
                },
                () = &mut wait => break,
            }
        }
        let count = u64::try_from(batch.len()).unwrap_or(u64::MAX);
        let body = encode(&std::mem::take(&mut batch));
        let sent = client
            .post(&url)
            .insert_header(("content-type", "application/json"))
            .send_body(body.to_string())
            .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                counter_add(Metric::TraceSpansExportedTotal, &[], count);
            }
            _ => counter_add(
                Metric::TraceSpansDroppedTotal,
                &[("reason", "export_failed")],
                count,
            ),
        }
    }
}

/// Spans as an OTLP/HTTP JSON `ExportTraceServiceRequest`.
pub fn encode(spans: &[Span]) -> Value {
    json!({
        "resourceSpans": [{
            "resource": {"attributes": [attribute("service.name", &AttributeValue::Text("tollgate".to_owned()))]},
            "scopeSpans": [{
                "scope": {"name": "tollgate", "version": env!("CARGO_PKG_VERSION")},
                "spans": spans.iter().map(encode_span).collect::<Vec<_>>(),
            }],
        }],
    })
}

fn encode_span(span: &Span) -> Value {
    let mut value = json!({
        "traceId": span.context.trace_id,
        "spanId": span.context.span_id,
        "name": span.name,
        "kind": match span.kind { SpanKind::Server => 2, SpanKind::Client => 3 },
        "startTimeUnixNano": span.start_unix_ns.to_string(),
        "endTimeUnixNano": span.end_unix_ns.to_string(),
        "attributes": span.attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
        "status": match &span.error {
            None => json!({"code": 1}),
            Some(message) => json!({"code": 2, "message": message}),
        },
    });
    if let (Some(parent), Value::Object(map)) = (&span.context.parent_span_id, &mut value) {
        map.insert("parentSpanId".to_owned(), Value::String(parent.clone()));
    }
    value
}

fn attribute(key: &str, value: &AttributeValue) -> Value {
    let value = match value {
        AttributeValue::Text(text) => json!({"stringValue": text}),
        // OTLP's JSON mapping carries 64-bit integers as strings.
        AttributeValue::Int(n) => json!({"intValue": n.to_string()}),
    };
    json!({"key": key, "value": value})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_under_a_callers_traceparent_keeps_its_trace_and_parents_its_attempts() {
        let caller = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
        let request = SpanContext::request(Some(caller));
        assert_eq!(request.trace_id, caller.0);
        assert_eq!(request.parent_span_id.as_deref(), Some(caller.1));
        assert_eq!(request.span_id.len(), 16);
        let attempt = request.child();
        assert_eq!(attempt.parent_span_id.as_ref(), Some(&request.span_id));
        assert_eq!(
            attempt.traceparent(),
            format!("00-{}-{}-01", caller.0, attempt.span_id)
        );
        let root = SpanContext::request(None);
        assert_eq!((root.trace_id.len(), root.parent_span_id), (32, None));
    }

    #[test]
    fn spans_encode_as_otlp_json_with_typed_attributes() {
        let mut span = Span {
            context: SpanContext::request(None),
            name: "chat fast".to_owned(),
            kind: SpanKind::Server,
            start_unix_ns: 1,
            end_unix_ns: 2,
            attributes: Vec::new(),
            error: Some("budget_exceeded".to_owned()),
        };
        span.text("gen_ai.operation.name", "chat")
            .int("gen_ai.usage.input_tokens", 12);
        let body = encode(&[span]);
        let encoded = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(encoded["kind"], 2);
        assert_eq!(encoded["startTimeUnixNano"], "1");
        assert_eq!(encoded["status"]["code"], 2);
        assert_eq!(encoded["attributes"][1]["value"]["intValue"], "12");
        assert!(encoded.get("parentSpanId").is_none());
    }
}
