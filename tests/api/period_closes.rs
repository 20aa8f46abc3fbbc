//! Months that close: a closed month's invoice never changes; rows stamped
//! in it and written later are adjustments on the first open month's
//! invoice; every row is on exactly one invoice, roll-ups included.

use std::sync::Arc;

use serde_json::{Value, json};
use tollgate::clock::ManualClock;
use tollgate::ledger::AttemptStatus;
use tollgate::money::Nanos;
use tollgate::period::parse_instant;

use crate::invoices::row;
use crate::support::{TestApp, TestSetup, spawn_app};

async fn setup() -> TestApp {
    let clock = Arc::new(ManualClock::new(
        parse_instant("2026-12-07T12:00:00Z").unwrap(),
    ));
    spawn_app(
        TestSetup::new()
            .clock(clock)
            .route("fast", &["primary/ok"])
            .tier("free", &["fast"], 1000, 100)
            .set("billing.timezone", "Asia/Shanghai")
            .set("ledger.retention_days", 1),
    )
    .await
}

async fn insert(app: &TestApp, tenant: &str, rows: &[(&str, i64)]) {
    let events: Vec<_> = rows
        .iter()
        .map(|(at, charged)| row(tenant, "m", "chat", AttemptStatus::Ok, at, *charged))
        .collect();
    tollgate::ledger::repo::insert_batch(
        app.gateway.directory.db(),
        &events,
        &tollgate::calendar::Calendar::utc(),
    )
    .await
    .unwrap();
}

/// An invoice's total, whether it is closed, its adjustments' amount, and
/// whether its check matched.
async fn invoice(app: &TestApp, tenant: &str, month: &str) -> (i64, bool, i64) {
    let reply = app
        .admin("GET", &format!("/tenants/{tenant}/invoices/{month}"), None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["check"]["matches"], true, "{}", reply.raw);
    let amount = |v: &Value| Nanos::parse_decimal(v.as_str().unwrap()).unwrap().to_db();
    let invoice = &reply.body["invoice"];
    let adjusted = invoice["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|line| line["adjustment"] == true)
        .map(|line| amount(&line["amount"]))
        .sum();
    let closed = invoice["closed"].as_bool().unwrap();
    (amount(&invoice["total"]), closed, adjusted)
}

#[actix_web::test]
async fn a_closed_month_keeps_its_invoice_and_rows_written_late_are_the_next_months_adjustments() {
    let app = setup().await;
    let (tenant, _) = app.tenant_with_key("free", json!({})).await;
    // Shanghai's November runs from 2026-10-31T16:00Z.
    insert(
        &app,
        &tenant,
        &[
            ("2026-10-05T00:00:00Z", 3),
            ("2026-11-10T00:00:00Z", 7),
            ("2026-11-20T00:00:00Z", 100),
        ],
    )
    .await;
    let closed = app
        .admin(
            "POST",
            "/periods/2026-11/close",
            Some(json!({"by": "finance"})),
        )
        .await;
    assert_eq!(closed.status, 200, "{}", closed.raw);
    assert_eq!(closed.body["months"], json!(["2026-10", "2026-11"]));
    assert_eq!(invoice(&app, &tenant, "2026-11").await, (107, true, 0));

    // Written after the close: two stamped in closed months, one in December.
    insert(
        &app,
        &tenant,
        &[
            ("2026-11-15T00:00:00Z", 1_000),
            ("2026-10-01T00:00:00Z", 20_000),
            ("2026-12-03T00:00:00Z", 5),
        ],
    )
    .await;
    assert_eq!(invoice(&app, &tenant, "2026-10").await, (3, true, 0));
    assert_eq!(invoice(&app, &tenant, "2026-11").await, (107, true, 0));
    assert_eq!(
        invoice(&app, &tenant, "2026-12").await,
        (21_005, false, 21_000)
    );

    // A roll-up past retention leaves the late rows to December's invoice.
    let rolled = app.admin("POST", "/ledger/rollup", None).await;
    assert_eq!(rolled.status, 200, "{}", rolled.raw);
    assert_eq!(invoice(&app, &tenant, "2026-10").await, (3, true, 0));
    assert_eq!(invoice(&app, &tenant, "2026-11").await, (107, true, 0));
    assert_eq!(
        invoice(&app, &tenant, "2026-12").await,
        (21_005, false, 21_000)
    );

    let again = app.admin("POST", "/periods/2026-11/close", None).await;
    assert_eq!(again.status, 409, "{}", again.raw);
    let early = app.admin("POST", "/periods/2026-12/close", None).await;
    assert_eq!(early.status, 400, "{}", early.raw);
    let listed = app.admin("GET", "/periods", None).await;
    assert_eq!(listed.body["closed_through"], "2026-11", "{}", listed.raw);
}
