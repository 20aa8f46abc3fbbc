//! The Responses door's wire format (`POST /v1/responses`, stateless): a
//! request is translated into a chat completion body for the pipeline, and
//! the pipeline's chat answer (complete, or a stream of chunks) back into a
//! `response` object or the typed events the SDKs read. Pure functions and
//! one stream mapper; no HTTP here.

use std::io::Write as _;

use bytes::Bytes;

use serde_json::{Map, Value, json};

use super::fields;
use super::tool_names::ToolNames;
use crate::anthropic::request::Gap;
use crate::config::server_tools::ServerTools;
use crate::error::ApiError;
use crate::fields::Screen;
use crate::openai::chunk::{self, ChatEvent};
use crate::tokenize::Untranslated;

/// What a `response` object repeats of its request.
#[derive(Debug, Clone, Default)]
pub struct Echo {
    fields: Map<String, Value>,
    /// The chat names of namespaced and custom tools, to answer calls in.
    names: ToolNames,
}

/// Fields of the request the `response` object carries back.
const ECHOED: [&str; 8] = [
    "instructions",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
];

/// A Responses request as the pipeline takes it: the chat completion body
/// it serves, the caller's own body for a provider of the Responses API
/// (less OpenAI's built-in tools, taken out of the offer), and what the field
/// table left for the route.
#[derive(Debug)]
pub struct Translation {
    pub chat: Vec<u8>,
    pub native: Bytes,
    /// The caller's own bytes, when tools were taken out of `native`: a
    /// route that prices one of them lets it back in (`ChatRequest::admit_server_tools`).
    pub original: Option<Bytes>,
    pub screen: Screen,
    pub echo: Echo,
    /// What chat cannot carry: a translated route refuses it, a passthrough sends it.
    pub gap: Option<Gap>,
    /// It asks for `reasoning`.
    pub asks_reasoning: bool,
    /// The agent run its `client_metadata` names (Codex's `session_id`).
    pub client_session: Option<String>,
    /// What the chat body carries only as text: images in tools' outputs.
    pub untranslated: Untranslated,
}

/// Translates a Responses body read by its field table.
pub fn to_chat(bytes: Bytes) -> Result<Translation, ApiError> {
    let request = super::chat::object(&bytes)?;
    translate(request, bytes)
}

/// `to_chat` of a body already parsed: `request` is `bytes` read.
pub fn translate(mut request: Map<String, Value>, bytes: Bytes) -> Result<Translation, ApiError> {
    let tools = fields::screen_tools(&mut request, &ServerTools::default());
    let (native, original) = if tools.removed.is_empty() {
        (bytes, None)
    } else {
        let screened = Bytes::from(Value::Object(request.clone()).to_string());
        (screened, Some(bytes))
    };
    let screen = Screen {
        unpriced: fields::RESPONSES.screen(&request)?,
        removed_tools: tools.removed,
        admitted: Vec::new(),
    };
    let mut chat = Map::new();
    if let Some(model) = request.get("model") {
        chat.insert("model".to_owned(), model.clone());
    }
    let mut names = ToolNames::default();
    let mut gap = None;
    let tools = chat_tools(&request, &mut names, &mut gap)?;
    if !tools.is_empty() {
        chat.insert("tools".to_owned(), Value::Array(tools));
    }
    let (messages, left_out) = Messages {
        names: &names,
        gap: &mut gap,
        out: Vec::new(),
        left_out: Vec::new(),
    }
    .of(&request)?;
    chat.insert("messages".to_owned(), Value::Array(messages));
    chat_options(&request, &mut chat);
    let echo = Echo {
        fields: ECHOED
            .iter()
            .filter_map(|f| Some(((*f).to_owned(), request.get(*f)?.clone())))
            .collect(),
        names,
    };
    Ok(Translation {
        chat: Value::Object(chat).to_string().into_bytes(),
        native,
        original,
        screen,
        echo,
        gap,
        asks_reasoning: super::chat::asks_reasoning(&request),
        client_session: request
            .get("client_metadata")
            .and_then(|m| m.get("session_id"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        untranslated: Untranslated {
            images: images_in_outputs(request.get("input")),
            texts: left_out,
            ..Untranslated::default()
        },
    })
}

/// The request's tools in chat's shape. Namespaced and custom tools get
/// chat names, kept in `names` so the answer's calls can be named back; a
/// tool chat cannot offer is a gap rather than a refusal, since a
/// passthrough route still sends it.
fn chat_tools(
    request: &Map<String, Value>,
    names: &mut ToolNames,
    gap: &mut Option<Gap>,
) -> Result<Vec<Value>, ApiError> {
    let Some(tools) = request.get("tools").filter(|t| !t.is_null()) else {
        return Ok(Vec::new());
    };
    let Value::Array(tools) = tools else {
        return Err(ApiError::invalid_request(
            "tools",
            "`tools` must be an array",
        ));
    };
    Ok(names.chat_tools(tools, gap))
}

/// The settings chat shares with the Responses API, under chat's names: a
/// translated route must sample, limit and format the answer as the caller
/// asked, and a stream must end with its usage for `response.completed`.
fn chat_options(request: &Map<String, Value>, chat: &mut Map<String, Value>) {
    if let Some(choice) = request.get("tool_choice").filter(|t| !t.is_null()) {
        chat.insert("tool_choice".to_owned(), chat_tool_choice(choice));
    }
    if let Some(limit) = request.get("max_output_tokens").filter(|t| !t.is_null()) {
        chat.insert("max_tokens".to_owned(), limit.clone());
    }
    if let Some(format) = response_format(request.get("text")) {
        chat.insert("response_format".to_owned(), format);
    }
    for field in ["temperature", "top_p", "user", "parallel_tool_calls"] {
        if let Some(value) = request.get(field).filter(|v| !v.is_null()) {
            chat.insert(field.to_owned(), value.clone());
        }
    }
    if request.get("stream") == Some(&Value::Bool(true)) {
        chat.insert("stream".to_owned(), Value::Bool(true));
        // `response.completed` carries the usage: ask for it.
        chat.insert("stream_options".to_owned(), json!({"include_usage": true}));
    }
}

/// Images in tools' outputs: the chat translation carries them as the
/// output's JSON text (a URL is short), the provider bills them as images.
fn images_in_outputs(input: Option<&Value>) -> u64 {
    let Some(Value::Array(items)) = input else {
        return 0;
    };
    let images = items
        .iter()
        .filter_map(|item| item.get("output").and_then(Value::as_array))
        .flatten()
        .filter(|part| part.get("type").and_then(Value::as_str) == Some("input_image"))
        .count();
    u64::try_from(images).unwrap_or(u64::MAX)
}

/// `text.format` as chat's `response_format`: the same schema, so a
/// translated route answers in it and the hold counts it.
fn response_format(text: Option<&Value>) -> Option<Value> {
    let format = text?.get("format")?;
    match format.get("type")?.as_str()? {
        "json_schema" => {
            let mut schema = Map::new();
            for field in ["name", "description", "schema", "strict"] {
                if let Some(value) = format.get(field).filter(|v| !v.is_null()) {
                    schema.insert(field.to_owned(), value.clone());
                }
            }
            Some(json!({"type": "json_schema", "json_schema": schema}))
        }
        "json_object" => Some(json!({"type": "json_object"})),
        _ => None,
    }
}

/// The input items as chat messages; what chat cannot carry is a gap.
struct Messages<'a> {
    names: &'a ToolNames,
    gap: &'a mut Option<Gap>,
    out: Vec<Value>,
    /// Items left out of the chat body, counted as text: a passthrough sends them.
    left_out: Vec<String>,
}

impl Messages<'_> {
    fn of(mut self, request: &Map<String, Value>) -> Result<(Vec<Value>, Vec<String>), ApiError> {
        if let Some(Value::String(instructions)) = request.get("instructions") {
            self.out
                .push(json!({"role": "system", "content": instructions}));
        }
        match request.get("input") {
            Some(Value::String(text)) => self.out.push(json!({"role": "user", "content": text})),
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    self.item(item, i)?;
                }
            }
            _ => {
                return Err(ApiError::invalid_request(
                    "input",
                    "`input` must be a string or an array of items",
                ));
            }
        }
        Ok((self.out, self.left_out))
    }

    fn gap(&mut self, param: String, problem: String) {
        self.gap.get_or_insert(Gap { param, problem });
    }

    /// One input item as chat messages; consecutive calls share one assistant message.
    fn item(&mut self, item: &Value, i: usize) -> Result<(), ApiError> {
        let field = |name: &str| item.get(name).and_then(Value::as_str);
        let invalid =
            |what: &str| ApiError::invalid_request(format!("input[{i}]"), what.to_owned());
        match field("type").unwrap_or("message") {
            "message" => self.message(item, i)?,
            kind @ ("function_call" | "custom_tool_call") => {
                let (Some(call_id), Some(name)) = (field("call_id"), field("name")) else {
                    return Err(invalid("a call needs `call_id` and `name`"));
                };
                let arguments = if kind == "custom_tool_call" {
                    json!({"input": field("input").unwrap_or_default()}).to_string()
                } else {
                    field("arguments").unwrap_or("{}").to_owned()
                };
                let name = self.names.chat_name(field("namespace"), name);
                self.call(json!({"id": call_id, "type": "function", "function": {
                    "name": name, "arguments": arguments,
                }}));
            }
            "function_call_output" | "custom_tool_call_output" => {
                let Some(call_id) = field("call_id") else {
                    return Err(invalid("a call's output needs `call_id`"));
                };
                let output = match item.get("output") {
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                self.out
                    .push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            }
            // The reasoning of an earlier turn is opaque to any other model.
            "reasoning" => self.left_out.push(item.to_string()),
            other => {
                self.left_out.push(item.to_string());
                self.gap(
                    format!("input[{i}]"),
                    format!("items of type `{other}` have no chat counterpart"),
                );
            }
        }
        Ok(())
    }

    fn message(&mut self, item: &Value, i: usize) -> Result<(), ApiError> {
        let invalid =
            |what: &str| ApiError::invalid_request(format!("input[{i}]"), what.to_owned());
        let role = match item.get("role").and_then(Value::as_str) {
            Some("developer" | "system") => "system",
            Some(role @ ("user" | "assistant")) => role,
            _ => {
                return Err(invalid(
                    "a message needs a `role`: user, assistant, system or developer",
                ));
            }
        };
        let content = match item.get("content") {
            Some(Value::String(text)) => Value::String(text.clone()),
            Some(Value::Array(parts)) => {
                let mut out = Vec::with_capacity(parts.len());
                for (j, part) in parts.iter().enumerate() {
                    match chat_part(part) {
                        Some(part) => out.push(part),
                        None => self.gap(
                            format!("input[{i}].content[{j}]"),
                            "only text and image parts have a chat counterpart".to_owned(),
                        ),
                    }
                }
                Value::Array(out)
            }
            _ => return Err(invalid("a message needs `content`")),
        };
        self.out.push(json!({"role": role, "content": content}));
        Ok(())
    }

    /// A tool call, joined to the assistant message of the calls just before it.
    fn call(&mut self, call: Value) {
        let joins = self.out.last().is_some_and(|m| {
            m["role"] == "assistant" && m.get("tool_calls").is_some() && m["content"].is_null()
        });
        match self
            .out
            .last_mut()
            .and_then(|m| m.get_mut("tool_calls"))
            .and_then(Value::as_array_mut)
        {
            Some(calls) if joins => calls.push(call),
            _ => self
                .out
                .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
        }
    }
}

fn chat_part(part: &Value) -> Option<Value> {
    match part.get("type").and_then(Value::as_str)? {
        "input_text" | "output_text" | "text" => {
            Some(json!({"type": "text", "text": part.get("text")?.as_str()?}))
        }
        "input_image" => {
            let url = part.get("image_url")?.as_str()?;
            let detail = part.get("detail").and_then(Value::as_str).unwrap_or("auto");
            Some(json!({"type": "image_url", "image_url": {"url": url, "detail": detail}}))
        }
        _ => None,
    }
}

fn chat_tool_choice(choice: &Value) -> Value {
    match (
        choice.get("type").and_then(Value::as_str),
        choice.get("name"),
    ) {
        (Some("function" | "custom"), Some(name)) => {
            json!({"type": "function", "function": {"name": name}})
        }
        _ => choice.clone(),
    }
}

/// The ids and time a response is known by.
#[derive(Debug, Clone)]
pub struct Identity {
    pub id: String,
    pub created_at: u64,
}

/// A complete chat answer as a `response` object.
pub fn to_response(chat: &[u8], identity: &Identity, echo: &Echo) -> Bytes {
    let chat: Value = serde_json::from_slice(chat).unwrap_or_default();
    let choice = &chat["choices"][0];
    let mut output = Vec::new();
    if let Some(text) = choice["message"]["content"]
        .as_str()
        .filter(|t| !t.is_empty())
    {
        output.push(message_item(
            &format!("msg_{}", identity.id),
            text,
            "completed",
        ));
    }
    for call in choice["message"]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let call_id = call["id"].as_str().unwrap_or_default();
        output.push(echo.names.item(
            call_id,
            call["function"]["name"].as_str().unwrap_or_default(),
            call["function"]["arguments"].as_str().unwrap_or_default(),
            "completed",
        ));
    }
    let finish = choice["finish_reason"].as_str();
    let body = response_object(
        identity,
        echo,
        &chat["model"],
        &output,
        finish,
        Some(&chat["usage"]),
    );
    Bytes::from(body.to_string())
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
}

fn response_object(
    identity: &Identity,
    echo: &Echo,
    model: &Value,
    output: &[Value],
    finish: Option<&str>,
    usage: Option<&Value>,
) -> Value {
    let (status, incomplete) = match finish {
        None => ("in_progress", Value::Null),
        Some("length") => ("incomplete", incomplete_at_limit()),
        Some(_) => ("completed", Value::Null),
    };
    // Every field the published schema requires, at the API's defaults
    // unless the request set it: typed clients refuse an object without one.
    let mut response = json!({
        "id": identity.id, "object": "response", "created_at": identity.created_at,
        "status": status, "incomplete_details": incomplete, "error": null,
        "instructions": null, "model": model, "output": output,
        "parallel_tool_calls": true, "tool_choice": "auto", "tools": [], "metadata": {},
        "temperature": 1.0, "top_p": 1.0,
    });
    // An answer not yet finished has no usage: the key is left out, not null.
    if let Some(usage) = usage {
        response["usage"] = response_usage(usage);
    }
    for (field, value) in &echo.fields {
        if !value.is_null() {
            response[field.as_str()] = value.clone();
        }
    }
    if let Some(tools) = response["tools"].as_array_mut() {
        tools.iter_mut().for_each(complete_tool);
    }
    response
}

/// A function tool as the schema describes it: `strict` and `parameters`
/// always present (chat's own defaults, which the translated call used).
fn complete_tool(tool: &mut Value) {
    if tool["type"] != "function" {
        return;
    }
    if let Some(tool) = tool.as_object_mut() {
        tool.entry("strict").or_insert(Value::Bool(false));
        tool.entry("parameters").or_insert(Value::Null);
    }
}

/// Chat usage in the Responses shape.
fn response_usage(usage: &Value) -> Value {
    let number = |v: &Value| v.as_u64().unwrap_or(0);
    let input = number(&usage["prompt_tokens"]);
    let output = number(&usage["completion_tokens"]);
    let cached = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .or_else(|| usage["prompt_cache_hit_tokens"].as_u64())
        .unwrap_or(0);
    let reasoning = number(&usage["completion_tokens_details"]["reasoning_tokens"]);
    let mut object = usage_object(input, cached, output, reasoning);
    object["input_tokens_details"]["cache_write_tokens"] = Value::from(number(
        &usage["prompt_tokens_details"]["cache_write_tokens"],
    ));
    object
}

/// A `response` object's `usage`. Input counts its cached tokens and output
/// its reasoning tokens, as chat's prompt and completion counts do.
/// Also what the passthrough relay reports when it ends a stream at its hold
/// (`provider/adapters/responses.rs`), so both paths end alike.
pub fn usage_object(input: u64, cached: u64, output: u64, reasoning: u64) -> Value {
    json!({"input_tokens": input,
           "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
           "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
           "total_tokens": input.saturating_add(output)})
}

/// The `incomplete_details` of a response its output limit ended (or the
/// gateway's hold did, which is that limit).
pub fn incomplete_at_limit() -> Value {
    json!({"reason": "max_output_tokens"})
}

/// Chat completion chunks → Responses stream events, in order.
#[derive(Debug)]
pub struct StreamMapper {
    identity: Identity,
    /// The text message's item id, `msg_` and the response's.
    message_id: String,
    echo: Echo,
    model: Value,
    sequence: u64,
    started: bool,
    finished: bool,
    /// The output items in order: text message or function calls (by chat tool index).
    items: Vec<Item>,
    finish: Option<String>,
    usage: Option<Value>,
}

#[derive(Debug)]
enum Item {
    Text {
        text: String,
    },
    Call {
        index: u64,
        call_id: String,
        name: String,
        arguments: String,
    },
}

impl StreamMapper {
    pub fn new(identity: Identity, echo: Echo) -> StreamMapper {
        StreamMapper {
            message_id: format!("msg_{}", identity.id),
            identity,
            echo,
            model: Value::Null,
            sequence: 0,
            started: false,
            finished: false,
            items: Vec::new(),
            finish: None,
            usage: None,
        }
    }

    /// The events for one chat SSE event's `data` (a chunk, `[DONE]`, or an error).
    pub fn on_data(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        let delta = match chunk::read(data) {
            None => return out,
            Some(ChatEvent::Done) => {
                self.finish(&mut out);
                return out;
            }
            Some(ChatEvent::Error(error)) => {
                self.emit(
                    &mut out,
                    "error",
                    json!({"code": error["code"], "message": error["message"], "param": null}),
                );
                self.finished = true;
                return out;
            }
            Some(ChatEvent::Chunk(delta)) => delta,
        };
        if !self.started {
            self.started = true;
            self.model = delta.model;
            let response = self.response(None);
            self.emit(&mut out, "response.created", json!({"response": response}));
            self.emit(
                &mut out,
                "response.in_progress",
                json!({"response": response}),
            );
        }
        if delta.usage.is_some() {
            self.usage = delta.usage;
        }
        if let Some(text) = &delta.text {
            self.text_delta(&mut out, text);
        }
        for call in &delta.tool_calls {
            self.call_delta(&mut out, call);
        }
        if delta.finish_reason.is_some() {
            self.finish = delta.finish_reason;
        }
        out
    }

    fn text_delta(&mut self, out: &mut Vec<u8>, delta: &str) {
        let id = self.message_id.clone();
        let index = if let Some(index) = self
            .items
            .iter()
            .position(|i| matches!(i, Item::Text { .. }))
        {
            index
        } else {
            self.items.push(Item::Text {
                text: String::new(),
            });
            let index = self.items.len() - 1;
            self.emit(out, "response.output_item.added", json!({"output_index": index,
                "item": {"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []}}));
            self.emit(out, "response.content_part.added", json!({"item_id": id, "output_index": index,
                "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}));
            index
        };
        if let Some(Item::Text { text }) = self.items.get_mut(index) {
            text.push_str(delta);
        }
        self.emit_text_delta(out, index, delta);
    }

    /// A text chunk's event, byte for byte what `emit` writes for it (the
    /// same keys in the same order), written without building a value:
    /// it is most of a stream's events.
    fn emit_text_delta(&mut self, out: &mut Vec<u8>, index: usize, delta: &str) {
        const KIND: &str = "response.output_text.delta";
        let _ = write!(out, "event: {KIND}\ndata: {{\"item_id\":");
        write_json_string(out, &self.message_id);
        let _ = write!(
            out,
            ",\"output_index\":{index},\"content_index\":0,\"delta\":"
        );
        write_json_string(out, delta);
        let _ = write!(
            out,
            ",\"logprobs\":[],\"type\":\"{KIND}\",\"sequence_number\":{}}}\n\n",
            self.sequence
        );
        self.sequence += 1;
    }

    fn call_delta(&mut self, out: &mut Vec<u8>, call: &Value) {
        let tool_index = call["index"].as_u64().unwrap_or(0);
        let position = self
            .items
            .iter()
            .position(|i| matches!(i, Item::Call { index, .. } if *index == tool_index));
        let position = if let Some(position) = position {
            position
        } else {
            let call_id = call["id"].as_str().unwrap_or_default().to_owned();
            let name = call["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let item = self.echo.names.item(&call_id, &name, "", "in_progress");
            self.items.push(Item::Call {
                index: tool_index,
                call_id,
                name,
                arguments: String::new(),
            });
            let output_index = self.items.len() - 1;
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": output_index, "item": item}),
            );
            output_index
        };
        let Some(delta) = call["function"]["arguments"]
            .as_str()
            .filter(|d| !d.is_empty())
        else {
            return;
        };
        // A custom tool's input is the `input` of the whole arguments: it is sent at the end.
        let custom = matches!(self.items.get(position),
            Some(Item::Call { name, .. }) if self.echo.names.is_custom(name));
        let Some(Item::Call {
            call_id, arguments, ..
        }) = self.items.get_mut(position)
        else {
            return;
        };
        arguments.push_str(delta);
        if custom {
            return;
        }
        let item_id = format!("fc_{call_id}");
        self.emit(
            out,
            "response.function_call_arguments.delta",
            json!({"item_id": item_id,
            "output_index": position, "delta": delta}),
        );
    }

    /// Closes every item, then `response.completed` (or `response.incomplete`) with the usage.
    fn finish(&mut self, out: &mut Vec<u8>) {
        self.finished = true;
        let mut output = Vec::new();
        let items = std::mem::take(&mut self.items);
        for (index, item) in items.iter().enumerate() {
            let done = match item {
                Item::Text { text } => {
                    let id = self.message_id.clone();
                    self.emit(
                        out,
                        "response.output_text.done",
                        json!({"item_id": id, "output_index": index,
                        "content_index": 0, "text": text, "logprobs": []}),
                    );
                    self.emit(out, "response.content_part.done", json!({"item_id": id, "output_index": index,
                        "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": [], "logprobs": []}}));
                    message_item(&id, text, "completed")
                }
                Item::Call {
                    call_id,
                    name,
                    arguments,
                    ..
                } => {
                    let item = self.echo.names.item(call_id, name, arguments, "completed");
                    if item["type"] == "custom_tool_call" {
                        let done = json!({"item_id": item["id"], "output_index": index,
                            "input": item["input"]});
                        self.emit(out, "response.custom_tool_call_input.done", done);
                    } else {
                        self.emit(
                            out,
                            "response.function_call_arguments.done",
                            json!({"item_id": format!("fc_{call_id}"), "name": item["name"],
                            "output_index": index, "arguments": arguments}),
                        );
                    }
                    item
                }
            };
            self.emit(
                out,
                "response.output_item.done",
                json!({"output_index": index, "item": done}),
            );
            output.push(done);
        }
        let finish = Some(self.finish.clone().unwrap_or_else(|| "stop".to_owned()));
        let usage = self.usage.clone();
        let response = response_object(
            &self.identity,
            &self.echo,
            &self.model,
            &output,
            finish.as_deref(),
            usage.as_ref(),
        );
        let kind = if response["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.emit(out, kind, json!({"response": response}));
    }

    fn response(&self, finish: Option<&str>) -> Value {
        response_object(&self.identity, &self.echo, &self.model, &[], finish, None)
    }

    fn emit(&mut self, out: &mut Vec<u8>, kind: &str, mut event: Value) {
        event["type"] = Value::from(kind);
        event["sequence_number"] = Value::from(self.sequence);
        self.sequence += 1;
        let _ = write!(out, "event: {kind}\ndata: {event}\n\n");
    }
}

/// `text` as a JSON string, escaped as a value's `Display` escapes it.
pub fn write_json_string(out: &mut Vec<u8>, text: &str) {
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

#[cfg(test)]
mod tests;
