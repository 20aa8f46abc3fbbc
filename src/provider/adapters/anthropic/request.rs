//! The caller's OpenAI chat body as a Messages body: turns, content blocks, tools.

use serde_json::{Map, Value, json};

use super::{AnthropicMapError, request_error};

/// Chat's structured output as Anthropic's: the same JSON schema.
pub(super) fn output_format(format: Option<&Value>) -> Option<Value> {
    let format = format?;
    if format["type"] != "json_schema" {
        return None;
    }
    let schema = format["json_schema"].get("schema")?;
    Some(json!({ "type": "json_schema", "schema": schema }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
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
pub(super) struct Turn {
    role: Role,
    first: usize,
    blocks: Vec<Value>,
}

/// Splits system prompts out and folds the rest into strictly alternating turns.
pub(super) fn map_messages(
    messages: &[Value],
) -> Result<(Option<Value>, Vec<Value>), AnthropicMapError> {
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

pub(super) fn finish_turn(mut turn: Turn) -> Value {
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
pub(super) fn plain_text(block: &Map<String, Value>) -> Option<&str> {
    if block.len() != 2 || block.get("type").and_then(Value::as_str) != Some("text") {
        return None;
    }
    block.get("text").and_then(Value::as_str)
}

#[derive(Default)]
pub(super) struct SystemPrompt {
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
pub(super) fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({ "type": "text", "text": text }))
}

pub(super) fn content_blocks(
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
pub(super) fn part_type<'a>(part: &'a Value, field: &str) -> Result<&'a str, AnthropicMapError> {
    let Some(part) = part.as_object() else {
        return Err(request_error(field, "must be an object"));
    };
    match part.get("type") {
        Some(Value::String(kind)) => Ok(kind),
        _ => Err(request_error(format!("{field}.type"), "must be a string")),
    }
}

pub(super) fn map_part(
    part: &Value,
    field: &str,
    images: bool,
) -> Result<Option<Value>, AnthropicMapError> {
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

pub(super) fn image_block(image: Option<&Value>, field: &str) -> Result<Value, AnthropicMapError> {
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

pub(super) fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| text.get(prefix.len()..))
        .flatten()
}

pub(super) fn copy_cache_control(cache_control: Option<&Value>, to: &mut Value) {
    if let (Some(cache_control), Some(to)) = (cache_control, to.as_object_mut()) {
        to.insert("cache_control".to_owned(), cache_control.clone());
    }
}

pub(super) fn assistant_blocks(
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

pub(super) fn tool_use(call: &Value, field: &str) -> Result<Value, AnthropicMapError> {
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

pub(super) fn tool_result(
    message: &Map<String, Value>,
    field: &str,
) -> Result<Value, AnthropicMapError> {
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

pub(super) fn non_empty_str<'a>(
    value: Option<&'a Value>,
    field: &str,
) -> Result<&'a str, AnthropicMapError> {
    match value {
        Some(Value::String(text)) if !text.is_empty() => Ok(text),
        _ => Err(request_error(field, "must be a non-empty string")),
    }
}

pub(super) fn map_tools(tools: Option<&Value>) -> Result<Option<Vec<Value>>, AnthropicMapError> {
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

pub(super) fn map_tool_choice(
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
pub(super) fn map_temperature(
    temperature: Option<&Value>,
) -> Result<Option<Value>, AnthropicMapError> {
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

pub(super) fn map_stop(stop: Option<&Value>) -> Result<Option<Value>, AnthropicMapError> {
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
