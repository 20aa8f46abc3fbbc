//! Retention: rows past `ledger.retention_days` are rolled up into daily
//! aggregates and leave the ledger, and every report, invoice and check
//! reads the same totals after as before, to the nano-unit, on every status.
//! On PostgreSQL a month past retention goes as a whole partition.

use std::sync::Arc;

use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde_json::{Value, json};
use tollgate::clock::ManualClock;
use tollgate::ids::{EventId, KeyId, RequestId, TenantId};
use tollgate::ledger::{AttemptStatus, UsageEvent, UsageKind};
use tollgate::money::Nanos;
use tollgate::period::parse_instant;
use tollgate::pricing::Usage;

use crate::support::{TestApp, TestSetup, chat_body, spawn_app};

/// 2026-12-03T00:00:00Z: with 90 days kept, rows before 2026-09-04 are due.
const NOW: &str = "2026-12-03T00:00:00Z";

struct Row<'a> {
    tenant: &'a str,
    request: &'a RequestId,
    attempt: u32,
    status: AttemptStatus,
    model: &'a str,
    feature: &'a str,
    end_user: Option<&'a str>,
    at: &'a str,
    charged: i64,
}

fn event(row: &Row) -> UsageEvent {
    let cost = row.charged * 5 / 6;
    UsageEvent {
        event_id: EventId::generate(),
        request_id: row.request.clone(),
        client_request_id: None,
        trace_id: None,
        tenant: TenantId::new(row.tenant),
        key: KeyId::new(if row.feature == "chat" {
            "key-1"
        } else {
            "key-2"
        }),
        feature: row.feature.to_owned(),
        end_user: row.end_user.map(str::to_owned),
        session: None,
        api: tollgate::ledger::Api::Chat,
        route: "fast".to_owned(),
        provider: if row.attempt > 1 {
            "secondary"
        } else {
            "primary"
        }
        .to_owned(),
        model: row.model.to_owned(),
        attempt: row.attempt,
        status: row.status,
        upstream_status: None,
        usage: Usage {
            prompt_tokens: 100 + u64::from(row.attempt),
            cached_tokens: 20,
            cache_write_tokens: 3,
            completion_tokens: 7,
            web_searches: 0,
        },
        usage_kind: UsageKind::Reported,
        reserved: Nanos::from_db(row.charged + 11),
        charged: Nanos::from_db(row.charged),
        cost: Some(Nanos::from_db(cost)),
        plan: Some("resale".to_owned()),
        price_version: "test".to_owned(),
        latency_ms: 1,
        ttft_ms: None,
        error: None,
        cache: None,
        created_at_ms: parse_instant(row.at).unwrap(),
    }
}

/// A row: its request (by index), attempt, status, model, feature, end user, time and charge.
type Spec = (
    usize,
    u32,
    AttemptStatus,
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
    i64,
);

/// Rows of every status on days past retention (one across the Shanghai
/// midnight, one at a UTC month's end); request 11 is the other tenant's.
#[rustfmt::skip]
const OLD: [Spec; 9] = [
    (0, 1, AttemptStatus::Ok, "m-large", "chat", Some("u1"), "2026-06-10T01:00:00Z", 1_000_000_001),
    (1, 1, AttemptStatus::UpstreamError, "m-large", "chat", Some("u1"), "2026-06-10T02:00:00Z", 0),
    (1, 2, AttemptStatus::FallbackOk, "m-small", "chat", Some("u1"), "2026-06-10T02:00:01Z", 300),
    (2, 1, AttemptStatus::Partial, "m-large", "search", None, "2026-06-10T20:00:00Z", 77),
    (3, 1, AttemptStatus::Orphaned, "m-small", "search", Some("u2"), "2026-06-30T20:00:00Z", 4_000),
    (4, 1, AttemptStatus::CacheHit, "m-small", "chat", None, "2026-07-15T00:00:00Z", 0),
    (5, 1, AttemptStatus::ClientError, "m-small", "chat", Some("u2"), "2026-08-31T23:59:59Z", 0),
    (6, 1, AttemptStatus::Ok, "m-large", "search", None, "2026-09-02T12:00:00Z", 123_456),
    (11, 1, AttemptStatus::Ok, "m-large", "chat", None, "2026-06-11T00:00:00Z", 999),
];

/// Recent rows, which stay.
#[rustfmt::skip]
const RECENT: [Spec; 4] = [
    (7, 1, AttemptStatus::Ok, "m-large", "chat", Some("u1"), "2026-11-20T10:00:00Z", 5_555),
    (8, 1, AttemptStatus::UpstreamError, "m-small", "chat", None, "2026-11-21T10:00:00Z", 0),
    (8, 2, AttemptStatus::FallbackOk, "m-large", "chat", None, "2026-11-21T10:00:01Z", 640),
    (9, 1, AttemptStatus::CacheHit, "m-small", "search", None, "2026-11-22T10:00:00Z", 0),
];

fn ledger(tenant: &str, other: &str) -> Vec<UsageEvent> {
    let ids: Vec<RequestId> = (0..12).map(|_| RequestId::generate()).collect();
    OLD.iter()
        .chain(&RECENT)
        .map(
            |&(i, attempt, status, model, feature, end_user, at, charged)| {
                event(&Row {
                    tenant: if i == 11 { other } else { tenant },
                    request: &ids[i],
                    attempt,
                    status,
                    model,
                    feature,
                    end_user,
                    at,
                    charged,
                })
            },
        )
        .collect()
}

/// Every report a finance team reads, for one tenant and for all.
async fn reports(app: &TestApp, tenant: &str) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    for group in [
        "tenant", "feature", "model", "provider", "route", "day", "status", "key", "api",
        "end_user",
    ] {
        for path in [
            format!("/tenants/{tenant}/spend?group_by={group}"),
            format!("/tenants/{tenant}/spend?group_by={group}&from=2026-06-10&to=2026-06-30"),
            format!("/spend?group_by={group}"),
        ] {
            let reply = app.admin("GET", &path, None).await;
            assert_eq!(reply.status, 200, "{path}: {}", reply.raw);
            seen.push((path, reply.body));
        }
    }
    for month in ["2026-06", "2026-07", "2026-08", "2026-09", "2026-11"] {
        let path = format!("/tenants/{tenant}/invoices/{month}");
        let reply = app.admin("GET", &path, None).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.raw);
        assert_eq!(
            reply.body["check"]["matches"], true,
            "{path}: {}",
            reply.raw
        );
        seen.push((path, reply.body));
    }
    seen
}

/// A request with a fallback counts in each of its groups among detail rows
/// and once, where it ended, among aggregates: groupings that split a
/// request's rows compare all but their request counts.
fn comparable(path: &str, mut report: Value) -> Value {
    let splits = ["model", "provider", "status"]
        .iter()
        .any(|g| path.contains(&format!("group_by={g}")));
    if splits {
        for row in report["rows"].as_array_mut().into_iter().flatten() {
            for field in ["requests", "fallback_rate", "cache_hit_rate"] {
                row.as_object_mut().unwrap().remove(field);
            }
        }
    }
    // Invoice lines are by model.
    for line in report["invoice"]["lines"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        line.as_object_mut().unwrap().remove("requests");
    }
    report
}

async fn partition_exists(app: &TestApp, name: &str) -> bool {
    let db = app.gateway.directory.db();
    db.query_one(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT 1 AS found FROM pg_class WHERE relname = $1",
        [name.into()],
    ))
    .await
    .unwrap()
    .is_some()
}

async fn roll_up(app: &TestApp) -> Value {
    let reply = app.admin("POST", "/ledger/rollup", None).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    reply.body
}

#[actix_web::test]
async fn rolling_up_past_retention_keeps_every_total_to_the_nano_unit() {
    let clock = Arc::new(ManualClock::new(parse_instant(NOW).unwrap()));
    let app = spawn_app(
        TestSetup::new()
            .clock(clock)
            .route("fast", &["primary/ok"])
            .tier("free", &["fast"], 1000, 100)
            .set("billing.timezone", "Asia/Shanghai")
            .set("ledger.retention_days", 90)
            .set("ledger.retention_batch_rows", 2)
            .set("ledger.retention_interval_ms", 0),
    )
    .await;
    let (tenant, _) = app.tenant_with_key("free", json!({})).await;
    let (other, _) = app.tenant_with_key("free", json!({})).await;
    let rows = ledger(&tenant, &other);
    let old = OLD.len();
    let db = app.gateway.directory.db();
    tollgate::ledger::repo::insert_batch(db, &rows, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    let june =
        tollgate::ledger::repo::committed_in_period(db, &TenantId::new(tenant.as_str()), "2026-06")
            .await
            .unwrap();
    let before = reports(&app, &tenant).await;

    let done = roll_up(&app).await;
    let after = reports(&app, &tenant).await;
    for ((path, was), (_, is)) in before.into_iter().zip(after) {
        assert_eq!(comparable(&path, is), comparable(&path, was), "{path}");
    }
    assert_eq!(
        tollgate::ledger::repo::committed_in_period(db, &TenantId::new(tenant.as_str()), "2026-06")
            .await
            .unwrap(),
        june
    );

    let postgres = db.get_database_backend() == DbBackend::Postgres;
    let kept = tollgate::ledger::repo::tenant_rows(db, &TenantId::new(tenant.as_str()))
        .await
        .unwrap();
    if postgres {
        // June, July and August ended before the cutoff; September has not.
        assert_eq!(
            done["months_dropped"],
            json!(["2026-06", "2026-07", "2026-08"]),
            "{done}"
        );
        assert_eq!(done["rows"], old - 1, "{done}");
        assert!(!partition_exists(&app, "usage_p2026_06").await);
        assert!(partition_exists(&app, "usage_p2026_09").await);
        assert!(
            kept.iter().all(|r| r.period.as_str() >= "2026-09"),
            "{kept:?}"
        );
        assert_eq!(kept.len(), 5);
    } else {
        assert_eq!(done["rows"], old, "{done}");
        assert_eq!(done["batches"], old.div_ceil(2), "{done}");
        assert!(
            kept.iter().all(|r| r.period.as_str() == "2026-11"),
            "{kept:?}"
        );
        assert_eq!(kept.len(), 4);
    }
    assert_eq!(
        done["cutoff_ms"],
        parse_instant("2026-09-04T00:00:00Z").unwrap()
    );

    // Nothing is due twice.
    let again = roll_up(&app).await;
    assert_eq!(again["rows"], 0, "{again}");
}

#[actix_web::test]
async fn requests_served_during_a_roll_up_all_reach_the_ledger() {
    let clock = Arc::new(ManualClock::new(parse_instant(NOW).unwrap()));
    let app = spawn_app(
        TestSetup::new()
            .clock(clock)
            .route("rt-fast", &["primary/ok"])
            .tier("free", &["rt-fast"], 100_000, 100)
            .set("ledger.retention_batch_rows", 5)
            .set("ledger.retention_interval_ms", 0),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let request = RequestId::generate();
    let old: Vec<UsageEvent> = (0..200)
        .map(|i| {
            let at = format!("2026-06-{:02}T00:00:00Z", 1 + i % 28);
            event(&Row {
                tenant: &tenant,
                request: &request,
                attempt: 1,
                status: AttemptStatus::Ok,
                model: "m",
                feature: "chat",
                end_user: None,
                at: &at,
                charged: 10,
            })
        })
        .collect();
    let db = app.gateway.directory.db();
    tollgate::ledger::repo::insert_batch(db, &old, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();

    let rolling = roll_up(&app);
    let served = async {
        let mut ok = 0;
        for _ in 0..30 {
            ok += usize::from(app.chat(&key, &chat_body("rt-fast")).await.status == 200);
        }
        ok
    };
    let (done, ok) = futures_util::future::join(rolling, served).await;
    assert_eq!(ok, 30);
    assert_eq!(done["rows"], 200, "{done}");
    app.flush_ledger().await;
    let rows = tollgate::ledger::repo::tenant_rows(db, &TenantId::new(tenant.as_str()))
        .await
        .unwrap();
    assert_eq!(rows.len(), 30);
    let report = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/spend?group_by=tenant"),
            None,
        )
        .await;
    assert_eq!(report.body["rows"][0]["attempts"], 230, "{}", report.raw);
    // The 200 old rows were one request, counted once where it ended.
    assert_eq!(report.body["rows"][0]["requests"], 31, "{}", report.raw);
}
