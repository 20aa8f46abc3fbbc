//! A Messages request as the chat completion body the pipeline routes,
//! estimates and, for an OpenAI-kind provider, sends. An Anthropic provider
//! gets the caller's own bytes instead (`provider/adapters/passthrough.rs`),
//! so what chat cannot carry (documents, server tools, thinking) is kept in
//! the chat body only to be counted, and recorded as a `Gap` that an
//! OpenAI-kind provider refuses.

use serde_json::{Map, Value, json};

use super::fields;
use crate::config::server_tools::ServerTools;
use crate::error::ApiError;
use crate::fields::{Screen, Table};
use crate::tokenize::Untranslated;

/// The first part of a Messages body that chat cannot express.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// Its path in the Messages body (`messages[1].content[0]`).
    pub param: String,
    pub problem: String,
}

/// The chat body, and what it leaves out.
#[derive(Debug)]
pub struct Translation {
    pub chat: Vec<u8>,
    pub gap: Option<Gap>,
    /// The caller's body written anew, when its server tools were taken out of the offer.
    pub screened: Option<Vec<u8>>,
    /// What the field table left for the route, and the server tools removed.
    pub screen: Screen,
    /// What the Messages body sends beyond the chat body, counted in the hold.
    pub untranslated: Untranslated,
    /// It asks for thinking.
    pub asks_reasoning: bool,
    /// Its thinking is omitted from the answer (`thinking.display`).
    pub thinking_omitted: bool,
}

/// Translates a Messages body read by its field `table`; its shape errors
/// and refused fields are the caller's 400.
pub fn to_chat(bytes: &[u8], table: &'static Table) -> Result<Translation, ApiError> {
    let mut body = crate::openai::chat::object(bytes)?;
    let offered = fields::screen_tools(&mut body, &ServerTools::default());
    let screened =
        (!offered.removed.is_empty()).then(|| Value::Object(body.clone()).to_string().into_bytes());
    let screen = Screen {
        unpriced: table.screen(&body)?,
        removed_tools: offered.removed,
        admitted: Vec::new(),
    };
    let mut out = Translator::default();
    out.untranslated.tokens = fields::defined_tools(&body) * fields::DEFINED_TOOL_TOKENS;
    // A requested output format's schema is input the provider reads.
    let formats = [
        body.get("output_format"),
        body.get("output_config").and_then(|c| c.get("format")),
    ];
    // A JSON schema is chat's structured output too, so an OpenAI-kind model
    // answers in it (and the chat body's count holds it); any other format
    // is counted beside the chat body.
    let mut response_format = None;
    for format in formats.into_iter().flatten().filter(|f| !f.is_null()) {
        if format["type"] == "json_schema" && response_format.is_none() {
            let schema = json!({"name": "output", "schema": format["schema"], "strict": true});
            response_format = Some(json!({"type": "json_schema", "json_schema": schema}));
        } else {
            out.untranslated.texts.push(format.to_string());
        }
    }
    let mut chat = Map::new();
    if let Some(format) = response_format {
        chat.insert("response_format".to_owned(), format);
    }
    for field in ["model", "max_tokens", "temperature", "top_p"] {
        if let Some(value) = body.get(field).filter(|v| !v.is_null()) {
            chat.insert(field.to_owned(), value.clone());
        }
    }
    if let Some(effort) = reasoning_effort(&body) {
        chat.insert("reasoning_effort".to_owned(), Value::from(effort));
    }
    out.system(body.get("system"))?;
    out.messages(body.get("messages"))?;
    chat.insert("messages".to_owned(), Value::Array(out.messages));
    if let Some(tools) = tools(body.get("tools"), &mut out.gap)? {
        chat.insert("tools".to_owned(), tools);
        if let Some(choice) = tool_choice(body.get("tool_choice"), &mut chat)? {
            chat.insert("tool_choice".to_owned(), choice);
        }
    }
    if let Some(stops) = body.get("stop_sequences").filter(|v| !v.is_null()) {
        chat.insert("stop".to_owned(), stops.clone());
    }
    if let Some(user) = body.get("metadata").and_then(|m| m.get("user_id")) {
        chat.insert("user".to_owned(), user.clone());
    }
    match body.get("stream") {
        None | Some(Value::Null | Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            chat.insert("stream".to_owned(), Value::Bool(true));
            // The door's `message_delta` reports the usage: ask for it (only a stream may).
            chat.insert("stream_options".to_owned(), json!({"include_usage": true}));
        }
        // Not a boolean: the chat request's validation refuses it, naming `stream`.
        Some(other) => {
            chat.insert("stream".to_owned(), other.clone());
        }
    }
    Ok(Translation {
        chat: Value::Object(chat).to_string().into_bytes(),
        gap: out.gap,
        screened,
        screen,
        untranslated: out.untranslated,
        asks_reasoning: crate::openai::chat::asks_reasoning(&body),
        thinking_omitted: body
            .get("thinking")
            .and_then(|t| t.get("display"))
            .and_then(Value::as_str)
            == Some("omitted"),
    })
}

/// Anthropic's `thinking` as chat's `reasoning_effort`, so an OpenAI-kind
/// model reasons as asked rather than the setting being dropped: the effort
/// the caller named (`output_config.effort`), else one by the thinking
/// budget's size. Its tokens are output either way, held under `max_tokens`.
fn reasoning_effort(body: &Map<String, Value>) -> Option<&'static str> {
    let thinking = body.get("thinking")?;
    match thinking.get("type").and_then(Value::as_str) {
        Some("enabled" | "adaptive") => {}
        _ => return None,
    }
    let named = body
        .get("output_config")
        .and_then(|c| c.get("effort"))
        .and_then(Value::as_str);
    let effort = match named {
        Some("low") => "low",
        Some("medium") => "medium",
        Some("high" | "max" | "xhigh") => "high",
        _ => match thinking.get("budget_tokens").and_then(Value::as_u64) {
            Some(0..=4_096) => "low",
            Some(4_097..=16_384) | None => "medium",
            Some(_) => "high",
        },
    };
    Some(effort)
}

#[derive(Default)]
struct Translator {
    messages: Vec<Value>,
    gap: Option<Gap>,
    untranslated: Untranslated,
}

impl Translator {
    /// Notes the first gap; later ones add nothing a caller needs to fix first.
    fn gap(&mut self, param: String, problem: impl Into<String>) {
        self.gap.get_or_insert(Gap {
            param,
            problem: problem.into(),
        });
    }

    fn system(&mut self, system: Option<&Value>) -> Result<(), ApiError> {
        let text = match system {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(blocks)) => {
                let mut texts = Vec::with_capacity(blocks.len());
                for (i, block) in blocks.iter().enumerate() {
                    match block.get("text").and_then(Value::as_str) {
                        Some(text) if block_type(block) == Some("text") => texts.push(text),
                        _ => {
                            return Err(ApiError::invalid_request(
                                format!("system[{i}]"),
                                "system blocks must be text blocks",
                            ));
                        }
                    }
                }
                texts.join("\n\n")
            }
            Some(_) => {
                return Err(ApiError::invalid_request(
                    "system",
                    "`system` must be a string or an array of text blocks",
                ));
            }
        };
        self.messages
            .push(json!({"role": "system", "content": text}));
        Ok(())
    }

    fn messages(&mut self, messages: Option<&Value>) -> Result<(), ApiError> {
        let Some(Value::Array(messages)) = messages else {
            return Err(ApiError::invalid_request(
                "messages",
                "`messages` must be an array",
            ));
        };
        for (i, message) in messages.iter().enumerate() {
            let field = format!("messages[{i}]");
            let blocks = match message.get("content") {
                Some(Value::String(text)) => vec![json!({"type": "text", "text": text})],
                Some(Value::Array(blocks)) => blocks.clone(),
                _ => {
                    return Err(ApiError::invalid_request(
                        format!("{field}.content"),
                        "`content` must be a string or an array of content blocks",
                    ));
                }
            };
            match message.get("role").and_then(Value::as_str) {
                Some("user") => self.user(&blocks, &field)?,
                Some("assistant") => self.assistant(&blocks, &field)?,
                // Instructions mid-conversation (Claude Code sends them): chat
                // has system messages anywhere; Anthropic reads them in place.
                Some("system") => self.system_message(&blocks, &field)?,
                Some(other) => {
                    return Err(ApiError::invalid_request(
                        format!("{field}.role"),
                        format!(
                            "Unexpected role \"{other}\". Allowed roles are \"user\", \"assistant\" and \"system\""
                        ),
                    ));
                }
                None => {
                    return Err(ApiError::invalid_request(
                        format!("{field}.role"),
                        "Field required",
                    ));
                }
            }
        }
        Ok(())
    }

    /// A system message within the conversation: text blocks only.
    fn system_message(&mut self, blocks: &[Value], field: &str) -> Result<(), ApiError> {
        let mut texts = Vec::with_capacity(blocks.len());
        for (j, block) in blocks.iter().enumerate() {
            let path = format!("{field}.content[{j}]");
            match block_type(block) {
                Some("text") => texts.push(text_part(block, &path)?["text"].clone()),
                _ => {
                    return Err(ApiError::invalid_request(
                        format!("{path}.type"),
                        "a system message carries text blocks only",
                    ));
                }
            }
        }
        let text: Vec<&str> = texts.iter().filter_map(Value::as_str).collect();
        self.messages
            .push(json!({"role": "system", "content": text.join("\n\n")}));
        Ok(())
    }

    /// Tool results become `tool` messages, first (chat wants them right after
    /// the assistant's calls); the other blocks one user message after them.
    fn user(&mut self, blocks: &[Value], field: &str) -> Result<(), ApiError> {
        let mut parts = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let path = format!("{field}.content[{j}]");
            match block_type(block) {
                Some("text") => parts.push(text_part(block, &path)?),
                Some("image") => parts.push(self.image(block, &path)),
                Some("tool_result") => {
                    let message = self.tool_result(block, &path)?;
                    self.messages.push(message);
                }
                Some(other) => {
                    self.gap(path, format!("`{other}` blocks have no chat counterpart"));
                    // Kept so the estimate still counts it; never sent to a chat upstream.
                    parts.push(block.clone());
                }
                None => return Err(no_type(&path)),
            }
        }
        if !parts.is_empty() {
            self.messages
                .push(json!({"role": "user", "content": parts}));
        }
        Ok(())
    }

    fn assistant(&mut self, blocks: &[Value], field: &str) -> Result<(), ApiError> {
        let mut text = String::new();
        let mut calls = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let path = format!("{field}.content[{j}]");
            match block_type(block) {
                Some("text") => {
                    let part = text_part(block, &path)?;
                    text.push_str(part["text"].as_str().unwrap_or_default());
                }
                Some("tool_use") => calls.push(tool_call(block, &path)?),
                // The model's own reasoning from an earlier turn: chat has no place
                // for it, but Anthropic reads (and bills) it in a tool loop.
                Some("thinking" | "redacted_thinking") => {
                    for field in ["thinking", "data"] {
                        if let Some(text) = block.get(field).and_then(Value::as_str) {
                            self.untranslated.texts.push(text.to_owned());
                        }
                    }
                }
                Some(other) => {
                    self.gap(path, format!("`{other}` blocks have no chat counterpart"));
                    text.push_str(&block.to_string());
                }
                None => return Err(no_type(&path)),
            }
        }
        let mut message = json!({"role": "assistant", "content": text});
        if !calls.is_empty() {
            if text.is_empty() {
                message["content"] = Value::Null;
            }
            message["tool_calls"] = Value::Array(calls);
        }
        self.messages.push(message);
        Ok(())
    }

    fn image(&mut self, block: &Value, path: &str) -> Value {
        let source = &block["source"];
        let url = match source["type"].as_str() {
            Some("base64") => Some(format!(
                "data:{};base64,{}",
                source["media_type"].as_str().unwrap_or_default(),
                source["data"].as_str().unwrap_or_default()
            )),
            Some("url") => source["url"].as_str().map(str::to_owned),
            _ => None,
        };
        if let Some(url) = url {
            return json!({"type": "image_url", "image_url": {"url": url}});
        }
        self.gap(
            format!("{path}.source"),
            "only base64 and url image sources map to chat",
        );
        json!({"type": "image"})
    }

    fn tool_result(&mut self, block: &Value, path: &str) -> Result<Value, ApiError> {
        let Some(id) = block.get("tool_use_id").and_then(Value::as_str) else {
            return Err(ApiError::invalid_request(
                format!("{path}.tool_use_id"),
                "a tool_result needs `tool_use_id`",
            ));
        };
        let content = match block.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => {
                let mut texts = Vec::with_capacity(parts.len());
                for (k, part) in parts.iter().enumerate() {
                    let text = part.get("text").and_then(Value::as_str);
                    if let (Some("text"), Some(text)) = (block_type(part), text) {
                        texts.push(text.to_owned());
                        continue;
                    }
                    // Billed as an image, whatever its text here (a URL is short).
                    if block_type(part) == Some("image") {
                        self.untranslated.images += 1;
                    }
                    self.gap(
                        format!("{path}.content[{k}]"),
                        "chat tool results carry text only",
                    );
                    texts.push(part.to_string());
                }
                texts.join("\n")
            }
            Some(other) => other.to_string(),
        };
        Ok(json!({"role": "tool", "tool_call_id": id, "content": content}))
    }
}

fn block_type(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

fn no_type(path: &str) -> ApiError {
    ApiError::invalid_request(format!("{path}.type"), "each content block needs a `type`")
}

fn text_part(block: &Value, path: &str) -> Result<Value, ApiError> {
    match block.get("text") {
        Some(Value::String(text)) => Ok(json!({"type": "text", "text": text})),
        _ => Err(ApiError::invalid_request(
            format!("{path}.text"),
            "a text block needs a string `text`",
        )),
    }
}

fn tool_call(block: &Value, path: &str) -> Result<Value, ApiError> {
    let (Some(id), Some(name)) = (
        block.get("id").and_then(Value::as_str),
        block.get("name").and_then(Value::as_str),
    ) else {
        return Err(ApiError::invalid_request(
            path,
            "a tool_use block needs `id` and `name`",
        ));
    };
    let arguments = block
        .get("input")
        .map_or_else(|| "{}".to_owned(), Value::to_string);
    Ok(json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}))
}

/// Custom tools as chat functions; server tools (`web_search_…`, `bash_…`)
/// are kept for the count and are a gap.
fn tools(tools: Option<&Value>, gap: &mut Option<Gap>) -> Result<Option<Value>, ApiError> {
    let tools = match tools {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(tools)) if tools.is_empty() => return Ok(None),
        Some(Value::Array(tools)) => tools,
        Some(_) => {
            return Err(ApiError::invalid_request(
                "tools",
                "`tools` must be an array",
            ));
        }
    };
    let mut mapped = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            return Err(ApiError::invalid_request(
                format!("tools[{i}].name"),
                "each tool needs a `name`",
            ));
        };
        match tool.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(kind) => {
                gap.get_or_insert(Gap {
                    param: format!("tools[{i}]"),
                    problem: format!("the server tool `{kind}` has no chat counterpart"),
                });
                mapped.push(tool.clone());
                continue;
            }
        }
        let mut function = json!({"name": name});
        if let Some(description) = tool.get("description").filter(|d| d.is_string()) {
            function["description"] = description.clone();
        }
        function["parameters"] = tool
            .get("input_schema")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        mapped.push(json!({"type": "function", "function": function}));
    }
    Ok(Some(Value::Array(mapped)))
}

/// Anthropic's `tool_choice` in chat's terms; `disable_parallel_tool_use`
/// becomes `parallel_tool_calls: false` on the chat body.
fn tool_choice(
    choice: Option<&Value>,
    chat: &mut Map<String, Value>,
) -> Result<Option<Value>, ApiError> {
    let Some(choice) = choice.filter(|c| !c.is_null()) else {
        return Ok(None);
    };
    if choice.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) {
        chat.insert("parallel_tool_calls".to_owned(), Value::Bool(false));
    }
    let mapped = match (
        block_type(choice),
        choice.get("name").and_then(Value::as_str),
    ) {
        (Some("auto"), _) => json!("auto"),
        (Some("any"), _) => json!("required"),
        (Some("none"), _) => json!("none"),
        (Some("tool"), Some(name)) => json!({"type": "function", "function": {"name": name}}),
        _ => {
            return Err(ApiError::invalid_request(
                "tool_choice",
                "`tool_choice` must be auto, any, none, or tool with a `name`",
            ));
        }
    };
    Ok(Some(mapped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat_of(request: &Value) -> (Value, Option<Gap>) {
        let translation = to_chat(request.to_string().as_bytes(), &fields::MESSAGES).unwrap();
        (
            serde_json::from_slice(&translation.chat).unwrap(),
            translation.gap,
        )
    }

    #[test]
    fn system_blocks_tools_and_a_tool_round_trip_become_a_chat_body() {
        let (chat, gap) = chat_of(&json!({
            "model": "m", "max_tokens": 64, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
            "stop_sequences": ["END"], "metadata": {"user_id": "u-1"}, "stream": true,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "lookup", "description": "Looks up.", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                    {"type": "text", "text": "thanks"}]},
            ]
        }));
        assert_eq!(gap, None);
        assert_eq!(
            chat["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(
            chat["messages"][1]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AAAA"
        );
        assert_eq!(chat["messages"][2]["content"], Value::Null);
        assert_eq!(
            chat["messages"][2]["tool_calls"][0]["function"]["arguments"],
            r#"{"q":1}"#
        );
        assert_eq!(
            chat["messages"][3],
            json!({"role": "tool", "tool_call_id": "t1", "content": "42"})
        );
        assert_eq!(chat["messages"][4]["content"][0]["text"], "thanks");
        assert_eq!(
            chat["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        assert_eq!(
            (
                chat["tool_choice"].clone(),
                chat["parallel_tool_calls"].clone()
            ),
            (json!("required"), json!(false))
        );
        assert_eq!(
            (chat["stop"].clone(), chat["user"].clone()),
            (json!(["END"]), json!("u-1"))
        );
        assert_eq!(chat["stream_options"]["include_usage"], true);
        assert_eq!(chat["max_tokens"], 64);
        assert!(chat.get("top_k").is_none());
    }

    /// Earlier turns' thinking goes to Anthropic (which reads it in a tool
    /// loop) though chat has no place for it; a provider-defined tool brings a
    /// system prompt of its own; a format's schema is input: each is counted.
    #[test]
    fn what_only_anthropic_reads_is_counted_beside_the_chat_body() {
        let request = json!({"model": "m", "max_tokens": 5,
            "tools": [{"type": "bash_20250124", "name": "bash"}],
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "a long chain of thought", "signature": "s"},
                    {"type": "redacted_thinking", "data": "EncryptedBlob"},
                    {"type": "text", "text": "ok"}]}]});
        let translation = to_chat(request.to_string().as_bytes(), &fields::MESSAGES).unwrap();
        assert_eq!(
            translation.untranslated.texts,
            ["a long chain of thought", "EncryptedBlob"]
        );
        assert_eq!(translation.untranslated.tokens, fields::DEFINED_TOOL_TOKENS);
        // The schema is chat's structured output, counted with the chat body.
        let chat: Value = serde_json::from_slice(&translation.chat).unwrap();
        let format = &chat["response_format"];
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["json_schema"]["schema"], json!({"type": "object"}));
    }

    /// An image a tool returns is billed as an image, however short its URL.
    #[test]
    fn an_image_in_a_tool_result_is_counted_as_an_image() {
        let request = json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "shot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}]});
        let translation = to_chat(request.to_string().as_bytes(), &fields::MESSAGES).unwrap();
        assert_eq!(translation.untranslated.images, 1);
    }

    #[test]
    fn what_chat_cannot_carry_is_a_gap_and_bad_shapes_name_the_field() {
        let (_, gap) = chat_of(&json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}]}));
        assert_eq!(gap.unwrap().param, "messages[0].content[0]");
        let (_, gap) = chat_of(&json!({"model": "m", "max_tokens": 5,
            "tools": [{"type": "bash_20250124", "name": "bash"}],
            "messages": [{"role": "user", "content": "x"}]}));
        assert_eq!(gap.unwrap().param, "tools[0]");
        let param = |request: Value| {
            let error = to_chat(request.to_string().as_bytes(), &fields::MESSAGES).unwrap_err();
            let envelope: Value = serde_json::from_slice(&error.envelope_json()).unwrap();
            envelope["error"]["param"].as_str().unwrap().to_owned()
        };
        assert_eq!(param(json!({"model": "m"})), "messages");
        assert_eq!(
            param(json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]})),
            "messages[0].role"
        );
        assert_eq!(
            param(
                json!({"model": "m", "messages": [{"role": "user", "content": [{"text": "x"}]}]})
            ),
            "messages[0].content[0].type"
        );
        assert_eq!(
            param(json!({"model": "m", "system": 3, "messages": []})),
            "system"
        );
        assert!(to_chat(b"{nope", &fields::MESSAGES).is_err());
        let (chat, _) = chat_of(&json!({"model": "m", "max_tokens": 5, "stream": false,
            "messages": [{"role": "user", "content": "x"}]}));
        assert!(chat.get("stream_options").is_none(), "{chat}");
    }

    #[test]
    fn system_messages_mid_conversation_stay_in_place_as_chat_system_messages() {
        let (chat, gap) = chat_of(
            &json!({"model": "m", "max_tokens": 5, "system": "Be terse.",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "system", "content": [{"type": "text", "text": "Now answer in French."}]},
                {"role": "assistant", "content": "Bonjour"}
            ]}),
        );
        assert!(gap.is_none());
        let roles: Vec<&str> = chat["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "system", "assistant"]);
        assert_eq!(chat["messages"][2]["content"], "Now answer in French.");
    }

    #[test]
    fn thinking_becomes_chat_s_reasoning_effort() {
        let effort = |extra: Value| {
            let mut request = json!({"model": "m", "max_tokens": 32_000,
                "messages": [{"role": "user", "content": "x"}]});
            request
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            chat_of(&request).0["reasoning_effort"].clone()
        };
        let budget = |n: u64| json!({"thinking": {"type": "enabled", "budget_tokens": n}});
        assert_eq!(effort(budget(31_999)), "high");
        assert_eq!(effort(budget(8_000)), "medium");
        assert_eq!(effort(budget(1_024)), "low");
        assert_eq!(effort(json!({"thinking": {"type": "adaptive"}})), "medium");
        assert_eq!(
            effort(json!({"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}})),
            "high"
        );
        assert_eq!(
            effort(json!({"thinking": {"type": "disabled"}})),
            Value::Null
        );
        assert_eq!(effort(json!({})), Value::Null);
    }
}
