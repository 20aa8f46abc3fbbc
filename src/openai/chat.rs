//! A request of an OpenAI door (chat completions, embeddings), validated
//! just enough to route, estimate and bound it. The body is kept as a JSON
//! map so every field the caller sent (tools, response_format, dimensions,
//! unknown ones) reaches the upstream unchanged. A Messages or Responses
//! request is its chat translation plus the caller's own body (`Native`),
//! which an upstream of that door's own API gets instead.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::anthropic::fields as anthropic_fields;
use crate::anthropic::request::{self as messages, Gap};
use crate::config::server_tools::ServerTools;
use crate::error::ApiError;
use crate::fields::{Screen, Table};
use crate::ledger::Api;
use crate::openai::fields;
use crate::tokenize::{Prompt, Untranslated};

/// A request's body in its door's own API, when that is not OpenAI chat.
#[derive(Debug, Clone)]
pub struct Native {
    /// As the caller sent it, less the provider-run tools its door took out of the offer.
    pub body: Bytes,
    /// The caller's own bytes, when tools were taken out of `body`.
    pub original: Option<Bytes>,
    /// What the chat translation could not carry: an OpenAI-kind upstream refuses it.
    pub gap: Option<Gap>,
    /// What this body sends beyond its chat translation, counted in the hold.
    pub untranslated: Untranslated,
    /// It asked the model to reason (`thinking`, `reasoning`).
    pub asks_reasoning: bool,
    /// Its thinking is omitted from the answer (Messages' `thinking.display`).
    pub thinking_omitted: bool,
    /// The agent run the body names (Codex's `client_metadata.session_id`).
    pub client_session: Option<String>,
}

/// What the Responses door hands the pipeline beside its chat translation:
/// the caller's body (less the built-in tools it removed) and what its field
/// table found.
#[derive(Debug)]
pub struct ResponsesBody {
    pub native: Bytes,
    pub original: Option<Bytes>,
    /// What its chat translation could not carry.
    pub gap: Option<Gap>,
    pub screen: Screen,
    pub asks_reasoning: bool,
    pub client_session: Option<String>,
    pub untranslated: Untranslated,
}

/// Whether a body of any door asks the model to reason: chat's
/// `reasoning_effort`, Responses' `reasoning`, Messages' `thinking`.
pub fn asks_reasoning(body: &Map<String, Value>) -> bool {
    let thinking = body
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|kind| kind != "disabled");
    let effort = body
        .get("reasoning_effort")
        .and_then(Value::as_str)
        .is_some_and(|effort| effort != "none");
    let reasoning = body.get("reasoning").is_some_and(|r| !r.is_null());
    effort || thinking || reasoning
}

#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The door: `Chat`, or `Embeddings` (no output, never a stream).
    api: Api,
    /// The caller's bytes, for building an upstream body without rewriting it all.
    raw: Bytes,
    body: Map<String, Value>,
    model: String,
    max_tokens: Option<u32>,
    max_tokens_field: &'static str,
    /// Both output-limit fields were sent: both leave with the reserved value.
    both_limits: bool,
    /// `n`: completions the upstream generates, each up to the output limit.
    choices: u32,
    stream: bool,
    native: Option<Native>,
    /// What the door's field table left for the route to decide, and the tools it removed.
    screen: Screen,
}

impl ChatRequest {
    pub fn parse(bytes: &[u8]) -> Result<ChatRequest, ApiError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            ApiError::invalid_request("body", format!("the body is not valid JSON: {e}"))
        })?;
        let Value::Object(body) = value else {
            return Err(ApiError::invalid_request(
                "body",
                "the body must be a JSON object",
            ));
        };
        let model = match body.get("model") {
            Some(Value::String(m)) if !m.trim().is_empty() => m.clone(),
            Some(_) => {
                return Err(ApiError::invalid_request(
                    "model",
                    "`model` must be a non-empty string",
                ));
            }
            None => return Err(ApiError::invalid_request("model", "`model` is required")),
        };
        validate_messages(body.get("messages"))?;
        let limit = |field: &str| match body.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => positive_u32(v, field).map(Some),
        };
        let completion_limit = limit("max_completion_tokens")?;
        let tokens_limit = limit("max_tokens")?;
        // Two limits: the smaller is what the caller asked to pay for at most.
        let (max_tokens, max_tokens_field) = match (completion_limit, tokens_limit) {
            (Some(a), Some(b)) => (Some(a.min(b)), "max_completion_tokens"),
            (Some(a), None) => (Some(a), "max_completion_tokens"),
            (None, b) => (b, "max_tokens"),
        };
        let both_limits = completion_limit.is_some() && tokens_limit.is_some();
        let choices = match body.get("n") {
            None | Some(Value::Null) => 1,
            Some(v) => positive_u32(v, "n")?,
        };
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::invalid_request(
                    "stream",
                    "`stream` must be a boolean",
                ));
            }
        };
        Ok(ChatRequest {
            api: Api::Chat,
            raw: Bytes::copy_from_slice(bytes),
            body,
            model,
            max_tokens,
            max_tokens_field,
            both_limits,
            choices,
            stream,
            native: None,
            screen: Screen::default(),
        })
    }

    /// `POST /v1/chat/completions`: the caller's chat body, read by its field table.
    pub fn parse_chat(bytes: &[u8]) -> Result<ChatRequest, ApiError> {
        let mut request = ChatRequest::parse(bytes)?;
        request.screen.unpriced = fields::CHAT.screen(&request.body)?;
        Ok(request)
    }

    /// `POST /v1/embeddings`: `input` is a string, an array of strings, an
    /// array of token ids or an array of such arrays, never empty. Nothing is
    /// generated, so there is no output limit and no stream.
    pub fn parse_embeddings(bytes: &[u8]) -> Result<ChatRequest, ApiError> {
        let body = object(bytes)?;
        let unpriced = fields::EMBEDDINGS.screen(&body)?;
        let model = model(&body)?;
        validate_input(body.get("input"))?;
        if let Some(stream) = body.get("stream").filter(|v| !v.is_null())
            && stream != &Value::Bool(false)
        {
            return Err(ApiError::invalid_request(
                "stream",
                "embeddings cannot be streamed",
            ));
        }
        Ok(ChatRequest {
            api: Api::Embeddings,
            raw: Bytes::copy_from_slice(bytes),
            body,
            model,
            max_tokens: None,
            max_tokens_field: "max_tokens",
            both_limits: false,
            choices: 1,
            stream: false,
            native: None,
            screen: Screen {
                unpriced,
                removed_tools: Vec::new(),
                admitted: Vec::new(),
            },
        })
    }

    /// `POST /v1/messages`: routed and estimated by its chat translation;
    /// `max_tokens` is required, as Anthropic requires it (it is the output
    /// limit the request reserves).
    pub fn parse_messages(bytes: &[u8]) -> Result<ChatRequest, ApiError> {
        let request = ChatRequest::translated(bytes, &anthropic_fields::MESSAGES)?;
        if request.max_tokens.is_none() {
            return Err(ApiError::invalid_request(
                "max_tokens",
                "`max_tokens` is required",
            ));
        }
        Ok(request)
    }

    /// `POST /v1/messages/count_tokens`: a Messages body without an output limit.
    pub fn parse_count_tokens(bytes: &[u8]) -> Result<ChatRequest, ApiError> {
        ChatRequest::translated(bytes, &anthropic_fields::COUNT_TOKENS)
    }

    /// A Messages body read by `table`, as its chat translation.
    fn translated(bytes: &[u8], table: &'static Table) -> Result<ChatRequest, ApiError> {
        let translation = messages::to_chat(bytes, table)?;
        let mut request = ChatRequest::parse(&translation.chat)?.through(Api::Messages);
        let original = translation
            .screened
            .is_some()
            .then(|| Bytes::copy_from_slice(bytes));
        request.native = Some(Native {
            body: translation
                .screened
                .map_or_else(|| Bytes::copy_from_slice(bytes), Bytes::from),
            original,
            gap: translation.gap,
            untranslated: translation.untranslated,
            asks_reasoning: translation.asks_reasoning,
            thinking_omitted: translation.thinking_omitted,
            client_session: None,
        });
        request.screen = translation.screen;
        Ok(request)
    }

    /// `POST /v1/responses`: routed and estimated by `chat`, the door's
    /// translation of the caller's `native` body, which an upstream of the
    /// Responses API gets instead; what chat cannot carry is its gap.
    pub fn parse_responses(chat: &[u8], door: ResponsesBody) -> Result<ChatRequest, ApiError> {
        let mut request = ChatRequest::parse(chat)?.through(Api::Responses);
        request.native = Some(Native {
            body: door.native,
            original: door.original,
            gap: door.gap,
            untranslated: door.untranslated,
            asks_reasoning: door.asks_reasoning,
            thinking_omitted: false,
            client_session: door.client_session,
        });
        request.screen = door.screen;
        Ok(request)
    }

    /// Lets the provider-run tools the route prices (`allowed`) back into
    /// the caller's body, at the bounds the hold covers, where its door had
    /// taken them out of the offer. Only for a route whose every target
    /// answers in the door's own API: a translation could not carry them.
    pub fn admit_server_tools(&mut self, allowed: &ServerTools) -> Result<(), ApiError> {
        let Some(native) = &mut self.native else {
            return Ok(());
        };
        let Some(original) = native.original.as_ref().filter(|_| !allowed.is_empty()) else {
            return Ok(());
        };
        let mut body = object(original)?;
        let tools = match self.api {
            Api::Messages => anthropic_fields::screen_tools(&mut body, allowed),
            Api::Responses => fields::screen_tools(&mut body, allowed),
            Api::Chat | Api::Embeddings => return Ok(()),
        };
        native.body = Bytes::from(Value::Object(body).to_string());
        self.screen.removed_tools = tools.removed;
        self.screen.admitted = tools.admitted;
        Ok(())
    }

    /// Whether the provider may bill what a stream never shows: reasoning,
    /// or the uses of a provider-run tool.
    pub fn bills_unseen(&self) -> bool {
        self.asks_reasoning() || !self.screen.admitted.is_empty()
    }

    /// The same request, arrived through another door.
    #[must_use]
    fn through(mut self, api: Api) -> ChatRequest {
        self.api = api;
        self
    }

    /// The door the request came in by.
    pub fn api(&self) -> Api {
        self.api
    }

    /// Whether the upstream generates output: it does for chat, not for embeddings.
    pub fn generates(&self) -> bool {
        self.api != Api::Embeddings
    }

    pub fn body(&self) -> &Map<String, Value> {
        &self.body
    }

    /// The input to estimate, shaped by the door: an embeddings body is
    /// counted by its `input` whatever else it carries.
    pub fn prompt(&self) -> Prompt<'_> {
        match (self.api, &self.native) {
            (Api::Embeddings, _) => Prompt::Embeddings(&self.body),
            (_, Some(native)) => Prompt::Translated(&self.body, &native.untranslated),
            (_, None) => Prompt::Chat(&self.body),
        }
    }

    /// Whether the request asked the model to reason (chat's
    /// `reasoning_effort`, Responses' `reasoning`, Messages' `thinking`):
    /// reasoning is billed output that a stream never shows.
    pub fn asks_reasoning(&self) -> bool {
        if let Some(native) = &self.native {
            return native.asks_reasoning;
        }
        asks_reasoning(&self.body)
    }

    /// What the door's field table left for the route, and the tools it removed.
    pub fn screen(&self) -> &Screen {
        &self.screen
    }

    /// The chat body as the caller sent it (or as its door translated it).
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// The caller's body in its door's own API, when that is not chat.
    pub fn native(&self) -> Option<&Native> {
        self.native.as_ref()
    }

    /// The `model` the caller asked for: a route name.
    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn max_tokens(&self) -> Option<u32> {
        self.max_tokens
    }

    /// The field the caller used for the output limit; the gateway sets the same one.
    pub fn max_tokens_field(&self) -> &'static str {
        self.max_tokens_field
    }

    /// Every output-limit field the outgoing body must carry: the caller's
    /// field, and the other one too when both were sent.
    pub fn max_tokens_fields(&self) -> &'static [&'static str] {
        match (self.both_limits, self.max_tokens_field) {
            (true, _) => &["max_completion_tokens", "max_tokens"],
            (false, "max_completion_tokens") => &["max_completion_tokens"],
            (false, _) => &["max_tokens"],
        }
    }

    /// `n`: how many completions the upstream generates (at least 1).
    pub fn choices(&self) -> u32 {
        self.choices
    }

    pub fn stream(&self) -> bool {
        self.stream
    }

    /// The caller asked for the usage-only chunk at the end of a stream.
    pub fn include_usage(&self) -> bool {
        self.body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// The body as a JSON object, else the caller's 400.
pub fn object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::invalid_request("body", format!("the body is not valid JSON: {e}"))
    })?;
    match value {
        Value::Object(body) => Ok(body),
        _ => Err(ApiError::invalid_request(
            "body",
            "the body must be a JSON object",
        )),
    }
}

fn model(body: &Map<String, Value>) -> Result<String, ApiError> {
    match body.get("model") {
        Some(Value::String(m)) if !m.trim().is_empty() => Ok(m.clone()),
        Some(_) => Err(ApiError::invalid_request(
            "model",
            "`model` must be a non-empty string",
        )),
        None => Err(ApiError::invalid_request("model", "`model` is required")),
    }
}

fn validate_input(input: Option<&Value>) -> Result<(), ApiError> {
    let token_ids = |items: &[Value]| !items.is_empty() && items.iter().all(Value::is_u64);
    let valid = match input {
        Some(Value::String(text)) => !text.is_empty(),
        Some(Value::Array(items)) if !items.is_empty() => {
            items
                .iter()
                .all(|item| matches!(item, Value::String(text) if !text.is_empty()))
                || token_ids(items)
                || items
                    .iter()
                    .all(|item| matches!(item, Value::Array(ids) if token_ids(ids)))
        }
        _ => false,
    };
    if valid {
        return Ok(());
    }
    Err(ApiError::invalid_request(
        "input",
        "`input` must be a non-empty string, or a non-empty array of strings, of token ids, or of arrays of token ids",
    ))
}

fn positive_u32(value: &Value, field: &str) -> Result<u32, ApiError> {
    value
        .as_u64()
        .filter(|n| *n > 0)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            ApiError::invalid_request(field, format!("`{field}` must be a positive integer"))
        })
}

fn validate_messages(messages: Option<&Value>) -> Result<(), ApiError> {
    let Some(messages) = messages else {
        return Err(ApiError::invalid_request(
            "messages",
            "`messages` is required",
        ));
    };
    let Value::Array(messages) = messages else {
        return Err(ApiError::invalid_request(
            "messages",
            "`messages` must be an array",
        ));
    };
    if messages.is_empty() {
        return Err(ApiError::invalid_request(
            "messages",
            "`messages` must not be empty",
        ));
    }
    for (i, message) in messages.iter().enumerate() {
        let Value::Object(message) = message else {
            return Err(ApiError::invalid_request(
                format!("messages[{i}]"),
                "each message must be an object",
            ));
        };
        match message.get("role") {
            Some(Value::String(role)) if !role.is_empty() => {}
            _ => {
                return Err(ApiError::invalid_request(
                    format!("messages[{i}].role"),
                    "each message needs a string `role`",
                ));
            }
        }
        match message.get("content") {
            None | Some(Value::Null | Value::String(_) | Value::Array(_)) => {}
            Some(_) => {
                return Err(ApiError::invalid_request(
                    format!("messages[{i}].content"),
                    "`content` must be a string or an array of parts",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param_of(body: &str) -> String {
        let error = ChatRequest::parse(body.as_bytes()).unwrap_err();
        let envelope: Value = serde_json::from_slice(&error.envelope_json()).unwrap();
        envelope["error"]["param"].as_str().unwrap().to_owned()
    }

    #[test]
    fn names_the_offending_field() {
        assert_eq!(param_of("{"), "body");
        assert_eq!(param_of("[]"), "body");
        assert_eq!(
            param_of(r#"{"messages":[{"role":"user","content":"x"}]}"#),
            "model"
        );
        assert_eq!(param_of(r#"{"model":"fast"}"#), "messages");
        assert_eq!(
            param_of(r#"{"model":"fast","messages":[{"content":"x"}]}"#),
            "messages[0].role"
        );
        assert_eq!(
            param_of(r#"{"model":"fast","messages":[{"role":"user","content":1}]}"#),
            "messages[0].content"
        );
        assert_eq!(
            param_of(r#"{"model":"fast","messages":[{"role":"user"}],"max_tokens":-1}"#),
            "max_tokens"
        );
        assert_eq!(
            param_of(r#"{"model":"fast","messages":[{"role":"user"}],"stream":"yes"}"#),
            "stream"
        );
    }

    #[test]
    fn two_output_limits_reserve_the_smaller_and_both_are_rewritten() {
        let request = ChatRequest::parse(
            br#"{"model":"fast","messages":[{"role":"user","content":"x"}],"max_completion_tokens":50,"max_tokens":100000}"#,
        )
        .unwrap();
        assert_eq!(request.max_tokens(), Some(50));
        assert_eq!(
            request.max_tokens_fields(),
            ["max_completion_tokens", "max_tokens"]
        );
        // An invalid second limit is refused even when the first is fine.
        assert_eq!(
            param_of(
                r#"{"model":"fast","messages":[{"role":"user"}],"max_completion_tokens":5,"max_tokens":"lots"}"#
            ),
            "max_tokens"
        );
    }

    #[test]
    fn embeddings_input_takes_each_shape_and_names_a_bad_one() {
        for good in [
            r#""one text""#,
            r#"["a", "b"]"#,
            "[1, 2, 3]",
            "[[1, 2], [3]]",
        ] {
            let body = format!(r#"{{"model":"embed","input":{good}}}"#);
            let request = ChatRequest::parse_embeddings(body.as_bytes()).unwrap();
            assert_eq!(
                (request.api(), request.generates()),
                (Api::Embeddings, false)
            );
        }
        for bad in [r#""""#, "[]", r#"["a", 1]"#, "[[]]", "{}", "null", "[-1]"] {
            let body = format!(r#"{{"model":"embed","input":{bad}}}"#);
            let error = ChatRequest::parse_embeddings(body.as_bytes()).unwrap_err();
            let envelope: Value = serde_json::from_slice(&error.envelope_json()).unwrap();
            assert_eq!(envelope["error"]["param"], "input", "{bad}");
        }
        let error = ChatRequest::parse_embeddings(br#"{"input":"x"}"#).unwrap_err();
        let envelope: Value = serde_json::from_slice(&error.envelope_json()).unwrap();
        assert_eq!(envelope["error"]["param"], "model");
    }

    #[test]
    fn n_is_read_and_must_be_a_positive_integer() {
        let request = ChatRequest::parse(
            br#"{"model":"fast","messages":[{"role":"user","content":"x"}],"n":4}"#,
        )
        .unwrap();
        assert_eq!(request.choices(), 4);
        for bad in ["0", "-1", "1.5", "\"2\""] {
            let body = format!(r#"{{"model":"fast","messages":[{{"role":"user"}}],"n":{bad}}}"#);
            assert_eq!(param_of(&body), "n", "{bad}");
        }
    }

    #[test]
    fn keeps_unknown_fields_and_reads_the_output_limit() {
        let request = ChatRequest::parse(
            br#"{"model":"fast","messages":[{"role":"user","content":"x"}],"max_completion_tokens":7,"tools":[],"x_custom":1}"#,
        )
        .unwrap();
        assert_eq!(request.max_tokens(), Some(7));
        assert_eq!(request.max_tokens_field(), "max_completion_tokens");
        assert!(request.body().contains_key("x_custom"));
    }
}
