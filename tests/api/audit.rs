//! Audit payloads: a tenant that opted in has each call's request and
//! response kept, keys redacted, cache hits and refusals included; a tenant
//! that did not has none; no payload reaches the logs; payloads leave after
//! `audit.retention_days`.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};
use tollgate::clock::ManualClock;
use tollgate::period::parse_instant;

use entity::audit_payload;

use crate::support::{TestApp, TestSetup, chat_body, process_logs, spawn_app};

const MARKER: &str = "zebra-audit-7";
const SECRET: &str = "sk-proj-abcdefghijklmnop1234";

fn asking(model: &str) -> Value {
    let mut body = chat_body(model);
    body["messages"][0]["content"] = json!(format!("{MARKER}: my key is {SECRET}"));
    body
}

async fn payloads(app: &TestApp, tenant: &str) -> Vec<audit_payload::Model> {
    audit_payload::Entity::find()
        .filter(audit_payload::Column::TenantId.eq(tenant))
        .order_by_asc(audit_payload::Column::Id)
        .all(app.gateway.directory.db())
        .await
        .unwrap()
}

/// The writer is off the request path: wait (boundedly) for `count` rows.
async fn wait_for(app: &TestApp, tenant: &str, count: usize) -> Vec<audit_payload::Model> {
    crate::support::wait_until(
        Duration::from_secs(5),
        &format!("{count} audit payloads of {tenant}"),
        async || {
            let rows = payloads(app, tenant).await;
            crate::support::done_if(rows.len() >= count, rows)
        },
    )
    .await
}

#[actix_web::test]
async fn an_opted_in_tenants_calls_are_kept_redacted_and_no_one_elses() {
    let clock = Arc::new(ManualClock::new(
        parse_instant("2026-12-03T00:00:00Z").unwrap(),
    ));
    let logs = process_logs();
    let app = spawn_app(
        TestSetup::new()
            .clock(clock.clone())
            .route("au-fast", &["primary/ok"])
            .route("au-stream", &["primary/chunks-3"])
            .route("au-cached", &["primary/ok"])
            .cached_route("au-cached", 60_000)
            .tier("free", &["au-fast", "au-stream", "au-cached"], 1000, 100)
            .set("ledger.retention_interval_ms", 0),
    )
    .await;
    let (audited, key) = app
        .tenant_with_key("free", json!({"audit_payloads": true}))
        .await;
    let (quiet, quiet_key) = app.tenant_with_key("free", json!({})).await;

    let plain = app.chat(&key, &asking("au-fast")).await;
    let mut stream = asking("au-stream");
    stream["stream"] = json!(true);
    let streamed = app.chat(&key, &stream).await;
    let miss = app.chat(&key, &asking("au-cached")).await;
    let hit = app.chat(&key, &asking("au-cached")).await;
    let refused = app.chat(&key, &asking("no-such-route")).await;
    assert_eq!(
        [plain.status, streamed.status, miss.status, hit.status],
        [200; 4]
    );
    assert_eq!(hit.header("x-tollgate-cache"), Some("hit"), "{}", hit.raw);
    assert!(refused.status >= 400, "{}", refused.raw);
    assert_eq!(app.chat(&quiet_key, &asking("au-fast")).await.status, 200);

    let rows = wait_for(&app, &audited, 5).await;
    assert_eq!(rows.len(), 5, "{rows:?}");
    for row in &rows {
        assert!(row.request_body.contains(MARKER), "{row:?}");
        assert!(row.request_body.contains("[redacted]"), "{row:?}");
        assert!(!row.request_body.contains(SECRET), "{row:?}");
        assert!(!row.truncated);
    }
    let request_id = plain.header("x-request-id").unwrap();
    assert_eq!(rows[0].request_id, request_id);
    assert_eq!(rows[0].response_body, plain.raw);
    assert!(rows[1].response_body.contains("data: "), "{:?}", rows[1]);
    assert!(rows[1].response_body.contains("[DONE]"), "{:?}", rows[1]);
    assert_eq!(rows[2].cache.as_deref(), Some("miss"));
    assert_eq!(rows[3].cache.as_deref(), Some("hit"));
    assert_eq!(rows[3].response_body, hit.raw);
    assert_eq!(rows[4].status, i32::from(refused.status));
    assert_eq!(rows[4].response_body, refused.raw);
    assert!(payloads(&app, &quiet).await.is_empty());

    // The logs saw these requests, and none of their text.
    let text = logs.text();
    assert!(text.contains(request_id), "the capture missed the requests");
    assert!(!text.contains(MARKER), "{text}");

    // Past their own retention (30 days by default) the payloads go.
    clock.advance_ms(31 * 86_400_000);
    let done = app.admin("POST", "/ledger/rollup", None).await;
    assert_eq!(done.status, 200, "{}", done.raw);
    assert_eq!(done.body["audit_payloads_deleted"], 5, "{}", done.raw);
    assert!(payloads(&app, &audited).await.is_empty());
}
