//! Price plans: every row keeps the provider's cost beside the tenant's
//! charge, on every status; budgets hold and count the charge; reports
//! show both and the margin.

use serde_json::{Value, json};

use crate::support::{TestApp, TestSetup, Upstream, chat_body, entry, spawn_app};

/// 100 prompt and 10 completion tokens at the default 2 / 8 per 1M: 280,000 nanos.
const COST: i64 = 280_000;

fn setup() -> TestSetup {
    TestSetup::new()
        .route("pl-fast", &["primary/usage-100-0-10"])
        .route(
            "pl-fallback",
            &["primary/status-503", "secondary/usage-100-0-10"],
        )
        .route("pl-cached", &["primary/usage-100-0-10"])
        .cached_route("pl-cached", 60_000)
        .route("pl-cut", &["primary/chunks-8+cut-after-3"])
        .tier(
            "free",
            &["pl-fast", "pl-fallback", "pl-cached", "pl-cut"],
            1000,
            100,
        )
        .push(
            "plans",
            entry([("name", "resale".into()), ("markup_percent", 20.into())]),
        )
        .push(
            "plans",
            entry([
                ("name", "hits".into()),
                ("markup_percent", 20.into()),
                ("cache_hit_percent", "12.5".into()),
            ]),
        )
        .push(
            "plans",
            entry([
                ("name", "bigco".into()),
                ("markup_percent", "50".into()),
                (
                    "prices",
                    vec![entry([
                        ("provider", "primary".into()),
                        ("model", "usage-100-0-10".into()),
                        ("input", "1".into()),
                        ("output", "4".into()),
                    ])]
                    .into(),
                ),
            ]),
        )
}

fn nanos(value: &Value) -> i64 {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("not an amount: {value}"));
    let (negative, digits) = text
        .strip_prefix('-')
        .map_or((false, text), |rest| (true, rest));
    let amount = tollgate::money::Nanos::parse_decimal(digits)
        .unwrap()
        .to_db();
    if negative { -amount } else { amount }
}

async fn spend(app: &TestApp, tenant: &str) -> Value {
    let report = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/spend?group_by=status"),
            None,
        )
        .await;
    assert_eq!(report.status, 200, "{}", report.raw);
    report.body
}

#[actix_web::test]
async fn a_plan_charges_its_markup_and_every_row_keeps_the_cost_beside_the_charge() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({"plan": "resale"})).await;

    let ok = app.chat(&key, &chat_body("pl-fast")).await;
    let fallback = app.chat(&key, &chat_body("pl-fallback")).await;
    let miss = app.chat(&key, &chat_body("pl-cached")).await;
    let hit = app.chat(&key, &chat_body("pl-cached")).await;
    let mut cut = chat_body("pl-cut");
    cut["stream"] = json!(true);
    let partial = app.chat(&key, &cut).await;

    for reply in [&ok, &fallback, &miss, &hit, &partial] {
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }
    // 100 × 2.4 + 10 × 9.6 per 1M: the cost plus 20 %.
    assert_eq!(ok.header("x-tollgate-cost"), Some("0.000336"));
    assert_eq!(hit.header("x-tollgate-cache"), Some("hit"));
    let rows = app.ledger_rows_eventually(&tenant, 7).await;
    let by_status = |status: &str| -> Vec<&entity::usage::Model> {
        rows.iter().filter(|r| r.status == status).collect()
    };
    for row in &rows {
        assert_eq!(row.plan.as_deref(), Some("resale"), "{row:?}");
        let cost = row.cost_nanos.unwrap_or_else(|| panic!("no cost: {row:?}"));
        // Every rate marked up by exactly a fifth: the charge is 6/5 of the cost.
        assert_eq!(row.charged_nanos * 5, cost * 6, "{row:?}");
    }
    for status in ["ok", "fallback_ok"] {
        let priced = by_status(status);
        assert!(!priced.is_empty(), "no {status} row: {rows:?}");
        for row in priced {
            assert_eq!(row.cost_nanos, Some(COST), "{row:?}");
            assert_eq!(row.charged_nanos, COST * 6 / 5, "{row:?}");
        }
    }
    let partial_row = by_status("partial");
    assert_eq!(partial_row.len(), 1, "{rows:?}");
    assert!(partial_row[0].charged_nanos > 0);
    for row in by_status("cache_hit")
        .into_iter()
        .chain(by_status("upstream_error"))
    {
        assert_eq!((row.charged_nanos, row.cost_nanos), (0, Some(0)), "{row:?}");
    }

    let report = spend(&app, &tenant).await;
    let charged: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    let cost: i64 = rows.iter().filter_map(|r| r.cost_nanos).sum();
    assert_eq!(nanos(&report["total"]["cost"]), charged);
    assert_eq!(nanos(&report["total"]["provider_cost"]), cost);
    assert_eq!(nanos(&report["total"]["margin"]), charged - cost);
    let budget = app.budget(&tenant).await;
    assert_eq!(nanos(&budget["committed"]), charged, "{budget}");
}

#[actix_web::test]
async fn a_negotiated_price_replaces_the_markup_and_a_tenant_on_no_plan_pays_the_cost() {
    let app = spawn_app(setup()).await;
    let (big, big_key) = app.tenant_with_key("free", json!({"plan": "bigco"})).await;
    let (plain, plain_key) = app.tenant_with_key("free", json!({})).await;

    let negotiated = app.chat(&big_key, &chat_body("pl-fast")).await;
    let marked_up = app.chat(&big_key, &chat_body("pl-fallback")).await;
    let at_cost = app.chat(&plain_key, &chat_body("pl-fast")).await;

    // 100 × 1 + 10 × 4 per 1M, below the cost: a negative margin.
    assert_eq!(negotiated.header("x-tollgate-cost"), Some("0.00014"));
    // The secondary's model has no negotiated price: 50 % over its cost.
    assert_eq!(marked_up.header("x-tollgate-cost"), Some("0.00042"));
    assert_eq!(at_cost.header("x-tollgate-cost"), Some("0.00028"));
    let big_report = spend(&app, &big).await;
    assert_eq!(nanos(&big_report["total"]["cost"]), 140_000 + 420_000);
    assert_eq!(nanos(&big_report["total"]["provider_cost"]), 2 * COST);
    assert_eq!(
        nanos(&big_report["total"]["margin"]),
        140_000 + 420_000 - 2 * COST
    );
    let rows = app.ledger_rows(&plain).await;
    assert_eq!(rows[0].plan, None);
    assert_eq!(
        (rows[0].charged_nanos, rows[0].cost_nanos),
        (COST, Some(COST))
    );
    let plain_report = spend(&app, &plain).await;
    assert_eq!(nanos(&plain_report["total"]["margin"]), 0);

    // Both layers recompute from the token counts: under the prices and
    // plans in force, to the nano-unit; under a plan the table lacks, the
    // cost is repriced and the charge kept.
    let config = &app.gateway.config;
    let db = app.gateway.directory.db();
    let run = tollgate::admin::reprice::RepriceRun {
        tenant: Some(&big),
        ..Default::default()
    };
    let same = tollgate::admin::reprice::reprice(db, &config.calendar, &config.billing(), run)
        .await
        .unwrap();
    assert_eq!(same.repriced_total, same.current_total);
    assert_eq!(same.repriced_cost_total, same.current_cost_total);
    assert_eq!(same.current_total.to_db(), 140_000 + 420_000);
    assert_eq!(same.current_cost_total.to_db(), 2 * COST);
    let no_plans = tollgate::config::Billing {
        plans: std::collections::BTreeMap::new(),
        ..config.billing()
    };
    let without = tollgate::admin::reprice::reprice(db, &config.calendar, &no_plans, run)
        .await
        .unwrap();
    assert_eq!(without.unplanned, ["bigco"]);
    assert_eq!(without.repriced_total, same.current_total);
    assert_eq!(without.repriced_cost_total.to_db(), 2 * COST);
}

#[actix_web::test]
async fn the_hold_is_made_at_the_plans_prices() {
    let app = spawn_app(setup()).await;
    // The worst case of one short request with 100 tokens out: about 0.00082
    // at cost, about 0.00098 at the plan's 20 % more.
    let (_, at_cost) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.0009"}))
        .await;
    let (_, resale) = app
        .tenant_with_key(
            "free",
            json!({"monthly_budget": "0.0009", "plan": "resale"}),
        )
        .await;

    let fits = app.chat(&at_cost, &chat_body("pl-fast")).await;
    let refused = app.chat(&resale, &chat_body("pl-fast")).await;

    assert_eq!(fits.status, 200, "{}", fits.raw);
    assert_eq!(refused.status, 402, "{}", refused.raw);
}

#[actix_web::test]
async fn plans_are_checked_where_they_are_named() {
    let app = spawn_app(setup()).await;
    let (tenant, _) = app.tenant_with_key("free", json!({})).await;
    let path = format!("/tenants/{tenant}");

    let unknown = app
        .admin("PATCH", &path, Some(json!({"plan": "gold"})))
        .await;
    let set = app
        .admin("PATCH", &path, Some(json!({"plan": "resale"})))
        .await;
    let back = app
        .admin("PATCH", &path, Some(json!({"plan": "cost"})))
        .await;

    assert_eq!(unknown.status, 400, "{}", unknown.raw);
    assert_eq!(unknown.body["error"]["param"], "plan");
    assert_eq!(set.body["plan"], "resale", "{}", set.raw);
    assert_eq!(back.body["plan"], "cost", "{}", back.raw);
}

/// A row charged its hold (the attempt timed out after it was sent, so the
/// provider may have billed it) costs the same hold at the providers' prices.
#[actix_web::test]
async fn a_row_charged_its_hold_costs_the_hold_at_the_providers_prices() {
    let app = spawn_app(
        setup()
            .provider("impatient", "openai", Upstream::Fake)
            .set("providers.impatient.timeout_ms", 300)
            .set("providers.impatient.max_attempts", 1)
            .route("pl-timeout", &["impatient/delay-2000ms"])
            .tier("paid", &["pl-timeout"], 1000, 100),
    )
    .await;
    let (resale, resale_key) = app.tenant_with_key("paid", json!({"plan": "resale"})).await;
    let (at_cost, cost_key) = app.tenant_with_key("paid", json!({})).await;

    for key in [&resale_key, &cost_key] {
        let reply = app.chat(key, &chat_body("pl-timeout")).await;
        assert_eq!(reply.status, 502, "{}", reply.raw);
    }

    let resale_rows = app.ledger_rows(&resale).await;
    let cost_rows = app.ledger_rows(&at_cost).await;
    for rows in [&resale_rows, &cost_rows] {
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].usage_kind, "unknown");
        assert_eq!(rows[0].charged_nanos, rows[0].reserved_nanos);
    }
    // 20 % over 2 / 8 per 1M is 2.4 / 9.6: exact, so the hold is 6/5 of its cost.
    let row = &resale_rows[0];
    assert_eq!(
        row.cost_nanos.map(|c| c * 6),
        Some(row.charged_nanos * 5),
        "{row:?}"
    );
    assert_eq!(cost_rows[0].cost_nanos, Some(cost_rows[0].charged_nanos));
    let report = spend(&app, &resale).await;
    let margin = nanos(&report["rows"][0]["margin"]);
    assert_eq!(margin, row.charged_nanos / 6, "{report}");
}

#[actix_web::test]
async fn a_plan_that_charges_cache_hits_holds_each_in_the_budget_until_it_is_spent() {
    let app = spawn_app(setup()).await;
    // The miss is held at 100 × 2.4 + 100 × 9.6 per 1M: the whole budget.
    let (tenant, key) = app
        .tenant_with_key("free", json!({"plan": "hits", "monthly_budget": "0.0012"}))
        .await;

    let miss = app.chat(&key, &chat_body("pl-cached")).await;
    assert_eq!(miss.status, 200, "{}", miss.raw);
    assert_eq!(miss.header("x-tollgate-cost"), Some("0.000336"));
    // Each hit: 12.5 % of the 0.000336 the answer is charged, 0.000042; the
    // 0.000864 left after the miss funds 20 of them, not 21.
    let mut served = 0;
    let refused = loop {
        let hit = app.chat(&key, &chat_body("pl-cached")).await;
        if hit.status != 200 {
            break hit;
        }
        assert_eq!(hit.header("x-tollgate-cache"), Some("hit"), "{}", hit.raw);
        assert_eq!(hit.header("x-tollgate-cost"), Some("0.000042"));
        served += 1;
        assert!(served <= 20, "a hit past the budget was served");
    };
    assert_eq!(served, 20);
    assert_eq!(refused.status, 402, "{}", refused.raw);

    let rows = app.ledger_rows_eventually(&tenant, 21).await;
    let hits: Vec<_> = rows.iter().filter(|r| r.status == "cache_hit").collect();
    assert_eq!(hits.len(), 20, "{rows:?}");
    for row in &hits {
        assert_eq!(
            (row.charged_nanos, row.cost_nanos),
            (42_000, Some(0)),
            "{row:?}"
        );
    }
    let total: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert_eq!(total, 336_000 + 20 * 42_000);
    let budget = app
        .admin("GET", &format!("/tenants/{tenant}/budget"), None)
        .await;
    assert_eq!(budget.body["committed"], "0.001176", "{}", budget.raw);
    assert_eq!(budget.body["reserved"], "0", "{}", budget.raw);
}
