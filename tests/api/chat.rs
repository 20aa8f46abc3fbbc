use serde_json::json;

use crate::support::{TestSetup, chat_body, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .route(
            "fast",
            &["primary/usage-3000-2000-400", "secondary/fallback-unused"],
        )
        .route("deepseek", &["primary/deepseek-3000-2000-400"])
        .tier("free", &["fast", "deepseek"], 1000, 100)
}

#[actix_web::test]
async fn primary_route_is_billed_exactly_with_cached_input_priced_apart() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "10"}))
        .await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-cost"), Some("0.00528"));
    assert_eq!(reply.header("x-tollgate-provider"), Some("primary"));
    assert_eq!(
        reply.header("x-tollgate-model"),
        Some("usage-3000-2000-400")
    );
    assert_eq!(reply.header("x-tollgate-budget-remaining"), Some("9.99472"));
    assert!(
        reply
            .header("x-request-id")
            .is_some_and(|id| !id.is_empty())
    );
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.status, "ok");
    assert_eq!(
        (row.prompt_tokens, row.cached_tokens, row.completion_tokens),
        (3000, 2000, 400)
    );
    assert_eq!(row.charged_nanos, 5_280_000);
    assert_eq!(row.usage_kind, "reported");
    assert_eq!(row.feature, "unknown");
    assert!(row.reserved_nanos > 0);
    assert_eq!(app.budget(&tenant).await["committed"], "0.00528");
}

#[actix_web::test]
async fn deepseek_cache_hit_tokens_are_priced_as_cached_input() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("deepseek")).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-cost"), Some("0.00528"));
    assert_eq!(app.ledger_rows(&tenant).await[0].cached_tokens, 2000);
}

#[actix_web::test]
async fn the_body_passes_through_with_only_model_and_max_tokens_set() {
    // A field no table knows leaves only where the route forwards unknown fields.
    let app = spawn_app(setup().set("routes.fast.forward_unknown_fields", true)).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let body = json!({
        "model": "fast",
        "messages": [{"role": "user", "content": "What's the weather?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        "response_format": {"type": "json_object"},
        "temperature": 0.25,
        "x_vendor_flag": {"keep": true}
    });

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let captured = app.fake.stats.captured();
    let sent = &captured.last().unwrap().body;
    assert_eq!(sent["model"], "usage-3000-2000-400");
    assert_eq!(sent["max_tokens"], 100, "the tier default is always sent");
    for field in [
        "messages",
        "tools",
        "response_format",
        "temperature",
        "x_vendor_flag",
    ] {
        assert_eq!(sent[field], body[field], "{field}");
    }
    let upstream_body = app.fake.stats.captured().len();
    assert_eq!(upstream_body, 1);
}

#[actix_web::test]
async fn a_field_no_table_knows_is_refused_naming_it_and_the_route_setting() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut body = chat_body("fast");
    body["x_vendor_flag"] = json!({"keep": true});

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 400, "{}", reply.raw);
    assert_eq!(reply.body["error"]["param"], "x_vendor_flag");
    assert!(
        reply
            .error_message()
            .contains("forward_unknown_fields = true"),
        "{}",
        reply.raw
    );
    assert_eq!(app.fake.stats.requests(), 0);
    assert!(app.ledger_rows(&tenant).await.is_empty());
    let metrics = app.get("/metrics", "").await.raw;
    assert!(
        metrics.contains(r#"tollgate_field_refusals_total{door="chat",field="unknown"}"#),
        "{metrics}"
    );
}

/// Tiers and retention the caller picks are billed above the route's prices:
/// refused, naming the field; a cheaper tier passes at the standard price.
#[actix_web::test]
async fn premium_tiers_are_refused_and_flex_passes() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    for (field, value) in [
        ("service_tier", "priority"),
        ("service_tier", "scale"),
        ("prompt_cache_retention", "24h"),
    ] {
        let mut body = chat_body("fast");
        body[field] = json!(value);
        let reply = app.chat(&key, &body).await;
        assert_eq!(reply.status, 400, "{field}={value}: {}", reply.raw);
        assert_eq!(reply.body["error"]["param"], field);
    }
    assert_eq!(app.fake.stats.requests(), 0);
    let mut body = chat_body("fast");
    body["service_tier"] = json!("flex");
    assert_eq!(app.chat(&key, &body).await.status, 200);
}

#[actix_web::test]
async fn the_callers_max_tokens_and_request_id_win() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut body = chat_body("fast");
    body["max_completion_tokens"] = json!(7);

    let reply = app
        .chat_with(
            &key,
            &body,
            &[
                ("x-request-id", "client-abc"),
                ("x-tollgate-feature", "search"),
            ],
        )
        .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-request-id"), Some("client-abc"));
    let sent = &app.fake.stats.captured()[0].body;
    assert_eq!(sent["max_completion_tokens"], 7);
    let row = &app.ledger_rows(&tenant).await[0];
    assert_eq!(row.client_request_id.as_deref(), Some("client-abc"));
    assert_ne!(row.request_id, "client-abc");
    assert_eq!(row.feature, "search");
}

#[actix_web::test]
async fn traceparent_is_recorded_and_propagated() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    let reply = app
        .chat_with(&key, &chat_body("fast"), &[("traceparent", traceparent)])
        .await;

    assert_eq!(reply.status, 200);
    assert_eq!(
        app.fake.stats.captured()[0].header("traceparent"),
        Some(traceparent)
    );
    let row = &app.ledger_rows(&tenant).await[0];
    assert_eq!(
        row.trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
}

#[actix_web::test]
async fn models_lists_the_routes_the_key_may_use() {
    let app = spawn_app(setup().route("smart", &["primary/smart-model"]).tier(
        "pro",
        &["fast", "smart"],
        10,
        10,
    ))
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.get("/v1/models", &key).await;

    assert_eq!(reply.status, 200);
    let ids: Vec<&str> = reply.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["fast", "deepseek"]);
    assert_eq!(reply.body["object"], "list");
}
