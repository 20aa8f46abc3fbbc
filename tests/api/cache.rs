use serde_json::json;

use crate::support::{TestSetup, chat_body, spawn_app};

#[actix_web::test]
async fn an_identical_request_is_answered_from_the_cache_free_and_still_recorded() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-100-20-30"])
            .tier("free", &["fast"], 1000, 100)
            .cached_route("fast", 60_000),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1"}))
        .await;
    let (other, other_key) = app.tenant_with_key("free", json!({})).await;

    let first = app.chat(&key, &chat_body("fast")).await;
    let second = app.chat(&key, &chat_body("fast")).await;
    let elsewhere = app.chat(&other_key, &chat_body("fast")).await;

    assert_eq!(first.header("x-tollgate-cache"), Some("miss"));
    assert_eq!(second.status, 200);
    assert_eq!(second.header("x-tollgate-cache"), Some("hit"));
    assert_eq!(second.header("x-tollgate-cost"), Some("0"));
    assert_eq!(
        second.body, first.body,
        "the cached answer is the upstream's, byte for byte"
    );
    assert_eq!(
        elsewhere.header("x-tollgate-cache"),
        Some("miss"),
        "keys include the tenant"
    );
    assert_eq!(app.fake.stats.requests(), 2);

    let rows = app.ledger_rows(&tenant).await;
    let summary: Vec<(&str, i64, i64)> = rows
        .iter()
        .map(|r| (r.status.as_str(), r.charged_nanos, r.reserved_nanos))
        .collect();
    assert_eq!(summary[1], ("cache_hit", 0, 0));
    assert_eq!(summary[0].0, "ok");
    assert_eq!(
        rows[1].completion_tokens, 30,
        "a hit is metered with the original usage"
    );
    assert_eq!(app.budget(&tenant).await["committed"], "0.0004008");
    assert_eq!(app.ledger_rows(&other).await.len(), 1);
    let metrics = app.get("/metrics", "").await.raw;
    assert!(
        metrics.contains("tollgate_cache_requests_total{route=\"fast\",result=\"hit\"}"),
        "{metrics}"
    );
}
