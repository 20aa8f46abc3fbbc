//! In-process fake of Anthropic's Messages API (`POST /v1/messages`) for tests of the gateway's
//! Anthropic adapter. Its point is the request check: it rejects what the real API rejects (missing
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
//! (`validate::AGENT_FIELDS`).

mod prompt_cache;
mod reply;
mod scenario;
mod validate;

#[cfg(test)]
mod fixtures;

use std::io;
use std::net::SocketAddr;

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use crate::FakeConfig;
use crate::http::{self, Launch, Received, Spawned};
use crate::sse;
use crate::stats::{CapturedRequest, FakeStats};
use prompt_cache::PromptCache;
use reply::Reply;
use scenario::Scenario;

const RETRY_AFTER_SECS: u64 = 1;

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
            .app_data(web::PayloadConfig::new(http::MAX_BODY_BYTES))
            .route(web::post().to(messages)),
    );
}

/// An Anthropic fake running inside the current actix System.
pub struct RunningAnthropicFake {
    pub addr: SocketAddr,
    pub state: web::Data<AnthropicFakeState>,
    server: Spawned,
}

impl RunningAnthropicFake {
    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:41234`.
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// Stops accepting, lets in-flight requests finish (bounded by a short timeout) and waits.
    pub async fn stop(self) {
        self.server.stop().await;
    }
}

/// Binds `listen` (port 0 picks a free port) and spawns the server on the current actix System,
/// returning at once. Signals are left to the caller.
pub fn start(listen: SocketAddr) -> io::Result<RunningAnthropicFake> {
    start_with(FakeConfig::default(), listen)
}

/// `start`, under `config` (of its options the Messages fake applies `agent`).
pub fn start_with(config: FakeConfig, listen: SocketAddr) -> io::Result<RunningAnthropicFake> {
    let state = web::Data::new(AnthropicFakeState::new(config));
    let app_state = state.clone();
    let launch = Launch {
        name: "the anthropic fake",
        listen,
        workers: Some(1),
        handle_signals: false,
        connections: None,
        tls: None,
    };
    let server = launch.spawn(move |cfg| {
        configure(cfg, app_state.clone());
        cfg.default_service(web::to(not_found));
    })?;
    Ok(RunningAnthropicFake {
        addr: server.addr,
        state,
        server,
    })
}

async fn messages(
    req: HttpRequest,
    body: web::Bytes,
    state: web::Data<AnthropicFakeState>,
) -> HttpResponse {
    let Received {
        request,
        model,
        ordinals,
    } = Received::record(&req, &body, &state.stats);
    let request_id = format!("req_fake_{}", ordinals.request);
    let model = model.as_deref().unwrap_or("");
    let mut response = answer(&req, request, model, &state).await;
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
    if let Err((status, message)) = validate::check_headers(req) {
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
    if let Err(message) = validate::validate(&request, scenario.agent) {
        return error_response(StatusCode::BAD_REQUEST, &message);
    }
    http::sleep_ms(scenario.delay_ms).await;
    if let Some(status) = scenario.status {
        return scenario_failure(status);
    }
    let reply = Reply::new(&request, model, &scenario, &state.prompt_cache);
    if request.get("stream").and_then(Value::as_bool) == Some(true) {
        sse::ok().body(reply.sse())
    } else {
        HttpResponse::Ok().json(reply.message())
    }
}

/// The failure a `status-NNN` scenario asks for.
fn scenario_failure(status: u16) -> HttpResponse {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let message = format!(
        "fake upstream scenario: status-{} requested",
        status.as_u16()
    );
    let mut response = error_response(status, &message);
    if status == StatusCode::TOO_MANY_REQUESTS {
        http::retry_after(&mut response, RETRY_AFTER_SECS);
    }
    response
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

#[cfg(test)]
mod tests {
    use super::*;
    use fixtures::{agent_request, sse_events, tool_input, valid_request};
    use reply::REPLY_TEXT;

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
        assert_eq!(tool_input(&events), json!({"city": "fake"}));

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
