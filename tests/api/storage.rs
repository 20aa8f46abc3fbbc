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

use std::sync::Arc;

use tollgate::app::{Application, BuildOptions};
use tollgate::clock::SystemClock;
use tollgate::config::Config;

use crate::support::{Backend, TestSetup, unique_tenant, write_config};

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
    for table in [
        "tenants",
        "api_keys",
        "usage",
        "feature_budgets",
        "usage_totals",
    ] {
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
    running_totals(&db, url).await;
    end_user_totals(&db).await;
    backfilled_totals(url).await;
}

/// An end user's totals are per local day of the billing time zone and over
/// their lifetime; a week sums its days; days no period can include are pruned.
async fn end_user_totals(db: &DatabaseConnection) {
    use tollgate::calendar::{Calendar, Period};
    let tenant = unique_tenant("storage-end-users");
    let shanghai = Calendar::named("Asia/Shanghai").unwrap();
    let ms = |text: &str| tollgate::period::parse_instant(text).unwrap();
    let spent = |charged: i64, at: &str| UsageEvent {
        end_user: Some("u-1".to_owned()),
        created_at_ms: ms(at),
        ..event(&tenant, 1, AttemptStatus::Ok, charged)
    };
    let events = vec![
        // 23:30 on Monday 12-07 in Shanghai (15:30 UTC).
        spent(1_000, "2026-12-07T15:30:00Z"),
        // 00:30 on Tuesday 12-08 in Shanghai, 12-07 in UTC.
        spent(2_000, "2026-12-07T16:30:00Z"),
        // Two months before: outside any period that can still matter.
        spent(4_000, "2026-10-01T04:00:00Z"),
    ];
    repo::insert_batch(db, &events, &shanghai).await.unwrap();
    let tenant_id = TenantId::new(tenant.as_str());
    let committed = |period, at: &str| {
        let window = shanghai.window(period, ms(at));
        let tenant_id = tenant_id.clone();
        async move {
            repo::end_user_committed(db, &tenant_id, "u-1", &window)
                .await
                .unwrap()
                .get()
        }
    };
    assert_eq!(committed(Period::Day, "2026-12-07T15:00:00Z").await, 1_000);
    assert_eq!(committed(Period::Day, "2026-12-08T01:00:00Z").await, 2_000);
    assert_eq!(committed(Period::Week, "2026-12-09T01:00:00Z").await, 3_000);
    assert_eq!(
        committed(Period::Lifetime, "2026-12-09T01:00:00Z").await,
        7_000
    );

    // Each event's tokens (prompt and completion) count on its local day.
    let tokens_on = |day: &'static str| {
        let tenant_id = tenant_id.clone();
        async move {
            repo::end_user_tokens_on(db, &tenant_id, "u-1", day)
                .await
                .unwrap()
        }
    };
    assert_eq!(tokens_on("2026-12-08").await, 3_000_000_077);
    assert_eq!(tokens_on("2026-12-06").await, 0);

    // October's day rows go: the end user's, and its key's and feature's.
    let deleted = repo::prune_end_user_days(db, "2026-11-01").await.unwrap();
    assert_eq!(deleted, 3);
    assert_eq!(committed(Period::Week, "2026-12-09T01:00:00Z").await, 3_000);
    assert_eq!(committed(Period::Month, "2026-10-15T00:00:00Z").await, 0);
    assert_eq!(
        committed(Period::Lifetime, "2026-12-09T01:00:00Z").await,
        7_000
    );
}

/// `usage_totals` moves with the rows: replays add nothing, a batch of old and
/// new rows adds only the new ones, and every kind reads back as the rows sum.
/// Writes a tenant's rows over two months (and another tenant's), two
/// batches of them twice: the tenant.
async fn write_totals_fixture(db: &DatabaseConnection) -> String {
    let tenant = unique_tenant("storage-totals");
    let other = unique_tenant("storage-totals-other");
    let day_ms = 86_400_000;
    let at = |event: UsageEvent, key: &str, feature: &str, created_at_ms: u64| UsageEvent {
        key: KeyId::new(key),
        feature: feature.to_owned(),
        end_user: None,
        created_at_ms,
        ..event
    };
    let today = 1_796_040_000_000; // 2026-11-30
    let first = vec![
        at(event(&tenant, 1, AttemptStatus::Ok, 100), "k1", "a", today),
        at(event(&tenant, 1, AttemptStatus::Ok, 20), "k2", "a", today),
        at(
            event(&tenant, 1, AttemptStatus::Ok, 3),
            "k1",
            "b",
            today - day_ms,
        ),
        // December: another month, another day.
        at(
            event(&tenant, 1, AttemptStatus::Ok, 4_000),
            "k1",
            "a",
            today + day_ms,
        ),
        at(
            event(&other, 1, AttemptStatus::Ok, 50_000),
            "k1",
            "a",
            today,
        ),
    ];
    repo::insert_batch(db, &first, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    repo::insert_batch(db, &first, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    let mut second = first[..2].to_vec();
    second.push(at(
        event(&tenant, 2, AttemptStatus::Ok, 600_000),
        "k2",
        "b",
        today,
    ));
    repo::insert_batch(db, &second, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    tenant
}

async fn running_totals(db: &DatabaseConnection, url: &str) {
    let tenant = write_totals_fixture(db).await;
    let id = TenantId::new(tenant.as_str());
    let totals = repo::period_totals(
        db,
        &id,
        &tollgate::calendar::Calendar::utc(),
        instant_ms("2026-11-30T12:00:00Z"),
    )
    .await
    .unwrap();
    let tokens = 3_000_000_000 + 77;
    assert_eq!(totals.committed, Nanos::from_db(600_123), "{url}");
    assert_eq!(
        totals.committed,
        repo::committed_in_period(db, &id, "2026-11").await.unwrap(),
        "{url}"
    );
    let keys: Vec<(String, Nanos)> = sorted(totals.keys.iter().map(|(k, v)| (k.to_string(), *v)));
    assert_eq!(
        keys,
        [
            ("k1".to_owned(), Nanos::from_db(103)),
            ("k2".to_owned(), Nanos::from_db(600_020))
        ],
        "{url}"
    );
    let features: Vec<(String, Nanos)> = sorted(totals.features.into_iter());
    assert_eq!(
        features,
        [
            ("a".to_owned(), Nanos::from_db(120)),
            ("b".to_owned(), Nanos::from_db(600_003))
        ],
        "{url}"
    );
    assert_eq!(totals.tokens_today, 3 * tokens, "{url}");
    assert_eq!(totals.tokens_this_month, 4 * tokens, "{url}");
    // 2026-11-30 is a Monday: its ISO week holds it and 1 December, not the
    // Sunday before; the lifetime every row.
    assert_eq!(totals.day.tenant, Nanos::from_db(600_120), "{url}");
    assert_eq!(totals.week.tenant, Nanos::from_db(604_120), "{url}");
    assert_eq!(totals.lifetime.tenant, Nanos::from_db(604_123), "{url}");
    assert_eq!(totals.day.keys[&KeyId::new("k2")], Nanos::from_db(600_020));
    assert_eq!(totals.day.features["b"], Nanos::from_db(600_000), "{url}");
    assert_eq!(totals.lifetime.features["b"], Nanos::from_db(600_003));
    let december = repo::period_totals(
        db,
        &id,
        &tollgate::calendar::Calendar::utc(),
        instant_ms("2026-12-01T12:00:00Z"),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            december.committed,
            december.tokens_today,
            december.tokens_this_month
        ),
        (Nanos::from_db(4_000), tokens, tokens),
        "{url}"
    );
}

/// Rows written before the totals table existed are summed into it by its migration.
async fn backfilled_totals(url: &str) {
    use sea_orm::EntityTrait;
    let dir = tempfile::tempdir().unwrap();
    let fresh = if url.starts_with("sqlite://") {
        Backend::Sqlite.fresh_database_url(dir.path())
    } else {
        Backend::Postgres.fresh_database_url(dir.path())
    };
    let db = tollgate::storage::connect(&fresh, 2).await.unwrap();
    let before_totals = Migrator::migrations()
        .iter()
        .position(|m| m.name() == "m20261130_000007_usage_totals")
        .unwrap();
    Migrator::up(&db, Some(u32::try_from(before_totals).unwrap()))
        .await
        .unwrap();
    let tenant = unique_tenant("storage-backfill");
    let events = [
        event(&tenant, 1, AttemptStatus::Ok, 11),
        event(&tenant, 2, AttemptStatus::Ok, 22),
    ];
    // Rows as they were then: columns added by later migrations are not set.
    let then = |event: &UsageEvent| entity::usage::ActiveModel {
        api: sea_orm::ActiveValue::NotSet,
        end_user: sea_orm::ActiveValue::NotSet,
        session: sea_orm::ActiveValue::NotSet,
        cache_source: sea_orm::ActiveValue::NotSet,
        cache_similarity: sea_orm::ActiveValue::NotSet,
        cost_nanos: sea_orm::ActiveValue::NotSet,
        plan: sea_orm::ActiveValue::NotSet,
        web_searches: sea_orm::ActiveValue::NotSet,
        ..event.to_active_model()
    };
    entity::usage::Entity::insert_many(events.iter().map(then))
        .exec(&db)
        .await
        .unwrap();
    tollgate::storage::migrate(&db).await.unwrap();
    let totals = repo::period_totals(
        &db,
        &TenantId::new(tenant.as_str()),
        &tollgate::calendar::Calendar::utc(),
        instant_ms("2026-11-30T12:00:00Z"),
    )
    .await
    .unwrap();
    assert_eq!(totals.committed, Nanos::from_db(33), "{fresh}");
    assert_eq!(
        totals.keys.get(&KeyId::new("key-1")),
        Some(&Nanos::from_db(33))
    );
    assert_eq!(totals.tokens_today, 2 * (3_000_000_000 + 77), "{fresh}");
    // Every row from before doors other than chat existed came in by chat.
    let rows = repo::tenant_rows(&db, &TenantId::new(tenant.as_str()))
        .await
        .unwrap();
    assert!(
        rows.len() == 2 && rows.iter().all(|r| r.api == "chat"),
        "{rows:?}"
    );
}

fn sorted<K: Ord, V>(items: impl Iterator<Item = (K, V)>) -> Vec<(K, V)> {
    let mut items: Vec<(K, V)> = items.collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    items
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
        cost: None,
        plan: None,
        ..failed.clone()
    };
    let events = [failed, served];
    repo::insert_batch(db, &events, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    // A replayed batch (same event ids) inserts nothing.
    repo::insert_batch(db, &events, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();

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
    repo::insert_batch(db, &events, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    repo::insert_batch(db, &events, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
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
        end_user: None,
        session: None,
        api: tollgate::ledger::Api::Chat,
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
            web_searches: 0,
        },
        usage_kind: UsageKind::Estimated,
        reserved: Nanos::from_db(9_000_000_000_000),
        charged: Nanos::from_db(charged),
        cost: None,
        plan: None,
        price_version: "2026-11-30".to_owned(),
        latency_ms: 4_321,
        ttft_ms: None,
        error: Some("upstream said: «overloaded»".to_owned()),
        cache: None,
        // 2026-11-30T12:00:00Z
        created_at_ms: 1_796_040_000_000,
    }
}

fn instant_ms(instant: &str) -> u64 {
    tollgate::period::parse_instant(instant).unwrap()
}

/// Replicas start together in every rollout and scale-up: on one freshly
/// created PostgreSQL database, each migrates it and makes the month's ledger
/// partitions at once, and every one of them starts.
#[actix_web::test]
async fn replicas_started_at_once_on_a_fresh_postgresql_database_all_start() {
    const REPLICAS: usize = 4;
    let url = crate::support::postgres::fresh_database_url();
    let setup = TestSetup::new();
    let (_dir, path) = write_config(&setup, "http://127.0.0.1:9");
    let loaded = Config::load(&path, setup.env_vars()).unwrap();
    let journals = tempfile::tempdir().unwrap();
    let starts = (0..REPLICAS).map(|replica| {
        let mut config = (*loaded).clone();
        config.storage.database_url.clone_from(&url);
        config.ledger.journal_dir = Some(journals.path().join(format!("journal-{replica}")));
        config.server.listen = ([127, 0, 0, 1], 0).into();
        let options = BuildOptions {
            clock: Arc::new(SystemClock),
            handle_signals: false,
            reload_source: None,
        };
        Application::build(Arc::new(config), options)
    });
    let built = futures_util::future::join_all(starts).await;
    let mut handles = Vec::new();
    for (replica, app) in built.into_iter().enumerate() {
        match app {
            Ok(app) => handles.push(app.handle()),
            Err(error) => panic!("replica {replica} did not start: {error}"),
        }
    }
    assert_eq!(handles.len(), REPLICAS);
    for handle in handles {
        handle.stop(true).await;
    }
}

/// Replicas that start together on a migrated database each make the months
/// ahead of them: a month none has made yet is made once, and none fails.
#[actix_web::test]
async fn replicas_making_the_same_new_month_s_partition_at_once_all_succeed() {
    const REPLICAS: usize = 6;
    let url = crate::support::postgres::fresh_database_url();
    tollgate::storage::connect_and_migrate(&url, 1)
        .await
        .unwrap();
    // A year ahead: months no start has made yet.
    let later_ms = tollgate::period::parse_instant("2027-12-15T00:00:00Z").unwrap();
    let mut connections = Vec::new();
    for _ in 0..REPLICAS {
        connections.push(tollgate::storage::connect(&url, 1).await.unwrap());
    }
    let prepared = futures_util::future::join_all(
        connections
            .iter()
            .map(|db| tollgate::ledger::retention::prepare(db, later_ms)),
    )
    .await;
    for (replica, result) in prepared.into_iter().enumerate() {
        assert!(result.is_ok(), "replica {replica}: {result:?}");
    }
}
