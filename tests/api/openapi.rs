//! Every answer and stream event of the OpenAI doors (chat completions,
//! Responses, embeddings), errors included, validates against OpenAI's
//! published OpenAPI description (`tests/fixtures/openai-openapi.json`): a
//! typed client generated from it (Go, Java, Swift, .NET) refuses an object
//! that lacks a field the description requires. The answers cover what the
//! gateway builds itself (translations, cuts at the hold, degraded answers,
//! errors) and what it relays from the fake upstreams.

use serde_json::{Value, json};

use crate::support::{Reply, TestApp, TestSetup, Upstream, run_sdk, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .provider("claude", "anthropic", Upstream::Anthropic)
        .set("providers.claude.api_key_env", "TEST_ANTHROPIC_KEY")
        .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
        .provider("responder", "openai", Upstream::FakeV1)
        .set("providers.responder.api_key_env", "TEST_PRIMARY_KEY")
        .set("providers.responder.responses", true)
        .route("gpt", &["primary/agent+usage-40-0-10"])
        .route("claude", &["claude/agent+usage-40-0-0-10"])
        .route("native", &["responder/agent+usage-40-0-0-10"])
        .route("runaway", &["primary/usage-40-0-400+chunks-40"])
        .route("embed", &["primary/usage-5-0-0"])
        .route("deg", &["primary/status-503"])
        .set("routes.deg.degraded_answer", "busy")
        .tier(
            "free",
            &["gpt", "claude", "native", "runaway", "embed", "deg"],
            1000,
            64,
        )
}

/// Every answer collected, each with the schema it must satisfy.
#[derive(Default)]
struct Answers(Vec<Value>);

impl Answers {
    fn add(&mut self, what: &str, schema: &str, value: &Value) {
        self.0
            .push(json!({"what": what, "schema": schema, "value": value}));
    }

    /// A whole answer, or its error in OpenAI's envelope.
    fn whole(&mut self, what: &str, schema: &str, reply: &Reply) {
        let schema = if reply.status == 200 {
            schema
        } else {
            "ErrorResponse"
        };
        self.add(&format!("{what} ({})", reply.status), schema, &reply.body);
    }

    /// Every `data:` event of a stream but `[DONE]`.
    fn stream(&mut self, what: &str, schema: &str, reply: &Reply) {
        assert_eq!(reply.status, 200, "{what}: {}", reply.raw);
        let mut seen = 0;
        for line in reply.raw.lines() {
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            if data.trim() == "[DONE]" {
                continue;
            }
            let event: Value = serde_json::from_str(data).unwrap();
            let kind = event["type"].as_str().unwrap_or("chunk").to_owned();
            self.add(&format!("{what} event {seen} {kind}"), schema, &event);
            seen += 1;
        }
        assert!(seen > 0, "{what}: {}", reply.raw);
    }
}

fn chat_body(model: &str, stream: bool, tools: bool) -> Value {
    let mut body = json!({"model": model, "stream": stream,
        "messages": [{"role": "user", "content": "Use the weather tool for Paris."}]});
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    if tools {
        body["tools"] = json!([{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}]);
    }
    body
}

fn responses_body(model: &str, stream: bool, tools: bool) -> Value {
    let mut body =
        json!({"model": model, "stream": stream, "input": "Use the weather tool for Paris."});
    if tools {
        body["tools"] = json!([{"type": "function", "name": "weather", "strict": false,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]);
    }
    body
}

async fn chat_door(app: &TestApp, key: &str, answers: &mut Answers) {
    for model in ["gpt", "claude"] {
        for tools in [false, true] {
            let what = format!("chat {model} tools {tools}");
            let reply = app.chat(key, &chat_body(model, false, tools)).await;
            answers.whole(&what, "CreateChatCompletionResponse", &reply);
            let reply = app.chat(key, &chat_body(model, true, tools)).await;
            answers.stream(&what, "CreateChatCompletionStreamResponse", &reply);
        }
    }
    let cut = app.chat(key, &chat_body("runaway", true, false)).await;
    answers.stream(
        "chat cut at the hold",
        "CreateChatCompletionStreamResponse",
        &cut,
    );
    let degraded = app.chat(key, &chat_body("deg", false, false)).await;
    answers.whole("chat degraded", "CreateChatCompletionResponse", &degraded);
    let degraded = app.chat(key, &chat_body("deg", true, false)).await;
    answers.stream(
        "chat degraded",
        "CreateChatCompletionStreamResponse",
        &degraded,
    );
    for (what, body) in [
        ("chat without messages", json!({"model": "gpt"})),
        (
            "chat of an unknown route",
            chat_body("nowhere", false, false),
        ),
    ] {
        answers.whole(
            what,
            "CreateChatCompletionResponse",
            &app.chat(key, &body).await,
        );
    }
    answers.whole(
        "chat with a bad key",
        "CreateChatCompletionResponse",
        &app.chat("tg_nope", &chat_body("gpt", false, false)).await,
    );
}

async fn responses_door(app: &TestApp, key: &str, answers: &mut Answers) {
    for model in ["gpt", "claude", "native"] {
        for tools in [false, true] {
            let what = format!("responses {model} tools {tools}");
            let body = responses_body(model, false, tools);
            let reply = app.post_json("/v1/responses", key, &body).await;
            answers.whole(&what, "Response", &reply);
            let body = responses_body(model, true, tools);
            let reply = app.post_json("/v1/responses", key, &body).await;
            answers.stream(&what, "ResponseStreamEvent", &reply);
        }
    }
    let cut = app
        .post_json(
            "/v1/responses",
            key,
            &responses_body("runaway", true, false),
        )
        .await;
    answers.stream("responses cut at the hold", "ResponseStreamEvent", &cut);
    let unkept = json!({"model": "gpt", "input": "x", "background": true});
    let reply = app.post_json("/v1/responses", key, &unkept).await;
    answers.whole("responses in the background", "Response", &reply);
}

#[actix_web::test]
async fn every_answer_and_event_of_the_openai_doors_fits_the_published_description() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut answers = Answers::default();
    chat_door(&app, &key, &mut answers).await;
    responses_door(&app, &key, &mut answers).await;
    let embedded = app
        .post_json(
            "/v1/embeddings",
            &key,
            &json!({"model": "embed", "input": ["a", "b"]}),
        )
        .await;
    answers.whole("embeddings", "CreateEmbeddingResponse", &embedded);
    let (_poor, poor_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.0000001"}))
        .await;
    let refused = app.chat(&poor_key, &chat_body("gpt", false, false)).await;
    answers.whole("chat over budget", "CreateChatCompletionResponse", &refused);

    let count = answers.0.len();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("answers.json");
    std::fs::write(&path, Value::Array(answers.0).to_string()).unwrap();
    let failures = run_sdk(
        "python3",
        "openapi_check.py",
        vec![path.display().to_string()],
    )
    .await;
    assert!(count > 80, "{count} answers");
    assert_eq!(failures, json!([]), "{failures:#}");
}
