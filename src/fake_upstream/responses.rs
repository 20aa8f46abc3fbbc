//! The fake's OpenAI Responses API (`POST /v1/responses`), for the Responses
//! door's passthrough: a `response` object, or the typed event stream the
//! OpenAI SDKs read (`response.created` … `response.completed`, numbered by
//! `sequence_number`). It speaks the chat fake's scenario language where it
//! applies (`status-NNN`, `delay-Nms`, `flaky-N`, `usage-P-C-O`, `usage-max`,
//! `no-usage`, `tool`, and for streams `chunks-N`, `chunk-delay-Nms`,
//! `ttft-Nms`, `cut-after-N`, `hang-after-N`, `malformed-after-N`, and
//! `failed-after-N`: `response.failed` with the usage billed so far), plus
//! `usage-IN-CW-CR-OUT` (input tokens, of them cache writes and cache reads,
//! and output), `reasoning-N` (of the output, reasoning tokens) and `words-N`
//! (a reply of N words, streamed as N deltas, whatever `max_output_tokens`
//! says: a runaway upstream).

use std::fmt::Write as _;
use std::sync::Arc;

use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::stream;
use serde_json::{Value, json};

use super::scenario::{self, Scenario};
use super::stats::FakeStats;
use super::stream::{CUT_FLUSH_MS, Fault, StreamPlan, Watch, chunk_text, sleep_ms};

const REPLY_TEXT: &str = "This is a canned response from the Tollgate fake upstream.";
/// A typo in a `words-…` segment must not build a gigabyte reply.
const MAX_WORDS: u64 = 100_000;

/// What the model string asks of a Responses answer beyond the chat scenario.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Extras {
    /// `[input, cache_write, cache_read, output]` tokens.
    usage: Option<[u64; 4]>,
    reasoning: u64,
    words: Option<u64>,
    /// `searches-N`: web searches run where a search tool is offered, up to `max_tool_calls`.
    searches: u64,
}

impl Extras {
    fn parse(model: &str) -> Extras {
        let mut extras = Extras::default();
        for segment in model.split('+').map(str::trim) {
            if let Some(rest) = segment.strip_prefix("usage-") {
                let counts: Option<Vec<u64>> = rest.split('-').map(number).collect();
                if let Some(Ok(counts)) = counts.map(<[u64; 4]>::try_from) {
                    extras.usage = Some(counts);
                }
            } else if let Some(n) = segment.strip_prefix("reasoning-").and_then(number) {
                extras.reasoning = n;
            } else if let Some(n) = segment.strip_prefix("words-").and_then(number) {
                extras.words = Some(n.min(MAX_WORDS));
            } else if let Some(n) = segment.strip_prefix("searches-").and_then(number) {
                extras.searches = n.min(1_000);
            }
        }
        extras
    }
}

/// Strict decimal: `u64::from_str` would also accept a leading `+`.
fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// One successful answer, as a `response` object or as its event stream.
pub(super) struct Answer {
    id: String,
    created_at: u64,
    model: String,
    request: Value,
    /// The text, in the pieces a stream sends as deltas.
    words: Vec<String>,
    /// The request's first function tool, called in `tool` scenarios.
    tool: Option<String>,
    /// Web searches run before the answer, each an output item.
    searches: u64,
    usage: Option<Value>,
    plan: StreamPlan,
}

/// The searches an answer runs: the scenario's where a search tool is
/// offered, up to the request's `max_tool_calls`.
fn searches(request: &Value, extras: &Extras) -> u64 {
    let offered = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|tool| {
            tool["type"]
                .as_str()
                .is_some_and(|kind| kind.starts_with("web_search"))
        });
    if !offered {
        return 0;
    }
    request["max_tool_calls"]
        .as_u64()
        .map_or(extras.searches, |most| extras.searches.min(most))
}

impl Answer {
    pub fn new(
        request: &Value,
        model: &str,
        scenario: &Scenario,
        number: u64,
        created_at: u64,
    ) -> Answer {
        let extras = Extras::parse(model);
        let plan = StreamPlan::parse(model);
        let words = match extras.words {
            Some(n) => (0..n).map(|_| "word ".to_owned()).collect(),
            // Streams say what the chat fake's say, so tests read them alike.
            None if request["stream"] == true => (0..plan.chunks).map(chunk_text).collect(),
            None => vec![REPLY_TEXT.to_owned()],
        };
        let tool = request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|tool| tool["type"] == "function")
            .and_then(|tool| tool["name"].as_str())
            .filter(|_| scenario.tool)
            .map(str::to_owned);
        Answer {
            id: format!("resp_fake_{number}"),
            created_at,
            model: model.to_owned(),
            request: request.clone(),
            words,
            tool,
            searches: searches(request, &extras),
            usage: usage(scenario, &extras, request),
            plan,
        }
    }

    /// The answer's search calls, as output items.
    fn search_calls(&self) -> Vec<Value> {
        (0..self.searches)
            .map(|i| {
                json!({"type": "web_search_call", "id": format!("ws_{}_{i}", self.id),
                       "status": "completed",
                       "action": {"type": "search", "query": "fake"}})
            })
            .collect()
    }

    fn text(&self) -> String {
        self.words.concat()
    }

    fn message(&self, text: &str, status: &str) -> Value {
        json!({"type": "message", "id": format!("msg_{}", self.id), "status": status,
               "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": []}]})
    }

    fn call(&self, name: &str, arguments: &str, status: &str) -> Value {
        json!({"type": "function_call", "id": format!("fc_{}", self.id),
               "call_id": format!("call_{}", self.id), "name": name,
               "arguments": arguments, "status": status})
    }

    /// The `response` object in a given state, with its output so far.
    fn response(&self, status: &str, output: &[Value], usage: Option<&Value>) -> Value {
        let echo = |field: &str, default: Value| {
            Some(&self.request[field])
                .filter(|v| !v.is_null())
                .cloned()
                .unwrap_or(default)
        };
        json!({
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "error": null, "incomplete_details": null,
            "instructions": echo("instructions", Value::Null),
            "max_output_tokens": echo("max_output_tokens", Value::Null),
            "model": self.model, "output": output, "parallel_tool_calls": true,
            "previous_response_id": null,
            "reasoning": echo("reasoning", json!({"effort": null, "summary": null})),
            "store": false, "temperature": echo("temperature", json!(1.0)),
            "text": echo("text", json!({"format": {"type": "text"}})),
            "tool_choice": echo("tool_choice", json!("auto")),
            "tools": echo("tools", json!([])), "top_p": echo("top_p", json!(1.0)),
            "truncation": "disabled", "user": echo("user", Value::Null),
            "metadata": echo("metadata", json!({})),
            "usage": usage,
        })
    }

    fn arguments() -> &'static str {
        "{\"word\":\"fake\"}"
    }

    /// The complete `response` object.
    pub fn complete(&self) -> HttpResponse {
        let mut output = self.search_calls();
        output.push(self.message(&self.text(), "completed"));
        if let Some(name) = &self.tool {
            output.push(self.call(name, Self::arguments(), "completed"));
        }
        let response = self.response("completed", &output, self.usage.as_ref());
        HttpResponse::Ok().json(response)
    }

    /// The event stream, paced and faulted by the model string.
    pub fn stream(self, stats: Arc<FakeStats>) -> HttpResponse {
        let streaming = Streaming {
            answer: self,
            step: Step::Start,
            sequence: 0,
            watch: Watch::start(stats),
        };
        let body = stream::unfold(streaming, |mut streaming| async move {
            let item = streaming.next().await?;
            Some((item, streaming))
        });
        HttpResponse::Ok()
            .content_type("text/event-stream")
            .insert_header(("cache-control", "no-cache"))
            .streaming(body)
    }
}

/// The usage block: the chat scenario's, read in the Responses shape, unless
/// `usage-IN-CW-CR-OUT` gives it whole; `None` for `no-usage`.
fn usage(scenario: &Scenario, extras: &Extras, request: &Value) -> Option<Value> {
    let (input, cache_write, cached, output) = if let Some(whole) = extras.usage {
        let [input, cache_write, cached, output] = whole;
        (input, cache_write, cached, output)
    } else {
        let chat = scenario::usage(scenario.usage, &chat_view(request))?;
        let cached = chat["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .or_else(|| chat["prompt_cache_hit_tokens"].as_u64());
        (
            chat["prompt_tokens"].as_u64().unwrap_or(0),
            0,
            cached.unwrap_or(0),
            chat["completion_tokens"].as_u64().unwrap_or(0),
        )
    };
    Some(json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": extras.reasoning.min(output)},
        "total_tokens": input.saturating_add(output),
    }))
}

/// The request as the chat scenario reads one: its texts as messages, its output limit.
fn chat_view(request: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(instructions) = request["instructions"].as_str() {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    match &request["input"] {
        Value::String(text) => messages.push(json!({"role": "user", "content": text})),
        Value::Array(items) => {
            for item in items {
                let content = match (&item["content"], &item["output"], &item["arguments"]) {
                    (Value::Null, Value::Null, Value::String(arguments)) => json!(arguments),
                    (Value::Null, output, _) => json!(output.as_str().unwrap_or_default()),
                    (content, _, _) => content.clone(),
                };
                messages.push(json!({"role": "user", "content": content}));
            }
        }
        _ => {}
    }
    json!({"messages": messages, "max_tokens": request["max_output_tokens"]})
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Start,
    /// The next text delta to send (past the last: the closing events).
    Delta(u32),
    End,
}

struct Streaming {
    answer: Answer,
    step: Step,
    sequence: u64,
    watch: Watch,
}

impl Streaming {
    fn event(&mut self, out: &mut String, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        // Writing to a String cannot fail.
        let _ = write!(out, "event: {kind}\ndata: {data}\n\n");
    }

    fn message_id(&self) -> String {
        format!("msg_{}", self.answer.id)
    }

    async fn next(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        let mut out = String::new();
        match self.step {
            Step::Start => {
                sleep_ms(self.answer.plan.ttft_ms).await;
                self.start(&mut out);
                self.step = Step::Delta(0);
            }
            Step::Delta(i) => {
                if let Some(fault) = self.fault(i).await {
                    return fault;
                }
                let word = self
                    .answer
                    .words
                    .get(usize::try_from(i).unwrap_or(usize::MAX))
                    .cloned();
                if let Some(word) = word {
                    if i > 0 {
                        sleep_ms(self.answer.plan.chunk_delay_ms).await;
                    }
                    let delta = json!({"item_id": self.message_id(), "output_index": 0,
                        "content_index": 0, "delta": word, "logprobs": []});
                    self.event(&mut out, "response.output_text.delta", delta);
                    self.step = Step::Delta(i + 1);
                } else {
                    self.finish(&mut out);
                    self.step = Step::End;
                    self.watch.finished = true;
                }
            }
            Step::End => return None,
        }
        Some(Ok(Bytes::from(out)))
    }

    /// The scripted fault due after `i` text deltas, if any: what the stream yields instead.
    async fn fault(&mut self, i: u32) -> Option<Option<Result<Bytes, std::io::Error>>> {
        match self.answer.plan.fault {
            Some(Fault::Cut(n)) if i == n => {
                sleep_ms(self.answer.plan.chunk_delay_ms.max(CUT_FLUSH_MS)).await;
                self.step = Step::End;
                Some(Some(Err(std::io::Error::other("fake upstream: cut-after"))))
            }
            Some(Fault::Hang(n)) if i == n => {
                sleep_ms(scenario::MAX_DELAY_MS).await;
                self.step = Step::End;
                Some(None)
            }
            Some(Fault::Malformed(n)) if i == n => {
                self.step = Step::End;
                self.watch.finished = true;
                Some(Some(Ok(Bytes::from_static(
                    b"event: response.output_text.delta\ndata: {\"type\": oops\n\n",
                ))))
            }
            Some(Fault::Failed(n)) if i == n => {
                self.step = Step::End;
                self.watch.finished = true;
                let mut response = self
                    .answer
                    .response("failed", &[], self.answer.usage.as_ref());
                response["error"] = json!({"code": "server_error", "message": "the model failed"});
                let mut out = String::new();
                self.event(&mut out, "response.failed", json!({"response": response}));
                Some(Some(Ok(Bytes::from(out))))
            }
            _ => None,
        }
    }

    fn start(&mut self, out: &mut String) {
        let response = self.answer.response("in_progress", &[], None);
        self.event(out, "response.created", json!({"response": response}));
        self.event(out, "response.in_progress", json!({"response": response}));
        let mut item = self.answer.message("", "in_progress");
        item["content"] = json!([]);
        self.event(
            out,
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        );
        self.event(
            out,
            "response.content_part.added",
            json!({"item_id": self.message_id(), "output_index": 0, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
    }

    fn finish(&mut self, out: &mut String) {
        let text = self.answer.text();
        let id = self.message_id();
        self.event(
            out,
            "response.output_text.done",
            json!({"item_id": id, "output_index": 0, "content_index": 0,
                   "text": text, "logprobs": []}),
        );
        self.event(
            out,
            "response.content_part.done",
            json!({"item_id": id, "output_index": 0, "content_index": 0,
                   "part": {"type": "output_text", "text": text, "annotations": []}}),
        );
        let message = self.answer.message(&text, "completed");
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": 0, "item": message}),
        );
        let mut output = self.answer.search_calls();
        output.push(message);
        if let Some(name) = self.answer.tool.clone() {
            output.push(self.call(out, &name));
        }
        let response = self
            .answer
            .response("completed", &output, self.answer.usage.as_ref());
        self.event(out, "response.completed", json!({"response": response}));
    }

    /// A function call item, its arguments in two deltas.
    fn call(&mut self, out: &mut String, name: &str) -> Value {
        let item_id = format!("fc_{}", self.answer.id);
        let added = self.answer.call(name, "", "in_progress");
        self.event(
            out,
            "response.output_item.added",
            json!({"output_index": 1, "item": added}),
        );
        let arguments = Answer::arguments();
        let (head, tail) = arguments.split_at(arguments.len() / 2);
        for delta in [head, tail] {
            self.event(
                out,
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": 1, "delta": delta}),
            );
        }
        self.event(
            out,
            "response.function_call_arguments.done",
            json!({"item_id": item_id, "output_index": 1, "arguments": arguments}),
        );
        let done = self.answer.call(name, arguments, "completed");
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": 1, "item": done}),
        );
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_upstream::{FakeConfig, start};

    #[test]
    fn parses_the_responses_segments_and_leaves_the_rest_to_the_chat_scenario() {
        assert_eq!(
            Extras::parse("gpt+usage-100-10-20-30+reasoning-5+words-400+searches-2"),
            Extras {
                usage: Some([100, 10, 20, 30]),
                reasoning: 5,
                words: Some(400),
                searches: 2,
            }
        );
        for ignored in [
            "usage-1-2-3",
            "usage-1-2-3-x",
            "reasoning-",
            "words-+3",
            "gpt-5",
        ] {
            assert_eq!(Extras::parse(ignored), Extras::default(), "{ignored}");
        }
        assert_eq!(Extras::parse("words-999999999").words, Some(MAX_WORDS));
    }

    #[test]
    fn usage_comes_in_the_responses_shape() {
        let request = json!({"model": "m", "instructions": "12345678", "input": "abcd",
            "max_output_tokens": 5});
        let of = |model: &str| usage(&Scenario::parse(model), &Extras::parse(model), &request);
        // 8 + 4 text bytes → 3 tokens, plus 4 per message; output capped at the limit.
        let estimated = of("m").unwrap();
        assert_eq!(
            (&estimated["input_tokens"], &estimated["output_tokens"]),
            (&json!(11), &json!(5))
        );
        let chat_shape = of("usage-100-20-30").unwrap();
        assert_eq!(chat_shape["input_tokens_details"]["cached_tokens"], 20);
        assert_eq!(chat_shape["total_tokens"], 130);
        let whole = of("usage-100-10-20-30+reasoning-7").unwrap();
        assert_eq!(
            whole,
            json!({"input_tokens": 100,
                   "input_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 10},
                   "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 7},
                   "total_tokens": 130})
        );
        assert_eq!(of("usage-max").unwrap()["output_tokens"], 5);
        assert_eq!(of("no-usage"), None);
        let items = json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "abcd"}]},
            {"type": "function_call_output", "call_id": "c", "output": "abcdabcd"}]});
        assert_eq!(chat_view(&items)["messages"].as_array().unwrap().len(), 2);
        let items_usage = usage(&Scenario::default(), &Extras::default(), &items).unwrap();
        assert_eq!(items_usage["input_tokens"], 11);
    }

    async fn post(url: &str, body: &Value) -> (u16, String) {
        let mut response = awc::Client::default()
            .post(url)
            .send_json(body)
            .await
            .unwrap();
        let status = response.status().as_u16();
        let bytes = response.body().limit(1 << 20).await.unwrap_or_default();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    fn events(text: &str) -> Vec<(String, Value)> {
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap();
                let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
                (name.to_owned(), serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    #[actix_rt::test]
    async fn answers_a_response_object_and_records_the_request() {
        let fake = start(FakeConfig::default(), "127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let url = format!("{}/v1/responses", fake.base_url());
        let tools =
            json!([{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]);
        let request = json!({"model": "usage-50-0-10-7+tool", "input": "hi",
            "max_output_tokens": 64, "tools": tools, "reasoning": {"effort": "low"}});
        let (status, body) = post(&url, &request).await;
        assert_eq!(status, 200, "{body}");
        let response: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(response["object"], "response");
        assert_eq!(response["status"], "completed");
        assert_eq!(response["output"][0]["content"][0]["text"], REPLY_TEXT);
        assert_eq!(response["output"][1]["name"], "lookup");
        assert_eq!(response["reasoning"], json!({"effort": "low"}));
        assert_eq!(
            response["usage"]["input_tokens_details"]["cached_tokens"],
            10
        );
        assert_eq!(response["usage"]["output_tokens"], 7);
        let captured = fake.stats.captured();
        assert_eq!(captured[0].path, "/v1/responses");
        assert_eq!(captured[0].body, request);

        let (status, body) = post(
            &format!("{}/responses", fake.base_url()),
            &json!({"model": "status-429", "input": "hi"}),
        )
        .await;
        assert_eq!(status, 429, "{body}");
        assert!(body.contains("rate_limit_error"), "{body}");
        let (_, body) = post(&url, &json!({"model": "words-3+no-usage", "input": "hi"})).await;
        let response: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            response["output"][0]["content"][0]["text"],
            "word word word "
        );
        assert_eq!(response["usage"], Value::Null);
        fake.stop().await;
    }

    #[actix_rt::test]
    async fn streams_the_sdk_event_sequence_and_faults_on_cue() {
        let fake = start(FakeConfig::default(), "127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let url = format!("{}/v1/responses", fake.base_url());
        let (status, body) = post(
            &url,
            &json!({"model": "usage-40-0-0-3+chunks-3+tool", "input": "hi", "stream": true,
                    "tools": [{"type": "function", "name": "f"}]}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let events = events(&body);
        let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, (kind, data)) in events.iter().enumerate() {
            assert_eq!(
                (&data["type"], data["sequence_number"].as_u64()),
                (&json!(kind), Some(i as u64))
            );
        }
        let expected: String = (0..3).map(chunk_text).collect();
        assert_eq!(events[7].1["text"], expected.as_str());
        let completed = &events[15].1["response"];
        assert_eq!(completed["id"], events[0].1["response"]["id"]);
        assert_eq!(
            completed["output"][0]["content"][0]["text"],
            expected.as_str()
        );
        assert_eq!(completed["output"][1]["arguments"], Answer::arguments());
        assert_eq!(completed["usage"]["input_tokens"], 40);

        let (_, body) = post(
            &url,
            &json!({"model": "words-5+malformed-after-2", "input": "hi", "stream": true}),
        )
        .await;
        assert!(body.ends_with("{\"type\": oops\n\n"), "{body}");
        let deltas = body.matches("\"delta\":\"word \"").count();
        assert_eq!(deltas, 2, "{body}");
        // The connection drops after one delta: no closing events.
        let (_, body) = post(
            &url,
            &json!({"model": "chunks-5+cut-after-1", "input": "hi", "stream": true}),
        )
        .await;
        assert_eq!(
            body.matches("response.output_text.delta").count(),
            2,
            "{body}"
        );
        assert!(!body.contains("response.completed"), "{body}");
        assert_eq!(fake.stats.streams_started(), 3);
        fake.stop().await;
    }
}
