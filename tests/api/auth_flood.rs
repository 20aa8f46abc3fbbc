//! A flood of well-formed unknown keys costs almost no database work: each
//! unknown id is looked up at most once while it is remembered, and real
//! calls made meanwhile are served and metered.

use std::sync::Arc;

use futures_util::future::join_all;
use sea_orm::ActiveValue::Set;
use serde_json::json;

use tollgate::auth::hash_secret;
use tollgate::clock::ManualClock;
use tollgate::config::Secret;
use tollgate::directory::{AuthError, KeyRecord, repo};
use tollgate::ids::{KeyId, TenantId};

use crate::support::{TestSetup, chat_body, now_ms, spawn_app};

const FLOOD: usize = 2_000;
const DISTINCT_IDS: usize = 200;
/// Requests in flight at once: unknown keys, and one real call per batch.
const BATCH: usize = 50;
const SECRET: &str = "floodfloodfloodfloodfloodfloodfloodflood";
/// `sync_interval_ms` of the test configuration: how long an unknown id is remembered.
const UNKNOWN_TTL_MS: u64 = 100;

fn setup(clock: Arc<ManualClock>) -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 100_000, 100)
        .clock(clock)
}

/// A well-formed key (`tg_` + 12-character id + `_` + 40-character secret) no one issued.
fn unknown_key(n: usize) -> String {
    format!("tg_flood{:07}_{SECRET}", n % DISTINCT_IDS)
}

#[actix_web::test]
async fn a_flood_of_unknown_keys_gets_401_without_a_query_each_while_real_calls_are_metered() {
    // The clock stands still, so no remembered id expires during the flood.
    let app = spawn_app(setup(Arc::new(ManualClock::new(now_ms())))).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let before = app.gateway.directory.key_lookups();

    let app = &app;
    let body = chat_body("fast");
    let body = &body;
    let mut real_calls = 0;
    for batch in 0..FLOOD / BATCH {
        let unknown = (0..BATCH - 1).map(|i| {
            let token = unknown_key(batch * BATCH + i);
            async move { app.chat(&token, body).await }
        });
        let (refused, real) = tokio::join!(join_all(unknown), app.chat(&key, body));
        assert_eq!(real.status, 200, "{}", real.raw);
        real_calls += 1;
        for reply in refused {
            assert_eq!(reply.status, 401, "{}", reply.raw);
            assert_eq!(reply.error_code(), "invalid_api_key", "{}", reply.raw);
            assert_eq!(reply.body["error"]["type"], "invalid_request_error");
            assert!(!reply.error_message().is_empty(), "{}", reply.raw);
        }
    }

    let lookups = app.gateway.directory.key_lookups() - before;
    eprintln!(
        "{} unknown-key requests over {DISTINCT_IDS} ids: {lookups} key lookups hit the database",
        FLOOD / BATCH * (BATCH - 1)
    );
    assert!(
        lookups <= DISTINCT_IDS as u64,
        "{lookups} database key lookups for {DISTINCT_IDS} distinct unknown ids"
    );
    assert_eq!(app.ledger_rows(&tenant).await.len(), real_calls);
    assert_eq!(app.fake.stats.requests(), real_calls as u64);
}

#[actix_web::test]
async fn an_id_refused_as_unknown_works_at_once_when_issued_here_and_after_a_sync_interval_when_issued_elsewhere()
 {
    let clock = Arc::new(ManualClock::new(now_ms()));
    let app = spawn_app(setup(clock.clone())).await;
    let (tenant, _key) = app.tenant_with_key("free", json!({})).await;
    let directory = &app.gateway.directory;
    let secret_hash = hash_secret(&Secret::new("test-pepper"), SECRET);

    // Issued through this process: `put_key` forgets that the id was unknown.
    let here = format!("tg_issuedhere01_{SECRET}");
    assert_eq!(
        directory.authenticate(&here).await.err(),
        Some(AuthError::Unknown)
    );
    directory.put_key(KeyRecord {
        id: KeyId::new("issuedhere01"),
        tenant: TenantId::new(tenant.as_str()),
        secret_hash: secret_hash.clone(),
        monthly_budget: None,
        expires_at_ms: None,
        on_credits: false,
        budget_period: tollgate::calendar::Period::Month,
        max_in_flight: None,
    });
    assert!(directory.authenticate(&here).await.is_ok());

    // Issued by another replica whose clock is behind: the row is stamped
    // before this replica's sync watermark, so only a lookup can find it.
    let elsewhere = format!("tg_issuedthere1_{SECRET}");
    assert_eq!(
        directory.authenticate(&elsewhere).await.err(),
        Some(AuthError::Unknown)
    );
    let lookups = directory.key_lookups();
    repo::insert_key(
        directory.db(),
        entity::api_key::ActiveModel {
            id: Set("issuedthere1".to_owned()),
            tenant_id: Set(tenant.clone()),
            name: Set(None),
            secret_hash: Set(secret_hash),
            created_at_ms: Set(0),
            revoked_at_ms: Set(None),
            monthly_budget_nanos: Set(None),
            expires_at_ms: Set(None),
            on_credits: Set(false),
            budget_period: Set(None),
            max_in_flight: Set(None),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        directory.authenticate(&elsewhere).await.err(),
        Some(AuthError::Unknown),
        "remembered as unknown for a sync interval"
    );
    assert_eq!(directory.key_lookups(), lookups, "without a query");
    clock.advance_ms(UNKNOWN_TTL_MS);
    assert!(directory.authenticate(&elsewhere).await.is_ok());
    assert_eq!(directory.key_lookups(), lookups + 1);
}

#[actix_web::test]
async fn a_key_issued_elsewhere_is_known_after_a_sync_without_a_lookup() {
    let app = spawn_app(setup(Arc::new(ManualClock::new(now_ms())))).await;
    let (tenant, _key) = app.tenant_with_key("free", json!({})).await;
    let directory = &app.gateway.directory;
    repo::insert_key(
        directory.db(),
        entity::api_key::ActiveModel {
            id: Set("syncedkey001".to_owned()),
            tenant_id: Set(tenant.clone()),
            name: Set(None),
            secret_hash: Set(hash_secret(&Secret::new("test-pepper"), SECRET)),
            created_at_ms: Set(i64::try_from(now_ms()).unwrap()),
            revoked_at_ms: Set(None),
            monthly_budget_nanos: Set(None),
            expires_at_ms: Set(None),
            on_credits: Set(false),
            budget_period: Set(None),
            max_in_flight: Set(None),
        },
    )
    .await
    .unwrap();
    directory.sync().await.unwrap();
    let lookups = directory.key_lookups();
    let token = format!("tg_syncedkey001_{SECRET}");
    assert!(directory.authenticate(&token).await.is_ok());
    assert_eq!(directory.key_lookups(), lookups, "known from the sync");
}
