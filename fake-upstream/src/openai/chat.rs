//! Chat completions' answers: the canned reply or an `agent`'s turn, complete or streamed, with
//! the scenario's usage.

use std::sync::Arc;

use actix_web::HttpResponse;
use serde_json::{Value, json};

use super::Call;
use super::scenario::{self, Scenario};
use super::stream::{Script, StreamPlan};
use crate::agent::{self, Choice, Conversation, Tool, Turn};
use crate::stats::FakeStats;

pub(crate) const REPLY_TEXT: &str = "This is a canned reply from the Tollgate fake upstream.";

/// The `chat.completion` object of a successful answer.
pub(crate) fn completion(call: &Call, delay_ms: u64) -> Value {
    let Call {
        request,
        model,
        scenario,
        number,
        ..
    } = *call;
    let mut body = json!({
        "id": format!("chatcmpl-fake-{number}"),
        "object": "chat.completion",
        "created": super::unix_now_secs(),
        "model": model,
        // Every field the published schema requires, as the API sends them.
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": REPLY_TEXT, "refusal": null},
            "logprobs": null,
            "finish_reason": "stop",
        }],
    });
    match agent_turn(request, scenario) {
        Turn::Canned => {
            let first_tool = request["tools"][0]["function"]["name"].as_str();
            if let (true, Some(name)) = (scenario.tool, first_tool) {
                body["choices"][0]["message"]["tool_calls"] = json!([{"id": call_id(number),
                    "type": "function", "function": {"name": name, "arguments": "{\"word\":\"fake\"}"}}]);
                body["choices"][0]["finish_reason"] = json!("tool_calls");
            }
        }
        Turn::Text(text) => body["choices"][0]["message"]["content"] = json!(text),
        Turn::Call(call) => {
            body["choices"][0]["message"] = json!({"role": "assistant", "content": null, "refusal": null,
                "tool_calls": [{"id": call_id(number), "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments()}}]});
            body["choices"][0]["finish_reason"] = json!("tool_calls");
        }
    }
    if let Some(object) = body.as_object_mut() {
        if let Some(usage) = scenario::usage(scenario.usage, request) {
            object.insert("usage".to_owned(), usage);
        }
        object.insert("x_fake_delay_ms".to_owned(), delay_ms.into());
    }
    body
}

/// The answer as chunks, paced and faulted by the model string.
pub(crate) fn stream(call: &Call, stats: Arc<FakeStats>) -> HttpResponse {
    let id = format!("chatcmpl-fake-{}", call.number);
    let turn = agent_turn(call.request, call.scenario);
    super::stream::response(
        StreamPlan::parse(call.model),
        Script::of(&turn, &call_id(call.number)),
        call.request,
        super::stream::chunk_base(&id, super::unix_now_secs(), call.model),
        scenario::usage(call.scenario.usage, call.request),
        stats,
    )
}

fn call_id(request_number: u64) -> String {
    format!("call_fake_{request_number}")
}

/// What an `agent` model does with this chat request; `Canned` without `agent`.
fn agent_turn(request: &Value, scenario: &Scenario) -> Turn {
    if scenario.agent {
        agent::turn(&conversation(request))
    } else {
        Turn::Canned
    }
}

/// A chat request as `agent::turn` reads it.
fn conversation(request: &Value) -> Conversation<'_> {
    let messages = request["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let tools = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|tool| tool["type"] == "function")
        .filter_map(|tool| {
            Some(Tool {
                name: tool["function"]["name"].as_str()?,
                namespace: None,
                schema: tool["function"].get("parameters"),
                custom: false,
            })
        })
        .collect();
    let choice = match &request["tool_choice"] {
        Value::String(choice) if choice == "none" => Choice::None,
        choice => choice["function"]["name"]
            .as_str()
            .map_or(Choice::Auto, Choice::Named),
    };
    let user_text = agent::last_user_text(messages);
    // Results answer the model's last calls even with a user message after them, as a
    // Messages turn translated to chat puts its text after its tool results.
    let since_model = messages
        .iter()
        .rposition(|message| message["role"] == "assistant")
        .map_or(0, |at| at + 1);
    let tool_result = messages[since_model..]
        .iter()
        .rev()
        .find(|message| message["role"] == "tool")
        .map(|message| agent::text_of(&message["content"]));
    let format = &request["response_format"];
    let schema = (format["type"] == "json_schema")
        .then(|| &format["json_schema"]["schema"])
        .filter(|schema| schema.is_object());
    Conversation {
        tools,
        choice,
        user_text,
        tool_result,
        schema,
    }
}
