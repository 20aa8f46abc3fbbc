//! Anthropic Messages API upstreams (`kind = "anthropic"`): the caller's OpenAI chat body is
//! rewritten into a Messages body, and answers (whole or streamed) are rewritten back into
//! OpenAI shapes. Every function is pure except the `created` stamp. `cache_control` objects
//! are copied verbatim and never interpreted, so prompt caching behaves exactly as the caller
//! asked; usage keeps Anthropic's split so cache writes and cache reads are priced separately.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::clock::{Clock, SystemClock};
use crate::openai::chat::ChatRequest;
use crate::pricing::Usage;
use crate::prompts::{Prefix, place};

/// The API version sent when the provider configures none.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// Used for chunks of a stream that never announced its message id.
const FALLBACK_ID: &str = "chatcmpl-anthropic";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnthropicMapError {
    /// The caller's request cannot be expressed in the Messages API; `field` is an OpenAI path.
    #[error("{field}: {problem}")]
    Request { field: String, problem: String },
    /// The upstream's answer is not shaped like a Messages API answer.
    #[error("anthropic response {field}: {problem}")]
    Response { field: String, problem: String },
    /// The upstream answered with an error (an `error` body or stream event).
    #[error("anthropic error {kind}: {message}")]
    Upstream { kind: String, message: String },
}

impl AnthropicMapError {
    /// The offending field (an OpenAI path for requests), if the error is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Request { field, .. } | Self::Response { field, .. } => Some(field),
            Self::Upstream { .. } => None,
        }
    }
}

fn request_error(field: impl Into<String>, problem: impl Into<String>) -> AnthropicMapError {
    AnthropicMapError::Request {
        field: field.into(),
        problem: problem.into(),
    }
}

fn response_error(field: impl Into<String>, problem: impl Into<String>) -> AnthropicMapError {
    AnthropicMapError::Response {
        field: field.into(),
        problem: problem.into(),
    }
}

// === request ===

/// The Messages API body for one target. OpenAI fields without an Anthropic counterpart
/// (`presence_penalty`, `seed`, a `json_object` format, `logprobs`, …) are dropped; a
/// `json_schema` format is Anthropic's `output_config.format`.
pub fn build_body(
    request: &ChatRequest,
    model: &str,
    max_tokens: u32,
    stream: bool,
) -> Result<Bytes, AnthropicMapError> {
    build_body_as(request, model, max_tokens, stream, None, None)
}

/// As `build_body`, with `metadata.user_id` set to `user` whatever the
/// caller sent, and the gateway's prompts first in `system`.
pub fn build_body_as(
    request: &ChatRequest,
    model: &str,
    max_tokens: u32,
    stream: bool,
    user: Option<&str>,
    prefix: Option<&Prefix<'_>>,
) -> Result<Bytes, AnthropicMapError> {
    let mut body = map_request(request.body(), model, max_tokens, stream)?;
    if let Some(user) = user {
        body.insert("metadata".to_owned(), json!({ "user_id": user }));
    }
    if let Some(prefix) = prefix {
        place::anthropic_system(&mut body, prefix);
    }
    // serde_json cannot fail to write a Map of Values.
    Ok(Bytes::from(
        serde_json::to_vec(&Value::Object(body)).unwrap_or_default(),
    ))
}

fn map_request(
    body: &Map<String, Value>,
    model: &str,
    max_tokens: u32,
    stream: bool,
) -> Result<Map<String, Value>, AnthropicMapError> {
    match body.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(_) => {
            return Err(request_error(
                "n",
                "anthropic returns a single choice; only 1 is supported",
            ));
        }
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err(request_error("messages", "must be an array"));
    };
    let (system, messages) = map_messages(messages)?;
    let mut out = Map::new();
    out.insert("model".to_owned(), Value::from(model));
    out.insert("max_tokens".to_owned(), Value::from(max_tokens));
    if let Some(system) = system {
        out.insert("system".to_owned(), system);
    }
    out.insert("messages".to_owned(), Value::Array(messages));
    if let Some(tools) = map_tools(body.get("tools"))? {
        out.insert("tools".to_owned(), Value::Array(tools));
        // Anthropic refuses a tool_choice without tools, and OpenAI's is meaningless then.
        if let Some(choice) =
            map_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))?
        {
            out.insert("tool_choice".to_owned(), choice);
        }
    }
    if let Some(temperature) = map_temperature(body.get("temperature"))? {
        out.insert("temperature".to_owned(), temperature);
    }
    match body.get("top_p") {
        None | Some(Value::Null) => {}
        Some(top_p @ Value::Number(_)) => {
            out.insert("top_p".to_owned(), top_p.clone());
        }
        Some(_) => return Err(request_error("top_p", "must be a number")),
    }
    if let Some(stop) = map_stop(body.get("stop"))? {
        out.insert("stop_sequences".to_owned(), stop);
    }
    match body.get("user") {
        None | Some(Value::Null) => {}
        Some(Value::String(user)) if user.is_empty() => {}
        Some(Value::String(user)) => {
            out.insert("metadata".to_owned(), json!({ "user_id": user }));
        }
        Some(_) => return Err(request_error("user", "must be a string")),
    }
    if let Some(format) = output_format(body.get("response_format")) {
        out.insert("output_config".to_owned(), json!({ "format": format }));
    }
    if stream {
        out.insert("stream".to_owned(), Value::Bool(true));
    }
    Ok(out)
}

/// Chat's structured output as Anthropic's: the same JSON schema.
fn output_format(format: Option<&Value>) -> Option<Value> {
    let format = format?;
    if format["type"] != "json_schema" {
        return None;
    }
    let schema = format["json_schema"].get("schema")?;
    Some(json!({ "type": "json_schema", "schema": schema }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One Anthropic message under construction; `first` is the index of the OpenAI message
/// that opened it, for error paths.
struct Turn {
    role: Role,
    first: usize,
    blocks: Vec<Value>,
}

/// Splits system prompts out and folds the rest into strictly alternating turns.
fn map_messages(messages: &[Value]) -> Result<(Option<Value>, Vec<Value>), AnthropicMapError> {
    let mut system = SystemPrompt::default();
    let mut turns: Vec<Turn> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let field = format!("messages[{i}]");
        let Some(message) = message.as_object() else {
            return Err(request_error(field, "must be an object"));
        };
        let Some(role) = message.get("role").and_then(Value::as_str) else {
            return Err(request_error(format!("{field}.role"), "must be a string"));
        };
        let (role, blocks) = match role {
            "system" | "developer" => {
                system.extend(message.get("content"), &field)?;
                continue;
            }
            "user" => (
                Role::User,
                content_blocks(message.get("content"), &field, true)?,
            ),
            "assistant" => (Role::Assistant, assistant_blocks(message, &field)?),
            "tool" => (Role::User, vec![tool_result(message, &field)?]),
            other => {
                return Err(request_error(
                    format!("{field}.role"),
                    format!("unsupported role {other:?}"),
                ));
            }
        };
        // Anthropic rejects empty messages; a message with nothing to say is dropped.
        if blocks.is_empty() {
            continue;
        }
        // Anthropic requires alternation, so consecutive same-role messages (several tool
        // results, a tool result followed by a user note) become one message.
        match turns.last_mut() {
            Some(last) if last.role == role => last.blocks.extend(blocks),
            _ => turns.push(Turn {
                role,
                first: i,
                blocks,
            }),
        }
    }
    match turns.first() {
        None => {
            return Err(request_error(
                "messages",
                "at least one user or assistant message with content is required",
            ));
        }
        Some(turn) if turn.role == Role::Assistant => {
            return Err(request_error(
                format!("messages[{}].role", turn.first),
                "anthropic requires the first non-system message to be from the user",
            ));
        }
        Some(_) => {}
    }
    Ok((
        system.finish(),
        turns.into_iter().map(finish_turn).collect(),
    ))
}

fn finish_turn(mut turn: Turn) -> Value {
    if turn.role == Role::User {
        // Tool results must open the message that answers the tool calls; the sort is stable.
        turn.blocks
            .sort_by_key(|block| block.get("type").and_then(Value::as_str) != Some("tool_result"));
    }
    let content = match turn.blocks.as_slice() {
        [Value::Object(block)] => plain_text(block).map(Value::from),
        _ => None,
    };
    let content = content.unwrap_or(Value::Array(turn.blocks));
    json!({ "role": turn.role.as_str(), "content": content })
}

/// The text of a block that carries nothing else, which can travel as a plain string.
fn plain_text(block: &Map<String, Value>) -> Option<&str> {
    if block.len() != 2 || block.get("type").and_then(Value::as_str) != Some("text") {
        return None;
    }
    block.get("text").and_then(Value::as_str)
}

#[derive(Default)]
struct SystemPrompt {
    blocks: Vec<Value>,
    cached: bool,
}

impl SystemPrompt {
    fn extend(&mut self, content: Option<&Value>, field: &str) -> Result<(), AnthropicMapError> {
        match content {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => self.blocks.extend(text_block(text)),
            Some(Value::Array(parts)) => {
                for (j, part) in parts.iter().enumerate() {
                    let part_field = format!("{field}.content[{j}]");
                    let kind = part_type(part, &part_field)?;
                    if kind != "text" {
                        return Err(request_error(
                            format!("{part_field}.type"),
                            format!("system messages may only contain text, not {kind:?}"),
                        ));
                    }
                    if let Some(block) = map_part(part, &part_field, false)? {
                        self.cached |= block.get("cache_control").is_some();
                        self.blocks.push(block);
                    }
                }
            }
            Some(_) => {
                return Err(request_error(
                    format!("{field}.content"),
                    "must be a string or an array of content parts",
                ));
            }
        }
        Ok(())
    }

    /// A string unless some part carries `cache_control`, which only blocks can hold.
    fn finish(self) -> Option<Value> {
        if self.blocks.is_empty() {
            None
        } else if self.cached {
            Some(Value::Array(self.blocks))
        } else {
            let texts: Vec<&str> = self
                .blocks
                .iter()
                .filter_map(|block| block.get("text").and_then(Value::as_str))
                .collect();
            Some(Value::String(texts.join("\n\n")))
        }
    }
}

/// Anthropic rejects empty text blocks, so empty text maps to no block at all.
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({ "type": "text", "text": text }))
}

fn content_blocks(
    content: Option<&Value>,
    field: &str,
    images: bool,
) -> Result<Vec<Value>, AnthropicMapError> {
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(text_block(text).into_iter().collect()),
        Some(Value::Array(parts)) => {
            let mut blocks = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                if let Some(block) = map_part(part, &format!("{field}.content[{j}]"), images)? {
                    blocks.push(block);
                }
            }
            Ok(blocks)
        }
        Some(_) => Err(request_error(
            format!("{field}.content"),
            "must be a string or an array of content parts",
        )),
    }
}

/// The `type` of a content part.
fn part_type<'a>(part: &'a Value, field: &str) -> Result<&'a str, AnthropicMapError> {
    let Some(part) = part.as_object() else {
        return Err(request_error(field, "must be an object"));
    };
    match part.get("type") {
        Some(Value::String(kind)) => Ok(kind),
        _ => Err(request_error(format!("{field}.type"), "must be a string")),
    }
}

fn map_part(part: &Value, field: &str, images: bool) -> Result<Option<Value>, AnthropicMapError> {
    let kind = part_type(part, field)?;
    let text_of = |key: &str| {
        part.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| request_error(format!("{field}.{key}"), "must be a string"))
    };
    let block = match kind {
        "text" => text_block(text_of("text")?),
        // A refusal replayed from an earlier assistant turn is still what the assistant said.
        "refusal" => text_block(text_of("refusal")?),
        "image_url" if images => Some(image_block(part.get("image_url"), field)?),
        "image_url" => {
            return Err(request_error(
                format!("{field}.type"),
                "images are only supported in user and tool messages",
            ));
        }
        other => {
            return Err(request_error(
                format!("{field}.type"),
                format!("unsupported content part type {other:?}"),
            ));
        }
    };
    Ok(block.map(|mut block| {
        copy_cache_control(part.get("cache_control"), &mut block);
        block
    }))
}

fn image_block(image: Option<&Value>, field: &str) -> Result<Value, AnthropicMapError> {
    let url = match image {
        Some(Value::String(url)) => url,
        Some(Value::Object(image)) => match image.get("url") {
            Some(Value::String(url)) => url,
            _ => {
                return Err(request_error(
                    format!("{field}.image_url.url"),
                    "must be a string",
                ));
            }
        },
        _ => {
            return Err(request_error(
                format!("{field}.image_url"),
                "must be an object with a url",
            ));
        }
    };
    let url_field = || format!("{field}.image_url.url");
    if let Some(rest) = strip_prefix_ignore_case(url, "data:") {
        // data:<media type>[;param]*;base64,<data>
        let Some((header, data)) = rest.split_once(',') else {
            return Err(request_error(url_field(), "data: URL without a comma"));
        };
        let mut params = header.split(';');
        let media_type = params.next().unwrap_or_default();
        if media_type.is_empty() || !params.any(|p| p.eq_ignore_ascii_case("base64")) {
            return Err(request_error(
                url_field(),
                "only base64 data: URLs with a media type are supported",
            ));
        }
        Ok(json!({
            "type": "image",
            "source": { "type": "base64", "media_type": media_type, "data": data },
        }))
    } else if strip_prefix_ignore_case(url, "https://").is_some()
        || strip_prefix_ignore_case(url, "http://").is_some()
    {
        Ok(json!({ "type": "image", "source": { "type": "url", "url": url } }))
    } else {
        Err(request_error(
            url_field(),
            "must be a data: URL or an http(s) URL",
        ))
    }
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| text.get(prefix.len()..))
        .flatten()
}

fn copy_cache_control(cache_control: Option<&Value>, to: &mut Value) {
    if let (Some(cache_control), Some(to)) = (cache_control, to.as_object_mut()) {
        to.insert("cache_control".to_owned(), cache_control.clone());
    }
}

fn assistant_blocks(
    message: &Map<String, Value>,
    field: &str,
) -> Result<Vec<Value>, AnthropicMapError> {
    if message
        .get("function_call")
        .is_some_and(|call| !call.is_null())
    {
        return Err(request_error(
            format!("{field}.function_call"),
            "legacy function calls are not supported; send tool_calls",
        ));
    }
    let mut blocks = content_blocks(message.get("content"), field, false)?;
    match message.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(calls)) => {
            for (k, call) in calls.iter().enumerate() {
                blocks.push(tool_use(call, &format!("{field}.tool_calls[{k}]"))?);
            }
        }
        Some(_) => {
            return Err(request_error(
                format!("{field}.tool_calls"),
                "must be an array",
            ));
        }
    }
    Ok(blocks)
}

fn tool_use(call: &Value, field: &str) -> Result<Value, AnthropicMapError> {
    let Some(call) = call.as_object() else {
        return Err(request_error(field, "must be an object"));
    };
    match call.get("type") {
        None | Some(Value::Null) => {}
        Some(Value::String(kind)) if kind == "function" => {}
        Some(_) => {
            return Err(request_error(
                format!("{field}.type"),
                "only function tool calls are supported",
            ));
        }
    }
    let id = non_empty_str(call.get("id"), &format!("{field}.id"))?;
    let Some(function) = call.get("function").and_then(Value::as_object) else {
        return Err(request_error(
            format!("{field}.function"),
            "must be an object",
        ));
    };
    let name = non_empty_str(function.get("name"), &format!("{field}.function.name"))?;
    let arguments_field = || format!("{field}.function.arguments");
    let input = match function.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        // Some clients send "" for a call without arguments.
        Some(Value::String(text)) if text.trim().is_empty() => Value::Object(Map::new()),
        Some(Value::String(text)) => serde_json::from_str::<Value>(text)
            .map_err(|_| request_error(arguments_field(), "not valid JSON"))?,
        Some(other) => other.clone(),
    };
    if !input.is_object() {
        return Err(request_error(
            arguments_field(),
            "must encode a JSON object",
        ));
    }
    let mut block = json!({ "type": "tool_use", "id": id, "name": name, "input": input });
    copy_cache_control(call.get("cache_control"), &mut block);
    Ok(block)
}

fn tool_result(message: &Map<String, Value>, field: &str) -> Result<Value, AnthropicMapError> {
    let id = non_empty_str(
        message.get("tool_call_id"),
        &format!("{field}.tool_call_id"),
    )?;
    let mut block = json!({ "type": "tool_result", "tool_use_id": id });
    let content = match message.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.is_empty() => None,
        Some(Value::String(text)) => Some(Value::String(text.clone())),
        Some(Value::Array(_)) => {
            let blocks = content_blocks(message.get("content"), field, true)?;
            (!blocks.is_empty()).then_some(Value::Array(blocks))
        }
        Some(_) => {
            return Err(request_error(
                format!("{field}.content"),
                "must be a string or an array of content parts",
            ));
        }
    };
    if let (Some(content), Some(object)) = (content, block.as_object_mut()) {
        object.insert("content".to_owned(), content);
    }
    Ok(block)
}

fn non_empty_str<'a>(value: Option<&'a Value>, field: &str) -> Result<&'a str, AnthropicMapError> {
    match value {
        Some(Value::String(text)) if !text.is_empty() => Ok(text),
        _ => Err(request_error(field, "must be a non-empty string")),
    }
}

fn map_tools(tools: Option<&Value>) -> Result<Option<Vec<Value>>, AnthropicMapError> {
    let tools = match tools {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(tools)) if tools.is_empty() => return Ok(None),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(request_error("tools", "must be an array")),
    };
    let mut mapped = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let field = format!("tools[{i}]");
        let Some(tool) = tool.as_object() else {
            return Err(request_error(field, "must be an object"));
        };
        match tool.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(other) => {
                return Err(request_error(
                    format!("{field}.type"),
                    format!("unsupported tool type {other:?}; only function tools map"),
                ));
            }
            None => return Err(request_error(format!("{field}.type"), "must be a string")),
        }
        let Some(function) = tool.get("function").and_then(Value::as_object) else {
            return Err(request_error(
                format!("{field}.function"),
                "must be an object",
            ));
        };
        let name = non_empty_str(function.get("name"), &format!("{field}.function.name"))?;
        let mut out = Map::new();
        out.insert("name".to_owned(), Value::from(name));
        match function.get("description") {
            None | Some(Value::Null) => {}
            Some(description @ Value::String(_)) => {
                out.insert("description".to_owned(), description.clone());
            }
            Some(_) => {
                return Err(request_error(
                    format!("{field}.function.description"),
                    "must be a string",
                ));
            }
        }
        let schema = match function.get("parameters") {
            // OpenAI allows a tool without parameters; Anthropic needs a schema.
            None | Some(Value::Null) => json!({ "type": "object", "properties": {} }),
            Some(schema @ Value::Object(_)) => schema.clone(),
            Some(_) => {
                return Err(request_error(
                    format!("{field}.function.parameters"),
                    "must be a JSON schema object",
                ));
            }
        };
        out.insert("input_schema".to_owned(), schema);
        if let Some(cache_control) = tool
            .get("cache_control")
            .or_else(|| function.get("cache_control"))
        {
            out.insert("cache_control".to_owned(), cache_control.clone());
        }
        mapped.push(Value::Object(out));
    }
    Ok(Some(mapped))
}

fn map_tool_choice(
    choice: Option<&Value>,
    parallel_tool_calls: Option<&Value>,
) -> Result<Option<Value>, AnthropicMapError> {
    let mut mapped = match choice {
        None | Some(Value::Null) => None,
        Some(Value::String(choice)) => match choice.as_str() {
            "auto" => Some(json!({ "type": "auto" })),
            "required" => Some(json!({ "type": "any" })),
            "none" => Some(json!({ "type": "none" })),
            other => {
                return Err(request_error(
                    "tool_choice",
                    format!("unsupported value {other:?}"),
                ));
            }
        },
        Some(Value::Object(choice)) => {
            let name = choice
                .get("function")
                .and_then(|function| function.get("name"))
                .and_then(Value::as_str)
                .filter(|name| !name.is_empty())
                .ok_or_else(|| request_error("tool_choice.function.name", "must be a string"))?;
            Some(json!({ "type": "tool", "name": name }))
        }
        Some(_) => {
            return Err(request_error(
                "tool_choice",
                "must be a string or an object",
            ));
        }
    };
    if parallel_tool_calls == Some(&Value::Bool(false)) {
        let choice = mapped.get_or_insert_with(|| json!({ "type": "auto" }));
        if let Some(choice) = choice.as_object_mut()
            && choice.get("type").and_then(Value::as_str) != Some("none")
        {
            choice.insert("disable_parallel_tool_use".to_owned(), Value::Bool(true));
        }
    }
    Ok(mapped)
}

/// OpenAI allows 0–2, Anthropic 0–1: higher values are clamped to Anthropic's most random
/// setting rather than failing the call.
fn map_temperature(temperature: Option<&Value>) -> Result<Option<Value>, AnthropicMapError> {
    match temperature {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => match number.as_f64() {
            Some(t) if t < 0.0 => Err(request_error("temperature", "must not be negative")),
            Some(t) if t > 1.0 => Ok(Some(Value::from(1.0))),
            _ => Ok(Some(Value::Number(number.clone()))),
        },
        Some(_) => Err(request_error("temperature", "must be a number")),
    }
}

fn map_stop(stop: Option<&Value>) -> Result<Option<Value>, AnthropicMapError> {
    let sequences: Vec<Value> = match stop {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(stop)) => vec![Value::String(stop.clone())],
        Some(Value::Array(stops)) => {
            for (k, stop) in stops.iter().enumerate() {
                if !stop.is_string() {
                    return Err(request_error(format!("stop[{k}]"), "must be a string"));
                }
            }
            stops.clone()
        }
        Some(_) => {
            return Err(request_error(
                "stop",
                "must be a string or an array of strings",
            ));
        }
    };
    Ok((!sequences.is_empty()).then_some(Value::Array(sequences)))
}

/// Request headers for one call. An empty `version` means [`DEFAULT_VERSION`].
pub fn headers(api_key: &str, version: &str) -> Vec<(&'static str, String)> {
    let version = if version.is_empty() {
        DEFAULT_VERSION
    } else {
        version
    };
    vec![
        ("x-api-key", api_key.to_owned()),
        ("anthropic-version", version.to_owned()),
        ("content-type", "application/json".to_owned()),
    ]
}

// === response ===

/// Anthropic's four input-side counters; `prompt_tokens` in OpenAI terms is their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct AnthropicUsage {
    input: u64,
    cache_creation: u64,
    cache_read: u64,
    output: u64,
    /// `server_tool_use.web_search_requests`: each bills a fee.
    web_searches: u64,
}

impl AnthropicUsage {
    /// Overwrites the counters present in `usage`; a stream's `message_delta` repeats only some.
    fn merge(&mut self, usage: &Map<String, Value>) {
        let fields = [
            ("input_tokens", &mut self.input),
            ("cache_creation_input_tokens", &mut self.cache_creation),
            ("cache_read_input_tokens", &mut self.cache_read),
            ("output_tokens", &mut self.output),
        ];
        for (key, slot) in fields {
            if let Some(count) = usage.get(key).and_then(Value::as_u64) {
                *slot = count;
            }
        }
        let searches = usage
            .get("server_tool_use")
            .and_then(|tools| tools.get("web_search_requests"))
            .and_then(Value::as_u64);
        if let Some(count) = searches {
            self.web_searches = count;
        }
    }

    fn to_usage(self) -> Usage {
        Usage {
            prompt_tokens: self
                .input
                .saturating_add(self.cache_creation)
                .saturating_add(self.cache_read),
            cached_tokens: self.cache_read,
            cache_write_tokens: self.cache_creation,
            completion_tokens: self.output,
            web_searches: self.web_searches,
        }
    }
}

/// OpenAI's `usage` object for a mapped answer.
fn openai_usage(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens.saturating_add(usage.completion_tokens),
        "prompt_tokens_details": { "cached_tokens": usage.cached_tokens },
    })
}

fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        // end_turn, stop_sequence, pause_turn and reasons added later.
        _ => "stop",
    }
}

fn upstream_error(body: &Map<String, Value>) -> AnthropicMapError {
    let error = body.get("error");
    let text = |key: &str| {
        error
            .and_then(|error| error.get(key))
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned()
    };
    AnthropicMapError::Upstream {
        kind: text("type"),
        message: text("message"),
    }
}

fn now_secs() -> u64 {
    // Only stamps `created`; nothing decides on it.
    SystemClock.now_ms() / 1000
}

/// An OpenAI `chat.completion` body and the call's usage, from a Messages API answer.
pub fn map_response(body: &[u8], model: &str) -> Result<(Bytes, Usage), AnthropicMapError> {
    map_response_at(body, model, now_secs())
}

/// [`map_response`] with an explicit `created` (Unix seconds), for exact comparisons.
pub fn map_response_at(
    body: &[u8],
    model: &str,
    created: u64,
) -> Result<(Bytes, Usage), AnthropicMapError> {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
        return Err(response_error("body", "not a JSON object"));
    };
    if body.get("type").and_then(Value::as_str) == Some("error") {
        return Err(upstream_error(&body));
    }
    let Some(content) = body.get("content").and_then(Value::as_array) else {
        return Err(response_error("content", "must be an array"));
    };
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (i, block) in content.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => tool_calls.push(tool_call(block, i)?),
            // thinking, redacted_thinking, server tools: nothing OpenAI's shape can carry.
            _ => {}
        }
    }
    let usage = usage_of(&body)?;
    let mut message = Map::new();
    message.insert("role".to_owned(), Value::from("assistant"));
    let content = if text.is_empty() && !tool_calls.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    message.insert("content".to_owned(), content);
    message.insert("refusal".to_owned(), Value::Null);
    if !tool_calls.is_empty() {
        message.insert("tool_calls".to_owned(), Value::Array(tool_calls));
    }
    let id = body
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or(FALLBACK_ID);
    let stop_reason = body.get("stop_reason").and_then(Value::as_str);
    let out = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(stop_reason),
        }],
        "usage": openai_usage(&usage),
    });
    Ok((Bytes::from(out.to_string()), usage))
}

/// The usage of a Messages API answer passed on unchanged (the Messages
/// door's passthrough), which the call is billed by.
pub fn read_usage(body: &[u8]) -> Result<Usage, AnthropicMapError> {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
        return Err(response_error("body", "not a JSON object"));
    };
    if body.get("type").and_then(Value::as_str) == Some("error") {
        return Err(upstream_error(&body));
    }
    usage_of(&body)
}

fn usage_of(body: &Map<String, Value>) -> Result<Usage, AnthropicMapError> {
    let Some(raw_usage) = body.get("usage").and_then(Value::as_object) else {
        // Without usage the call cannot be billed; a silent zero would undercharge.
        return Err(response_error("usage", "missing"));
    };
    let mut counts = AnthropicUsage::default();
    counts.merge(raw_usage);
    Ok(counts.to_usage())
}

fn tool_call(block: &Value, index: usize) -> Result<Value, AnthropicMapError> {
    let field = |key: &str| format!("content[{index}].{key}");
    let id = block
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| response_error(field("id"), "must be a string"))?;
    let name = block
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| response_error(field("name"), "must be a string"))?;
    let arguments = block
        .get("input")
        .map_or_else(|| "{}".to_owned(), Value::to_string);
    Ok(json!({
        "id": id,
        "type": "function",
        "function": { "name": name, "arguments": arguments },
    }))
}

// === streaming ===

/// Turns Anthropic SSE events, fed one at a time, into OpenAI `chat.completion.chunk` JSON
/// strings (without the `data: ` framing). Input usage is known from `message_start`, output
/// usage is final after `message_delta`.
#[derive(Debug, Clone)]
pub struct StreamMapper {
    id: String,
    model: String,
    created: u64,
    usage: Option<AnthropicUsage>,
    /// Anthropic content-block index → OpenAI tool-call index, for `tool_use` blocks.
    tool_blocks: HashMap<u64, u64>,
    finished: bool,
}

impl StreamMapper {
    pub fn new(model: &str) -> Self {
        Self::with_created(model, now_secs())
    }

    /// A mapper stamping `created` (Unix seconds) on every chunk, for exact comparisons.
    pub fn with_created(model: &str, created: u64) -> Self {
        StreamMapper {
            id: FALLBACK_ID.to_owned(),
            model: model.to_owned(),
            created,
            usage: None,
            tool_blocks: HashMap::new(),
            finished: false,
        }
    }

    /// The chunks one event maps to (often none). `event` is the SSE `event:` name; when empty,
    /// the `type` inside `data` is used. Unknown events are ignored, as Anthropic asks.
    pub fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<String>, AnthropicMapError> {
        if event == "ping" {
            return Ok(Vec::new());
        }
        let Ok(Value::Object(data)) = serde_json::from_str::<Value>(data) else {
            let name = if event.is_empty() { "stream" } else { event };
            return Err(response_error(
                format!("{name} event"),
                "data is not a JSON object",
            ));
        };
        let kind = if event.is_empty() {
            data.get("type").and_then(Value::as_str).unwrap_or("")
        } else {
            event
        };
        match kind {
            "message_start" => Ok(self.message_start(&data)),
            "content_block_start" => Ok(self.block_start(&data)),
            "content_block_delta" => self.block_delta(&data),
            "message_delta" => Ok(self.message_delta(&data)),
            "message_stop" => {
                self.finished = true;
                Ok(Vec::new())
            }
            "error" => Err(upstream_error(&data)),
            // ping, content_block_stop, and event types added later.
            _ => Ok(Vec::new()),
        }
    }

    /// The call's usage so far: `None` before `message_start`.
    pub fn usage(&self) -> Option<Usage> {
        self.usage.map(AnthropicUsage::to_usage)
    }

    /// OpenAI's final usage-only chunk (`choices: []`), once usage is known.
    pub fn usage_chunk(&self) -> Option<String> {
        let usage = self.usage()?;
        Some(
            json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": openai_usage(&usage),
            })
            .to_string(),
        )
    }

    /// Whether `message_stop` arrived: a stream that ends without it was cut off.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    fn chunk(&self, delta: &Value, finish_reason: Option<&str>) -> String {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }],
        })
        .to_string()
    }

    fn message_start(&mut self, data: &Map<String, Value>) -> Vec<String> {
        let message = data.get("message");
        if let Some(id) = message.and_then(|m| m.get("id")).and_then(Value::as_str) {
            id.clone_into(&mut self.id);
        }
        let usage = self.usage.get_or_insert_with(AnthropicUsage::default);
        if let Some(raw) = message
            .and_then(|m| m.get("usage"))
            .and_then(Value::as_object)
        {
            usage.merge(raw);
        }
        vec![self.chunk(&json!({ "role": "assistant", "content": "" }), None)]
    }

    fn block_start(&mut self, data: &Map<String, Value>) -> Vec<String> {
        let Some(block) = data.get("content_block") else {
            return Vec::new();
        };
        match block.get("type").and_then(Value::as_str) {
            Some("text") => match block.get("text").and_then(Value::as_str) {
                Some(text) if !text.is_empty() => {
                    vec![self.chunk(&json!({ "content": text }), None)]
                }
                _ => Vec::new(),
            },
            Some("tool_use") => {
                let tool_index = u64::try_from(self.tool_blocks.len()).unwrap_or(u64::MAX);
                let block_index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                self.tool_blocks.insert(block_index, tool_index);
                let id = block.get("id").and_then(Value::as_str).unwrap_or("");
                let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                let call = json!({
                    "index": tool_index,
                    "id": id,
                    "type": "function",
                    "function": { "name": name, "arguments": "" },
                });
                vec![self.chunk(&json!({ "tool_calls": [call] }), None)]
            }
            _ => Vec::new(),
        }
    }

    fn block_delta(&self, data: &Map<String, Value>) -> Result<Vec<String>, AnthropicMapError> {
        let Some(delta) = data.get("delta") else {
            return Ok(Vec::new());
        };
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => match delta.get("text").and_then(Value::as_str) {
                Some(text) if !text.is_empty() => {
                    Ok(vec![self.chunk(&json!({ "content": text }), None)])
                }
                _ => Ok(Vec::new()),
            },
            Some("input_json_delta") => {
                let partial = delta
                    .get("partial_json")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if partial.is_empty() {
                    return Ok(Vec::new());
                }
                let block_index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let Some(tool_index) = self.tool_blocks.get(&block_index) else {
                    return Err(response_error(
                        "content_block_delta.index",
                        format!("no tool_use block {block_index} was started"),
                    ));
                };
                let call = json!({ "index": tool_index, "function": { "arguments": partial } });
                Ok(vec![self.chunk(&json!({ "tool_calls": [call] }), None)])
            }
            // thinking, signature and citation deltas have no OpenAI counterpart.
            _ => Ok(Vec::new()),
        }
    }

    fn message_delta(&mut self, data: &Map<String, Value>) -> Vec<String> {
        if let Some(raw) = data.get("usage").and_then(Value::as_object) {
            self.usage
                .get_or_insert_with(AnthropicUsage::default)
                .merge(raw);
        }
        match data
            .get("delta")
            .and_then(|delta| delta.get("stop_reason"))
            .and_then(Value::as_str)
        {
            Some(reason) => vec![self.chunk(&json!({}), Some(finish_reason(Some(reason))))],
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Price;
    use crate::money::PricePerMTok;

    const MIXED_REQUEST: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/anthropic/mixed_request.json"
    ));
    const MIXED_REQUEST_EXPECTED: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/anthropic/mixed_request.expected.json"
    ));
    const RESPONSE: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/anthropic/response_text_tool_use.json"
    ));
    const RESPONSE_EXPECTED: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/anthropic/response_text_tool_use.expected.json"
    ));
    const STREAM: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/anthropic/stream_text_tool_use.sse"
    ));
    const STREAM_EXPECTED: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/anthropic/stream_text_tool_use.expected.json"
    ));
    const CREATED: u64 = 1_700_000_000;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn build(request: &Value) -> Result<Value, AnthropicMapError> {
        let request = ChatRequest::parse(request.to_string().as_bytes()).unwrap();
        build_body(&request, "claude-sonnet-4-5", 256, false)
            .map(|bytes| serde_json::from_slice(&bytes).unwrap())
    }

    fn build_error(request: &Value) -> String {
        build(request).unwrap_err().to_string()
    }

    /// `event:`/`data:` pairs of an SSE text.
    fn sse_events(text: &str) -> Vec<(String, String)> {
        text.split("\n\n")
            .filter(|frame| !frame.trim().is_empty())
            .map(|frame| {
                let mut event = String::new();
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(name) = line.strip_prefix("event:") {
                        name.trim().clone_into(&mut event);
                    } else if let Some(payload) = line.strip_prefix("data:") {
                        data.push_str(payload.strip_prefix(' ').unwrap_or(payload));
                    }
                }
                (event, data)
            })
            .collect()
    }

    #[test]
    fn mixed_request_maps_to_the_exact_messages_body() {
        let body = build(&parse(MIXED_REQUEST)).unwrap();
        assert_eq!(body, parse(MIXED_REQUEST_EXPECTED));
        // Key order matters to nobody but a human reading captures; keep it stable anyway.
        let keys: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(&keys[..4], ["model", "max_tokens", "system", "messages"]);
        // The 1h TTL is Anthropic-specific and must arrive untouched.
        assert_eq!(
            body["messages"][0]["content"][0]["cache_control"],
            json!({"type": "ephemeral", "ttl": "1h"})
        );
    }

    #[test]
    fn plain_requests_stay_plain() {
        let body = build(&json!({
            "model": "r",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "Use French."}]},
                {"role": "user", "content": "Hi"},
                {"role": "user", "content": "there"},
                {"role": "assistant", "content": ""},
            ],
            "stop": ["a", "b"],
            "temperature": 1.7,
            "tool_choice": "required",
            "parallel_tool_calls": false,
        }))
        .unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 256,
                "system": "Be brief.\n\nUse French.",
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "Hi"},
                    {"type": "text", "text": "there"},
                ]}],
                "temperature": 1.0,
                "stop_sequences": ["a", "b"],
            })
        );
        let request = ChatRequest::parse(
            br#"{"model":"r","messages":[{"role":"user","content":"x"}],"stream":true}"#,
        )
        .unwrap();
        let streamed: Value =
            serde_json::from_slice(&build_body(&request, "m", 5, true).unwrap()).unwrap();
        assert_eq!(streamed["stream"], true);
        assert_eq!(streamed["messages"][0]["content"], "x");
    }

    #[test]
    fn tool_choice_shapes() {
        let with_choice = |choice: Value, parallel: Value| {
            let body = build(&json!({
                "model": "r",
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": choice,
                "parallel_tool_calls": parallel,
            }))
            .unwrap();
            assert_eq!(
                body["tools"],
                json!([{"name": "f", "input_schema": {"type": "object", "properties": {}}}])
            );
            body.get("tool_choice").cloned()
        };
        assert_eq!(
            with_choice(json!("auto"), Value::Null),
            Some(json!({"type": "auto"}))
        );
        assert_eq!(
            with_choice(json!("required"), json!(false)),
            Some(json!({"type": "any", "disable_parallel_tool_use": true}))
        );
        assert_eq!(
            with_choice(json!("none"), json!(false)),
            Some(json!({"type": "none"}))
        );
        assert_eq!(
            with_choice(
                json!({"type": "function", "function": {"name": "f"}}),
                json!(true)
            ),
            Some(json!({"type": "tool", "name": "f"}))
        );
        assert_eq!(
            with_choice(Value::Null, json!(false)),
            Some(json!({"type": "auto", "disable_parallel_tool_use": true}))
        );
        assert_eq!(with_choice(Value::Null, Value::Null), None);
    }

    #[test]
    fn request_errors_name_the_field() {
        let user = json!({"role": "user", "content": "x"});
        let cases = [
            (
                json!([user, {"role": "assistant", "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{"}}
                ]}]),
                "messages[1].tool_calls[0].function.arguments: not valid JSON",
            ),
            (
                json!([user, {"role": "assistant", "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
                ]}]),
                "messages[1].tool_calls[0].function.arguments: must encode a JSON object",
            ),
            (
                json!([user, {"role": "assistant", "tool_calls": [
                    {"type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]}]),
                "messages[1].tool_calls[0].id: must be a non-empty string",
            ),
            (
                json!([user, {"role": "tool", "content": "r"}]),
                "messages[1].tool_call_id: must be a non-empty string",
            ),
            (
                json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]),
                "messages[0].content[0].type: unsupported content part type \"input_audio\"",
            ),
            (
                json!([{"role": "user", "content": [
                    {"type": "text", "text": "x"},
                    {"type": "image_url", "image_url": {"url": "ftp://host/a.png"}},
                ]}]),
                "messages[0].content[1].image_url.url: must be a data: URL or an http(s) URL",
            ),
            (
                json!([{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png,abc"}},
                ]}]),
                "messages[0].content[0].image_url.url: only base64 data: URLs with a media type \
                 are supported",
            ),
            (
                json!([{"role": "system", "content": [
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                ]}, user]),
                "messages[0].content[0].type: system messages may only contain text, not \
                 \"image_url\"",
            ),
            (
                json!([{"role": "function", "name": "f", "content": "x"}]),
                "messages[0].role: unsupported role \"function\"",
            ),
            (
                json!([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]),
                "messages[1].role: anthropic requires the first non-system message to be from \
                 the user",
            ),
            (
                json!([{"role": "system", "content": "s"}]),
                "messages: at least one user or assistant message with content is required",
            ),
        ];
        for (messages, expected) in cases {
            let error = build_error(&json!({"model": "r", "messages": messages}));
            assert_eq!(error, expected);
        }
        let with = |extra: Value| {
            let mut request = json!({"model": "r", "messages": [user]});
            for (key, value) in extra.as_object().unwrap() {
                request[key] = value.clone();
            }
            build_error(&request)
        };
        assert_eq!(
            with(json!({"n": 2})),
            "n: anthropic returns a single choice; only 1 is supported"
        );
        assert_eq!(
            with(json!({"tools": [{"type": "web_search"}]})),
            "tools[0].type: unsupported tool type \"web_search\"; only function tools map"
        );
        assert_eq!(
            with(
                json!({"tools": [{"type": "function", "function": {"name": "f"}}],
                        "tool_choice": "sometimes"})
            ),
            "tool_choice: unsupported value \"sometimes\""
        );
        assert_eq!(with(json!({"stop": ["a", 1]})), "stop[1]: must be a string");
        assert_eq!(
            with(json!({"temperature": "hot"})),
            "temperature: must be a number"
        );
        let error = build(&json!({"model": "r", "messages": [user], "user": 5})).unwrap_err();
        assert_eq!(error.field(), Some("user"));
    }

    #[test]
    fn headers_carry_key_and_version() {
        assert_eq!(
            headers("sk-ant", ""),
            vec![
                ("x-api-key", "sk-ant".to_owned()),
                ("anthropic-version", DEFAULT_VERSION.to_owned()),
                ("content-type", "application/json".to_owned()),
            ]
        );
        assert_eq!(headers("k", "2024-01-01")[1].1, "2024-01-01");
    }

    #[test]
    fn response_with_text_and_tool_use_maps_to_openai() {
        let (body, usage) = map_response_at(RESPONSE.as_bytes(), "claude-route", CREATED).unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, parse(RESPONSE_EXPECTED));
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: 120 + 2048 + 4096,
                cached_tokens: 4096,
                cache_write_tokens: 2048,
                completion_tokens: 57,
                web_searches: 0,
            }
        );
        let (live, _) = map_response(RESPONSE.as_bytes(), "claude-route").unwrap();
        let live: Value = serde_json::from_slice(&live).unwrap();
        assert!(live["created"].as_u64().unwrap() > CREATED);
    }

    #[test]
    fn cache_write_and_cache_read_are_priced_exactly() {
        let (_, usage) = map_response_at(RESPONSE.as_bytes(), "m", CREATED).unwrap();
        let per_mtok = |text| PricePerMTok::parse_decimal(text).unwrap();
        let price = Price {
            input: per_mtok("3"),
            cached_input: per_mtok("0.30"),
            cache_write: per_mtok("3.75"),
            output: per_mtok("15"),
            long_context: None,
            web_search: None,
            hidden_output: crate::config::HiddenOutput::default(),
        };
        // 120 × 3 + 4096 × 0.30 + 2048 × 3.75 + 57 × 15, per million tokens.
        assert_eq!(
            crate::pricing::charge(&price, &usage).to_string(),
            "0.0101238"
        );
    }

    #[test]
    fn response_edge_cases() {
        let only_tool =
            br#"{"id":"m","content":[{"type":"tool_use","id":"t","name":"f","input":{}}],
            "stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2}}"#;
        let (body, usage) = map_response_at(only_tool, "r", 0).unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(
            body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{}"
        );
        assert_eq!((usage.prompt_tokens, usage.cached_tokens), (1, 0));
        for (stop_reason, expected) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("max_tokens", "length"),
            ("refusal", "content_filter"),
        ] {
            let body = json!({"content": [{"type": "text", "text": "x"}],
                "stop_reason": stop_reason, "usage": {"input_tokens": 1, "output_tokens": 1}});
            let (body, _) = map_response_at(body.to_string().as_bytes(), "r", 0).unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["choices"][0]["finish_reason"], expected);
        }
        assert_eq!(
            map_response_at(b"not json", "r", 0)
                .unwrap_err()
                .to_string(),
            "anthropic response body: not a JSON object"
        );
        assert_eq!(
            map_response_at(br#"{"content":[]}"#, "r", 0)
                .unwrap_err()
                .to_string(),
            "anthropic response usage: missing"
        );
        assert_eq!(
            map_response_at(
                br#"{"content":[{"type":"tool_use","name":"f"}],"usage":{}}"#,
                "r",
                0
            )
            .unwrap_err()
            .to_string(),
            "anthropic response content[0].id: must be a string"
        );
        let overloaded =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            map_response_at(overloaded, "r", 0).unwrap_err(),
            AnthropicMapError::Upstream {
                kind: "overloaded_error".to_owned(),
                message: "Overloaded".to_owned()
            }
        );
    }

    #[test]
    fn recorded_stream_maps_to_openai_chunks() {
        let mut mapper = StreamMapper::with_created("claude-route", CREATED);
        assert_eq!(mapper.usage(), None);
        assert_eq!(mapper.usage_chunk(), None);
        let mut chunks = Vec::new();
        for (event, data) in sse_events(STREAM) {
            for chunk in mapper.on_event(&event, &data).unwrap() {
                chunks.push(parse(&chunk));
            }
        }
        assert!(mapper.is_finished());
        let expected = parse(STREAM_EXPECTED);
        assert_eq!(Value::Array(chunks), expected["chunks"]);
        assert_eq!(
            parse(&mapper.usage_chunk().unwrap()),
            expected["usage_chunk"]
        );
        assert_eq!(
            mapper.usage(),
            Some(Usage {
                prompt_tokens: 472 + 1024 + 2048,
                cached_tokens: 2048,
                cache_write_tokens: 1024,
                completion_tokens: 89,
                web_searches: 0,
            })
        );
    }

    #[test]
    fn stream_usage_is_known_from_message_start() {
        let mut mapper = StreamMapper::with_created("r", 0);
        let start = r#"{"type":"message_start","message":{"id":"msg_1","usage":
            {"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}"#;
        // The event name may be absent; the data's own type then decides.
        let chunks = mapper.on_event("", start).unwrap();
        assert_eq!(parse(&chunks[0])["id"], "msg_1");
        let usage = mapper.usage().unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (15, 1));
        assert!(!mapper.is_finished());
    }

    #[test]
    fn stream_errors() {
        let mut mapper = StreamMapper::with_created("r", 0);
        let error = mapper
            .on_event(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "anthropic error overloaded_error: Overloaded"
        );
        assert_eq!(
            mapper
                .on_event("content_block_delta", "{oops")
                .unwrap_err()
                .to_string(),
            "anthropic response content_block_delta event: data is not a JSON object"
        );
        let orphan = r#"{"type":"content_block_delta","index":3,
            "delta":{"type":"input_json_delta","partial_json":"{}"}}"#;
        assert_eq!(
            mapper
                .on_event("content_block_delta", orphan)
                .unwrap_err()
                .field(),
            Some("content_block_delta.index")
        );
        assert!(mapper.on_event("ping", "").unwrap().is_empty());
        assert!(mapper.on_event("brand_new_event", "{}").unwrap().is_empty());
    }
}
