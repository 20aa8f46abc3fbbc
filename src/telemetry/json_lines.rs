//! The JSON line of a log event, in the shape of `tracing-subscriber`'s JSON
//! format (flattened fields; `target`; `span` and `spans` inside a span) but
//! written straight into one buffer, its strings escaped by serde_json as the
//! doors' stream events are (`write_json_string`). That formatter serializes
//! through a `fmt::Write` adapter that checks every token as UTF-8 again: the
//! access log line alone took 4% of the gateway's CPU under load.

use std::fmt;
use std::io::Write as _;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::openai::responses::write_json_string;

/// Events that came from the `log` crate carry their real target (and their
/// module, file and line) in fields of this prefix.
const LOG_FIELD_PREFIX: &str = "log.";

pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Vec::with_capacity(384);
        // Writing into a Vec cannot fail.
        let _ = write!(
            line,
            "{{\"timestamp\":\"{:.6}\",\"level\":\"{}\"",
            crate::clock::wall_time(),
            meta.level().as_str()
        );
        let mut fields = Fields {
            line: &mut line,
            log_target: None,
        };
        event.record(&mut fields);
        let target = fields.log_target.take();
        push_key(&mut line, "target");
        write_json_string(&mut line, target.as_deref().unwrap_or(meta.target()));
        let current = event
            .parent()
            .and_then(|id| ctx.span(id))
            .or_else(|| ctx.lookup_current());
        if let Some(current) = current {
            push_key(&mut line, "span");
            push_span::<N>(&mut line, current.name(), &current.extensions());
            push_key(&mut line, "spans");
            line.push(b'[');
            for (i, span) in current.scope().from_root().enumerate() {
                if i > 0 {
                    line.push(b',');
                }
                push_span::<N>(&mut line, span.name(), &span.extensions());
            }
            line.push(b']');
        }
        line.extend_from_slice(b"}\n");
        // One check of the whole line: every piece was a `str` or ASCII.
        writer.write_str(std::str::from_utf8(&line).map_err(|_| fmt::Error)?)
    }
}

/// A span as `{"<field>": …, "name": "<name>"}`. The fields were formatted
/// as a JSON object when the span was made (`JsonFields`); this happens only
/// for events inside a span, which the request path's do not take.
fn push_span<N: 'static>(
    line: &mut Vec<u8>,
    name: &str,
    extensions: &tracing_subscriber::registry::Extensions<'_>,
) {
    let mut object = extensions
        .get::<FormattedFields<N>>()
        .and_then(|fields| serde_json::from_str::<Map<String, Value>>(fields).ok())
        .unwrap_or_default();
    object.insert("name".to_owned(), Value::String(name.to_owned()));
    let _ = serde_json::to_writer(&mut *line, &Value::Object(object));
}

/// `,"key":`
fn push_key(line: &mut Vec<u8>, key: &str) {
    line.push(b',');
    write_json_string(line, key);
    line.push(b':');
}

/// Writes each field as `,"name":value`, in the order recorded.
struct Fields<'a> {
    line: &'a mut Vec<u8>,
    /// The `log.target` of an event from the `log` crate.
    log_target: Option<String>,
}

impl Fields<'_> {
    /// `false` for the `log.*` fields, kept out of the line as the JSON format does.
    fn key(&mut self, field: &Field) -> bool {
        if field.name().starts_with(LOG_FIELD_PREFIX) {
            return false;
        }
        push_key(self.line, field.name());
        true
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "log.target" {
            self.log_target = Some(value.to_owned());
        }
        if self.key(field) {
            write_json_string(self.line, value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.key(field) {
            let _ = write!(self.line, "{value}");
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.key(field) {
            let _ = write!(self.line, "{value}");
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.key(field) {
            self.line
                .extend_from_slice(if value { b"true" } else { b"false" });
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if self.key(field) {
            if value.is_finite() {
                let _ = write!(self.line, "{value}");
            } else {
                self.line.extend_from_slice(b"null");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.key(field) {
            write_json_string(self.line, &format!("{value:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// Collects what the subscriber writes.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    fn logged(emit: impl FnOnce()) -> Vec<Value> {
        let lines = Lines::default();
        let subscriber = crate::telemetry::logging::json_subscriber(
            lines.clone(),
            tracing_subscriber::EnvFilter::new("info"),
        );
        tracing::subscriber::with_default(subscriber, emit);
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    #[test]
    fn an_event_is_one_json_object_with_its_fields_in_order() {
        let lines = logged(|| {
            tracing::info!(request_id = %"r-1", tenant = "acme \"quoted\"\n", latency_ms = 3_u64, delta = -2_i64, ok = true, "Request served.");
        });
        let [line] = &lines[..] else {
            panic!("{lines:?}")
        };
        let keys: Vec<&str> = line
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "timestamp",
                "level",
                "message",
                "request_id",
                "tenant",
                "latency_ms",
                "delta",
                "ok",
                "target"
            ]
        );
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["message"], "Request served.");
        assert_eq!(line["request_id"], "r-1");
        assert_eq!(line["tenant"], "acme \"quoted\"\n");
        assert_eq!(line["latency_ms"], 3);
        assert_eq!(line["delta"], -2);
        assert_eq!(line["ok"], true);
        assert_eq!(line["target"], module_path!());
        let timestamp = line["timestamp"].as_str().unwrap();
        assert!(timestamp.parse::<jiff::Timestamp>().is_ok(), "{timestamp}");
        assert_eq!(
            timestamp.len(),
            "2026-12-04T23:12:40.107207Z".len(),
            "{timestamp}"
        );
    }

    #[test]
    fn an_event_inside_a_span_names_it_and_its_parents() {
        let lines = logged(|| {
            let outer = tracing::info_span!("request", api = "chat", tenant = "acme");
            let _outer = outer.enter();
            let inner = tracing::info_span!("attempt", number = 2_u64);
            let _inner = inner.enter();
            tracing::warn!(status = 503_u64, "Upstream failed.");
        });
        let [line] = &lines[..] else {
            panic!("{lines:?}")
        };
        assert_eq!(line["span"]["name"], "attempt");
        assert_eq!(line["span"]["number"], 2);
        assert_eq!(line["spans"][0]["name"], "request");
        assert_eq!(line["spans"][0]["tenant"], "acme");
        assert_eq!(line["spans"][1]["name"], "attempt");
        assert_eq!(line["status"], 503);
    }

    #[test]
    fn control_characters_and_backslashes_are_escaped() {
        // A raw control character would make the line unreadable as JSON.
        let lines = logged(|| tracing::info!(text = "a\u{1}b\\c\r", shown = %"d\u{1f}e", "x"));
        let [line] = &lines[..] else {
            panic!("{lines:?}")
        };
        assert_eq!(line["text"], "a\u{1}b\\c\r");
        assert_eq!(line["shown"], "d\u{1f}e");
    }
}
