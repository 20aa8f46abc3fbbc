//! `POST /v1/embeddings`: the same governance as chat, input-only holds.

use serde_json::{Value, json};

use crate::support::{TestSetup, Upstream, chat_body, run_sdk, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        // The fake reports 50 prompt tokens for this model: 50 × 2 per 1M = 0.0001.
        .route("embed", &["primary/usage-50-0-0"])
        .route("embed-failover", &["primary/status-503", "secondary/usage-50-0-0"])
        .route("fast", &["primary/usage-10-0-5"])
        .provider("claude", "anthropic", Upstream::Anthropic)
        .route("embed-claude", &["claude/claude-embeds-nothing"])
        .route("embed-only", &["primary/usage-50-0-0+input-only"])
        .input_price("primary/usage-50-0-0+input-only", "2", "2")
        .tier(
            "free",
            &["embed", "embed-failover", "fast", "embed-claude", "embed-only"],
            1000,
            100,
        )
}

async fn embed(app: &crate::support::TestApp, key: &str, body: &Value) -> crate::support::Reply {
    app.post_json("/v1/embeddings", key, body).await
}

#[actix_web::test]
async fn an_embeddings_call_is_held_charged_and_recorded_under_its_door() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = embed(
        &app,
        &key,
        &json!({"model": "embed", "input": ["one", "two"], "dimensions": 4}),
    )
    .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(
        reply.body["data"][0]["embedding"].as_array().unwrap().len(),
        4
    );
    assert_eq!(reply.header("x-tollgate-cost"), Some("0.0001"));
    let sent = &app.fake.stats.captured()[0];
    assert!(sent.path.ends_with("/embeddings"), "{}", sent.path);
    assert_eq!(sent.body["model"], "usage-50-0-0");
    assert_eq!(sent.body["dimensions"], 4);
    assert!(sent.body.get("max_tokens").is_none(), "{}", sent.body);
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].api.as_str(), rows[0].status.as_str()),
        ("embeddings", "ok")
    );
    assert_eq!((rows[0].prompt_tokens, rows[0].completion_tokens), (50, 0));
    assert_eq!(rows[0].charged_nanos, 100_000);
    // The hold is the input alone (a few tokens at 2 per 1M): the tier's 100
    // default output tokens at 8 per 1M would have added 0.0008.
    assert!(
        (1..100_000).contains(&rows[0].reserved_nanos),
        "{:?}",
        rows[0]
    );
}

#[actix_web::test]
async fn an_embeddings_call_past_the_budget_is_402_and_never_leaves() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.000000001"}))
        .await;

    let reply = embed(
        &app,
        &key,
        &json!({"model": "embed", "input": "some text to embed"}),
    )
    .await;

    assert_eq!(reply.status, 402, "{}", reply.raw);
    assert_eq!(reply.error_code(), "budget_exceeded");
    assert_eq!(app.fake.stats.requests(), 0);
}

#[actix_web::test]
async fn embeddings_fail_over_and_bad_input_or_an_anthropic_target_is_400() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = embed(
        &app,
        &key,
        &json!({"model": "embed-failover", "input": "x"}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-provider"), Some("secondary"));

    let bad = embed(&app, &key, &json!({"model": "embed", "input": []})).await;
    assert_eq!(bad.status, 400, "{}", bad.raw);
    assert_eq!(bad.body["error"]["param"], "input");

    let claude = embed(&app, &key, &json!({"model": "embed-claude", "input": "x"})).await;
    assert_eq!(claude.status, 400, "{}", claude.raw);
    assert!(
        claude.error_message().contains("no embeddings API"),
        "{}",
        claude.raw
    );

    // Spend by door: the chat call and the embeddings calls apart.
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    app.flush_ledger().await;
    let spend = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/spend?group_by=api"),
            None,
        )
        .await;
    assert_eq!(spend.status, 200, "{}", spend.raw);
    let keys: Vec<&str> = spend.body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 2, "{}", spend.raw);
    assert!(
        keys.contains(&"chat") && keys.contains(&"embeddings"),
        "{keys:?}"
    );
}

#[actix_web::test]
async fn the_official_openai_python_sdk_creates_embeddings_and_gets_the_402() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let (_poor, poor_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.000000001"}))
        .await;
    let base = format!("{}/v1", app.base_url);
    let seen = run_sdk(
        "python3",
        "openai_embeddings.py",
        vec![base.clone(), key.clone(), poor_key.clone()],
    )
    .await;
    assert_eq!(seen["vectors"], 2, "{seen}");
    // The SDK asks for base64 and decodes it: the fake's default 8 dimensions.
    assert_eq!(seen["dimensions"], 8, "{seen}");
    assert_eq!(seen["prompt_tokens"], 50);
    assert_eq!(seen["cost"], "0.0001");
    assert_eq!(seen["poor"], json!([402, "budget_exceeded"]));
}

/// The door decides how a body is counted, never its keys: an embeddings
/// body with chat fields (`"messages": null` once made it a 3-token chat,
/// charged 37 times its hold) is refused, naming the field, and nothing is sent.
#[actix_web::test]
async fn an_embeddings_body_with_chat_fields_is_refused_and_nothing_leaves() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.001"}))
        .await;
    let long = "words that cost many tokens to embed ".repeat(2_000);

    let reply = embed(
        &app,
        &key,
        &json!({"model": "embed", "input": long, "messages": null}),
    )
    .await;

    assert_eq!(reply.status, 400, "{}", reply.raw);
    assert_eq!(reply.body["error"]["param"], "messages");
    assert_eq!(app.fake.stats.requests(), 0);
    assert!(app.ledger_rows(&tenant).await.is_empty());
}

/// An embeddings model's price entry needs no output price: it generates
/// nothing. A request that would generate through it is refused, naming the
/// target, before anything is held.
#[actix_web::test]
async fn an_embeddings_model_needs_no_output_price_and_refuses_to_generate() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let reply = embed(&app, &key, &json!({"model": "embed-only", "input": "one"})).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-cost"), Some("0.0001"));

    let refused = app.chat(&key, &chat_body("embed-only")).await;
    assert_eq!(refused.status, 400, "{}", refused.raw);
    assert_eq!(refused.body["error"]["param"], "model");
    assert!(
        refused.error_message().contains("serves embeddings only"),
        "{}",
        refused.raw
    );
    assert_eq!(app.ledger_rows(&tenant).await.len(), 1);
}
