//! Invoices: a tenant's month in the billing time zone, in lines by model and
//! feature whose total equals the ledger's sum to the nano-unit, with rows of
//! every status; the admin API's check and the CLI's `--check` prove it.

use serde_json::json;
use tollgate::ids::{EventId, KeyId, RequestId, TenantId};
use tollgate::ledger::{AttemptStatus, UsageEvent, UsageKind};
use tollgate::money::Nanos;
use tollgate::period::parse_instant;
use tollgate::pricing::Usage;

use crate::support::process::cli;
use crate::support::{TestSetup, spawn_app, write_config};

pub(crate) fn row(
    tenant: &str,
    model: &str,
    feature: &str,
    status: AttemptStatus,
    at: &str,
    charged: i64,
) -> UsageEvent {
    UsageEvent {
        event_id: EventId::generate(),
        request_id: RequestId::generate(),
        client_request_id: None,
        trace_id: None,
        tenant: TenantId::new(tenant),
        key: KeyId::new("key-1"),
        feature: feature.to_owned(),
        end_user: None,
        session: None,
        api: tollgate::ledger::Api::Chat,
        route: "fast".to_owned(),
        provider: "primary".to_owned(),
        model: model.to_owned(),
        attempt: 1,
        status,
        upstream_status: None,
        usage: Usage {
            prompt_tokens: 10,
            cached_tokens: 0,
            cache_write_tokens: 0,
            completion_tokens: 5,
            web_searches: 0,
        },
        usage_kind: UsageKind::Reported,
        reserved: Nanos::from_db(charged),
        charged: Nanos::from_db(charged),
        cost: None,
        plan: None,
        price_version: "test".to_owned(),
        latency_ms: 1,
        ttft_ms: None,
        error: None,
        cache: None,
        created_at_ms: parse_instant(at).unwrap(),
    }
}

/// November in Shanghai runs from 2026-10-31T16:00Z to 2026-11-30T16:00Z.
fn november(tenant: &str) -> (Vec<UsageEvent>, i64) {
    let rows = vec![
        row(
            tenant,
            "m-large",
            "search",
            AttemptStatus::Ok,
            "2026-10-31T16:00:00Z",
            1_000_000_001,
        ),
        row(
            tenant,
            "m-large",
            "search",
            AttemptStatus::FallbackOk,
            "2026-11-10T00:00:00Z",
            7,
        ),
        row(
            tenant,
            "m-large",
            "chat",
            AttemptStatus::Partial,
            "2026-11-15T00:00:00Z",
            30,
        ),
        row(
            tenant,
            "m-small",
            "chat",
            AttemptStatus::Orphaned,
            "2026-11-20T00:00:00Z",
            400,
        ),
        row(
            tenant,
            "m-small",
            "chat",
            AttemptStatus::CacheHit,
            "2026-11-21T00:00:00Z",
            0,
        ),
        row(
            tenant,
            "m-small",
            "chat",
            AttemptStatus::UpstreamError,
            "2026-11-30T15:59:59Z",
            5_000,
        ),
        // Outside the Shanghai month on either side.
        row(
            tenant,
            "m-small",
            "chat",
            AttemptStatus::Ok,
            "2026-10-31T15:59:59Z",
            90_000,
        ),
        row(
            tenant,
            "m-small",
            "chat",
            AttemptStatus::Ok,
            "2026-11-30T16:00:00Z",
            90_000,
        ),
    ];
    (rows, 1_000_000_001 + 7 + 30 + 400 + 5_000)
}

#[actix_web::test]
async fn an_invoice_totals_the_ledger_of_its_local_month_to_the_nano_unit() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/ok"])
            .tier("free", &["fast"], 1000, 100)
            .set("billing.timezone", "Asia/Shanghai"),
    )
    .await;
    let (tenant, _) = app.tenant_with_key("free", json!({})).await;
    let (rows, expected) = november(&tenant);
    let db = app.gateway.directory.db();
    tollgate::ledger::repo::insert_batch(db, &rows, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();

    let reply = app
        .admin("GET", &format!("/tenants/{tenant}/invoices/2026-11"), None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let invoice = &reply.body["invoice"];
    assert_eq!(invoice["timezone"], "Asia/Shanghai");
    let total = Nanos::parse_decimal(invoice["total"].as_str().unwrap()).unwrap();
    assert_eq!(total.to_db(), expected, "{}", reply.raw);
    assert_eq!(reply.body["check"]["matches"], true, "{}", reply.raw);
    assert_eq!(reply.body["check"]["ledger_rows"], 6);
    let lines = invoice["lines"].as_array().unwrap();
    let line = |model: &str, feature: &str| {
        lines
            .iter()
            .find(|l| l["model"] == model && l["feature"] == feature)
            .unwrap_or_else(|| panic!("no {model}/{feature} line in {lines:?}"))
    };
    assert_eq!(line("m-large", "search")["amount"], "1.000000008");
    assert_eq!(line("m-large", "search")["rows"], 2);
    assert_eq!(line("m-small", "chat")["amount"], "0.0000054");
    assert_eq!(lines.len(), 3);

    let csv = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/invoices/2026-11?format=csv"),
            None,
        )
        .await;
    assert_eq!(csv.status, 200);
    assert!(
        csv.raw.ends_with("total,,,,,,,1.000005438,\n"),
        "{}",
        csv.raw
    );
    let bad = app
        .admin("GET", &format!("/tenants/{tenant}/invoices/2026-13"), None)
        .await;
    assert_eq!(bad.status, 400, "{}", bad.raw);
}

#[actix_web::test]
async fn the_cli_writes_the_invoice_and_its_check_proves_the_total() {
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 1000, 100)
        .set("billing.timezone", "Asia/Shanghai");
    let env = setup.env_vars().clone();
    let (_dir, config) = write_config(&setup, "http://127.0.0.1:9");
    let tenant = crate::support::unique_tenant("invoice-cli");
    cli(
        &config,
        &env,
        &["tenant", "create", "--id", &tenant, "--tier", "free"],
    );
    let db = tollgate::storage::connect_and_migrate(
        &crate::support::configured_database_url(&config),
        1,
    )
    .await
    .unwrap();
    let (rows, expected) = november(&tenant);
    tollgate::ledger::repo::insert_batch(&db, &rows, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    let csv = cli(
        &config,
        &env,
        &["invoice", "--tenant", &tenant, "--month", "2026-11"],
    );
    let total_line = csv.lines().last().unwrap();
    let total = Nanos::parse_decimal(
        total_line
            .trim_start_matches("total,,,,,,,")
            .trim_end_matches(','),
    )
    .unwrap();
    assert_eq!(total.to_db(), expected, "{csv}");
    let checked: serde_json::Value = serde_json::from_str(&cli(
        &config,
        &env,
        &[
            "invoice", "--tenant", &tenant, "--month", "2026-11", "--check",
        ],
    ))
    .unwrap();
    assert_eq!(checked["matches"], true, "{checked}");
    assert_eq!(checked["ledger_rows"], 6);
}

/// The records of a CSV text (RFC 4180: quoted fields may hold commas,
/// doubled quotes and line breaks).
fn csv_records(text: &str) -> Vec<Vec<String>> {
    let (mut records, mut record, mut field) = (Vec::new(), Vec::new(), String::new());
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (false, '"') => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (_, c) => field.push(c),
        }
    }
    records
}

#[actix_web::test]
async fn a_day_exported_as_focus_sums_to_the_ledger_s_charge_for_that_local_day() {
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 1000, 100)
        .set("billing.timezone", "Asia/Shanghai");
    let env = setup.env_vars().clone();
    let (dir, config) = write_config(&setup, "http://127.0.0.1:9");
    let tenant = crate::support::unique_tenant("focus");
    let db = tollgate::storage::connect_and_migrate(
        &crate::support::configured_database_url(&config),
        1,
    )
    .await
    .unwrap();
    // Shanghai's 2026-11-10 runs from 2026-11-09T16:00Z to 2026-11-10T16:00Z.
    let rows = [
        row(
            &tenant,
            "m-a",
            "search",
            AttemptStatus::Ok,
            "2026-11-09T16:00:00Z",
            5,
        ),
        row(
            &tenant,
            "m, \"b\"",
            "chat",
            AttemptStatus::Ok,
            "2026-11-10T15:59:59Z",
            7,
        ),
        row(
            &tenant,
            "m-a",
            "search",
            AttemptStatus::Ok,
            "2026-11-10T16:00:00Z",
            100,
        ),
        row(
            &tenant,
            "m-a",
            "search",
            AttemptStatus::Ok,
            "2026-11-09T15:59:59Z",
            1_000,
        ),
    ];
    tollgate::ledger::repo::insert_batch(&db, &rows, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    let out = dir.path().join("focus.csv");
    let out_arg = out.to_str().unwrap();
    let summary: serde_json::Value = serde_json::from_str(&cli(
        &config,
        &env,
        &["export", "focus", "--date", "2026-11-10", "--out", out_arg],
    ))
    .unwrap();
    assert_eq!(summary["rows"], 2, "{summary}");
    let records = csv_records(&std::fs::read_to_string(&out).unwrap());
    let header = &records[0];
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let ours: Vec<&Vec<String>> = records[1..]
        .iter()
        .filter(|r| r[column("SubAccountId")] == tenant)
        .collect();
    assert_eq!(ours.len(), 2, "{records:?}");
    let billed: i64 = ours
        .iter()
        .map(|r| {
            Nanos::parse_decimal(&r[column("BilledCost")])
                .unwrap()
                .to_db()
        })
        .sum();
    assert_eq!(billed, 12);
    assert!(ours.iter().any(|r| r[column("ServiceName")] == "m, \"b\""));
    for record in &ours {
        assert_eq!(record.len(), header.len(), "{record:?}");
        assert_eq!(record[column("ChargePeriodStart")], "2026-11-09T16:00:00Z");
        assert_eq!(record[column("BillingPeriodStart")], "2026-10-31T16:00:00Z");
    }
}
