use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::support::{TestSetup, Upstream, spawn_app};

const CLAUDE: &str = "claude/usage-100-200-300-50";

fn setup() -> TestSetup {
    TestSetup::new()
        .provider("claude", "anthropic", Upstream::Anthropic)
        .set("providers.claude.api_key_env", "TEST_ANTHROPIC_KEY")
        .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
        .route("claude", &[CLAUDE])
        .route(
            "claude-refuses",
            &["claude/status-400", "secondary/never-after-claude"],
        )
        .price(CLAUDE, "3", "0.3", "15")
        .price_field(CLAUDE, "cache_write", "3.75")
        .tier("free", &["claude", "claude-refuses"], 1000, 100)
}

fn mixed_request() -> Value {
    let mut body: Value =
        serde_json::from_str(include_str!("../fixtures/anthropic/mixed_request.json")).unwrap();
    body["model"] = json!("claude");
    body
}

#[actix_web::test]
async fn a_mixed_request_reaches_anthropic_in_its_shape_with_cache_control_intact_and_is_priced_exactly()
 {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &mixed_request()).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["object"], "chat.completion");
    assert!(
        reply.body["choices"][0]["message"]["content"]
            .as_str()
            .is_some(),
        "{}",
        reply.raw
    );
    let captured = app.anthropic.state.captured();
    let sent = &captured[0];
    assert_eq!(sent.header("x-api-key"), Some("sk-ant-test"));
    assert!(sent.header("anthropic-version").is_some());
    assert_eq!(sent.body["model"], "usage-100-200-300-50");
    assert_eq!(
        sent.body["max_tokens"],
        mixed_request()["max_tokens"],
        "the caller's limit is sent"
    );
    assert_eq!(
        sent.body["system"][1]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(
        sent.body["messages"][0]["content"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
    assert!(
        sent.body["tools"][0].get("input_schema").is_some(),
        "{}",
        sent.body
    );
    // 100 uncached at 3 + 300 cache reads at 0.3 + 200 cache writes at 3.75 + 50 out at 15, per 1M.
    assert_eq!(reply.header("x-tollgate-cost"), Some("0.00189"));
    let row = &app.ledger_rows(&tenant).await[0];
    assert_eq!(
        (
            row.prompt_tokens,
            row.cached_tokens,
            row.cache_write_tokens,
            row.completion_tokens
        ),
        (600, 300, 200, 50)
    );
    assert_eq!(row.charged_nanos, 1_890_000);
}

#[actix_web::test]
async fn an_anthropic_stream_comes_back_as_openai_chunks() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut body = json!({"model": "claude", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Hello"}]});
    body["max_tokens"] = json!(64);

    let mut response = app
        .client
        .post(format!("{}/v1/chat/completions", app.base_url))
        .insert_header(("authorization", format!("Bearer {key}")))
        .send_json(&body)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut raw = Vec::new();
    while let Some(Ok(chunk)) = response.next().await {
        raw.extend_from_slice(&chunk);
    }
    let raw = String::from_utf8(raw).unwrap();

    let events: Vec<&str> = raw
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{raw}");
    let chunks: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_str(e).ok())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"),
        "{raw}"
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(!text.is_empty(), "{raw}");
    let usage = chunks
        .iter()
        .find(|c| c.get("usage").is_some_and(|u| !u.is_null()))
        .unwrap();
    assert_eq!(usage["usage"]["prompt_tokens"], 600);
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(
        (rows[0].status.as_str(), rows[0].usage_kind.as_str()),
        ("ok", "reported")
    );
    assert_eq!(rows[0].charged_nanos, 1_890_000);
    assert_eq!(app.anthropic.state.captured()[0].body["stream"], true);
}

#[actix_web::test]
async fn an_anthropic_refusal_comes_back_in_openais_envelope_without_failover() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app
        .chat(
            &key,
            &json!({"model": "claude-refuses", "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;

    assert_eq!(reply.status, 400, "{}", reply.raw);
    assert!(
        reply.body["error"]["message"].as_str().is_some(),
        "{}",
        reply.raw
    );
    assert_eq!(reply.body["error"]["type"], "invalid_request_error");
    assert_eq!(app.fake.stats.requests_for_model("never-after-claude"), 0);
}
