//! The same migrations on an empty SQLite and an empty PostgreSQL (both in
//! every run, whatever TOLLGATE_TEST_DATABASE selects), and ledger rows written
//! through the gateway's repo read back unchanged and summed alike on each.

use migration::{Migrator, MigratorTrait, SchemaManager};
use sea_orm::{ActiveValue::Set, DatabaseConnection, TryIntoModel};

use tollgate::ids::{EventId, KeyId, RequestId, TenantId};
use tollgate::ledger::repo::{self, GroupBy, SpendFilter};
use tollgate::ledger::{AttemptStatus, UsageEvent, UsageKind};
use tollgate::money::Nanos;
use tollgate::pricing::Usage;

use crate::support::{Backend, unique_tenant};

#[actix_web::test]
async fn migrations_apply_on_an_empty_sqlite_and_ledger_rows_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let url = Backend::Sqlite.fresh_database_url(dir.path());
    assert!(url.starts_with("sqlite://"), "{url}");
    migrate_and_round_trip(&url).await;
}

#[actix_web::test]
async fn migrations_apply_on_an_empty_postgresql_and_ledger_rows_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let url = Backend::Postgres.fresh_database_url(dir.path());
    assert!(url.starts_with("postgres://"), "{url}");
    migrate_and_round_trip(&url).await;
}

async fn migrate_and_round_trip(url: &str) {
    let db = tollgate::storage::connect(url, 2).await.unwrap();
    let all = Migrator::migrations().len();
    assert_eq!(
        Migrator::get_pending_migrations(&db).await.unwrap().len(),
        all
    );

    tollgate::storage::migrate(&db).await.unwrap();
    assert_eq!(
        Migrator::get_applied_migrations(&db).await.unwrap().len(),
        all
    );
    let schema = SchemaManager::new(&db);
    for table in ["tenants", "api_keys", "usage", "feature_budgets"] {
        assert!(schema.has_table(table).await.unwrap(), "{table} on {url}");
    }
    // A restart migrates again: nothing left to do, nothing fails.
    tollgate::storage::migrate(&db).await.unwrap();
    assert!(
        Migrator::get_pending_migrations(&db)
            .await
            .unwrap()
            .is_empty()
    );

    round_trip(&db, url).await;
    large_batch(&db, url).await;
}

async fn round_trip(db: &DatabaseConnection, url: &str) {
    let tenant = unique_tenant("storage");
    let failed = event(&tenant, 1, AttemptStatus::UpstreamError, 5);
    let served = UsageEvent {
        event_id: EventId::generate(),
        attempt: 2,
        status: AttemptStatus::FallbackOk,
        upstream_status: Some(200),
        usage_kind: UsageKind::Reported,
        ttft_ms: Some(u64::from(u32::MAX) + 7),
        error: None,
        charged: Nanos::from_db(1_234_567_890_123),
        ..failed.clone()
    };
    let events = [failed, served];
    repo::insert_batch(db, &events).await.unwrap();
    // A replayed batch (same event ids) inserts nothing.
    repo::insert_batch(db, &events).await.unwrap();

    let rows = repo::tenant_rows(db, &TenantId::new(tenant.as_str()))
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "{url}");
    for (row, event) in rows.iter().zip(&events) {
        let mut expected = event.to_active_model();
        expected.id = Set(row.id);
        assert_eq!(*row, expected.try_into_model().unwrap(), "{url}");
    }

    let period = &rows[0].period;
    let committed = repo::committed_in_period(db, &TenantId::new(tenant.as_str()), period)
        .await
        .unwrap();
    assert_eq!(committed, Nanos::from_db(1_234_567_890_123 + 5), "{url}");
    let filter = SpendFilter {
        tenant: Some(TenantId::new(tenant.as_str())),
        ..SpendFilter::default()
    };
    let spend = repo::spend(db, &filter, GroupBy::Feature).await.unwrap();
    assert_eq!(spend.len(), 1, "{url}");
    let row = &spend[0];
    assert_eq!(row.key, "résumé-search", "{url}");
    assert_eq!(
        (
            row.requests,
            row.attempts,
            row.fallbacks,
            row.failed_attempts
        ),
        (1, 2, 1, 1),
        "{url}"
    );
    assert_eq!(
        (row.prompt_tokens, row.cached_tokens, row.completion_tokens),
        (2 * 3_000_000_000, 2 * 1_000, 2 * 77),
        "{url}"
    );
    assert_eq!(row.cost, committed, "{url}");
}

/// A flush larger than one statement can bind (a usage row binds 27 parameters;
/// PostgreSQL allows 65,535 per statement, SQLite 32,766) is written whole.
async fn large_batch(db: &DatabaseConnection, url: &str) {
    let tenant = unique_tenant("storage-large");
    let events: Vec<UsageEvent> = (0..3_000)
        .map(|_| event(&tenant, 1, AttemptStatus::Ok, 7))
        .collect();
    repo::insert_batch(db, &events).await.unwrap();
    repo::insert_batch(db, &events).await.unwrap();
    let rows = repo::tenant_rows(db, &TenantId::new(tenant.as_str()))
        .await
        .unwrap();
    assert_eq!(rows.len(), events.len(), "{url}");
}

/// An attempt with every column set, values past 32 bits and non-ASCII text.
fn event(tenant: &str, attempt: u32, status: AttemptStatus, charged: i64) -> UsageEvent {
    UsageEvent {
        event_id: EventId::generate(),
        request_id: RequestId::generate(),
        client_request_id: Some("client-ü-1".to_owned()),
        trace_id: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned()),
        tenant: TenantId::new(tenant),
        key: KeyId::new("key-1"),
        feature: "résumé-search".to_owned(),
        route: "fast".to_owned(),
        provider: "primary".to_owned(),
        model: "gpt-4o-mini".to_owned(),
        attempt,
        status,
        upstream_status: Some(503),
        usage: Usage {
            prompt_tokens: 3_000_000_000,
            cached_tokens: 1_000,
            cache_write_tokens: 12,
            completion_tokens: 77,
        },
        usage_kind: UsageKind::Estimated,
        reserved: Nanos::from_db(9_000_000_000_000),
        charged: Nanos::from_db(charged),
        price_version: "2026-11-30".to_owned(),
        latency_ms: 4_321,
        ttft_ms: None,
        error: Some("upstream said: «overloaded»".to_owned()),
        // 2026-11-30T12:00:00Z
        created_at_ms: 1_796_040_000_000,
    }
}
