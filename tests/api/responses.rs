//! `POST /v1/responses`: the Responses door, translated to the chat
//! pipeline and back, under the same ceiling.

use serde_json::{Value, json};

use crate::support::{TestSetup, run_sdk, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .route("quick", &["primary/usage-100-20-30+chunks-4"])
        .route("runaway", &["primary/usage-100-0-40+chunks-400"])
        .route("responses_cut3", &["primary/chunks-8+cut-after-3"])
        .tier("free", &["quick", "runaway", "responses_cut3"], 1000, 100)
}

#[actix_web::test]
async fn the_official_openai_python_sdk_creates_streams_and_uses_tools_through_responses() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let (_poor, poor_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.01"}))
        .await;
    let base = format!("{}/v1", app.base_url);
    let seen = run_sdk(
        "python3",
        "openai_responses.py",
        vec![base.clone(), key.clone(), poor_key.clone()],
    )
    .await;
    assert!(
        seen["plain"]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{seen}"
    );
    assert_eq!(seen["plain"]["status"], "completed");
    assert_eq!(
        (
            &seen["plain"]["input_tokens"],
            &seen["plain"]["output_tokens"],
            &seen["plain"]["cached"]
        ),
        (&json!(100), &json!(30), &json!(20))
    );
    assert_eq!(seen["tool"]["tools"], json!(["lookup"]));
    let expected: String = (0..4).map(tollgate::fake_upstream::chunk_text).collect();
    assert_eq!(seen["stream"]["text"], expected.as_str());
    assert_eq!(seen["stream"]["final_text"], expected.as_str());
    assert_eq!(seen["poor"], json!([402, "budget_exceeded"]));
    assert_eq!(seen["stateful"], "previous_response_id");

    // The tool round trip reached the upstream as chat messages.
    let captured = app.fake.stats.captured();
    let tool_call = captured
        .iter()
        .find(|c| c.body["tools"].is_array())
        .expect("the request with tools");
    let messages = tool_call.body["messages"].as_array().unwrap();
    assert_eq!(messages[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "a gate where a toll is paid"})
    );
    assert_eq!(tool_call.body["tools"][0]["function"]["name"], "lookup");

    // Every call is a ledger row under its door; the stream's completed usage is the row's.
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.api == "responses" && r.status == "ok")
    );
    assert_eq!(
        (rows[2].prompt_tokens, rows[2].completion_tokens),
        (100, 30)
    );
}

#[actix_web::test]
async fn a_responses_stream_that_ignores_its_limit_ends_incomplete_at_the_hold() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "runaway", "input": "go on", "max_output_tokens": 10, "stream": true}),
        )
        .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let kinds: Vec<&str> = reply
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{}", reply.raw);
    assert_eq!(kinds.last(), Some(&"response.incomplete"), "{}", reply.raw);
    let last = reply
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .unwrap();
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(last["response"]["usage"]["output_tokens"], 10);
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(
        (rows[0].api.as_str(), rows[0].completion_tokens),
        ("responses", 10)
    );
    assert!(rows[0].charged_nanos <= rows[0].reserved_nanos);
}

#[actix_web::test]
async fn the_official_openai_node_sdk_streams_chat_and_responses() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let base = format!("{}/v1", app.base_url);
    let seen = run_sdk(
        "node",
        "openai_streams.mjs",
        vec![base.clone(), key.clone()],
    )
    .await;
    let expected: String = (0..4).map(tollgate::fake_upstream::chunk_text).collect();
    assert_eq!(seen["chat"]["text"], expected.as_str(), "{seen}");
    assert_eq!(seen["chat"]["completion_tokens"], 30);
    assert_eq!(seen["responses"]["text"], expected.as_str(), "{seen}");
    assert_eq!(seen["responses"]["output_tokens"], 30);
    let rows = app.ledger_rows(&tenant).await;
    let doors: Vec<&str> = rows.iter().map(|r| r.api.as_str()).collect();
    assert_eq!(doors, ["chat", "responses"]);
}

/// The Responses door in front of an `anthropic` provider: Responses → chat →
/// Messages on the way out, and back, under the same hold.
fn anthropic_setup() -> TestSetup {
    TestSetup::new()
        .provider(
            "[providers.claude]\nkind = \"anthropic\"\nbase_url = \"@ANTHROPIC@\"\napi_key_env = \"TEST_ANTHROPIC_KEY\"",
        )
        .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
        .route("claude", &["claude/usage-40-0-0-12"])
        .route("claude-runaway", &["claude/words-400"])
        .price("claude/usage-40-0-0-12", "3", "0.3", "15")
        .price("claude/words-400", "3", "0.3", "15")
        .tier("free", &["claude", "claude-runaway"], 1000, 100)
}

#[actix_web::test]
async fn responses_reach_an_anthropic_provider_as_messages_and_come_back_as_a_response() {
    let app = spawn_app(anthropic_setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let body = json!({
        "model": "claude",
        "instructions": "Answer briefly.",
        "input": [{"role": "user", "content": "Say hello."}],
        "max_output_tokens": 64,
    });

    let reply = app.post_json("/v1/responses", &key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["object"], "response");
    assert_eq!(reply.body["status"], "completed");
    let text = reply.body["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(!text.is_empty(), "{}", reply.raw);
    assert_eq!(reply.body["usage"]["input_tokens"], 40);
    assert_eq!(reply.body["usage"]["output_tokens"], 12);
    let captured = app.anthropic.state.captured();
    let sent = &captured[0].body;
    assert_eq!(sent["max_tokens"], 64, "{sent}");
    assert_eq!(sent["system"], json!("Answer briefly."), "{sent}");
    assert_eq!(sent["messages"][0]["role"], "user", "{sent}");
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].api.as_str(),
            rows[0].prompt_tokens,
            rows[0].completion_tokens
        ),
        ("responses", 40, 12)
    );
    // 40 in at 3 + 12 out at 15, per 1M.
    assert_eq!(rows[0].charged_nanos, 300_000);
}

#[actix_web::test]
async fn a_runaway_anthropic_stream_through_responses_ends_incomplete_at_the_hold() {
    let app = spawn_app(anthropic_setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let body = json!({
        "model": "claude-runaway",
        "input": "go on",
        "max_output_tokens": 10,
        "stream": true,
    });

    let reply = app.post_json("/v1/responses", &key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let kinds: Vec<&str> = reply
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{}", reply.raw);
    assert_eq!(kinds.last(), Some(&"response.incomplete"), "{}", reply.raw);
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(rows[0].api.as_str(), "responses");
    assert!(rows[0].completion_tokens <= 10, "{:?}", rows[0]);
    assert!(
        rows[0].charged_nanos <= rows[0].reserved_nanos,
        "{:?}",
        rows[0]
    );
}

#[actix_web::test]
async fn a_budget_refusal_and_stateful_fields_get_openai_errors_at_the_responses_door() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.0000001"}))
        .await;
    let refused = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "quick", "input": "hi"}),
        )
        .await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert_eq!(
        refused.body["error"]["code"], "budget_exceeded",
        "{}",
        refused.raw
    );
    for (field, value) in [
        ("store", json!(true)),
        ("previous_response_id", json!("resp_1")),
    ] {
        let mut body = json!({"model": "quick", "input": "hi"});
        body[field] = value;
        let reply = app.post_json("/v1/responses", &key, &body).await;
        assert_eq!(reply.status, 400, "{field}: {}", reply.raw);
        assert_eq!(reply.body["error"]["param"], field, "{}", reply.raw);
        assert!(reply.error_message().contains("stateless"), "{}", reply.raw);
    }
}

#[actix_web::test]
async fn a_responses_stream_the_upstream_breaks_ends_with_an_error_event_and_a_partial_row() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "responses_cut3", "input": "go on", "stream": true}),
        )
        .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let kinds: Vec<&str> = reply
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds.last(), Some(&"error"), "{}", reply.raw);
    assert!(!kinds.contains(&"response.completed"), "{}", reply.raw);
    let last = reply
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .unwrap();
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["code"], "stream_interrupted", "{}", reply.raw);
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(
        (rows[0].api.as_str(), rows[0].status.as_str()),
        ("responses", "partial")
    );
    assert!(rows[0].charged_nanos > 0, "{:?}", rows[0]);
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
}
