//! Prices with dates: an entry with `effective_from` takes over at the start
//! of its day, without a reload; rows keep what they were charged, and
//! reprice prices each row at the price in force when it was written.

use std::sync::Arc;

use serde_json::json;
use tollgate::clock::ManualClock;

use crate::support::{TestSetup, chat_body, entry, spawn_app};

/// 2027-01-01T00:00:00Z in Unix ms.
const NEW_YEAR_MS: u64 = 1_798_761_600_000;

#[actix_web::test]
async fn a_dated_price_takes_over_at_its_day_and_reprice_honours_each_rows_date() {
    let clock = Arc::new(ManualClock::new(NEW_YEAR_MS - 1));
    let app = spawn_app(
        TestSetup::new()
            .clock(clock.clone())
            .route("ef-fast", &["primary/usage-100-0-10"])
            .tier("free", &["ef-fast"], 1000, 100)
            .push(
                "prices",
                entry([
                    ("provider", "primary".into()),
                    ("model", "usage-100-0-10".into()),
                    ("input", "4".into()),
                    ("output", "16".into()),
                    ("effective_from", "2027-01-01".into()),
                ]),
            )
            .push(
                "plans",
                entry([("name", "resale".into()), ("markup_percent", 20.into())]),
            ),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let (_, resale) = app.tenant_with_key("free", json!({"plan": "resale"})).await;

    let before = app.chat(&key, &chat_body("ef-fast")).await;
    clock.set_ms(NEW_YEAR_MS);
    let after = app.chat(&key, &chat_body("ef-fast")).await;
    let marked_up = app.chat(&resale, &chat_body("ef-fast")).await;

    // 100 in and 10 out: at 2 / 8 per 1M, then at 4 / 16, then 20 % over that.
    assert_eq!(
        before.header("x-tollgate-cost"),
        Some("0.00028"),
        "{}",
        before.raw
    );
    assert_eq!(
        after.header("x-tollgate-cost"),
        Some("0.00056"),
        "{}",
        after.raw
    );
    assert_eq!(marked_up.header("x-tollgate-cost"), Some("0.000672"));
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(
        rows.iter().map(|r| r.charged_nanos).collect::<Vec<_>>(),
        [280_000, 560_000]
    );
    assert_eq!(
        rows[0].price_version, rows[1].price_version,
        "one table, two dates"
    );

    let config = &app.gateway.config;
    let db = app.gateway.directory.db();
    let repriced = tollgate::admin::reprice::reprice(
        db,
        &config.calendar,
        &config.billing(),
        tollgate::admin::reprice::RepriceRun::default(),
    )
    .await
    .unwrap();
    assert_eq!(repriced.current_total.to_db(), 280_000 + 560_000 + 672_000);
    assert_eq!(repriced.repriced_total, repriced.current_total);
    assert_eq!(
        repriced.repriced_cost_total.to_db(),
        280_000 + 560_000 + 560_000
    );
}

/// A plan's negotiated price may carry a date too: before it the plan's
/// markup applies, from it the negotiated price; reprice follows each row's date.
#[actix_web::test]
async fn a_plans_dated_price_takes_over_at_its_day() {
    let clock = Arc::new(ManualClock::new(NEW_YEAR_MS - 1));
    let app = spawn_app(
        TestSetup::new()
            .clock(clock.clone())
            .route("ef-plan", &["primary/usage-100-0-10"])
            .tier("free", &["ef-plan"], 1000, 100)
            .push(
                "plans",
                entry([
                    ("name", "bigco".into()),
                    ("markup_percent", 50.into()),
                    (
                        "prices",
                        vec![entry([
                            ("provider", "primary".into()),
                            ("model", "usage-100-0-10".into()),
                            ("input", "1".into()),
                            ("output", "4".into()),
                            ("effective_from", "2027-01-01".into()),
                        ])]
                        .into(),
                    ),
                ]),
            ),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({"plan": "bigco"})).await;

    let before = app.chat(&key, &chat_body("ef-plan")).await;
    clock.set_ms(NEW_YEAR_MS);
    let after = app.chat(&key, &chat_body("ef-plan")).await;

    // 100 in and 10 out: at 2 / 8 per 1M + 50 %, then at the negotiated 1 / 4.
    assert_eq!(
        before.header("x-tollgate-cost"),
        Some("0.00042"),
        "{}",
        before.raw
    );
    assert_eq!(
        after.header("x-tollgate-cost"),
        Some("0.00014"),
        "{}",
        after.raw
    );
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(
        rows.iter()
            .map(|r| (r.charged_nanos, r.cost_nanos))
            .collect::<Vec<_>>(),
        [(420_000, Some(280_000)), (140_000, Some(280_000))]
    );

    let config = &app.gateway.config;
    let db = app.gateway.directory.db();
    let repriced = tollgate::admin::reprice::reprice(
        db,
        &config.calendar,
        &config.billing(),
        tollgate::admin::reprice::RepriceRun::default(),
    )
    .await
    .unwrap();
    assert_eq!(repriced.current_total.to_db(), 420_000 + 140_000);
    assert_eq!(repriced.repriced_total, repriced.current_total);
}
