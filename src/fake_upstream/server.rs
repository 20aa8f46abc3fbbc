//! HTTP side of the fake upstream: the routes (chat, embeddings, Responses), capturing each
//! request before anything can fail, applying its scenario, and the actix server lifecycle,
//! embedded in the caller's actix System (`start`) or standalone until a signal (`serve`).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::{Value, json};

use super::agent::{self, Choice, Conversation, Tool, Turn};
use super::scenario::{self, Failure, Scenario};
use super::stats::{CapturedRequest, FakeStats};
use super::stream::Script;
use super::{FakeArgs, FakeConfig, FakeError};

/// Far above any realistic prompt, so large-context tests are not cut off by actix's 256 KiB
/// default before the request is captured.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
/// Slow scenarios (`delay-…`) should not keep a test waiting long on `stop`.
const SHUTDOWN_TIMEOUT_SECS: u64 = 1;
const DELAY_HEADER: &str = "x-fake-delay-ms";
const REPLY_TEXT: &str = "This is a canned reply from the Tollgate fake upstream.";

struct AppState {
    config: FakeConfig,
    stats: Arc<FakeStats>,
}

/// A fake upstream running inside the current actix System.
pub struct RunningFake {
    pub addr: SocketAddr,
    pub stats: Arc<FakeStats>,
    handle: ServerHandle,
}

impl RunningFake {
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
/// returning at once. Signals are left to the caller; `workers` is clamped to at least 1.
pub fn start(config: FakeConfig, listen: SocketAddr, workers: usize) -> io::Result<RunningFake> {
    // `actix_rt::spawn` panics outside an actix System; report that as an error instead.
    if actix_rt::Arbiter::try_current().is_none() {
        return Err(io::Error::other(
            "the fake upstream must be started from within an actix system",
        ));
    }
    let stats = Arc::new(FakeStats::default());
    let (server, addr) = launch(config, Arc::clone(&stats), listen, Some(workers), false)?;
    let handle = server.handle();
    actix_rt::spawn(server);
    Ok(RunningFake {
        addr,
        stats,
        handle,
    })
}

/// Runs the standalone fake upstream until SIGINT/SIGTERM.
pub async fn serve(args: &FakeArgs) -> Result<(), FakeError> {
    let config = args.to_config()?;
    let stats = Arc::new(FakeStats::default());
    let (server, addr) =
        launch(config, stats, args.listen, None, true).map_err(|source| FakeError::Bind {
            addr: args.listen,
            source,
        })?;
    tracing::info!(%addr, ?config, "fake upstream listening");
    server.await.map_err(FakeError::Server)
}

fn launch(
    config: FakeConfig,
    stats: Arc<FakeStats>,
    listen: SocketAddr,
    workers: Option<usize>,
    handle_signals: bool,
) -> io::Result<(Server, SocketAddr)> {
    if !listen.ip().is_loopback() {
        tracing::warn!(%listen, "fake upstream bound to a non-loopback address");
    }
    let connections = Arc::clone(&stats);
    let app_state = web::Data::new(AppState { config, stats });
    let mut server = HttpServer::new(move || {
        let app_state = app_state.clone();
        App::new().configure(|cfg| routes(cfg, app_state))
    })
    .on_connect(move |_, _| connections.connection_accepted())
    .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS);
    if let Some(workers) = workers {
        server = server.workers(workers.max(1));
    }
    if !handle_signals {
        server = server.disable_signals();
    }
    let server = server.bind(listen)?;
    let addr = server
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| io::Error::other("the fake upstream bound no address"))?;
    Ok((server.run(), addr))
}

fn routes(cfg: &mut web::ServiceConfig, state: web::Data<AppState>) {
    cfg.app_data(state)
        .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
        .route("/chat/completions", web::post().to(chat))
        .route("/v1/chat/completions", web::post().to(chat))
        .route("/embeddings", web::post().to(chat))
        .route("/v1/embeddings", web::post().to(chat))
        .route("/responses", web::post().to(chat))
        .route("/v1/responses", web::post().to(chat))
        .route("/fake/stats", web::get().to(stats))
        .default_service(web::to(not_found));
}

async fn chat(req: HttpRequest, body: web::Bytes, state: web::Data<AppState>) -> HttpResponse {
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
    let ordinals = state.stats.record(
        CapturedRequest {
            path: req.path().to_owned(),
            headers: headers(&req),
            body: captured_body,
        },
        model.as_deref(),
    );
    let request = match parsed {
        Ok(request) => request,
        Err(err) => {
            let message = format!("we could not parse the JSON body of your request: {err}");
            return error_response(StatusCode::BAD_REQUEST, &message);
        }
    };
    let model = model.unwrap_or_default();
    let config = state.config;
    let mut scenario = Scenario::parse(&model);
    scenario.agent |= config.agent;
    // ThreadRng is not held across the await below.
    let (random_error, latency_ms) = {
        let mut rng = rand::rng();
        let random_error = scenario::roll_random_error(config.error_rate_ppm, &mut rng);
        (
            random_error,
            scenario::sample_latency_ms(config.latency, &mut rng),
        )
    };
    let delay_ms = scenario
        .delay_ms
        .saturating_add(latency_ms)
        .min(scenario::MAX_DELAY_MS);
    tracing::debug!(%model, delay_ms, "fake upstream chat request");
    if delay_ms > 0 {
        actix_rt::time::sleep(Duration::from_millis(delay_ms)).await;
    }
    let failure = scenario::failure(&config, &scenario, &model, ordinals.for_model, random_error);
    let mut response = match failure {
        Some(Failure {
            status,
            message,
            retry_after_secs,
        }) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            let mut response = error_response(status, &message);
            if let Some(secs) = retry_after_secs
                && let Ok(value) = header::HeaderValue::from_str(&secs.to_string())
            {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        None if req.path().ends_with("/responses") => {
            let answer = super::responses::Answer::new(
                &request,
                &model,
                &scenario,
                ordinals.request,
                unix_now_secs(),
            );
            if request.get("stream").and_then(Value::as_bool) == Some(true) {
                answer.stream(Arc::clone(&state.stats))
            } else {
                answer.complete()
            }
        }
        None if request.get("stream").and_then(Value::as_bool) == Some(true) => {
            let id = format!("chatcmpl-fake-{}", ordinals.request);
            let turn = agent_turn(&request, &scenario);
            super::stream::response(
                super::stream::StreamPlan::parse(&model),
                Script::of(&turn, &call_id(ordinals.request)),
                &request,
                super::stream::chunk_base(&id, unix_now_secs(), &model),
                scenario::usage(scenario.usage, &request),
                Arc::clone(&state.stats),
            )
        }
        None if req.path().ends_with("/embeddings") => {
            HttpResponse::Ok().json(super::embeddings::body(&request, &model, scenario.usage))
        }
        None => success(&request, &model, &scenario, ordinals.request, delay_ms),
    };
    response.headers_mut().insert(
        header::HeaderName::from_static(DELAY_HEADER),
        header::HeaderValue::from(delay_ms),
    );
    response
}

fn success(
    request: &Value,
    model: &str,
    scenario: &Scenario,
    request_number: u64,
    delay_ms: u64,
) -> HttpResponse {
    let mut body = json!({
        "id": format!("chatcmpl-fake-{request_number}"),
        "object": "chat.completion",
        "created": unix_now_secs(),
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
                body["choices"][0]["message"]["tool_calls"] = json!([{"id": call_id(request_number),
                    "type": "function", "function": {"name": name, "arguments": "{\"word\":\"fake\"}"}}]);
                body["choices"][0]["finish_reason"] = json!("tool_calls");
            }
        }
        Turn::Text(text) => body["choices"][0]["message"]["content"] = json!(text),
        Turn::Call(call) => {
            body["choices"][0]["message"] = json!({"role": "assistant", "content": null, "refusal": null,
                "tool_calls": [{"id": call_id(request_number), "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments()}}]});
            body["choices"][0]["finish_reason"] = json!("tool_calls");
        }
    }
    if let Some(usage) = scenario::usage(scenario.usage, request)
        && let Some(object) = body.as_object_mut()
    {
        object.insert("usage".to_owned(), usage);
    }
    if let Some(object) = body.as_object_mut() {
        object.insert("x_fake_delay_ms".to_owned(), delay_ms.into());
    }
    HttpResponse::Ok().json(body)
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

/// OpenAI's error envelope, which the gateway's upstream error handling parses.
fn error_response(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(json!({
        "error": {
            "message": message,
            "type": scenario::error_type(status.as_u16()),
            "code": null,
            "param": null,
        }
    }))
}

async fn stats(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "requests": state.stats.requests() }))
}

async fn not_found(req: HttpRequest) -> HttpResponse {
    let message = format!(
        "the fake upstream has no route {} {}",
        req.method(),
        req.path()
    );
    error_response(StatusCode::NOT_FOUND, &message)
}

fn headers(req: &HttpRequest) -> Vec<(String, String)> {
    // `HeaderName` is already lower-case; sorting makes captures comparable across runs
    // because the header map iterates in hash order.
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

fn unix_now_secs() -> u64 {
    use crate::clock::Clock;
    // the fake upstream has no injected clock: it only stamps `created`
    crate::clock::SystemClock.now_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_upstream::Latency;

    async fn post(
        client: &awc::Client,
        url: &str,
        body: &Value,
    ) -> (StatusCode, header::HeaderMap, Value) {
        let mut response = client.post(url).send_json(body).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let json = response.json::<Value>().await.unwrap();
        (status, headers, json)
    }

    fn chat_body(model: &str) -> Value {
        json!({
            "model": model,
            "messages": [{"role": "user", "content": "hello there!"}],
            "max_tokens": 100,
        })
    }

    fn header_str<'a>(headers: &'a header::HeaderMap, name: &str) -> Option<&'a str> {
        headers.get(name).and_then(|value| value.to_str().ok())
    }

    #[actix_rt::test]
    async fn serves_scenarios_over_http() {
        let config = FakeConfig {
            latency: Latency::Fixed { ms: 5 },
            ..FakeConfig::default()
        };
        let fake = start(config, "127.0.0.1:0".parse().unwrap(), 1).unwrap();
        assert!(fake.addr.ip().is_loopback());
        assert!(fake.base_url().starts_with("http://127.0.0.1:"));
        let client = awc::Client::default();
        let chat_url = format!("{}/v1/chat/completions", fake.base_url());

        let (status, headers, body) = post(&client, &chat_url, &chat_body("ok")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            header_str(&headers, "content-type"),
            Some("application/json")
        );
        assert_eq!(header_str(&headers, "x-fake-delay-ms"), Some("5"));
        assert_eq!(body["id"], "chatcmpl-fake-1");
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["model"], "ok");
        assert_eq!(body["choices"][0]["message"]["content"], REPLY_TEXT);
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert!(body["created"].as_u64().unwrap() > 1_600_000_000);
        assert_eq!(body["x_fake_delay_ms"], 5);
        // "hello there!" is 12 bytes -> 3 tokens, plus 4 for the single message.
        assert_eq!(
            body["usage"],
            json!({
                "prompt_tokens": 7,
                "completion_tokens": 12,
                "total_tokens": 19,
                "prompt_tokens_details": {"cached_tokens": 0},
            })
        );

        let bare_url = format!("{}/chat/completions", fake.base_url());
        let (status, headers, body) =
            post(&client, &bare_url, &chat_body("status-429+delay-10ms")).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header_str(&headers, "retry-after"), Some("1"));
        assert_eq!(header_str(&headers, "x-fake-delay-ms"), Some("15"));
        assert_eq!(body["error"]["type"], "rate_limit_error");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("status-429")
        );
        assert_eq!(body["error"]["code"], Value::Null);

        for expected in [503, 503, 200] {
            let (status, _, _) = post(&client, &chat_url, &chat_body("flaky-2+no-usage")).await;
            assert_eq!(status.as_u16(), expected);
        }
        let (_, _, body) = post(&client, &chat_url, &chat_body("deepseek-10-4-3")).await;
        assert_eq!(body["usage"]["prompt_cache_miss_tokens"], 6);

        let mut response = client
            .post(&chat_url)
            .insert_header(("X-Tollgate-Test", "Yes"))
            .insert_header(("content-type", "application/json"))
            .send_body("{not json")
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = response.json::<Value>().await.unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["param"], Value::Null);

        let mut response = client
            .get(format!("{}/fake/stats", fake.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.json::<Value>().await.unwrap(),
            json!({"requests": 7})
        );
        assert_eq!(fake.stats.requests(), 7);
        assert_eq!(fake.stats.requests_for_model("flaky-2+no-usage"), 3);
        let captured = fake.stats.captured();
        assert_eq!(captured.len(), 7);
        assert_eq!(captured[0].path, "/v1/chat/completions");
        assert_eq!(captured[1].path, "/chat/completions");
        assert_eq!(captured[0].body, chat_body("ok"));
        assert_eq!(captured[6].body, json!("{not json"));
        assert_eq!(captured[6].header("x-tollgate-test"), Some("Yes"));
        assert!(
            captured[6]
                .headers
                .iter()
                .all(|(name, _)| *name == name.to_ascii_lowercase())
        );

        fake.stop().await;
    }

    #[actix_rt::test]
    async fn forced_status_applies_to_every_chat_request() {
        let config = FakeConfig {
            forced_status: Some(502),
            ..FakeConfig::default()
        };
        let fake = start(config, "127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let client = awc::Client::default();
        let url = format!("{}/chat/completions", fake.base_url());
        let (status, headers, body) = post(&client, &url, &chat_body("ok")).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(header_str(&headers, "retry-after"), None);
        assert_eq!(body["error"]["type"], "server_error");
        assert_eq!(fake.stats.requests_for_model("ok"), 1);
        fake.stop().await;
    }

    fn agent_tools() -> Value {
        let schema = |property: &str| {
            json!({"type": "object", "properties": {property: {"type": "string"},
                   "verbose": {"type": "boolean"}}, "required": [property]})
        };
        json!([
            {"type": "function", "function": {"name": "read_file", "parameters": schema("path")}},
            {"type": "function", "function": {"name": "shell", "parameters": schema("command")}},
        ])
    }

    fn agent_body(model: &str, messages: &Value) -> Value {
        json!({"model": model, "messages": messages, "tools": agent_tools()})
    }

    #[actix_rt::test]
    async fn agent_calls_the_named_tool_then_answers_with_its_result() {
        let fake = start(FakeConfig::default(), "127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let client = awc::Client::default();
        let url = format!("{}/v1/chat/completions", fake.base_url());
        let ask = json!([{"role": "user", "content": "Use the Shell, please."}]);
        let (status, _, body) = post(&client, &url, &agent_body("m+agent", &ask)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let choice = &body["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        let call = &choice["message"]["tool_calls"][0];
        assert_eq!(call["id"], "call_fake_1");
        assert_eq!(call["function"]["name"], "shell");
        assert_eq!(
            call["function"]["arguments"],
            "{\"command\":\"echo tollgate\"}"
        );
        assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

        let mut answered = ask.as_array().unwrap().clone();
        answered.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
        answered.push(json!({"role": "tool", "tool_call_id": "call_fake_1",
                             "content": "tollgate\n"}));
        // Text after the results (a Messages turn translated to chat) still answers them.
        answered.push(json!({"role": "user", "content": "<reminder/>"}));
        let (_, _, body) = post(&client, &url, &agent_body("m+agent", &json!(answered))).await;
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["choices"][0]["message"]["content"], "Done: tollgate");
        assert_eq!(body["choices"][0]["message"]["tool_calls"], Value::Null);

        // Without `agent` the same request gets the canned answer.
        let (_, _, body) = post(&client, &url, &agent_body("m", &ask)).await;
        assert_eq!(body["choices"][0]["message"]["content"], REPLY_TEXT);
        fake.stop().await;
    }

    #[actix_rt::test]
    async fn agent_config_answers_a_schema_with_json_and_a_plain_chat_as_before() {
        let config = FakeConfig {
            agent: true,
            ..FakeConfig::default()
        };
        let fake = start(config, "127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let client = awc::Client::default();
        let url = format!("{}/v1/chat/completions", fake.base_url());
        let mut request = chat_body("gpt-4o");
        request["response_format"] = json!({"type": "json_schema", "json_schema": {
            "name": "city", "strict": true, "schema": {"type": "object",
            "properties": {"city": {"type": "string"}, "rank": {"type": "integer"}},
            "required": ["city", "rank"], "additionalProperties": false}}});
        let (_, _, body) = post(&client, &url, &request).await;
        let content = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(content).unwrap(),
            json!({"city": "tollgate", "rank": 1})
        );
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        let (_, _, body) = post(&client, &url, &chat_body("gpt-4o")).await;
        assert_eq!(body["choices"][0]["message"]["content"], REPLY_TEXT);
        fake.stop().await;
    }

    /// The `data:` payloads of an SSE body, `[DONE]` left out.
    fn chunks(text: &str) -> Vec<Value> {
        text.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter(|data| *data != "[DONE]")
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    }

    #[actix_rt::test]
    async fn agent_streams_its_tool_call_and_its_text() {
        let fake = start(FakeConfig::default(), "127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let client = awc::Client::default();
        let url = format!("{}/v1/chat/completions", fake.base_url());
        let mut request = agent_body(
            "m+agent",
            &json!([{"role": "user", "content": "read_file the readme"}]),
        );
        request["stream"] = json!(true);
        request["stream_options"] = json!({"include_usage": true});
        let mut response = client.post(&url).send_json(&request).await.unwrap();
        let text = String::from_utf8(response.body().await.unwrap().to_vec()).unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        let call_chunks = chunks(&text);
        let first = &call_chunks[0]["choices"][0]["delta"];
        assert_eq!(first["tool_calls"][0]["function"]["name"], "read_file");
        assert_eq!(first["tool_calls"][0]["id"], "call_fake_1");
        let arguments: String = call_chunks
            .iter()
            .filter_map(|c| {
                c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
            })
            .collect();
        assert_eq!(arguments, "{\"path\":\"tollgate\"}");
        let finish: Vec<&Value> = call_chunks
            .iter()
            .map(|c| &c["choices"][0]["finish_reason"])
            .filter(|reason| !reason.is_null())
            .collect();
        assert_eq!(finish, [&json!("tool_calls")]);
        assert!(
            call_chunks.last().unwrap()["usage"]["total_tokens"]
                .as_u64()
                .is_some()
        );

        request["messages"] = json!([
            {"role": "user", "content": "read_file the readme"},
            {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "# Tollgate"}]},
        ]);
        let mut response = client.post(&url).send_json(&request).await.unwrap();
        let text = String::from_utf8(response.body().await.unwrap().to_vec()).unwrap();
        let content: String = chunks(&text)
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(content, "Done: # Tollgate");
        fake.stop().await;
    }

    #[test]
    fn start_outside_an_actix_system_is_an_error() {
        let result = start(FakeConfig::default(), "127.0.0.1:0".parse().unwrap(), 1);
        assert!(result.is_err());
    }
}
