//! In-process fake of Anthropic's Messages API (`POST /v1/messages`) for tests of the Anthropic
//! adapter. Its point is the request check: it rejects what the real API rejects (missing
//! headers or fields, roles that do not alternate, stray OpenAI fields, tool results without a
//! matching tool use, malformed `cache_control`) with Anthropic's error envelope, so a mapping
//! bug fails a test instead of production. Scenarios ride in the `model` string as in the
//! OpenAI fake: `status-NNN`, `delay-NNNms`, `usage-IN-CW-CR-OUT`, `tool`, `words-N` (a
//! reply of N words whatever `max_tokens` says: a runaway upstream), `searches-N` (N web
//! searches where a search tool is offered, up to its `max_uses`) and `thinks-N` (N tokens of
//! omitted thinking, streamed as Anthropic's estimates, where the request's thinking has
//! `display: "omitted"`). Without `usage-…`, cache
//! breakpoints write and read a small prompt cache of its own (`prompt_cache.rs`). With `agent`
//! it plays a model in a tool loop (`agent.rs`) and accepts the newer fields agent clients send
//! (`AGENT_FIELDS`).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::{Map, Value, json};

use super::FakeConfig;
use super::agent::{self, Choice, Conversation, Tool, Turn};
use super::prompt_cache::PromptCache;
use super::stats::{CapturedRequest, FakeStats};
use super::stream::halves;

/// Large prompts (cached documents) must reach the validator, not actix's 256 KiB default.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
const SHUTDOWN_TIMEOUT_SECS: u64 = 1;
/// A typo in a `delay-…` segment must not hold a test for hours.
const MAX_DELAY_MS: u64 = 600_000;
const REPLY_TEXT: &str = "This is a canned reply from the Tollgate Anthropic fake.";
const DEFAULT_OUTPUT_TOKENS: u64 = 12;
const TOKENS_PER_MESSAGE: u64 = 4;
const BYTES_PER_TOKEN: u64 = 4;
const RETRY_AFTER_SECS: u64 = 1;

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

/// Counters and captured requests of one Anthropic fake.
#[derive(Debug, Default)]
pub struct AnthropicFakeState {
    stats: FakeStats,
    prompt_cache: PromptCache,
    /// Every model answers as `agent` (`FakeConfig::agent`).
    agent: bool,
}

impl AnthropicFakeState {
    /// A fresh state under `config`; of its options the Messages fake applies `agent`.
    pub fn new(config: FakeConfig) -> Self {
        AnthropicFakeState {
            agent: config.agent,
            ..AnthropicFakeState::default()
        }
    }

    /// Messages requests received, rejected ones included.
    pub fn requests(&self) -> u64 {
        self.stats.requests()
    }

    /// Messages requests whose body carried exactly this `model` string.
    pub fn requests_for_model(&self, model: &str) -> u64 {
        self.stats.requests_for_model(model)
    }

    /// Messages requests in arrival order, as received (before any validation).
    pub fn captured(&self) -> Vec<CapturedRequest> {
        self.stats.captured()
    }
}

/// Registers `POST /v1/messages` and `POST /messages` with their own state and body limit.
pub fn configure(cfg: &mut web::ServiceConfig, state: web::Data<AnthropicFakeState>) {
    cfg.service(
        web::resource(["/v1/messages", "/messages"])
            .app_data(state)
            .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
            .route(web::post().to(messages)),
    );
}

/// An Anthropic fake running inside the current actix System.
pub struct RunningAnthropicFake {
    pub addr: SocketAddr,
    pub state: web::Data<AnthropicFakeState>,
    handle: ServerHandle,
}

impl RunningAnthropicFake {
    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:41234`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets in-flight requests finish (bounded by a short timeout) and waits.
    pub async fn stop(self) {
        self.handle.stop(true).await;
    }
}

/// Binds `listen` (port 0 picks a free port) and spawns the server on the current actix System,
/// returning at once. Signals are left to the caller.
pub fn start(listen: SocketAddr) -> io::Result<RunningAnthropicFake> {
    start_with(FakeConfig::default(), listen)
}

/// `start`, under `config` (of its options the Messages fake applies `agent`).
pub fn start_with(config: FakeConfig, listen: SocketAddr) -> io::Result<RunningAnthropicFake> {
    // `actix_rt::spawn` panics outside an actix System; report that as an error instead.
    if actix_rt::Arbiter::try_current().is_none() {
        return Err(io::Error::other(
            "the anthropic fake must be started from within an actix system",
        ));
    }
    if !listen.ip().is_loopback() {
        tracing::warn!(%listen, "anthropic fake bound to a non-loopback address");
    }
    let state = web::Data::new(AnthropicFakeState::new(config));
    let app_state = state.clone();
    let server = HttpServer::new(move || {
        let app_state = app_state.clone();
        App::new()
            .configure(|cfg| configure(cfg, app_state))
            .default_service(web::to(not_found))
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS)
    .bind(listen)?;
    let addr = server
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| io::Error::other("the anthropic fake bound no address"))?;
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    Ok(RunningAnthropicFake {
        addr,
        state,
        handle,
    })
}

async fn messages(
    req: HttpRequest,
    body: web::Bytes,
    state: web::Data<AnthropicFakeState>,
) -> HttpResponse {
    let parsed = serde_json::from_slice::<Value>(&body);
    let model = parsed
        .as_ref()
        .ok()
        .and_then(|request| request.get("model"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let captured_body = match &parsed {
        Ok(request) => request.clone(),
        Err(_) => Value::String(String::from_utf8_lossy(&body).into_owned()),
    };
    // Captured before anything can fail, so tests can inspect what a rejected request carried.
    let ordinals = state.stats.record(
        CapturedRequest {
            path: req.path().to_owned(),
            headers: captured_headers(&req),
            body: captured_body,
        },
        model.as_deref(),
    );
    let request_id = format!("req_fake_{}", ordinals.request);
    let model = model.as_deref().unwrap_or("");
    let mut response = answer(&req, parsed, model, &state).await;
    if let Ok(value) = header::HeaderValue::from_str(&request_id) {
        response
            .headers_mut()
            .insert(header::HeaderName::from_static("request-id"), value);
    }
    response
}

async fn answer(
    req: &HttpRequest,
    parsed: Result<Value, serde_json::Error>,
    model: &str,
    state: &AnthropicFakeState,
) -> HttpResponse {
    // Authentication comes before the body, as in the real API.
    if let Err((status, message)) = check_headers(req) {
        return error_response(status, &message);
    }
    let request = match parsed {
        Ok(request) => request,
        Err(err) => {
            let message = format!("There was an error parsing the body of your request: {err}");
            return error_response(StatusCode::BAD_REQUEST, &message);
        }
    };
    let mut scenario = Scenario::parse(model);
    scenario.agent |= state.agent;
    if let Err(message) = validate(&request, scenario.agent) {
        return error_response(StatusCode::BAD_REQUEST, &message);
    }
    if scenario.delay_ms > 0 {
        actix_rt::time::sleep(Duration::from_millis(scenario.delay_ms)).await;
    }
    if let Some(status) = scenario.status {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let message = format!(
            "fake upstream scenario: status-{} requested",
            status.as_u16()
        );
        let mut response = error_response(status, &message);
        if status == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from(RETRY_AFTER_SECS),
            );
        }
        return response;
    }
    let reply = Reply::new(&request, model, &scenario, &state.prompt_cache);
    if request.get("stream").and_then(Value::as_bool) == Some(true) {
        HttpResponse::Ok()
            .content_type("text/event-stream")
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .body(reply.sse())
    } else {
        HttpResponse::Ok().json(reply.message())
    }
}

/// Anthropic's error envelope with the `error.type` the real API uses for the status.
fn error_response(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(json!({
        "type": "error",
        "error": { "type": error_type(status.as_u16()), "message": message },
    }))
}

fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

async fn not_found(req: HttpRequest) -> HttpResponse {
    let message = format!(
        "the anthropic fake has no route {} {}",
        req.method(),
        req.path()
    );
    error_response(StatusCode::NOT_FOUND, &message)
}

fn captured_headers(req: &HttpRequest) -> Vec<(String, String)> {
    // Sorted so captures compare across runs; the header map iterates in hash order.
    let mut headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    headers.sort_by(|(a, _), (b, _)| a.cmp(b));
    headers
}

// === validation ===

/// The real API answers a missing key with 401 and a missing version with 400.
fn check_headers(req: &HttpRequest) -> Result<(), (StatusCode, String)> {
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
fn validate(request: &Value, agent: bool) -> Check {
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
fn server_tool(tool: &Map<String, Value>) -> Option<&str> {
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

// === scenarios ===

/// What a `model` string such as `claude+usage-10-20-30-5+tool` asks for. Unknown segments are
/// ignored so real model names pass through; later segments override earlier ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Scenario {
    status: Option<u16>,
    delay_ms: u64,
    /// `[input, cache_creation, cache_read, output]` tokens.
    usage: Option<[u64; 4]>,
    tool: bool,
    /// A reply of this many words, ignoring `max_tokens`.
    words: Option<u64>,
    /// Web searches to run where a search tool is offered, up to its `max_uses`.
    searches: u64,
    /// `agent`: answers play a model in a tool loop.
    agent: bool,
    /// `thinks-N`: where the request's thinking is `display: "omitted"`, N
    /// tokens of thinking, billed and streamed only as estimates.
    thinks: u64,
}

impl Scenario {
    fn parse(model: &str) -> Self {
        let mut scenario = Self::default();
        for segment in model.split('+').map(str::trim) {
            if segment == "tool" {
                scenario.tool = true;
            } else if segment == "agent" {
                scenario.agent = true;
            } else if let Some(rest) = segment.strip_prefix("status-") {
                if let Some(status) = number(rest)
                    .and_then(|n| u16::try_from(n).ok())
                    .filter(|s| (400..=599).contains(s))
                {
                    scenario.status = Some(status);
                }
            } else if let Some(rest) = segment.strip_prefix("delay-") {
                if let Some(ms) = rest.strip_suffix("ms").and_then(number) {
                    scenario.delay_ms = ms.min(MAX_DELAY_MS);
                }
            } else if let Some(rest) = segment.strip_prefix("words-") {
                scenario.words = number(rest).map(|n| n.min(100_000));
            } else if let Some(rest) = segment.strip_prefix("searches-") {
                scenario.searches = number(rest).map_or(0, |n| n.min(1_000));
            } else if let Some(rest) = segment.strip_prefix("thinks-") {
                scenario.thinks = number(rest).map_or(0, |n| n.min(1_000_000));
            } else if let Some(rest) = segment.strip_prefix("usage-") {
                let counts: Option<Vec<u64>> = rest.split('-').map(number).collect();
                if let Some(Ok(counts)) = counts.map(<[u64; 4]>::try_from) {
                    scenario.usage = Some(counts);
                }
            }
        }
        scenario
    }
}

/// Strict decimal: `u64::from_str` would also accept a leading `+`.
fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

// === answers ===

/// `(id, name, input)` of a tool use block.
type ToolUse = (String, String, Value);

/// One successful answer, rendered either as a Messages response or as its SSE stream.
struct Reply {
    id: String,
    model: String,
    /// The text block; `None` for an `agent`'s tool use, which comes alone.
    text: Option<String>,
    /// `(id, name, input)` of the tool use, in `tool` scenarios with tools given.
    tool_use: Option<ToolUse>,
    stop_reason: &'static str,
    usage: [u64; 4],
    /// Web searches run, as `usage.server_tool_use` reports them.
    searches: u64,
    /// Omitted thinking: tokens billed, shown only as estimates.
    thinking: u64,
}

/// The estimate's quantum: a `thinking_delta` reports this many tokens more.
const THINKING_QUANTUM: u64 = 64;

/// Whether the request's thinking is on and omitted from the answer.
fn thinking_omitted(request: &Value) -> bool {
    let thinking = &request["thinking"];
    thinking["type"]
        .as_str()
        .is_some_and(|kind| kind != "disabled")
        && thinking["display"].as_str() == Some("omitted")
}

/// The input each search adds when the scenario does not fix the usage.
const SEARCH_INPUT_TOKENS: u64 = 1_000;

/// The searches a reply runs: the scenario's, up to the search tool's own `max_uses`.
fn searches(request: &Value, scenario: &Scenario) -> u64 {
    let tools = request.get("tools").and_then(Value::as_array);
    let search = tools.into_iter().flatten().find(|tool| {
        tool["type"]
            .as_str()
            .is_some_and(|kind| kind.starts_with("web_search_"))
    });
    search.map_or(0, |tool| {
        tool["max_uses"]
            .as_u64()
            .map_or(scenario.searches, |most| scenario.searches.min(most))
    })
}

impl Reply {
    fn new(request: &Value, model: &str, scenario: &Scenario, cache: &PromptCache) -> Self {
        let max_tokens = request
            .get("max_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let (text, tool_use) = if scenario.agent {
            agent_content(request, scenario)
        } else {
            scripted_content(request, scenario)
        };
        let default_output = DEFAULT_OUTPUT_TOKENS.min(max_tokens);
        let searches = searches(request, scenario);
        let thinking = if thinking_omitted(request) {
            scenario.thinks
        } else {
            0
        };
        let mut usage = scenario.usage.unwrap_or_else(|| {
            let [input, creation, read] = cache.split(request, estimate_input_tokens(request));
            let results = searches * SEARCH_INPUT_TOKENS;
            [input + results, creation, read, default_output]
        });
        usage[3] += thinking;
        let stop_reason = if tool_use.is_some() {
            "tool_use"
        } else if scenario.usage.is_none() && max_tokens < DEFAULT_OUTPUT_TOKENS {
            "max_tokens"
        } else {
            "end_turn"
        };
        Reply {
            id: format!("msg_fake_{:016x}", fingerprint(&request.to_string())),
            model: model.to_owned(),
            text,
            tool_use,
            stop_reason,
            usage,
            searches,
            thinking,
        }
    }

    fn usage_json(&self) -> Value {
        let [input, cache_creation, cache_read, output] = self.usage;
        let mut usage = json!({
            "input_tokens": input,
            "cache_creation_input_tokens": cache_creation,
            "cache_read_input_tokens": cache_read,
            "output_tokens": output,
        });
        if self.searches > 0 {
            usage["server_tool_use"] = json!({ "web_search_requests": self.searches });
        }
        usage
    }

    /// `message_delta`'s usage: the output so far, and the searches run.
    fn delta_usage(&self) -> Value {
        let mut usage = json!({ "output_tokens": self.usage[3] });
        if self.searches > 0 {
            usage["server_tool_use"] = json!({ "web_search_requests": self.searches });
        }
        usage
    }

    fn message(&self) -> Value {
        let thinking = (self.thinking > 0)
            .then(|| json!({ "type": "thinking", "thinking": "", "signature": "fake-signature" }));
        let mut content: Vec<Value> = thinking
            .into_iter()
            .chain(
                self.text
                    .iter()
                    .map(|text| json!({ "type": "text", "text": text })),
            )
            .collect();
        if let Some((id, name, input)) = &self.tool_use {
            content.push(json!({ "type": "tool_use", "id": id, "name": name, "input": input }));
        }
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.stop_reason,
            "stop_sequence": null,
            "usage": self.usage_json(),
        })
    }

    /// The event sequence of the real API: message_start, a text block in word-sized deltas,
    /// an optional tool block with its input in two JSON fragments, message_delta, message_stop.
    fn sse(&self) -> String {
        let mut out = String::new();
        let mut start_usage = self.usage_json();
        // The real API reports a token or so of output at the start, the total at the end.
        if let Some(usage) = start_usage.as_object_mut() {
            usage.insert("output_tokens".to_owned(), json!(self.usage[3].min(1)));
        }
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage,
        });
        event(
            &mut out,
            "message_start",
            &json!({ "type": "message_start", "message": message }),
        );
        let first = usize::from(self.thinking > 0);
        if self.thinking > 0 {
            thinking_block(&mut out, self.thinking);
        }
        if let Some(text) = &self.text {
            text_block(&mut out, first, text);
        }
        if let Some((id, name, input)) = &self.tool_use {
            let index = first + usize::from(self.text.is_some());
            tool_use_block(&mut out, index, (id, name, input));
        }
        event(
            &mut out,
            "message_delta",
            &json!({ "type": "message_delta",
                     "delta": { "stop_reason": self.stop_reason, "stop_sequence": null },
                     "usage": self.delta_usage() }),
        );
        event(&mut out, "message_stop", &json!({ "type": "message_stop" }));
        out
    }
}

/// Omitted thinking at index 0: no text, the running estimate of its tokens
/// in quanta, then its signature.
fn thinking_block(out: &mut String, tokens: u64) {
    event(
        out,
        "content_block_start",
        &json!({ "type": "content_block_start", "index": 0,
                 "content_block": { "type": "thinking", "thinking": "" } }),
    );
    event(out, "ping", &json!({ "type": "ping" }));
    let mut left = tokens;
    while left > 0 {
        let step = left.min(THINKING_QUANTUM);
        left -= step;
        event(
            out,
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": 0,
                     "delta": { "type": "thinking_delta", "thinking": "", "estimated_tokens": step } }),
        );
    }
    event(
        out,
        "content_block_delta",
        &json!({ "type": "content_block_delta", "index": 0,
                 "delta": { "type": "signature_delta", "signature": "fake-signature" } }),
    );
    event(
        out,
        "content_block_stop",
        &json!({ "type": "content_block_stop", "index": 0 }),
    );
}

/// A text block at `index`, its text in word-sized deltas; the real API
/// pings after the first block's start.
fn text_block(out: &mut String, index: usize, text: &str) {
    event(
        out,
        "content_block_start",
        &json!({ "type": "content_block_start", "index": index,
                 "content_block": { "type": "text", "text": "" } }),
    );
    if index == 0 {
        event(out, "ping", &json!({ "type": "ping" }));
    }
    for word in text.split_inclusive(' ') {
        event(
            out,
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": index,
                     "delta": { "type": "text_delta", "text": word } }),
        );
    }
    event(
        out,
        "content_block_stop",
        &json!({ "type": "content_block_stop", "index": index }),
    );
}

/// A tool use block at `index`, its input in an empty and two JSON fragments; the first block
/// of a message is followed by the ping.
fn tool_use_block(out: &mut String, index: usize, (id, name, input): (&str, &str, &Value)) {
    event(
        out,
        "content_block_start",
        &json!({ "type": "content_block_start", "index": index, "content_block":
                 { "type": "tool_use", "id": id, "name": name, "input": {} } }),
    );
    if index == 0 {
        event(out, "ping", &json!({ "type": "ping" }));
    }
    let input = input.to_string();
    let (head, tail) = halves(&input);
    for fragment in ["", head, tail] {
        event(
            out,
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": index,
                     "delta": { "type": "input_json_delta", "partial_json": fragment } }),
        );
    }
    event(
        out,
        "content_block_stop",
        &json!({ "type": "content_block_stop", "index": index }),
    );
}

/// The `tool` and `words-N` scenarios' content, else the canned text.
fn scripted_content(request: &Value, scenario: &Scenario) -> (Option<String>, Option<ToolUse>) {
    let first_tool = request
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|tools| tools.first());
    let tool_use = first_tool.filter(|_| scenario.tool).map(|tool| {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("tool");
        let input = sample_input(tool.get("input_schema"));
        (
            format!("toolu_fake_{:016x}", fingerprint(name)),
            name.to_owned(),
            input,
        )
    });
    let text = match (&tool_use, scenario.words) {
        (Some((_, name, _)), _) => format!("I will call the {name} tool."),
        (None, Some(words)) => "word ".repeat(usize::try_from(words).unwrap_or(0)),
        (None, None) => REPLY_TEXT.to_owned(),
    };
    (Some(text), tool_use)
}

/// An `agent` model's content: its tool use alone, or its text.
fn agent_content(request: &Value, scenario: &Scenario) -> (Option<String>, Option<ToolUse>) {
    match agent::turn(&conversation(request)) {
        Turn::Canned => scripted_content(request, scenario),
        Turn::Text(text) => (Some(text), None),
        Turn::Call(call) => {
            // Unique per conversation: agents track their calls by id across turns.
            let id = format!("toolu_fake_{:016x}", fingerprint(&request.to_string()));
            let input = call.arguments_value();
            (None, Some((id, call.name, input)))
        }
    }
}

/// A Messages request as `agent::turn` reads it.
fn conversation(request: &Value) -> Conversation<'_> {
    let tools = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|tool| tool.as_object().is_some_and(|t| server_tool(t).is_none()))
        .filter_map(|tool| {
            Some(Tool {
                name: tool["name"].as_str()?,
                namespace: None,
                schema: tool.get("input_schema"),
                custom: false,
            })
        })
        .collect();
    let choice = match request["tool_choice"]["type"].as_str() {
        Some("none") => Choice::None,
        Some("tool") => request["tool_choice"]["name"]
            .as_str()
            .map_or(Choice::Auto, Choice::Named),
        _ => Choice::Auto,
    };
    let messages = request["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let user_text = agent::last_user_text(messages);
    // Roles alternate, so only the last message can answer the model's calls.
    let tool_result = messages
        .last()
        .filter(|message| message["role"] == "user")
        .and_then(|message| message["content"].as_array())
        .and_then(|blocks| blocks.iter().rev().find(|b| b["type"] == "tool_result"))
        .map(|block| agent::text_of(&block["content"]));
    let formats = [
        &request["output_config"]["format"],
        &request["output_format"],
    ];
    let schema = formats
        .into_iter()
        .find(|format| format["type"] == "json_schema")
        .map(|format| &format["schema"])
        .filter(|schema| schema.is_object());
    Conversation {
        tools,
        choice,
        user_text,
        tool_result,
        schema,
    }
}

fn event(out: &mut String, name: &str, data: &Value) {
    // Writing to a String cannot fail.
    let _ = write!(out, "event: {name}\ndata: {data}\n\n");
}

/// A deterministic id suffix (FNV-1a), so repeated requests get repeatable ids.
fn fingerprint(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// An input object for the tool's schema: one plausible value per declared property.
fn sample_input(schema: Option<&Value>) -> Value {
    let mut input = Map::new();
    if let Some(properties) = schema
        .and_then(|schema| schema.get("properties"))
        .and_then(Value::as_object)
    {
        for (name, property) in properties {
            let value = match property.get("type").and_then(Value::as_str) {
                Some("integer" | "number") => json!(1),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => match property
                    .get("enum")
                    .and_then(Value::as_array)
                    .and_then(|values| values.first())
                {
                    Some(first) => first.clone(),
                    None => json!("fake"),
                },
            };
            input.insert(name.clone(), value);
        }
    }
    Value::Object(input)
}

/// The bytes of text a block or content carries: texts, tool inputs and
/// tool results (what `estimate_input_tokens` counts).
pub(super) fn text_bytes(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len(),
        Value::Array(items) => items.iter().map(text_bytes).fold(0, usize::saturating_add),
        Value::Object(block) => ["text", "content"]
            .iter()
            .filter_map(|key| block.get(*key))
            .map(text_bytes)
            .fold(
                block
                    .get("input")
                    .map_or(0, |input| input.to_string().len()),
                usize::saturating_add,
            ),
        _ => 0,
    }
}

/// A crude stand-in for a tokenizer (4 bytes per token plus a per-message overhead) over the
/// system prompt and every text, tool input and tool result in the messages.
fn estimate_input_tokens(request: &Value) -> u64 {
    let messages = request.get("messages").and_then(Value::as_array);
    let mut bytes = request.get("system").map_or(0, text_bytes);
    for message in messages.into_iter().flatten() {
        bytes = bytes.saturating_add(message.get("content").map_or(0, text_bytes));
    }
    let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
    let count = u64::try_from(messages.map_or(0, Vec::len)).unwrap_or(u64::MAX);
    bytes
        .div_ceil(BYTES_PER_TOKEN)
        .saturating_add(count.saturating_mul(TOKENS_PER_MESSAGE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::chat::ChatRequest;
    use crate::provider::adapters::anthropic as adapter;

    const MIXED_REQUEST: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/anthropic/mixed_request.json"
    ));

    fn valid_request(model: &str) -> Value {
        json!({
            "model": model,
            "max_tokens": 100,
            "system": [
                {"type": "text", "text": "You are terse."},
                {"type": "text", "text": "Long cached context.", "cache_control": {"type": "ephemeral"}},
            ],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                    {"type": "text", "text": "Thanks", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                ]},
            ],
            "tools": [{
                "name": "get_weather",
                "description": "Weather for a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                "cache_control": {"type": "ephemeral"},
            }],
        })
    }

    async fn send(
        client: &awc::Client,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (StatusCode, header::HeaderMap, web::Bytes) {
        let mut request = client.post(url).content_type("application/json");
        for (name, value) in headers {
            request = request.insert_header((*name, *value));
        }
        let mut response = request.send_body(body.to_vec()).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.body().await.unwrap();
        (status, headers, body)
    }

    const AUTH: [(&str, &str); 2] = [
        ("x-api-key", "sk-ant-test"),
        ("anthropic-version", "2023-06-01"),
    ];

    fn sse_events(text: &str) -> Vec<(String, String)> {
        text.split("\n\n")
            .filter(|frame| !frame.is_empty())
            .map(|frame| {
                let mut lines = frame.lines();
                let event = lines
                    .next()
                    .unwrap()
                    .strip_prefix("event: ")
                    .unwrap()
                    .to_owned();
                let data = lines
                    .next()
                    .unwrap()
                    .strip_prefix("data: ")
                    .unwrap()
                    .to_owned();
                (event, data)
            })
            .collect()
    }

    #[actix_rt::test]
    async fn validates_and_answers_over_http() {
        let fake = start("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(fake.base_url().starts_with("http://127.0.0.1:"));
        let client = awc::Client::default();
        let url = format!("{}/v1/messages", fake.base_url());

        let body = valid_request("claude+usage-10-2048-4096-7").to_string();
        let (status, headers, reply) = send(&client, &url, &AUTH, body.as_bytes()).await;
        assert_eq!(status, StatusCode::OK, "{reply:?}");
        assert_eq!(headers.get("request-id").unwrap(), "req_fake_1");
        let reply: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!(reply["type"], "message");
        assert_eq!(reply["model"], "claude+usage-10-2048-4096-7");
        assert_eq!(reply["content"][0]["text"], REPLY_TEXT);
        assert_eq!(reply["stop_reason"], "end_turn");
        assert_eq!(
            reply["usage"],
            json!({"input_tokens": 10, "cache_creation_input_tokens": 2048,
                   "cache_read_input_tokens": 4096, "output_tokens": 7})
        );

        // The tool scenario answers with a tool_use for the first tool, also when streamed.
        let mut streamed = valid_request("claude+tool");
        streamed["stream"] = json!(true);
        let (status, headers, reply) =
            send(&client, &url, &AUTH, streamed.to_string().as_bytes()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers.get("content-type").unwrap(), "text/event-stream");
        let events = sse_events(std::str::from_utf8(&reply).unwrap());
        let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names.first(), Some(&"message_start"));
        assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
        let mut mapper = adapter::StreamMapper::with_created("route", 0);
        let mut arguments = String::new();
        for (event, data) in &events {
            for chunk in mapper.on_event(event, data).unwrap() {
                let chunk: Value = serde_json::from_str(&chunk).unwrap();
                if let Some(fragment) =
                    chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
                {
                    arguments.push_str(fragment);
                }
            }
        }
        assert!(mapper.is_finished());
        assert_eq!(
            serde_json::from_str::<Value>(&arguments).unwrap(),
            json!({"city": "fake"})
        );

        // Missing anthropic-version.
        let (status, _, reply) = send(&client, &url, &AUTH[..1], body.as_bytes()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            serde_json::from_slice::<Value>(&reply).unwrap(),
            json!({"type": "error", "error": {"type": "invalid_request_error",
                   "message": "anthropic-version: header is required"}})
        );
        // Missing x-api-key: the real API says 401.
        let (status, _, reply) = send(&client, &url, &AUTH[1..], body.as_bytes()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            serde_json::from_slice::<Value>(&reply).unwrap()["error"]["type"],
            "authentication_error"
        );

        // Two user messages in a row.
        let mut doubled = valid_request("claude");
        doubled["messages"] =
            json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]);
        let (status, _, reply) = send(
            &client,
            &format!("{}/messages", fake.base_url()),
            &AUTH,
            doubled.to_string().as_bytes(),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let reply: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!(reply["type"], "error");
        assert_eq!(reply["error"]["type"], "invalid_request_error");
        assert_eq!(
            reply["error"]["message"],
            "messages: roles must alternate between \"user\" and \"assistant\", but found \
             multiple \"user\" roles in a row"
        );

        // Scenario failures use Anthropic's envelope too.
        let (status, headers, reply) = send(
            &client,
            &url,
            &AUTH,
            valid_request("claude+status-429+delay-5ms")
                .to_string()
                .as_bytes(),
        )
        .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(headers.get("retry-after").unwrap(), "1");
        assert_eq!(
            serde_json::from_slice::<Value>(&reply).unwrap()["error"]["type"],
            "rate_limit_error"
        );

        let (status, _, reply) = send(&client, &url, &AUTH, b"{oops").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{reply:?}");

        let (status, _, _) = send(
            &client,
            &format!("{}/v1/chat/completions", fake.base_url()),
            &AUTH,
            b"{}",
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        assert_eq!(fake.state.requests(), 7);
        assert_eq!(fake.state.requests_for_model("claude+tool"), 1);
        let captured = fake.state.captured();
        assert_eq!(captured[0].header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(captured[0].path, "/v1/messages");
        assert_eq!(captured[4].path, "/messages");
        fake.stop().await;
    }

    /// The adapter's output for the mixed fixture is a body the fake (and so the real API)
    /// accepts, arriving with `cache_control` intact, and the answers map back to OpenAI shape.
    #[actix_rt::test]
    async fn adapter_round_trip() {
        let fake = start("127.0.0.1:0".parse().unwrap()).unwrap();
        let client = awc::Client::default();
        let url = format!("{}/v1/messages", fake.base_url());
        let request = ChatRequest::parse(MIXED_REQUEST.as_bytes()).unwrap();
        let headers = adapter::headers("sk-ant-test", "");
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();

        let model = "claude+usage-120-2048-4096-57";
        let body = adapter::build_body(&request, model, 256, false).unwrap();
        let (status, _, reply) = send(&client, &url, &headers, &body).await;
        assert_eq!(status, StatusCode::OK, "{reply:?}");
        let captured = fake.state.captured().pop().unwrap();
        assert_eq!(
            captured.body["system"][1]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert_eq!(
            captured.body["messages"][0]["content"][0]["cache_control"],
            json!({"type": "ephemeral", "ttl": "1h"})
        );
        assert_eq!(
            captured.body["tools"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        let (openai, usage) = adapter::map_response(&reply, "claude-route").unwrap();
        let openai: Value = serde_json::from_slice(&openai).unwrap();
        assert_eq!(openai["choices"][0]["message"]["content"], REPLY_TEXT);
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.cached_tokens,
                usage.cache_write_tokens,
                usage.completion_tokens
            ),
            (120 + 2048 + 4096, 4096, 2048, 57)
        );

        let body = adapter::build_body(&request, "claude+tool", 256, true).unwrap();
        let (status, _, reply) = send(&client, &url, &headers, &body).await;
        assert_eq!(status, StatusCode::OK, "{reply:?}");
        let mut mapper = adapter::StreamMapper::new("claude-route");
        let mut finish = None;
        for (event, data) in sse_events(std::str::from_utf8(&reply).unwrap()) {
            for chunk in mapper.on_event(&event, &data).unwrap() {
                let chunk: Value = serde_json::from_str(&chunk).unwrap();
                if let Some(reason) = chunk["choices"][0]["finish_reason"].as_str() {
                    finish = Some(reason.to_owned());
                }
            }
        }
        assert_eq!(finish.as_deref(), Some("tool_calls"));
        assert!(mapper.usage().unwrap().prompt_tokens > 0);
        assert!(mapper.usage_chunk().is_some());
        fake.stop().await;
    }

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

    #[test]
    fn parses_scenarios() {
        assert_eq!(Scenario::parse("claude-sonnet-4-5"), Scenario::default());
        assert_eq!(
            Scenario::parse(
                "claude+status-529+delay-20ms+usage-1-2-3-4+tool+words-7+searches-3+agent+thinks-9"
            ),
            Scenario {
                status: Some(529),
                delay_ms: 20,
                usage: Some([1, 2, 3, 4]),
                tool: true,
                words: Some(7),
                searches: 3,
                agent: true,
                thinks: 9,
            }
        );
        for ignored in [
            "status-200",
            "status-x",
            "delay-5",
            "usage-1-2-3",
            "usage-1-2-3-4-5",
            "usage-a-b-c-d",
        ] {
            assert_eq!(Scenario::parse(ignored), Scenario::default(), "{ignored}");
        }
        assert_eq!(
            Scenario::parse("delay-99999999999ms").delay_ms,
            MAX_DELAY_MS
        );
    }

    #[test]
    fn default_usage_counts_text() {
        let request = json!({
            "max_tokens": 5,
            "system": "12345678",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "abcd"}]},
                {"role": "assistant", "content": "efgh"},
            ],
        });
        let reply = Reply::new(&request, "m", &Scenario::default(), &PromptCache::default());
        // 16 bytes -> 4 tokens, plus 4 per message; output capped by max_tokens.
        assert_eq!(reply.usage, [12, 0, 0, 5]);
        assert_eq!(reply.stop_reason, "max_tokens");
    }

    fn agent_request(messages: &Value) -> Value {
        let schema = |property: &str| {
            json!({"type": "object", "properties": {property: {"type": "string"},
                   "timeout": {"type": "number"}}, "required": [property]})
        };
        json!({
            "model": "claude+agent",
            "max_tokens": 1024,
            "messages": messages,
            "tools": [
                {"type": "web_search_20250305", "name": "web_search"},
                {"name": "Read", "description": "Reads a file", "input_schema": schema("file_path")},
                {"name": "Bash", "description": "Runs a command", "input_schema": schema("command")},
            ],
        })
    }

    fn agent_reply(request: &Value) -> Reply {
        Reply::new(
            request,
            "claude+agent",
            &Scenario::parse("claude+agent"),
            &PromptCache::default(),
        )
    }

    #[test]
    fn agent_uses_the_named_tool_alone() {
        let ask = json!([{"role": "user", "content": [
            {"type": "text", "text": "Run `ls` with bash."}]}]);
        let reply = agent_reply(&agent_request(&ask)).message();
        assert_eq!(reply["stop_reason"], "tool_use");
        assert_eq!(reply["content"].as_array().unwrap().len(), 1);
        let tool_use = &reply["content"][0];
        assert_eq!(
            (&tool_use["type"], &tool_use["name"]),
            (&json!("tool_use"), &json!("Bash"))
        );
        assert_eq!(tool_use["input"], json!({"command": "echo tollgate"}));
        assert!(tool_use["id"].as_str().unwrap().starts_with("toolu_fake_"));
        // The first client tool when none is named; server tools are the provider's own.
        let unnamed = json!([{"role": "user", "content": "go"}]);
        let reply = agent_reply(&agent_request(&unnamed)).message();
        assert_eq!(reply["content"][0]["name"], "Read");
        assert_eq!(
            reply["content"][0]["input"],
            json!({"file_path": "tollgate"})
        );
        // Without `agent`, the canned text.
        let mut plain = agent_request(&ask);
        plain["model"] = json!("claude");
        let reply = Reply::new(
            &plain,
            "claude",
            &Scenario::default(),
            &PromptCache::default(),
        );
        assert_eq!(reply.message()["content"][0]["text"], REPLY_TEXT);
    }

    #[test]
    fn agent_answers_a_tool_result_in_text_or_json() {
        let answered = json!([
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "x"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "tollgate"}]},
                {"type": "text", "text": "<system-reminder>Bash</system-reminder>"}]},
        ]);
        let request = agent_request(&answered);
        let reply = agent_reply(&request).message();
        assert_eq!(reply["stop_reason"], "end_turn");
        assert_eq!(
            reply["content"],
            json!([{"type": "text", "text": "Done: tollgate"}])
        );
        let schema = json!({"type": "object", "properties": {"summary": {"type": "string"},
            "files": {"type": "array", "items": {"type": "string"}}}});
        for field in ["output_config", "output_format"] {
            let mut structured = request.clone();
            let format = json!({"type": "json_schema", "schema": schema});
            structured[field] = if field == "output_config" {
                json!({"format": format})
            } else {
                format
            };
            assert_eq!(validate(&structured, true), Ok(()));
            let text = agent_reply(&structured).message()["content"][0]["text"].clone();
            assert_eq!(
                serde_json::from_str::<Value>(text.as_str().unwrap()).unwrap(),
                json!({"summary": "tollgate", "files": []}),
                "{field}"
            );
        }
    }

    #[test]
    fn agent_streams_its_tool_use_as_the_adapter_reads_it() {
        let ask = json!([{"role": "user", "content": "read the file"}]);
        let sse = agent_reply(&agent_request(&ask)).sse();
        let events = sse_events(&sse);
        let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        let start: Value = serde_json::from_str(&events[1].1).unwrap();
        assert_eq!(start["index"], 0);
        assert_eq!(start["content_block"]["name"], "Read");
        let delta: Value = serde_json::from_str(&events[7].1).unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
        let mut mapper = adapter::StreamMapper::with_created("route", 0);
        let mut arguments = String::new();
        let mut finish = None;
        for (event, data) in &events {
            for chunk in mapper.on_event(event, data).unwrap() {
                let chunk: Value = serde_json::from_str(&chunk).unwrap();
                let choice = &chunk["choices"][0];
                if let Some(fragment) =
                    choice["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
                {
                    arguments.push_str(fragment);
                }
                if let Some(reason) = choice["finish_reason"].as_str() {
                    finish = Some(reason.to_owned());
                }
            }
        }
        assert_eq!(
            serde_json::from_str::<Value>(&arguments).unwrap(),
            json!({"file_path": "tollgate"})
        );
        assert_eq!(finish.as_deref(), Some("tool_calls"));
    }

    #[actix_rt::test]
    async fn agent_config_accepts_the_fields_agent_clients_send() {
        let fake = start_with(
            FakeConfig {
                agent: true,
                ..FakeConfig::default()
            },
            "127.0.0.1:0".parse().unwrap(),
        )
        .unwrap();
        let plain = start("127.0.0.1:0".parse().unwrap()).unwrap();
        let client = awc::Client::default();
        let mut request = agent_request(&json!([{"role": "user", "content": "hi"}]));
        request["model"] = json!("claude-sonnet-4-5");
        request["output_config"] = json!({"effort": "high"});
        request["context_management"] = json!({"edits": []});
        request["tools"][1]["strict"] = json!(true);
        let body = request.to_string();
        let url = format!("{}/v1/messages", fake.base_url());
        let (status, _, reply) = send(&client, &url, &AUTH, body.as_bytes()).await;
        assert_eq!(status, StatusCode::OK, "{reply:?}");
        let reply: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!(reply["content"][0]["name"], "Read");
        let url = format!("{}/v1/messages", plain.base_url());
        let (status, _, reply) = send(&client, &url, &AUTH, body.as_bytes()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            serde_json::from_slice::<Value>(&reply).unwrap()["error"]["message"],
            "output_config: Extra inputs are not permitted"
        );
        fake.stop().await;
        plain.stop().await;
    }
}
