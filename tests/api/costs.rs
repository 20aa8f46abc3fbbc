//! Cost analysis against known rows written through the ledger's insert
//! path: spend sorted by cost with a limit, the distribution of a call's
//! charge per feature and model, and month over month per tenant and feature.

use serde_json::{Value, json};
use tollgate::ledger::{AttemptStatus, UsageEvent};

use crate::support::process::cli;
use crate::support::{TestApp, TestSetup, spawn_app, write_config};

/// A call's row: `invoices::row` with the feature before the model.
fn row(tenant: &str, feature: &str, model: &str, at: &str, charged: u64) -> UsageEvent {
    let charged = i64::try_from(charged).unwrap();
    crate::invoices::row(tenant, model, feature, AttemptStatus::Ok, at, charged)
}

async fn write(app: &TestApp, rows: &[UsageEvent]) {
    tollgate::ledger::repo::insert_batch(
        app.gateway.directory.db(),
        rows,
        &tollgate::calendar::Calendar::utc(),
    )
    .await
    .unwrap();
}

fn setup() -> TestSetup {
    TestSetup::new()
}

#[actix_web::test]
async fn spend_sorted_by_cost_lists_the_most_charged_groups_first_up_to_the_limit() {
    let app = spawn_app(setup()).await;
    let at = "2026-12-03T10:00:00Z";
    write(
        &app,
        &[
            row("sorted", "alpha", "m", at, 100),
            row("sorted", "beta", "m", at, 300),
            row("sorted", "gamma", "m", at, 200),
            row("sorted", "gamma", "m", at, 50),
        ],
    )
    .await;
    let reply = app
        .admin(
            "GET",
            "/spend?tenant=sorted&group_by=feature&sort=cost&limit=2",
            None,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let keys: Vec<&str> = reply.body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["beta", "gamma"]);
    assert_eq!(reply.body["rows"][1]["cost"], "0.00000025");
    assert_eq!(reply.body["groups_left_off"], 1);
    // The total covers every group, listed or not.
    assert_eq!(reply.body["total"]["cost"], "0.00000065");
    let by_key = app
        .admin("GET", "/spend?tenant=sorted&group_by=feature", None)
        .await;
    assert_eq!(by_key.body["rows"][0]["key"], "alpha", "{}", by_key.raw);
    let bad = app.admin("GET", "/spend?sort=price", None).await;
    assert_eq!(bad.status, 400, "{}", bad.raw);
    assert!(
        bad.error_message().contains("use key or cost"),
        "{}",
        bad.raw
    );
}

#[actix_web::test]
async fn a_call_s_cost_distribution_gives_nearest_rank_percentiles_per_feature_and_model() {
    let app = spawn_app(setup()).await;
    let mut rows: Vec<UsageEvent> = (1..=100u64)
        .rev()
        .map(|i| {
            row(
                "dist",
                "search",
                "m-large",
                "2026-12-02T10:00:00Z",
                i * 1000,
            )
        })
        .collect();
    for charged in [30, 10, 20] {
        rows.push(row(
            "dist",
            "chat",
            "m-small",
            "2026-12-02T11:00:00Z",
            charged,
        ));
    }
    // A cache hit is no call; a day outside the range is not counted.
    let mut hit = row("dist", "chat", "m-small", "2026-12-02T12:00:00Z", 0);
    hit.status = AttemptStatus::CacheHit;
    rows.push(hit);
    rows.push(row(
        "dist",
        "chat",
        "m-small",
        "2026-12-05T12:00:00Z",
        99_999,
    ));
    write(&app, &rows).await;

    let reply = app
        .admin(
            "GET",
            "/spend/distribution?tenant=dist&from=2026-12-01&to=2026-12-03",
            None,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let rows = reply.body["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{}", reply.raw);
    assert_eq!(
        rows[0],
        json!({"feature": "search", "model": "m-large", "calls": 100, "total": "0.00505",
               "p50": "0.00005", "p95": "0.000095", "p99": "0.000099", "max": "0.0001"})
    );
    // Three calls: p50 is the 2nd cheapest (⌈1.5⌉), p95 and p99 the 3rd.
    assert_eq!(
        rows[1],
        json!({"feature": "chat", "model": "m-small", "calls": 3, "total": "0.00000006",
               "p50": "0.00000002", "p95": "0.00000003", "p99": "0.00000003", "max": "0.00000003"})
    );
    let limited = app
        .admin("GET", "/spend/distribution?tenant=dist&limit=1", None)
        .await;
    assert_eq!(limited.body["rows"].as_array().unwrap().len(), 1);
    let bad = app.admin("GET", "/spend/distribution?limit=0", None).await;
    assert_eq!(bad.status, 400, "{}", bad.raw);
}

fn month(report: &Value, key: &str) -> Vec<(String, String, String, Option<u64>)> {
    let row = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no {key} in {report}"));
    row["months"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["month"].as_str().unwrap().to_owned(),
                m["cost"].as_str().unwrap().to_owned(),
                m["change"].as_str().unwrap().to_owned(),
                m["change_share"].as_f64().map(f64::to_bits),
            )
        })
        .collect()
}

fn m(
    month: &str,
    cost: &str,
    change: &str,
    share: Option<f64>,
) -> (String, String, String, Option<u64>) {
    (
        month.to_owned(),
        cost.to_owned(),
        change.to_owned(),
        share.map(f64::to_bits),
    )
}

#[actix_web::test]
async fn month_over_month_gives_each_month_per_tenant_and_feature_with_its_change() {
    let app = spawn_app(setup()).await;
    write(
        &app,
        &[
            row("acme", "search", "m", "2026-10-15T00:00:00Z", 100),
            row("acme", "search", "m", "2026-11-15T00:00:00Z", 200),
            row("acme", "chat", "m", "2026-11-16T00:00:00Z", 100),
            row("acme", "search", "m", "2026-12-01T00:00:00Z", 150),
            row("bolt", "search", "m", "2026-11-30T23:59:59Z", 50),
            // Before the months read.
            row("bolt", "search", "m", "2026-09-30T00:00:00Z", 7),
        ],
    )
    .await;
    let reply = app
        .admin(
            "GET",
            "/spend/monthly?group_by=tenant&months=2&to=2026-12",
            None,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let report = &reply.body;
    assert_eq!(report["months"], json!(["2026-11", "2026-12"]));
    assert_eq!(report["rows"][0]["key"], "acme", "largest last month first");
    assert_eq!(
        month(report, "acme"),
        [
            m("2026-11", "0.0000003", "0.0000002", Some(2.0)),
            m("2026-12", "0.00000015", "-0.00000015", Some(-0.5)),
        ]
    );
    assert_eq!(
        month(report, "bolt"),
        [
            m("2026-11", "0.00000005", "0.00000005", None),
            m("2026-12", "0", "-0.00000005", Some(-1.0)),
        ]
    );
    let features = app
        .admin(
            "GET",
            "/spend/monthly?group_by=feature&tenant=acme&months=2&to=2026-12",
            None,
        )
        .await;
    assert_eq!(features.status, 200, "{}", features.raw);
    assert_eq!(
        month(&features.body, "search"),
        [
            m("2026-11", "0.0000002", "0.0000001", Some(1.0)),
            m("2026-12", "0.00000015", "-0.00000005", Some(-0.25)),
        ]
    );
    assert_eq!(
        month(&features.body, "chat"),
        [
            m("2026-11", "0.0000001", "0.0000001", None),
            m("2026-12", "0", "-0.0000001", Some(-1.0)),
        ]
    );
    let bad = app.admin("GET", "/spend/monthly?to=2026-13", None).await;
    assert_eq!(bad.status, 400, "{}", bad.raw);
}

#[actix_web::test]
async fn the_cli_sorts_spend_by_cost_and_prints_the_distribution_and_the_months() {
    let setup = setup();
    let env = setup.env_vars().clone();
    let (_dir, config) = write_config(&setup, "http://127.0.0.1:9");
    let db = tollgate::storage::connect_and_migrate(
        &crate::support::configured_database_url(&config),
        1,
    )
    .await
    .unwrap();
    let rows = [
        row("cli", "alpha", "m", "2026-11-03T10:00:00Z", 100),
        row("cli", "beta", "m", "2026-12-03T10:00:00Z", 300),
    ];
    tollgate::ledger::repo::insert_batch(&db, &rows, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    let spend: Value = serde_json::from_str(&cli(
        &config,
        &env,
        &[
            "spend",
            "--group-by",
            "feature",
            "--sort",
            "cost",
            "--limit",
            "1",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(spend["rows"][0]["key"], "beta", "{spend}");
    assert_eq!(spend["groups_left_off"], 1);
    let distribution = cli(&config, &env, &["spend-distribution", "--tenant", "cli"]);
    assert!(distribution.contains("beta"), "{distribution}");
    let months: Value = serde_json::from_str(&cli(
        &config,
        &env,
        &[
            "spend-monthly",
            "--months",
            "1",
            "--to",
            "2026-12",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(
        months["rows"][0]["months"][0]["change"], "0.0000002",
        "{months}"
    );
}
