//! The OpenAI-compatible fake: its routes (chat completions, embeddings, Responses, and its
//! own `/fake/stats`), applying each request's scenario and the instance-wide faults, and its
//! server, embedded in the caller's actix System (`start`) or standalone until a signal
//! (`serve`).

mod chat;
mod embeddings;
mod responses;
pub(crate) mod scenario;
pub(crate) mod stream;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use crate::http::{self, Launch, Received, Spawned};
use crate::stats::FakeStats;
use crate::tls::FakeTls;
use crate::{FakeArgs, FakeConfig, FakeError};
use scenario::{Failure, Scenario};

const DELAY_HEADER: &str = "x-fake-delay-ms";

struct AppState {
    config: FakeConfig,
    stats: Arc<FakeStats>,
    /// The seeded draws of `config.seed`, shared by the workers in arrival order.
    draws: Option<std::sync::Mutex<rand::rngs::StdRng>>,
}

/// A fake upstream running inside the current actix System.
pub struct RunningFake {
    pub addr: SocketAddr,
    pub stats: Arc<FakeStats>,
    server: Spawned,
    /// The PEM of the authority behind the HTTPS side, if any.
    ca_pem: Option<String>,
}

impl RunningFake {
    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:41234`.
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// The HTTPS base URL (`https://127.0.0.1:…`) of a fake started with `start_tls`.
    pub fn tls_base_url(&self) -> Option<String> {
        self.server.tls_addr.map(|addr| format!("https://{addr}"))
    }

    /// The PEM of the authority that signed the HTTPS certificate, for a client to trust.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Stops accepting, lets in-flight requests finish (bounded by a short timeout) and waits.
    pub async fn stop(self) {
        self.server.stop().await;
    }
}

/// Binds `listen` (port 0 picks a free port) and spawns the server on the current actix System,
/// returning at once. Signals are left to the caller; `workers` is clamped to at least 1.
pub fn start(config: FakeConfig, listen: SocketAddr, workers: usize) -> io::Result<RunningFake> {
    start_with(config, listen, workers, None)
}

/// `start`, also serving HTTPS on a free loopback port with a fresh authority's certificate.
pub fn start_tls(
    config: FakeConfig,
    listen: SocketAddr,
    workers: usize,
) -> io::Result<RunningFake> {
    let tls = FakeTls::generate()?;
    start_with(config, listen, workers, Some(tls))
}

fn start_with(
    config: FakeConfig,
    listen: SocketAddr,
    workers: usize,
    tls: Option<FakeTls>,
) -> io::Result<RunningFake> {
    let stats = Arc::new(FakeStats::default());
    let ca_pem = tls.as_ref().map(|tls| tls.ca_pem().to_owned());
    let launch = Launch {
        name: "the fake upstream",
        listen,
        workers: Some(workers),
        handle_signals: false,
        connections: Some(Arc::clone(&stats)),
        tls: tls.map(|tls| (SocketAddr::from(([127, 0, 0, 1], 0)), tls)),
    };
    let server = launch.spawn(routes(config, Arc::clone(&stats)))?;
    Ok(RunningFake {
        addr: server.addr,
        stats,
        server,
        ca_pem,
    })
}

/// Runs the standalone fake upstream until SIGINT/SIGTERM.
pub async fn serve(args: &FakeArgs) -> Result<(), FakeError> {
    let config = args.to_config()?;
    let tls = match (args.tls_listen, &args.tls_ca) {
        (Some(tls_listen), Some(ca_path)) => {
            let tls = FakeTls::generate().map_err(FakeError::Tls)?;
            std::fs::write(ca_path, tls.ca_pem()).map_err(|source| FakeError::WriteCa {
                path: ca_path.clone(),
                source,
            })?;
            Some((tls_listen, tls))
        }
        (None, None) => None,
        _ => return Err(FakeError::TlsFlags),
    };
    let stats = Arc::new(FakeStats::default());
    let launch = Launch {
        name: "the fake upstream",
        listen: args.listen,
        workers: None,
        handle_signals: true,
        connections: Some(Arc::clone(&stats)),
        tls,
    };
    let bound = launch
        .bind(routes(config, stats))
        .map_err(|source| FakeError::Bind {
            addr: args.listen,
            source,
        })?;
    tracing::info!(addr = %bound.addr, tls_addr = ?bound.tls_addr, ?config, "fake upstream listening");
    bound.server.await.map_err(FakeError::Server)
}

fn routes(
    config: FakeConfig,
    stats: Arc<FakeStats>,
) -> impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static {
    let draws = config
        .seed
        .map(|seed| std::sync::Mutex::new(rand::SeedableRng::seed_from_u64(seed)));
    let app_state = web::Data::new(AppState {
        config,
        stats,
        draws,
    });
    move |cfg| {
        cfg.app_data(app_state.clone())
            .app_data(web::PayloadConfig::new(http::MAX_BODY_BYTES))
            .route("/chat/completions", web::post().to(answer))
            .route("/v1/chat/completions", web::post().to(answer))
            .route("/embeddings", web::post().to(answer))
            .route("/v1/embeddings", web::post().to(answer))
            .route("/responses", web::post().to(answer))
            .route("/v1/responses", web::post().to(answer))
            .route("/fake/stats", web::get().to(stats_of))
            .default_service(web::to(not_found));
    }
}

/// Any of the fake's `POST` routes: the request recorded, its delay waited, then a failure
/// (scenario or injected) or the answer its path asks for.
async fn answer(req: HttpRequest, body: web::Bytes, state: web::Data<AppState>) -> HttpResponse {
    let _answering = state.stats.answering();
    let Received {
        request,
        model,
        ordinals,
    } = Received::record(&req, &body, &state.stats);
    let request = match request {
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
    let (random_error, delay_ms) = scenario::roll(&config, &scenario, state.draws.as_ref());
    tracing::debug!(%model, delay_ms, "fake upstream chat request");
    http::sleep_ms(delay_ms).await;
    let failure = scenario::failure(&config, &scenario, &model, ordinals.for_model, random_error);
    let call = Call {
        path: req.path(),
        request: &request,
        model: &model,
        scenario: &scenario,
        number: ordinals.request,
        stats: &state.stats,
    };
    let mut response = match failure {
        Some(failure) => failure_response(failure),
        None => call.success(delay_ms),
    };
    response.headers_mut().insert(
        header::HeaderName::from_static(DELAY_HEADER),
        header::HeaderValue::from(delay_ms),
    );
    response
}

/// One request the fake answers successfully.
struct Call<'a> {
    path: &'a str,
    request: &'a Value,
    model: &'a str,
    scenario: &'a Scenario,
    /// Its 1-based number among this fake's requests.
    number: u64,
    stats: &'a Arc<FakeStats>,
}

impl Call<'_> {
    fn success(&self, delay_ms: u64) -> HttpResponse {
        let streamed = self.request.get("stream").and_then(Value::as_bool) == Some(true);
        if self.path.ends_with("/responses") {
            let answer = responses::Answer::new(
                self.request,
                self.model,
                self.scenario,
                self.number,
                unix_now_secs(),
            );
            if streamed {
                answer.stream(Arc::clone(self.stats))
            } else {
                answer.complete()
            }
        } else if streamed {
            chat::stream(self, Arc::clone(self.stats))
        } else if self.path.ends_with("/embeddings") {
            let body = embeddings::body(self.request, self.model, self.scenario.usage);
            HttpResponse::Ok().json(body)
        } else {
            HttpResponse::Ok().json(chat::completion(self, delay_ms))
        }
    }
}

fn failure_response(failure: Failure) -> HttpResponse {
    let Failure {
        status,
        message,
        retry_after_secs,
    } = failure;
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let mut response = error_response(status, &message);
    if let Some(secs) = retry_after_secs {
        http::retry_after(&mut response, secs);
    }
    response
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

async fn stats_of(state: web::Data<AppState>) -> HttpResponse {
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

/// What the answers stamp as `created`: the fake has no injected clock, and nothing reads the
/// stamp but a check that it is plausible.
#[expect(
    clippy::disallowed_methods,
    reason = "the fakes are outside the gateway's injected clock; only `created` stamps read it"
)]
fn unix_now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

#[cfg(test)]
mod tests {
    use super::chat::REPLY_TEXT;
    use super::*;
    use crate::Latency;

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
