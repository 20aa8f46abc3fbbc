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
//! says: a runaway upstream). With `agent` it plays a model in a tool loop
//! (`agent.rs`): its tool call is the only output item (a `function_call`,
//! with its `namespace` for a namespace's function, or a `custom_tool_call`).

mod stream;

use std::sync::Arc;

use actix_web::HttpResponse;
use serde_json::{Value, json};

use super::scenario::{self, Scenario};
use super::stream::{StreamPlan, chunk_text};
use crate::agent::{self, Call, Choice, Conversation, Tool, Turn};
use crate::model_string::{self, number};
use crate::stats::FakeStats;

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
        for segment in model_string::segments(model) {
            if let Some(counts) = segment
                .strip_prefix("usage-")
                .and_then(model_string::numbers)
            {
                extras.usage = Some(counts);
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

/// One successful answer, as a `response` object or as its event stream.
pub(crate) struct Answer {
    id: String,
    created_at: u64,
    model: String,
    request: Value,
    /// The text, in the pieces a stream sends as deltas.
    words: Vec<String>,
    /// The request's first function tool, called in `tool` scenarios.
    tool: Option<String>,
    /// The `agent` model's tool call, answered instead of any text.
    agent_call: Option<Call>,
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
        let turn = if scenario.agent {
            agent::turn(&conversation(request))
        } else {
            Turn::Canned
        };
        let streamed = request["stream"] == true;
        let words = match (&turn, extras.words) {
            (Turn::Text(text), _) if streamed => {
                text.split_inclusive(' ').map(str::to_owned).collect()
            }
            (Turn::Text(text), _) => vec![text.clone()],
            (_, Some(n)) => (0..n).map(|_| "word ".to_owned()).collect(),
            // Streams say what the chat fake's say, so tests read them alike.
            (_, None) if streamed => (0..plan.chunks).map(chunk_text).collect(),
            (_, None) => vec![REPLY_TEXT.to_owned()],
        };
        let agent_call = match turn {
            Turn::Call(call) => Some(call),
            Turn::Text(_) | Turn::Canned => None,
        };
        let tool = request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|tool| tool["type"] == "function")
            .and_then(|tool| tool["name"].as_str())
            .filter(|_| scenario.tool && !scenario.agent)
            .map(str::to_owned);
        Answer {
            id: format!("resp_fake_{number}"),
            created_at,
            model: model.to_owned(),
            request: request.clone(),
            words,
            tool,
            agent_call,
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
               "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
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
        let mut response = json!({
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
        });
        // A field the request did not set is absent, as the API leaves it,
        // and so is the usage of a response not finished.
        if let Some(object) = response.as_object_mut() {
            for field in ["user", "usage"] {
                if object.get(field).is_some_and(Value::is_null) {
                    object.remove(field);
                }
            }
        }
        response
    }

    fn arguments() -> &'static str {
        "{\"word\":\"fake\"}"
    }

    /// The agent's call as an output item; its input is empty until it is `completed`.
    fn agent_item(&self, call: &Call, status: &str) -> Value {
        let input = if status == "completed" {
            call.arguments()
        } else {
            String::new()
        };
        let call_id = format!("call_{}", self.id);
        let mut item = if call.is_custom() {
            json!({"type": "custom_tool_call", "id": format!("ctc_{}", self.id),
                   "call_id": call_id, "name": call.name, "input": input, "status": status})
        } else {
            json!({"type": "function_call", "id": format!("fc_{}", self.id),
                   "call_id": call_id, "name": call.name, "arguments": input, "status": status})
        };
        if let Some(namespace) = &call.namespace {
            item["namespace"] = json!(namespace);
        }
        item
    }

    /// The complete `response` object.
    pub fn complete(&self) -> HttpResponse {
        HttpResponse::Ok().json(self.completed())
    }

    fn completed(&self) -> Value {
        if let Some(call) = &self.agent_call {
            let output = [self.agent_item(call, "completed")];
            return self.response("completed", &output, self.usage.as_ref());
        }
        let mut output = self.search_calls();
        output.push(self.message(&self.text(), "completed"));
        if let Some(name) = &self.tool {
            output.push(self.call(name, Self::arguments(), "completed"));
        }
        self.response("completed", &output, self.usage.as_ref())
    }

    /// The event stream, paced and faulted by the model string.
    pub fn stream(self, stats: Arc<FakeStats>) -> HttpResponse {
        stream::response(self, stats)
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

/// A Responses request as `agent::turn` reads it.
fn conversation(request: &Value) -> Conversation<'_> {
    let choice = match &request["tool_choice"] {
        Value::String(choice) if choice == "none" => Choice::None,
        choice => choice["name"].as_str().map_or(Choice::Auto, Choice::Named),
    };
    let items = request["input"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let user_text = match &request["input"] {
        Value::String(text) => text.clone(),
        _ => agent::last_user_text(items),
    };
    let format = &request["text"]["format"];
    let schema = (format["type"] == "json_schema")
        .then(|| &format["schema"])
        .filter(|schema| schema.is_object());
    Conversation {
        tools: offered(&request["tools"]),
        choice,
        user_text,
        tool_result: latest_output(items),
        schema,
    }
}

/// The function and custom tools offered, a namespace's own among them.
fn offered(tools: &Value) -> Vec<Tool<'_>> {
    let mut offered = Vec::new();
    for tool in tools.as_array().into_iter().flatten() {
        if tool["type"] == "namespace" {
            let namespace = tool["name"].as_str();
            let inner = tool["tools"].as_array().into_iter().flatten();
            offered.extend(inner.filter_map(|inner| callable(inner, namespace)));
        } else {
            offered.extend(callable(tool, None));
        }
    }
    offered
}

fn callable<'a>(tool: &'a Value, namespace: Option<&'a str>) -> Option<Tool<'a>> {
    let custom = match tool["type"].as_str()? {
        "function" => false,
        "custom" => true,
        _ => return None,
    };
    Some(Tool {
        name: tool["name"].as_str()?,
        namespace,
        schema: tool.get("parameters"),
        custom,
    })
}

/// The latest tool output given since the model's last item, if any: the caller's messages
/// may follow it, anything of the model's (a message, a call, reasoning) answers it.
fn latest_output(items: &[Value]) -> Option<String> {
    for item in items.iter().rev() {
        match item["type"].as_str() {
            Some("function_call_output" | "custom_tool_call_output") => {
                return Some(agent::text_of(&item["output"]));
            }
            Some(kind) if kind.ends_with("_output") => {}
            _ if matches!(item["role"].as_str(), Some("user" | "system" | "developer")) => {}
            _ => return None,
        }
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FakeConfig, start};

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

    fn agent_tools() -> Value {
        json!([
            {"type": "web_search"},
            {"type": "function", "name": "exec_command", "parameters": {"type": "object",
                "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}},
                "required": ["cmd"]}},
            {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
            {"type": "namespace", "name": "mcp__docs", "description": "Docs", "tools": [
                {"type": "function", "name": "search", "parameters": {"type": "object",
                    "properties": {"query": {"type": "string"}}, "required": ["query"]}}]},
        ])
    }

    /// The `agent` answer to a request of these fields, with `agent_tools` offered.
    fn answer(fields: &Value) -> Value {
        let mut request = json!({"model": "m+agent", "tools": agent_tools()});
        for (key, value) in fields.as_object().unwrap() {
            request[key] = value.clone();
        }
        Answer::new(&request, "m+agent", &Scenario::parse("m+agent"), 1, 0).completed()
    }

    #[test]
    fn agent_calls_functions_namespaced_functions_and_custom_tools() {
        let first = answer(&json!({"input": "hello"}));
        assert_eq!(first["output"].as_array().unwrap().len(), 1);
        let call = &first["output"][0];
        assert_eq!(
            (&call["type"], &call["name"], &call["status"]),
            (
                &json!("function_call"),
                &json!("exec_command"),
                &json!("completed")
            )
        );
        assert_eq!(call["arguments"], "{\"cmd\":\"echo tollgate\"}");
        assert_eq!(call["call_id"], "call_resp_fake_1");

        let named = answer(&json!({"input": [{"role": "user", "content": [
            {"type": "input_text", "text": "Search the docs"}]}]}));
        let call = &named["output"][0];
        assert_eq!(
            (&call["name"], &call["namespace"]),
            (&json!("search"), &json!("mcp__docs"))
        );
        assert_eq!(call["arguments"], "{\"query\":\"tollgate\"}");

        let custom = answer(&json!({"input": "apply_patch now"}));
        let call = &custom["output"][0];
        assert_eq!(
            (&call["type"], &call["name"], &call["input"]),
            (
                &json!("custom_tool_call"),
                &json!("apply_patch"),
                &json!("tollgate")
            )
        );
        let forced = answer(&json!({"input": "hi", "tool_choice": {"type": "custom",
                                    "name": "apply_patch"}}));
        assert_eq!(forced["output"][0]["name"], "apply_patch");
    }

    #[test]
    fn agent_answers_a_tool_output_in_text_or_json() {
        let input = json!([
            {"role": "user", "content": "run it"},
            {"type": "function_call", "call_id": "c", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "tollgate\n"},
        ]);
        let done = answer(&json!({"input": input}));
        let message = &done["output"][0];
        assert_eq!(message["type"], "message");
        assert_eq!(message["content"][0]["text"], "Done: tollgate");
        assert_eq!(done["status"], "completed");

        let schema = json!({"type": "object", "properties": {"answer": {"type": "string"},
            "sure": {"type": "boolean"}}, "required": ["answer", "sure"]});
        let structured = answer(&json!({"input": input,
            "text": {"format": {"type": "json_schema", "name": "out", "schema": schema}}}));
        let text = structured["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            json!({"answer": "tollgate", "sure": false})
        );
        let custom_output = json!([{"type": "custom_tool_call", "call_id": "c",
            "name": "apply_patch", "input": "x"},
            {"type": "custom_tool_call_output", "call_id": "c", "output": [
                {"type": "input_text", "text": "patched"}]}]);
        let done = answer(&json!({"input": custom_output}));
        assert_eq!(done["output"][0]["content"][0]["text"], "Done: patched");
    }

    #[actix_rt::test]
    async fn agent_streams_its_tool_call_as_the_sdk_reads_it() {
        let config = FakeConfig {
            agent: true,
            ..FakeConfig::default()
        };
        let fake = start(config, "127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let url = format!("{}/v1/responses", fake.base_url());
        let request = json!({"model": "gpt-5", "input": "use search", "stream": true,
                             "tools": agent_tools()});
        let (status, body) = post(&url, &request).await;
        assert_eq!(status, 200, "{body}");
        let call_events = events(&body);
        let kinds: Vec<&str> = call_events.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, (_, data)) in call_events.iter().enumerate() {
            assert_eq!(data["sequence_number"].as_u64(), Some(i as u64));
        }
        let deltas: String = call_events[3..5]
            .iter()
            .map(|(_, data)| data["delta"].as_str().unwrap())
            .collect();
        assert_eq!(deltas, "{\"query\":\"tollgate\"}");
        assert_eq!(call_events[2].1["item"]["arguments"], "");
        let completed = &call_events[7].1["response"];
        assert_eq!(completed["output"][0]["namespace"], "mcp__docs");
        assert_eq!(completed["output"][0]["arguments"], deltas.as_str());

        let custom = json!({"model": "gpt-5", "input": "apply_patch", "stream": true,
                            "tools": agent_tools()});
        let (_, body) = post(&url, &custom).await;
        let custom_events = events(&body);
        assert_eq!(custom_events[3].0, "response.custom_tool_call_input.delta");
        assert_eq!(custom_events[5].0, "response.custom_tool_call_input.done");
        assert_eq!(custom_events[5].1["input"], "tollgate");

        let answered = json!({"model": "gpt-5", "stream": true, "tools": agent_tools(),
            "input": [{"type": "function_call_output", "call_id": "c", "output": "ok then"}]});
        let (_, body) = post(&url, &answered).await;
        let text: String = events(&body)
            .iter()
            .filter(|(kind, _)| kind == "response.output_text.delta")
            .map(|(_, data)| data["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "Done: ok then");
        fake.stop().await;
    }
}
