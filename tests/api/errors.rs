use serde_json::json;

use crate::support::{TestSetup, chat_body, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 1000, 100)
        .body_limit(2048)
}

#[actix_web::test]
async fn bad_bodies_get_400_naming_the_field() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let cases: [(&'static [u8], &str); 5] = [
        (b"{not json", "body"),
        (br#"{"messages":[{"role":"user","content":"x"}]}"#, "model"),
        (br#"{"model":"fast"}"#, "messages"),
        (
            br#"{"model":"fast","messages":[{"content":"x"}]}"#,
            "messages[0].role",
        ),
        (
            br#"{"model":"fast","messages":[{"role":"user","content":"x"}],"max_tokens":0}"#,
            "max_tokens",
        ),
    ];
    for (body, param) in cases {
        let reply = app.post_raw("/v1/chat/completions", &key, body).await;
        assert_eq!(reply.status, 400, "{param}: {}", reply.raw);
        assert_eq!(reply.body["error"]["type"], "invalid_request_error");
        assert_eq!(reply.body["error"]["param"], param, "{}", reply.raw);
    }
    assert_eq!(app.fake.stats.requests(), 0);
}

#[actix_web::test]
async fn an_unknown_model_gets_404_model_not_found() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("gpt-9")).await;

    assert_eq!(reply.status, 404);
    assert_eq!(reply.error_code(), "model_not_found");
    assert_eq!(reply.body["error"]["param"], "model");
}

#[actix_web::test]
async fn a_body_over_the_limit_gets_413_in_the_openai_envelope() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut body = chat_body("fast");
    body["messages"][0]["content"] = json!("x".repeat(4096));

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 413, "{}", reply.raw);
    assert_eq!(reply.error_code(), "payload_too_large");
}

#[actix_web::test]
async fn unknown_paths_and_bad_admin_json_answer_in_the_envelope() {
    let app = spawn_app(setup()).await;

    let missing = app.get("/v2/nothing", "x").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), "not_found");

    let bad = app
        .admin(
            "POST",
            "/tenants",
            Some(json!({"id": "x", "tier": "free", "colour": "red"})),
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.raw);
    assert_eq!(bad.body["error"]["type"], "invalid_request_error");
}

#[actix_web::test]
async fn health_and_readiness_answer() {
    let app = spawn_app(setup()).await;
    assert_eq!(app.get("/healthz", "").await.status, 200);
    let ready = app.get("/readyz", "").await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.body["database"], "ok");
    let metrics = app.get("/metrics", "").await;
    assert_eq!(metrics.status, 200);
}
