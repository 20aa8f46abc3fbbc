//! The Responses event stream the OpenAI SDKs read (`response.created` …
//! `response.completed`, numbered by `sequence_number`), paced and faulted as
//! the chat stream is; an `agent`'s tool call streams alone.

use std::io;
use std::sync::Arc;

use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::stream;
use serde_json::{Value, json};

use super::Answer;
use crate::agent::Call;
use crate::http::sleep_ms;
use crate::openai::stream::{Fault, StreamPlan};
use crate::sse::{self, Watch, halves};
use crate::stats::FakeStats;

/// The answer's events, sent as the model string paces them.
pub(super) fn response(answer: Answer, stats: Arc<FakeStats>) -> HttpResponse {
    let streaming = Streaming {
        answer,
        step: Step::Start,
        sequence: 0,
        watch: Watch::start(stats),
    };
    let body = stream::unfold(streaming, |mut streaming| async move {
        let item = streaming.next().await?;
        Some((item, streaming))
    });
    sse::ok().streaming(body)
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
        sse::event(out, kind, &data);
    }

    fn message_id(&self) -> String {
        format!("msg_{}", self.answer.id)
    }

    async fn next(&mut self) -> Option<Result<Bytes, io::Error>> {
        let mut out = String::new();
        match self.step {
            Step::Start => {
                sleep_ms(self.answer.plan.ttft_ms).await;
                if let Some(call) = self.answer.agent_call.clone() {
                    self.agent_call(&mut out, &call);
                    self.step = Step::End;
                    self.watch.finished = true;
                } else {
                    self.start(&mut out);
                    self.step = Step::Delta(0);
                }
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
    async fn fault(&mut self, i: u32) -> Option<Option<Result<Bytes, io::Error>>> {
        match self.answer.plan.fault {
            Some(Fault::Cut(n)) if i == n => {
                self.step = Step::End;
                Some(Some(Err(self.answer.plan.cut().await)))
            }
            Some(Fault::Hang(n)) if i == n => {
                StreamPlan::hang().await;
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
                   "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
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
                   "part": {"type": "output_text", "text": text, "annotations": [], "logprobs": []}}),
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

    /// The whole stream of an agent's tool call: the response opened, the call item with its
    /// input in two deltas, the response completed.
    fn agent_call(&mut self, out: &mut String, call: &Call) {
        let response = self.answer.response("in_progress", &[], None);
        self.event(out, "response.created", json!({"response": response}));
        self.event(out, "response.in_progress", json!({"response": response}));
        let added = self.answer.agent_item(call, "in_progress");
        let item_id = added["id"].clone();
        self.event(
            out,
            "response.output_item.added",
            json!({"output_index": 0, "item": added}),
        );
        let (delta_kind, done_kind, field) = if call.is_custom() {
            let prefix = "response.custom_tool_call_input";
            (format!("{prefix}.delta"), format!("{prefix}.done"), "input")
        } else {
            let prefix = "response.function_call_arguments";
            (
                format!("{prefix}.delta"),
                format!("{prefix}.done"),
                "arguments",
            )
        };
        let input = call.arguments();
        let (head, tail) = halves(&input);
        for delta in [head, tail] {
            let data = json!({"item_id": item_id, "output_index": 0, "delta": delta});
            self.event(out, &delta_kind, data);
        }
        let item = self.answer.agent_item(call, "completed");
        let mut done = json!({"item_id": item_id, "output_index": 0});
        done[field] = json!(input);
        if !item["name"].is_null() && field == "arguments" {
            done["name"] = item["name"].clone();
        }
        self.event(out, &done_kind, done);
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        );
        let output = [item];
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
            json!({"item_id": item_id, "output_index": 1, "name": name, "arguments": arguments}),
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
