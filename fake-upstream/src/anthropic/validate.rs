//! The Messages fake's request check: the first problem the real API would report for a body,
//! in its path style (`messages.1.content.0.cache_control`), and its header check.

use std::collections::HashSet;

use actix_web::HttpRequest;
use actix_web::http::StatusCode;
use serde_json::{Map, Value, json};

/// Top-level fields the Messages API accepts; anything else is refused, as the real API does,
/// which catches OpenAI fields leaking through the adapter.
const KNOWN_FIELDS: [&str; 16] = [
    "model",
    "messages",
    "max_tokens",
    "system",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
];
/// Fields the real API accepts that the plain fake still refuses (its answers in the suite stay
/// as they were), accepted with `agent` because agent clients send them: structured output,
/// effort and context management (Claude Code), and the settings the Messages door passes on.
const AGENT_FIELDS: [&str; 7] = [
    "output_config",
    "output_format",
    "context_management",
    "diagnostics",
    "inference_geo",
    "speed",
    "cache_control",
];
/// Keys a client tool may carry beyond the plain fake's, accepted with `agent` likewise.
const AGENT_TOOL_FIELDS: [&str; 4] = [
    "strict",
    "defer_loading",
    "eager_input_streaming",
    "input_examples",
];
const IMAGE_MEDIA_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// The real API answers a missing key with 401 and a missing version with 400.
pub(super) fn check_headers(req: &HttpRequest) -> Result<(), (StatusCode, String)> {
    let present = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| !value.trim().is_empty())
    };
    if !present("x-api-key") {
        return Err((
            StatusCode::UNAUTHORIZED,
            "x-api-key header is required".to_owned(),
        ));
    }
    if !present("anthropic-version") {
        return Err((
            StatusCode::BAD_REQUEST,
            "anthropic-version: header is required".to_owned(),
        ));
    }
    Ok(())
}

type Check = Result<(), String>;

fn fail<T>(path: &str, problem: &str) -> Result<T, String> {
    Err(format!("{path}: {problem}"))
}

/// The first problem the real API would report for this body, in its path style
/// (`messages.1.content.0.cache_control`); `agent` also accepts `AGENT_FIELDS`.
pub(super) fn validate(request: &Value, agent: bool) -> Check {
    let Some(body) = request.as_object() else {
        return fail("body", "Input should be a valid dictionary");
    };
    only_keys(body, "", &allowed(&KNOWN_FIELDS, &AGENT_FIELDS, agent))?;
    match body.get("model") {
        Some(Value::String(model)) if !model.is_empty() => {}
        None => return fail("model", "Field required"),
        Some(_) => return fail("model", "Input should be a valid non-empty string"),
    }
    match body.get("max_tokens") {
        Some(n) if n.as_u64().is_some_and(|n| n >= 1) => {}
        None => return fail("max_tokens", "Field required"),
        Some(_) => {
            return fail(
                "max_tokens",
                "Input should be an integer greater than or equal to 1",
            );
        }
    }
    validate_system(body.get("system"))?;
    let Some(messages) = body.get("messages") else {
        return fail("messages", "Field required");
    };
    validate_messages(messages)?;
    validate_tools(body.get("tools"), agent)?;
    validate_tool_choice(body.get("tool_choice"))?;
    validate_sampling(body)
}

/// `known`, and `extra` too with `agent`.
fn allowed<'a>(known: &[&'a str], extra: &[&'a str], agent: bool) -> Vec<&'a str> {
    let extra = if agent { extra } else { &[] };
    known.iter().chain(extra).copied().collect()
}

fn only_keys(object: &Map<String, Value>, path: &str, allowed: &[&str]) -> Check {
    match object.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) if path.is_empty() => fail(key, "Extra inputs are not permitted"),
        Some(key) => fail(&format!("{path}.{key}"), "Extra inputs are not permitted"),
        None => Ok(()),
    }
}

/// The real API accepts `null` for an absent `cache_control`.
fn validate_cache_control(block: &Map<String, Value>, path: &str) -> Check {
    let path = format!("{path}.cache_control");
    match block.get("cache_control") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(cache_control)) => {
            if cache_control.get("type").and_then(Value::as_str) != Some("ephemeral") {
                return fail(&format!("{path}.type"), "Input should be 'ephemeral'");
            }
            only_keys(cache_control, &path, &["type", "ttl"])?;
            match cache_control.get("ttl") {
                None => Ok(()),
                Some(Value::String(ttl)) if ttl == "5m" || ttl == "1h" => Ok(()),
                Some(_) => fail(&format!("{path}.ttl"), "Input should be '5m' or '1h'"),
            }
        }
        Some(_) => fail(&path, "Input should be an object with type 'ephemeral'"),
    }
}

fn validate_system(system: Option<&Value>) -> Check {
    match system {
        None | Some(Value::Null | Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => {
            for (i, block) in blocks.iter().enumerate() {
                let path = format!("system.{i}");
                let block = object(block, &path)?;
                if block.get("type").and_then(Value::as_str) != Some("text") {
                    return fail(&format!("{path}.type"), "Input should be 'text'");
                }
                validate_text(block, &path)?;
            }
            Ok(())
        }
        Some(_) => fail("system", "Input should be a valid string or list"),
    }
}

fn object<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{path}: Input should be a valid dictionary"))
}

fn validate_messages(messages: &Value) -> Check {
    let Some(messages) = messages.as_array() else {
        return fail("messages", "Input should be a valid list");
    };
    if messages.is_empty() {
        return fail("messages", "at least one message is required");
    }
    let mut previous_role = "";
    // `tool_use` ids of the previous assistant message, which the next message must answer.
    let mut open_tool_uses: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let path = format!("messages.{i}");
        let message = object(message, &path)?;
        only_keys(message, &path, &["role", "content"])?;
        let role = match message.get("role").and_then(Value::as_str) {
            Some(role @ ("user" | "assistant")) => role,
            // Current models read a system message right after a user turn.
            Some("system") if previous_role == "user" => {
                validate_system(message.get("content"))?;
                continue;
            }
            Some("system") => {
                return fail(
                    &format!("{path}.role"),
                    "Unexpected role \"system\". The Messages API accepts a top-level `system` \
                     parameter, not \"system\" as an input message role.",
                );
            }
            Some(_) => {
                return fail(
                    &format!("{path}.role"),
                    "Input should be 'user' or 'assistant'",
                );
            }
            None => return fail(&format!("{path}.role"), "Field required"),
        };
        if i == 0 && role != "user" {
            return fail("messages", "first message must use the \"user\" role");
        }
        if role == previous_role {
            return fail(
                "messages",
                &format!(
                    "roles must alternate between \"user\" and \"assistant\", but found multiple \
                     \"{role}\" roles in a row"
                ),
            );
        }
        previous_role = role;
        let last = i + 1 == messages.len();
        let blocks = validate_content(message.get("content"), &path, role, last)?;
        if role == "user" {
            check_tool_results(&blocks, &open_tool_uses, &path)?;
            open_tool_uses.clear();
        } else {
            open_tool_uses = blocks.tool_uses;
        }
    }
    Ok(())
}

/// What a message's content holds that matters across messages.
#[derive(Default)]
struct ContentSummary {
    tool_uses: Vec<String>,
    /// `(block index, tool_use_id)` of each tool result.
    tool_results: Vec<(usize, String)>,
}

fn check_tool_results(blocks: &ContentSummary, open: &[String], path: &str) -> Check {
    for (j, id) in &blocks.tool_results {
        if !open.contains(id) {
            return fail(
                &format!("{path}.content.{j}"),
                &format!(
                    "unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each \
                     `tool_result` block must have a corresponding `tool_use` block in the \
                     previous message."
                ),
            );
        }
    }
    let answered: HashSet<&str> = blocks
        .tool_results
        .iter()
        .map(|(_, id)| id.as_str())
        .collect();
    let missing: Vec<&str> = open
        .iter()
        .map(String::as_str)
        .filter(|id| !answered.contains(id))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        fail(
            path,
            &format!(
                "`tool_use` ids were found without `tool_result` blocks immediately after: {}. \
                 Each `tool_use` block must have a corresponding `tool_result` block in the next \
                 message.",
                missing.join(", ")
            ),
        )
    }
}

fn validate_content(
    content: Option<&Value>,
    path: &str,
    role: &str,
    last: bool,
) -> Result<ContentSummary, String> {
    // Only a final assistant message (a prefill) may be empty.
    let may_be_empty = last && role == "assistant";
    let empty = || {
        fail(
            path,
            "all messages must have non-empty content except for the optional final assistant \
             message",
        )
    };
    let blocks = match content {
        None => return fail(&format!("{path}.content"), "Field required"),
        Some(Value::String(text)) if text.is_empty() && !may_be_empty => return empty(),
        Some(Value::String(_)) => return Ok(ContentSummary::default()),
        Some(Value::Array(blocks)) if blocks.is_empty() && !may_be_empty => return empty(),
        Some(Value::Array(blocks)) => blocks,
        Some(_) => return fail(&format!("{path}.content"), "Input should be a valid list"),
    };
    let mut summary = ContentSummary::default();
    for (j, block) in blocks.iter().enumerate() {
        let block_path = format!("{path}.content.{j}");
        let block = object(block, &block_path)?;
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        match (kind, role) {
            ("text", _) => validate_text(block, &block_path)?,
            ("image", "user") => validate_image(block, &block_path)?,
            ("tool_use", "assistant") => summary
                .tool_uses
                .push(validate_tool_use(block, &block_path)?),
            ("tool_result", "user") => {
                summary
                    .tool_results
                    .push((j, validate_tool_result(block, &block_path)?));
            }
            ("thinking" | "redacted_thinking", "assistant") | ("document", "user") => {
                validate_cache_control(block, &block_path)?;
            }
            ("image" | "tool_result" | "document", _) => {
                return fail(
                    &format!("{block_path}.type"),
                    &format!("`{kind}` blocks are only allowed in user messages"),
                );
            }
            ("tool_use" | "thinking" | "redacted_thinking", _) => {
                return fail(
                    &format!("{block_path}.type"),
                    &format!("`{kind}` blocks are only allowed in assistant messages"),
                );
            }
            _ => {
                return fail(
                    &format!("{block_path}.type"),
                    &format!(
                        "Input tag '{kind}' found using 'type' does not match any of the \
                         expected tags: 'text', 'image', 'document', 'tool_use', 'tool_result', \
                         'thinking', 'redacted_thinking'"
                    ),
                );
            }
        }
    }
    Ok(summary)
}

fn validate_text(block: &Map<String, Value>, path: &str) -> Check {
    only_keys(block, path, &["type", "text", "cache_control", "citations"])?;
    match block.get("text") {
        Some(Value::String(text)) if !text.is_empty() => {}
        Some(Value::String(_)) => return fail(path, "text content blocks must be non-empty"),
        _ => return fail(&format!("{path}.text"), "Field required"),
    }
    validate_cache_control(block, path)
}

fn validate_image(block: &Map<String, Value>, path: &str) -> Check {
    only_keys(block, path, &["type", "source", "cache_control"])?;
    let source_path = format!("{path}.source");
    let Some(source) = block.get("source") else {
        return fail(&source_path, "Field required");
    };
    let source = object(source, &source_path)?;
    let text = |key: &str| {
        source
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match source.get("type").and_then(Value::as_str) {
        Some("base64") => {
            only_keys(source, &source_path, &["type", "media_type", "data"])?;
            if !text("media_type").is_some_and(|media| IMAGE_MEDIA_TYPES.contains(&media)) {
                return fail(
                    &format!("{source_path}.media_type"),
                    "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
                );
            }
            if text("data").is_none() {
                return fail(&format!("{source_path}.data"), "Field required");
            }
        }
        Some("url") => {
            only_keys(source, &source_path, &["type", "url"])?;
            if text("url").is_none() {
                return fail(&format!("{source_path}.url"), "Field required");
            }
        }
        _ => {
            return fail(
                &format!("{source_path}.type"),
                "Input should be 'base64' or 'url'",
            );
        }
    }
    validate_cache_control(block, path)
}

fn validate_tool_use(block: &Map<String, Value>, path: &str) -> Result<String, String> {
    only_keys(
        block,
        path,
        &["type", "id", "name", "input", "cache_control"],
    )?;
    let Some(id) = block
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
    else {
        return fail(&format!("{path}.id"), "Field required");
    };
    if block
        .get("name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return fail(&format!("{path}.name"), "Field required");
    }
    if !block.get("input").is_some_and(Value::is_object) {
        return fail(
            &format!("{path}.input"),
            "Input should be a valid dictionary",
        );
    }
    validate_cache_control(block, path)?;
    Ok(id.to_owned())
}

fn validate_tool_result(block: &Map<String, Value>, path: &str) -> Result<String, String> {
    only_keys(
        block,
        path,
        &[
            "type",
            "tool_use_id",
            "content",
            "is_error",
            "cache_control",
        ],
    )?;
    let Some(id) = block
        .get("tool_use_id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
    else {
        return fail(&format!("{path}.tool_use_id"), "Field required");
    };
    match block.get("content") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(parts)) => {
            for (k, part) in parts.iter().enumerate() {
                let part_path = format!("{path}.content.{k}");
                let part = object(part, &part_path)?;
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => validate_text(part, &part_path)?,
                    Some("image") => validate_image(part, &part_path)?,
                    _ => {
                        return fail(
                            &format!("{part_path}.type"),
                            "Input should be 'text' or 'image'",
                        );
                    }
                }
            }
        }
        Some(_) => {
            return fail(
                &format!("{path}.content"),
                "Input should be a valid string or list",
            );
        }
    }
    if !block.get("is_error").is_none_or(Value::is_boolean) {
        return fail(
            &format!("{path}.is_error"),
            "Input should be a valid boolean",
        );
    }
    validate_cache_control(block, path)?;
    Ok(id.to_owned())
}

fn validate_tools(tools: Option<&Value>, agent: bool) -> Check {
    let tools = match tools {
        None => return Ok(()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return fail("tools", "Input should be a valid list"),
    };
    for (i, tool) in tools.iter().enumerate() {
        let path = format!("tools.{i}");
        let tool = object(tool, &path)?;
        if let Some(kind) = server_tool(tool) {
            validate_server_tool(tool, kind, &path)?;
            continue;
        }
        let known = [
            "type",
            "name",
            "description",
            "input_schema",
            "cache_control",
        ];
        only_keys(tool, &path, &allowed(&known, &AGENT_TOOL_FIELDS, agent))?;
        let name_ok = tool
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|name| {
                (1..=128).contains(&name.len())
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            });
        if !name_ok {
            return fail(
                &format!("{path}.name"),
                "String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
            );
        }
        if !tool.get("description").is_none_or(Value::is_string) {
            return fail(
                &format!("{path}.description"),
                "Input should be a valid string",
            );
        }
        match tool.get("input_schema") {
            Some(Value::Object(schema)) if schema.get("type") == Some(&json!("object")) => {}
            Some(_) => {
                return fail(
                    &format!("{path}.input_schema.type"),
                    "Input should be 'object'",
                );
            }
            None => return fail(&format!("{path}.input_schema"), "Field required"),
        }
        validate_cache_control(tool, &path)?;
    }
    Ok(())
}

/// The type of a web search or fetch tool, which the provider runs itself.
pub(super) fn server_tool(tool: &Map<String, Value>) -> Option<&str> {
    tool.get("type")
        .and_then(Value::as_str)
        .filter(|kind| kind.starts_with("web_search_") || kind.starts_with("web_fetch_"))
}

fn validate_server_tool(tool: &Map<String, Value>, kind: &str, path: &str) -> Check {
    only_keys(
        tool,
        path,
        &[
            "type",
            "name",
            "max_uses",
            "allowed_domains",
            "blocked_domains",
            "user_location",
            "max_content_tokens",
            "citations",
            "cache_control",
        ],
    )?;
    for limit in ["max_uses", "max_content_tokens"] {
        if tool
            .get(limit)
            .is_some_and(|n| n.as_u64().is_none_or(|n| n == 0))
        {
            return fail(&format!("{path}.{limit}"), "Input should be greater than 0");
        }
    }
    let expected = if kind.starts_with("web_search_") {
        "web_search"
    } else {
        "web_fetch"
    };
    if tool.get("name").and_then(Value::as_str) != Some(expected) {
        return fail(
            &format!("{path}.name"),
            &format!("Input should be '{expected}'"),
        );
    }
    Ok(())
}

fn validate_tool_choice(choice: Option<&Value>) -> Check {
    let Some(choice) = choice else {
        return Ok(());
    };
    let choice = object(choice, "tool_choice")?;
    match choice.get("type").and_then(Value::as_str) {
        Some("auto" | "any") => only_keys(
            choice,
            "tool_choice",
            &["type", "disable_parallel_tool_use"],
        ),
        Some("none") => only_keys(choice, "tool_choice", &["type"]),
        Some("tool") => {
            only_keys(
                choice,
                "tool_choice",
                &["type", "name", "disable_parallel_tool_use"],
            )?;
            if choice
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
            {
                Ok(())
            } else {
                fail("tool_choice.name", "Field required")
            }
        }
        _ => fail(
            "tool_choice.type",
            "Input should be 'auto', 'any', 'tool' or 'none'",
        ),
    }
}

fn validate_sampling(body: &Map<String, Value>) -> Check {
    for key in ["temperature", "top_p"] {
        match body.get(key) {
            None => {}
            Some(Value::Number(n)) if n.as_f64().is_some_and(|v| (0.0..=1.0).contains(&v)) => {}
            Some(_) => return fail(key, "Input should be a number between 0 and 1"),
        }
    }
    if body.get("top_k").is_some_and(|k| k.as_u64().is_none()) {
        return fail("top_k", "Input should be a non-negative integer");
    }
    match body.get("stop_sequences") {
        None => {}
        Some(Value::Array(stops)) if stops.iter().all(Value::is_string) => {}
        Some(_) => return fail("stop_sequences", "Input should be a list of strings"),
    }
    match body.get("metadata") {
        None => {}
        Some(Value::Object(metadata)) => {
            only_keys(metadata, "metadata", &["user_id"])?;
            if !metadata
                .get("user_id")
                .is_none_or(|id| id.is_string() || id.is_null())
            {
                return fail("metadata.user_id", "Input should be a valid string");
            }
        }
        Some(_) => return fail("metadata", "Input should be a valid dictionary"),
    }
    if !body.get("stream").is_none_or(Value::is_boolean) {
        return fail("stream", "Input should be a valid boolean");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::anthropic::fixtures::valid_request;

    fn message_of(request: &Value) -> String {
        validate(request, false).unwrap_err()
    }

    #[test]
    fn rejects_what_the_real_api_rejects() {
        let base = valid_request("m");
        assert_eq!(validate(&base, false), Ok(()));
        let with = |pointer: &str, value: Value| {
            let mut request = base.clone();
            *request.pointer_mut(pointer).unwrap() = value;
            message_of(&request)
        };
        let without = |key: &str| {
            let mut request = base.clone();
            request.as_object_mut().unwrap().remove(key);
            message_of(&request)
        };
        assert_eq!(without("model"), "model: Field required");
        assert_eq!(without("max_tokens"), "max_tokens: Field required");
        assert_eq!(without("messages"), "messages: Field required");
        assert!(
            with("/messages/0/role", json!("system"))
                .starts_with("messages.0.role: Unexpected role \"system\".")
        );
        assert_eq!(
            with("/messages/0/role", json!("tool")),
            "messages.0.role: Input should be 'user' or 'assistant'"
        );
        assert_eq!(
            with("/messages/0/role", json!("assistant")),
            "messages: first message must use the \"user\" role"
        );
        assert_eq!(
            with(
                "/messages/2/content/0",
                json!({"type": "tool_result", "content": "x"})
            ),
            "messages.2.content.0.tool_use_id: Field required"
        );
        assert_eq!(
            with(
                "/messages/2/content/1/cache_control",
                json!({"type": "persistent"})
            ),
            "messages.2.content.1.cache_control.type: Input should be 'ephemeral'"
        );
        assert_eq!(
            with("/system/1/cache_control", json!("ephemeral")),
            "system.1.cache_control: Input should be an object with type 'ephemeral'"
        );
        assert_eq!(
            with(
                "/tools/0/cache_control",
                json!({"type": "ephemeral", "ttl": "2h"})
            ),
            "tools.0.cache_control.ttl: Input should be '5m' or '1h'"
        );
        assert!(
            with("/messages/2/content/0/tool_use_id", json!("toolu_other"))
                .starts_with("messages.2.content.0: unexpected `tool_use_id`")
        );
        assert!(
            with("/messages/2/content", json!("no results"))
                .starts_with("messages.2: `tool_use` ids were found without `tool_result` blocks")
        );
        assert_eq!(
            with("/messages/0/content", json!("")),
            "messages.0: all messages must have non-empty content except for the optional \
             final assistant message"
        );
    }

    #[test]
    fn rejects_chat_fields_and_values_out_of_range() {
        let base = valid_request("m");
        let mut leaked = base.clone();
        leaked["stop"] = json!("END");
        assert_eq!(message_of(&leaked), "stop: Extra inputs are not permitted");
        let mut leaked = base.clone();
        leaked["messages"][1]["tool_calls"] = json!([]);
        assert_eq!(
            message_of(&leaked),
            "messages.1.tool_calls: Extra inputs are not permitted"
        );
        let mut hot = base.clone();
        hot["temperature"] = json!(1.5);
        assert_eq!(
            message_of(&hot),
            "temperature: Input should be a number between 0 and 1"
        );
        assert_eq!(
            message_of(&json!([])),
            "body: Input should be a valid dictionary"
        );
    }
}
