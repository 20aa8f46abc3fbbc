//! `POST /v1/responses`: the Responses door, translated to the chat
//! pipeline and back, under the same ceiling.

use serde_json::{Value, json};

use crate::support::{TestSetup, run_sdk, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .route("quick", &["primary/usage-100-20-30+chunks-4"])
        .route("runaway", &["primary/usage-100-0-40+chunks-400"])
        .tier("free", &["quick", "runaway"], 1000, 100)
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
