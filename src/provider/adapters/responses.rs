//! A request of the Responses door to a provider that speaks OpenAI's
//! Responses API (`kind = "openai"`, `responses = true`). The caller's bytes
//! go upstream with only `model`, `max_output_tokens` (the held limit) and,
//! where the provider takes it, `user` (the tenant) rewritten, so `reasoning`,
//! `text`, `include` and fields the gateway does not know arrive as sent. The
//! answer comes back unchanged and is read only for billing: a `response`
//! object's usage; a stream's generated text (counted against the hold), its
//! final usage and its end. When the relay ends a stream itself it ends it as
//! the translating Responses path does (`openai/responses.rs`), so an SDK sees
//! the same shapes whichever path served it.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::openai::ResponseUsage;
use super::passthrough::{from_values, rewrite};
use super::{Ending, Relayed, Translated};
use crate::openai::responses::{incomplete_at_limit, usage_object};
use crate::pipeline::stream::STREAM_INTERRUPTED;
use crate::pricing::Usage;
use crate::prompts::{Prefix, place};

/// The upstream body: the caller's, with the target's model, the held output
/// limit, `store: false` and, if the provider takes the tenant, `user` (the caller's own
/// `user` is replaced, as at OpenAI's chat API), and the gateway's prompts
/// opening `instructions`.
pub fn build_body(
    native: &[u8],
    model: &str,
    max_tokens: u32,
    user: Option<&str>,
    prefix: Option<&Prefix<'_>>,
) -> Bytes {
    let model_json = Value::from(model).to_string();
    let max_tokens_json = max_tokens.to_string();
    let user_json = user.map(|user| Value::from(user).to_string());
    let mut set = vec![
        ("model", model_json.as_str()),
        ("max_output_tokens", max_tokens_json.as_str()),
        // The provider stores a response unless told not to; the gateway
        // keeps no state there, and the caller's data stays unstored.
        ("store", "false"),
    ];
    if let Some(user) = &user_json {
        set.push(("user", user.as_str()));
    }
    match prefix {
        Some(prefix) => from_values(native, &set, |body| {
            place::responses_instructions(body, prefix);
        }),
        None => rewrite(native, &set),
    }
}

/// The fields of a `response` object billing reads.
#[derive(Deserialize)]
struct ResponseBody {
    usage: Option<RawUsage>,
    #[serde(default)]
    output: Vec<Value>,
}

/// A `response` object's `usage`. `input_tokens` counts the cached and
/// cache-write tokens within it, and `output_tokens` the reasoning tokens
/// (`output_tokens_details.reasoning_tokens`), which are priced as output:
/// the same reading as chat's `prompt_tokens` and `completion_tokens`.
#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    input_tokens_details: Option<InputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    cached_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
}

impl RawUsage {
    fn to_usage(&self) -> Usage {
        let details = self.input_tokens_details.as_ref();
        Usage {
            prompt_tokens: self.input_tokens,
            cached_tokens: details.and_then(|d| d.cached_tokens).unwrap_or(0),
            cache_write_tokens: details.and_then(|d| d.cache_write_tokens).unwrap_or(0),
            completion_tokens: self.output_tokens,
            web_searches: 0,
        }
    }
}

/// What a complete answer, which passes on unchanged, says about its cost;
/// without a usage block its generated text, to be counted.
pub fn read_usage(body: &[u8]) -> Result<ResponseUsage, String> {
    let response: ResponseBody = serde_json::from_slice(body)
        .map_err(|e| format!("the upstream's answer is not a response object: {e}"))?;
    Ok(match response.usage {
        Some(usage) => ResponseUsage::Reported(Usage {
            web_searches: web_searches(&response.output),
            ..usage.to_usage()
        }),
        None => ResponseUsage::Missing {
            completion_text: generated_output(&response.output),
        },
    })
}

/// A `response` object's usage, with the searches its output made.
fn usage_of(response: &Value) -> Option<Usage> {
    let usage = serde_json::from_value::<RawUsage>(response["usage"].clone()).ok()?;
    let output = response["output"].as_array().map_or(&[][..], Vec::as_slice);
    Some(Usage {
        web_searches: web_searches(output),
        ..usage.to_usage()
    })
}

/// The web searches among a response's output items: each bills a fee.
/// Every `web_search_call` counts, whatever its action (a search, opening
/// a page, finding in it): one counted that was not billed overcharges a
/// fee, one missed would spend past the hold.
fn web_searches(output: &[Value]) -> u64 {
    let calls = output
        .iter()
        .filter(|item| item["type"] == "web_search_call")
        .count();
    u64::try_from(calls).unwrap_or(u64::MAX)
}

/// Every generated text of a response's output items: message text and
/// refusals, function call arguments, reasoning text and summaries.
fn generated_output(output: &[Value]) -> String {
    let mut texts: Vec<&str> = Vec::new();
    for item in output {
        if let Some(arguments) = item["arguments"].as_str() {
            texts.push(arguments);
        }
        for part in ["content", "summary"]
            .iter()
            .filter_map(|field| item[*field].as_array())
            .flatten()
        {
            texts.extend(part["text"].as_str());
            texts.extend(part["refusal"].as_str());
        }
    }
    texts.join("\n")
}

/// The generated text a stream event carries: what counts against the hold.
fn generated_text<'a>(kind: &str, event: &'a Value) -> &'a str {
    match kind {
        "response.output_text.delta"
        | "response.refusal.delta"
        | "response.function_call_arguments.delta"
        | "response.reasoning_text.delta"
        | "response.reasoning_summary_text.delta" => event["delta"].as_str().unwrap_or_default(),
        _ => "",
    }
}

/// One output item as the stream has built it so far.
#[derive(Debug)]
struct Item {
    /// As added, with the deltas since applied (like an SDK's snapshot), or as done.
    value: Value,
    done: bool,
    /// Content parts added and not yet done, which a cut must close.
    open_parts: BTreeSet<u64>,
}

/// The Responses API's typed events, forwarded as they came, read for billing.
#[derive(Debug, Default)]
pub struct EventRelay {
    /// The upstream's latest `response` (from `response.created` or
    /// `response.in_progress`): what a cut's `response.incomplete` repeats.
    response: Value,
    /// Output items by `output_index`.
    items: BTreeMap<u64, Item>,
    /// The `sequence_number` that follows the last event the caller has.
    next_sequence: u64,
    /// The last event, applied to the state above once the next event
    /// arrives: only then is it known to have reached the caller (the relay
    /// drops the event that would pass the hold, and then cuts).
    pending: Option<(String, Value)>,
}

impl EventRelay {
    pub fn new() -> EventRelay {
        EventRelay::default()
    }

    /// `event` is one complete SSE event without its terminating blank line.
    pub fn on_event(&mut self, event: &[u8]) -> Translated {
        if let Some((kind, data)) = self.pending.take() {
            self.apply(&kind, &data);
        }
        let mut bytes = Vec::with_capacity(event.len() + 2);
        bytes.extend_from_slice(event);
        bytes.extend_from_slice(b"\n\n");
        let bytes = Some(Bytes::from(bytes));
        let (name, data) = super::event_fields(event);
        if data.is_empty() {
            return Translated::Events(vec![Relayed {
                bytes,
                content: String::new(),
                usage: None,
                unseen_tokens: 0,
            }]);
        }
        let Ok(parsed) = serde_json::from_str::<Value>(&data) else {
            return Translated::Broken("malformed SSE line".to_owned());
        };
        let kind = match parsed["type"].as_str() {
            Some(kind) => kind.to_owned(),
            None => name,
        };
        match kind.as_str() {
            "error" => Translated::Broken(format!(
                "upstream error event: {}",
                parsed["message"].as_str().unwrap_or(&data)
            )),
            "response.failed" => {
                let reason = format!(
                    "upstream response.failed: {}",
                    parsed["response"]["error"]["message"]
                        .as_str()
                        .unwrap_or("no error given")
                );
                // A failed response still says what it billed: that is the charge.
                match usage_of(&parsed["response"]) {
                    Some(usage) => Translated::Failed { reason, usage },
                    None => Translated::Broken(reason),
                }
            }
            "response.completed" | "response.incomplete" => {
                let usage = usage_of(&parsed["response"]);
                Translated::Done(vec![Relayed {
                    bytes,
                    content: String::new(),
                    usage,
                    unseen_tokens: 0,
                }])
            }
            _ => {
                let content = generated_text(&kind, &parsed).to_owned();
                self.pending = Some((kind, parsed));
                Translated::Events(vec![Relayed {
                    bytes,
                    content,
                    usage: None,
                    unseen_tokens: 0,
                }])
            }
        }
    }

    /// One event the caller has, applied to what a cut would close.
    fn apply(&mut self, kind: &str, event: &Value) {
        self.next_sequence = event["sequence_number"]
            .as_u64()
            .unwrap_or(self.next_sequence)
            .saturating_add(1);
        let output_index = event["output_index"].as_u64().unwrap_or(0);
        let content_index = event["content_index"].as_u64().unwrap_or(0);
        match kind {
            "response.created" | "response.in_progress" | "response.queued"
                if event["response"].is_object() =>
            {
                self.response = event["response"].clone();
            }
            "response.output_item.added" | "response.output_item.done"
                if event["item"].is_object() =>
            {
                let item = Item {
                    value: event["item"].clone(),
                    done: kind == "response.output_item.done",
                    open_parts: BTreeSet::new(),
                };
                self.items.insert(output_index, item);
            }
            _ => {
                if let Some(item) = self.items.get_mut(&output_index) {
                    item.apply(kind, event, content_index);
                }
            }
        }
    }

    /// The events that end a stream the relay ended: at the hold, every open
    /// part and item closed and `response.incomplete` with the usage charged,
    /// as the translating path ends one; broken, its `error` event. A
    /// finished stream already passed on its last event.
    pub fn ending(&self, end: &Ending<'_>) -> Bytes {
        let mut out = Events {
            out: String::new(),
            sequence: self.next_sequence,
        };
        match end {
            Ending::Done => {}
            Ending::Cut {
                input_tokens,
                output_tokens,
            } => {
                // The pending event is the one that would have passed the hold: dropped.
                let mut output = Vec::with_capacity(self.items.len());
                for (index, item) in &self.items {
                    output.push(if item.done {
                        item.value.clone()
                    } else {
                        item.close(*index, &mut out)
                    });
                }
                let mut response = self.response.clone();
                response["status"] = json!("incomplete");
                response["incomplete_details"] = incomplete_at_limit();
                response["output"] = Value::Array(output);
                response["usage"] = usage_object(*input_tokens, 0, *output_tokens, 0);
                out.push("response.incomplete", json!({"response": response}));
            }
            Ending::Broken(reason) => {
                // The pending event reached the caller before the stream broke.
                if let Some((_, event)) = &self.pending {
                    out.sequence = event["sequence_number"]
                        .as_u64()
                        .unwrap_or(out.sequence)
                        .saturating_add(1);
                }
                // The error event the translating path sends for the relay's own.
                out.push(
                    "error",
                    json!({"code": STREAM_INTERRUPTED, "param": null,
                           "message": format!("the upstream stream broke: {reason}")}),
                );
            }
        }
        Bytes::from(out.out)
    }
}

impl Item {
    /// A part or delta event of this item.
    fn apply(&mut self, kind: &str, event: &Value, content_index: u64) {
        let part = usize::try_from(content_index).unwrap_or(usize::MAX);
        let delta = event["delta"].as_str().unwrap_or_default();
        match kind {
            "response.content_part.added" | "response.content_part.done" => {
                let Some(content) = self.value["content"].as_array_mut() else {
                    return;
                };
                if part < content.len() {
                    content[part] = event["part"].clone();
                } else {
                    content.push(event["part"].clone());
                }
                if kind == "response.content_part.added" {
                    self.open_parts.insert(content_index);
                } else {
                    self.open_parts.remove(&content_index);
                }
            }
            "response.output_text.delta" | "response.reasoning_text.delta" => {
                append(self.part_field(part, "text"), delta);
            }
            "response.refusal.delta" => append(self.part_field(part, "refusal"), delta),
            "response.function_call_arguments.delta" => {
                let arguments = self
                    .value
                    .as_object_mut()
                    .map(|item| item.entry("arguments").or_insert(Value::Null));
                append(arguments, delta);
            }
            _ => {}
        }
    }

    /// A field of one of this item's content parts, if the item has that part.
    fn part_field(&mut self, part: usize, field: &str) -> Option<&mut Value> {
        let part = self
            .value
            .get_mut("content")?
            .as_array_mut()?
            .get_mut(part)?
            .as_object_mut()?;
        Some(part.entry(field).or_insert(Value::Null))
    }

    /// Closes this item's open parts and then the item, as the stream would
    /// have had it ended here; returns the item as closed.
    fn close(&self, output_index: u64, out: &mut Events) -> Value {
        let mut item = self.value.clone();
        let item_id = item["id"].clone();
        for content_index in &self.open_parts {
            let part = usize::try_from(*content_index).unwrap_or(usize::MAX);
            let value = &item["content"][part];
            let at = json!({"item_id": item_id, "output_index": output_index,
                            "content_index": content_index});
            let (done, field) = match value["type"].as_str() {
                Some("output_text") => ("response.output_text.done", "text"),
                Some("refusal") => ("response.refusal.done", "refusal"),
                Some("reasoning_text") => ("response.reasoning_text.done", "text"),
                _ => ("", ""),
            };
            if !done.is_empty() {
                let mut event = at.clone();
                event[field] = value[field].clone();
                if field == "text" && done == "response.output_text.done" {
                    event["logprobs"] = json!([]);
                }
                out.push(done, event);
            }
            let mut event = at;
            event["part"] = value.clone();
            out.push("response.content_part.done", event);
        }
        if item["type"] == "function_call" {
            out.push(
                "response.function_call_arguments.done",
                json!({"item_id": item_id, "output_index": output_index,
                       "arguments": item["arguments"]}),
            );
        }
        item["status"] = json!("incomplete");
        out.push(
            "response.output_item.done",
            json!({"output_index": output_index, "item": item}),
        );
        item
    }
}

/// Grows a text field by a delta, in place: a long stream's text is not
/// copied again for every delta. An event for a part never added changes nothing.
fn append(field: Option<&mut Value>, delta: &str) {
    match field {
        Some(Value::String(text)) => text.push_str(delta),
        Some(field) => *field = Value::String(delta.to_owned()),
        None => {}
    }
}

/// Typed events the relay writes, numbered on from the upstream's.
struct Events {
    out: String,
    sequence: u64,
}

impl Events {
    fn push(&mut self, kind: &str, mut event: Value) {
        event["type"] = json!(kind);
        event["sequence_number"] = json!(self.sequence);
        self.sequence = self.sequence.saturating_add(1);
        self.out.push_str("event: ");
        self.out.push_str(kind);
        self.out.push_str("\ndata: ");
        self.out.push_str(&event.to_string());
        self.out.push_str("\n\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_model_max_output_tokens_store_and_user_change_in_the_caller_s_bytes() {
        let native = br#"{"model":"fast","input":"hi","max_output_tokens":9000,"reasoning":{"effort":"high"},"x_new":[1]}"#;
        let body = build_body(native, "gpt-5", 100, None, None);
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            r#"{"model":"gpt-5","input":"hi","max_output_tokens":100,"reasoning":{"effort":"high"},"x_new":[1],"store":false}"#
        );
        let body = build_body(
            br#"{"model":"fast","input":"hi","user":"me"}"#,
            "gpt-5",
            7,
            Some("t-1"),
            None,
        );
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            json!({"model": "gpt-5", "input": "hi", "user": "t-1", "max_output_tokens": 7, "store": false})
        );
        let escaped = br#"{"mod\u0065l":"fast","input":"hi"}"#;
        let body: Value =
            serde_json::from_slice(&build_body(escaped, "gpt-5", 7, None, None)).unwrap();
        assert_eq!(
            (body["model"].clone(), body["max_output_tokens"].clone()),
            (json!("gpt-5"), json!(7))
        );
    }

    #[test]
    fn usage_reads_cached_and_cache_write_input_and_counts_reasoning_as_output() {
        let body = br#"{"object":"response","output":[],"usage":{"input_tokens":300,
            "input_tokens_details":{"cached_tokens":200,"cache_write_tokens":50},
            "output_tokens":40,"output_tokens_details":{"reasoning_tokens":30},"total_tokens":340}}"#;
        let Ok(ResponseUsage::Reported(usage)) = read_usage(body) else {
            panic!("no usage")
        };
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: 300,
                cached_tokens: 200,
                cache_write_tokens: 50,
                completion_tokens: 40,
                web_searches: 0,
            }
        );
        let bare = br#"{"usage":{"input_tokens":3,"output_tokens":4,"input_tokens_details":null}}"#;
        let Ok(ResponseUsage::Reported(usage)) = read_usage(bare) else {
            panic!("no usage")
        };
        assert_eq!((usage.prompt_tokens, usage.cached_tokens), (3, 0));
    }

    #[test]
    fn an_answer_without_usage_yields_its_generated_text_and_junk_is_an_error() {
        let body = br#"{"object":"response","usage":null,"output":[
            {"type":"reasoning","summary":[{"type":"summary_text","text":"thought"}]},
            {"type":"message","content":[{"type":"output_text","text":"Hello"},{"type":"refusal","refusal":"no"}]},
            {"type":"function_call","call_id":"c","name":"f","arguments":"{\"a\":1}"}]}"#;
        let Ok(ResponseUsage::Missing { completion_text }) = read_usage(body) else {
            panic!("usage where there is none")
        };
        assert_eq!(completion_text, "thought\nHello\nno\n{\"a\":1}");
        assert!(read_usage(b"not json").is_err());
        assert!(read_usage(b"[1]").is_err());
    }

    fn event(kind: &str, data: &Value) -> Vec<u8> {
        let mut data = data.clone();
        data["type"] = json!(kind);
        format!("event: {kind}\ndata: {data}").into_bytes()
    }

    fn relayed(translated: Translated) -> Relayed {
        match translated {
            Translated::Events(mut relayed) | Translated::Done(mut relayed) => relayed.remove(0),
            Translated::Broken(reason) | Translated::Failed { reason, .. } => {
                panic!("broken: {reason}")
            }
        }
    }

    /// A stream up to a text delta and a function call's arguments, the last
    /// delta being the one the relay drops at the hold.
    fn started() -> (EventRelay, Vec<Vec<u8>>) {
        let response = json!({"id": "resp_1", "object": "response", "status": "in_progress",
            "model": "gpt-5", "output": [], "usage": null});
        let message = json!({"type": "message", "id": "msg_1", "status": "in_progress",
            "role": "assistant", "content": []});
        let part = json!({"type": "output_text", "text": "", "annotations": []});
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
            "name": "f", "arguments": "", "status": "in_progress"});
        let events = vec![
            event(
                "response.created",
                &json!({"response": response, "sequence_number": 0}),
            ),
            event(
                "response.output_item.added",
                &json!({"output_index": 0, "item": message, "sequence_number": 1}),
            ),
            event(
                "response.content_part.added",
                &json!({"item_id": "msg_1", "output_index": 0,
                "content_index": 0, "part": part, "sequence_number": 2}),
            ),
            event(
                "response.output_text.delta",
                &json!({"item_id": "msg_1", "output_index": 0,
                "content_index": 0, "delta": "Hel", "logprobs": [], "sequence_number": 3}),
            ),
            event(
                "response.output_text.delta",
                &json!({"item_id": "msg_1", "output_index": 0,
                "content_index": 0, "delta": "lo", "logprobs": [], "sequence_number": 4}),
            ),
            event(
                "response.output_item.added",
                &json!({"output_index": 1, "item": call, "sequence_number": 5}),
            ),
            event(
                "response.function_call_arguments.delta",
                &json!({"item_id": "fc_1",
                "output_index": 1, "delta": "{\"a\":", "sequence_number": 6}),
            ),
            event(
                "response.function_call_arguments.delta",
                &json!({"item_id": "fc_1",
                "output_index": 1, "delta": "1}", "sequence_number": 7}),
            ),
        ];
        let mut relay = EventRelay::new();
        for event in &events {
            let relayed = relayed(relay.on_event(event));
            let mut forwarded = event.clone();
            forwarded.extend_from_slice(b"\n\n");
            assert_eq!(relayed.bytes.as_deref(), Some(&forwarded[..]));
        }
        (relay, events)
    }

    fn kinds(text: &str) -> Vec<&str> {
        text.lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect()
    }

    fn datas(text: &str) -> Vec<Value> {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn events_pass_unchanged_and_their_generated_text_is_counted() {
        let (mut relay, events) = started();
        let content = |relay: &mut EventRelay, event: &[u8]| relayed(relay.on_event(event)).content;
        assert_eq!(content(&mut relay, &events[0]), "");
        assert_eq!(content(&mut relay, &events[3]), "Hel");
        assert_eq!(content(&mut relay, &events[6]), "{\"a\":");
        let reasoning = event(
            "response.reasoning_summary_text.delta",
            &json!({"delta": "hmm"}),
        );
        assert_eq!(content(&mut relay, &reasoning), "hmm");
        let keepalive = relayed(relay.on_event(b": keep-alive"));
        assert_eq!(keepalive.bytes.as_deref(), Some(&b": keep-alive\n\n"[..]));
        let usage = json!({"input_tokens": 9, "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 1}});
        let completed = event("response.completed", &json!({"response": {"usage": usage}}));
        let Translated::Done(done) = relay.on_event(&completed) else {
            panic!("not done")
        };
        let usage = done[0].usage.unwrap();
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.cached_tokens,
                usage.completion_tokens
            ),
            (9, 4, 3)
        );
        assert!(relay.ending(&Ending::Done).is_empty());
    }

    #[test]
    fn failures_and_junk_break_the_stream() {
        for broken in [
            event(
                "response.failed",
                &json!({"response": {"error": {"message": "overloaded"}}}),
            ),
            event("error", &json!({"code": "server_error", "message": "boom"})),
            b"event: response.output_text.delta\ndata: {oops".to_vec(),
            b"data: [DONE]".to_vec(),
        ] {
            let mut relay = EventRelay::new();
            assert!(
                matches!(relay.on_event(&broken), Translated::Broken(_)),
                "{}",
                String::from_utf8_lossy(&broken)
            );
        }
        let mut relay = EventRelay::new();
        let Translated::Broken(reason) = relay.on_event(&event(
            "response.failed",
            &json!({"response": {"error": {"message": "overloaded"}}}),
        )) else {
            panic!()
        };
        assert!(reason.contains("overloaded"), "{reason}");
        // A failure that reports its usage is what was billed.
        let Translated::Failed { reason, usage } = relay.on_event(&event(
            "response.failed",
            &json!({"response": {"error": {"message": "overloaded"},
                "usage": {"input_tokens": 30, "output_tokens": 20, "total_tokens": 50}}}),
        )) else {
            panic!()
        };
        assert!(reason.contains("overloaded"), "{reason}");
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (30, 20));
    }

    #[test]
    fn a_cut_closes_what_is_open_without_the_dropped_delta_and_ends_incomplete() {
        let (relay, _) = started();
        let ending = relay.ending(&Ending::Cut {
            input_tokens: 12,
            output_tokens: 5,
        });
        let text = std::str::from_utf8(&ending).unwrap();
        assert_eq!(
            kinds(text),
            [
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.incomplete",
            ]
        );
        let events = datas(text);
        // Numbered on from the last event the caller got (7 was dropped at the hold).
        let numbers: Vec<u64> = events
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, [7, 8, 9, 10, 11, 12]);
        assert_eq!(events[0]["text"], "Hello");
        assert_eq!(events[1]["part"]["text"], "Hello");
        assert_eq!(events[2]["item"]["status"], "incomplete");
        assert_eq!(events[2]["item"]["content"][0]["text"], "Hello");
        assert_eq!(events[3]["arguments"], "{\"a\":");
        let response = &events[5]["response"];
        assert_eq!(response["id"], "resp_1");
        assert_eq!(response["status"], "incomplete");
        assert_eq!(
            response["incomplete_details"]["reason"],
            "max_output_tokens"
        );
        assert_eq!(response["output"][1]["arguments"], "{\"a\":");
        assert_eq!(response["usage"], usage_object(12, 0, 5, 0));
    }

    #[test]
    fn a_done_item_stays_as_done_and_a_broken_stream_ends_with_the_door_s_error() {
        let (mut relay, _) = started();
        let done_call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
            "name": "f", "arguments": "{\"a\":1}", "status": "completed"});
        relay.on_event(&event(
            "response.output_item.done",
            &json!({"output_index": 1, "item": done_call, "sequence_number": 8}),
        ));
        // Passed on before the break: its number is taken.
        let broken = relay.ending(&Ending::Broken("gone"));
        let text = std::str::from_utf8(&broken).unwrap();
        assert_eq!(kinds(text), ["error"]);
        let error = &datas(text)[0];
        assert_eq!(
            (error["code"].as_str(), error["sequence_number"].as_u64()),
            (Some(STREAM_INTERRUPTED), Some(9))
        );
        assert!(error["message"].as_str().unwrap().contains("gone"));
        relay.on_event(b": ping");
        let cut = relay.ending(&Ending::Cut {
            input_tokens: 1,
            output_tokens: 1,
        });
        let text = std::str::from_utf8(&cut).unwrap();
        assert_eq!(
            kinds(text)
                .iter()
                .filter(|k| **k == "response.output_item.done")
                .count(),
            1
        );
        let last = datas(text).pop().unwrap();
        assert_eq!(last["response"]["output"][1]["status"], "completed");
    }
}
