//! Reconciliation with the providers' bills: their usage and cost exports
//! (fixtures in OpenAI's and Anthropic's own shapes) imported, and the drift
//! from the ledger per billing day, model and provider key, figured by hand
//! from the fixtures and the ledger rows written here.

use sea_orm::EntityTrait;
use serde_json::{Value, json};
use tollgate::ids::{EventId, KeyId, RequestId, TenantId};
use tollgate::ledger::{AttemptStatus, UsageEvent, UsageKind};
use tollgate::money::Nanos;
use tollgate::period::parse_instant;
use tollgate::pricing::Usage;
use tollgate::telemetry::metrics::ratio;

use crate::support::process::cli;
use crate::support::{Reply, TestApp, TestSetup, Upstream, spawn_app, write_config};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/bills/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn setup() -> TestSetup {
    TestSetup::new()
        .provider("claude", "anthropic", Upstream::Anthropic)
        .set("billing.currency", "USD")
        .set("reconcile.key_ids.primary", "key_gateway")
        .set("reconcile.key_ids.claude", "apikey_gateway")
        .set("reconcile.max_drift_percent", 5)
}

/// A ledger row of `provider`'s `model` at `at` that cost `cost` nano-units.
fn row(provider: &str, model: &str, at: &str, tokens: [u64; 4], cost: u64) -> UsageEvent {
    let [
        prompt_tokens,
        cached_tokens,
        cache_write_tokens,
        completion_tokens,
    ] = tokens;
    UsageEvent {
        event_id: EventId::generate(),
        request_id: RequestId::generate(),
        client_request_id: None,
        trace_id: None,
        tenant: TenantId::new("bills"),
        key: KeyId::new("key-1"),
        feature: "agent".to_owned(),
        end_user: None,
        session: None,
        api: tollgate::ledger::Api::Chat,
        route: "fast".to_owned(),
        provider: provider.to_owned(),
        model: model.to_owned(),
        attempt: 1,
        status: AttemptStatus::Ok,
        upstream_status: Some(200),
        usage: Usage {
            prompt_tokens,
            cached_tokens,
            cache_write_tokens,
            completion_tokens,
            web_searches: 0,
        },
        usage_kind: UsageKind::Reported,
        reserved: Nanos::new(cost * 2),
        // The tenant is charged a plan's price: the drift reads the cost.
        charged: Nanos::new(cost * 3),
        cost: Some(Nanos::new(cost)),
        plan: Some("resale".to_owned()),
        price_version: "test".to_owned(),
        latency_ms: 1,
        ttft_ms: None,
        error: None,
        cache: None,
        created_at_ms: parse_instant(at).unwrap(),
    }
}

const MINI: &str = "gpt-4o-mini-2024-07-18";
const GPT4O: &str = "gpt-4o-2024-08-06";
const SONNET: &str = "claude-sonnet-4-5-20250929";
const HAIKU: &str = "claude-haiku-4-5-20251001";

/// The OpenAI rows are `openai`'s (a provider name of the test's own: the
/// drift gauge is process-wide and other tests import for `primary`).
async fn write_ledger(app: &TestApp, openai: &str) {
    let rows = vec![
        row(
            openai,
            MINI,
            "2026-12-01T10:00:00Z",
            [500, 100, 0, 250],
            200_000,
        ),
        row(
            openai,
            MINI,
            "2026-12-01T23:59:59Z",
            [500, 100, 0, 250],
            200_000,
        ),
        row(
            openai,
            GPT4O,
            "2026-12-01T12:00:00Z",
            [2000, 0, 0, 400],
            9_000_000,
        ),
        row(
            openai,
            MINI,
            "2026-12-02T23:30:00Z",
            [600, 0, 0, 300],
            270_000,
        ),
        row(
            "claude",
            SONNET,
            "2026-12-01T08:00:00Z",
            [2000, 1000, 200, 300],
            7_900_000,
        ),
        row(
            "claude",
            HAIKU,
            "2026-12-02T08:00:00Z",
            [150, 0, 50, 40],
            100_000,
        ),
        // Outside the range, and another provider's.
        row(openai, MINI, "2026-11-30T23:59:59Z", [1, 0, 0, 1], 5),
        row("secondary", MINI, "2026-12-01T10:00:00Z", [1, 0, 0, 1], 7),
    ];
    let db = app.gateway.directory.db();
    tollgate::ledger::repo::insert_batch(db, &rows, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
}

async fn import(app: &TestApp, provider: &str, pages: &[&str]) -> Reply {
    let body: Vec<Value> = pages
        .iter()
        .map(|name| serde_json::from_str(&fixture(name)).unwrap())
        .collect();
    app.admin(
        "POST",
        &format!("/bills/import?provider={provider}"),
        Some(Value::Array(body)),
    )
    .await
}

fn find<'a>(report: &'a Value, day: &str, provider: &str, model: &str, key: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["day"] == day
                && r["provider"] == provider
                && r["model"] == model
                && r["key_id"] == key
        })
        .unwrap_or_else(|| panic!("no {day} {provider} {model} {key} row in {report}"))
}

/// A row's share, bit for bit (the same division gives the same bits).
fn share(row: &Value) -> u64 {
    row["share"].as_f64().unwrap().to_bits()
}

#[actix_web::test]
async fn openai_usage_and_costs_are_compared_with_the_ledger_per_day_model_and_key() {
    let app = spawn_app(
        setup()
            .provider("billed", "openai", Upstream::Fake)
            .set("reconcile.key_ids.billed", "key_gateway"),
    )
    .await;
    write_ledger(&app, "billed").await;
    let usage = import(
        &app,
        "billed",
        &["openai-usage-page1.json", "openai-usage-page2.json"],
    )
    .await;
    assert_eq!(usage.status, 200, "{}", usage.raw);
    assert_eq!(usage.body["reports"][0]["report"], "openai_usage");
    assert_eq!(usage.body["reports"][0]["buckets"], 3);
    assert_eq!(usage.body["reports"][0]["lines"], 5);
    assert_eq!(usage.body["incomplete"], false);
    let costs = import(&app, "billed", &["openai-costs.json"]).await;
    assert_eq!(costs.status, 200, "{}", costs.raw);
    assert_eq!(costs.body["reports"][0]["lines"], 7);

    let reply = app
        .admin(
            "GET",
            "/bills/drift?provider=billed&from=2026-12-01&to=2026-12-03",
            None,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let report = &reply.body;
    assert_eq!(report["timezone"], "UTC");
    assert_eq!(report["currency"], "USD");
    // Mini on day 1 through the gateway's key: two rows of 0.0002 against
    // 0.00015 + 0.0003 billed.
    let mini = find(report, "2026-12-01", "billed", MINI, "key_gateway");
    assert_eq!(mini["ledger_cost"], "0.0004");
    assert_eq!(mini["bill_cost"], "0.00045");
    assert_eq!(mini["difference"], "0.00005");
    assert_eq!(share(mini), ratio(50_000, 450_000).to_bits(), "{mini}");
    assert_eq!(mini["ledger_attempts"], 2);
    assert_eq!(
        mini["ledger_tokens"],
        json!({"input": 1000, "cached": 200, "cache_write": 0, "output": 500})
    );
    assert_eq!(
        mini["bill_tokens"],
        json!({"input": 1000, "cached": 200, "cache_write": 0, "output": 500})
    );
    assert_eq!(mini["bill_requests"], 2);
    // 0.004000000000000001 is read from its digits: 0.004 to the nano-unit.
    let gpt4o = find(report, "2026-12-01", "billed", GPT4O, "key_gateway");
    assert_eq!(gpt4o["ledger_cost"], "0.009");
    assert_eq!(gpt4o["bill_cost"], "0.009");
    assert_eq!(gpt4o["difference"], "0");
    // Another key of the account: billed, not through the gateway.
    let other = find(report, "2026-12-01", "billed", MINI, "key_other");
    assert_eq!(other["ledger_cost"], "0");
    assert_eq!(other["bill_cost"], "0.1");
    assert_eq!(other["share"], 1.0);
    assert_eq!(other["bill_tokens"]["input"], 300);
    // 9e-5 + 0.00018 against a row at 23:30 UTC of day 2.
    let day2 = find(report, "2026-12-02", "billed", MINI, "key_gateway");
    assert_eq!(day2["bill_cost"], "0.00027");
    assert_eq!(day2["difference"], "0");
    // Day 3: usage exported, no costs; no ledger rows.
    let day3 = find(report, "2026-12-03", "billed", MINI, "key_gateway");
    assert_eq!(day3["bill_cost"], Value::Null);
    assert_eq!(day3["ledger_cost"], "0");
    assert_eq!(day3["bill_tokens"]["input"], 100);
    assert_eq!(report["rows"].as_array().unwrap().len(), 5, "{report}");

    // Over the days the costs cover: ledger 0.0004 + 0.009 + 0.00027,
    // bill 0.00045 + 0.1 + 0.009 + 0.00027.
    let total = &report["providers"][0];
    assert_eq!(total["provider"], "billed");
    assert_eq!(total["days"], json!(["2026-12-01", "2026-12-02"]));
    assert_eq!(total["ledger_cost"], "0.00967");
    assert_eq!(total["bill_cost"], "0.10972");
    assert_eq!(total["difference"], "0.10005");
    let expected = ratio(100_050_000, 109_720_000);
    assert_eq!(share(total), expected.to_bits());
    let scrape = app.get("/metrics", "").await.raw;
    let gauge = scrape
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_bill_drift_ratio{provider=\"billed\"} "))
        .unwrap_or_else(|| panic!("no drift gauge in {scrape}"));
    assert_eq!(
        gauge.parse::<f64>().unwrap().to_bits(),
        expected.to_bits(),
        "{gauge}"
    );
    assert!(
        scrape.contains("tollgate_bill_drift_limit_ratio 0.05"),
        "{scrape}"
    );
}

#[actix_web::test]
async fn anthropic_usage_and_cost_reports_are_compared_under_the_gateway_s_key() {
    let app = spawn_app(setup()).await;
    write_ledger(&app, "primary").await;
    // The first page alone says more follow.
    let first = import(&app, "claude", &["anthropic-usage-page1.json"]).await;
    assert_eq!(first.body["incomplete"], true, "{}", first.raw);
    let usage = import(
        &app,
        "claude",
        &["anthropic-usage-page1.json", "anthropic-usage-page2.json"],
    )
    .await;
    assert_eq!(usage.status, 200, "{}", usage.raw);
    assert_eq!(usage.body["reports"][0]["report"], "anthropic_usage");
    assert_eq!(usage.body["incomplete"], false);
    let cost = import(&app, "claude", &["anthropic-cost.json"]).await;
    assert_eq!(cost.status, 200, "{}", cost.raw);

    let reply = app
        .admin(
            "GET",
            "/bills/drift?provider=claude&from=2026-12-01&to=2026-12-02",
            None,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let report = &reply.body;
    // Cents: 0.24 + 0.45 + 0.03 + 0.075 = 0.795 ¢ = $0.00795; a cost report
    // names no key, so it counts for the gateway's.
    let sonnet = find(report, "2026-12-01", "claude", SONNET, "apikey_gateway");
    assert_eq!(sonnet["bill_cost"], "0.00795");
    assert_eq!(sonnet["ledger_cost"], "0.0079");
    assert_eq!(sonnet["difference"], "0.00005");
    assert_eq!(share(sonnet), ratio(50_000, 7_950_000).to_bits());
    // 800 uncached + 1000 read + 200 written.
    assert_eq!(
        sonnet["bill_tokens"],
        json!({"input": 2000, "cached": 1000, "cache_write": 200, "output": 300})
    );
    assert_eq!(
        sonnet["ledger_tokens"],
        json!({"input": 2000, "cached": 1000, "cache_write": 200, "output": 300})
    );
    let haiku = find(report, "2026-12-02", "claude", HAIKU, "apikey_gateway");
    assert_eq!(
        haiku["bill_tokens"],
        json!({"input": 150, "cached": 0, "cache_write": 50, "output": 40})
    );
    assert_eq!(haiku["bill_cost"], Value::Null);
    assert_eq!(haiku["ledger_cost"], "0.0001");
    let console = find(report, "2026-12-02", "claude", HAIKU, "apikey_console");
    assert_eq!(console["bill_tokens"]["input"], 5000);
    assert_eq!(console["ledger_cost"], "0");
    assert_eq!(report["providers"][0]["days"], json!(["2026-12-01"]));
    assert_eq!(report["providers"][0]["difference"], "0.00005");
}

#[actix_web::test]
async fn importing_the_same_export_again_replaces_its_lines() {
    let app = spawn_app(setup()).await;
    write_ledger(&app, "primary").await;
    for _ in 0..2 {
        let costs = import(&app, "primary", &["openai-costs.json"]).await;
        assert_eq!(costs.status, 200, "{}", costs.raw);
    }
    let reply = app
        .admin(
            "GET",
            "/bills/drift?provider=primary&from=2026-12-01&to=2026-12-02",
            None,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["providers"][0]["bill_cost"], "0.10972");
    let lines = entity::bill_line::Entity::find()
        .all(app.gateway.directory.db())
        .await
        .unwrap();
    assert_eq!(lines.len(), 7);
    // A corrected export of day 1 replaces day 1 only.
    let mut corrected: Value = serde_json::from_str(&fixture("openai-costs.json")).unwrap();
    corrected["data"].as_array_mut().unwrap().truncate(1);
    corrected["data"][0]["results"]
        .as_array_mut()
        .unwrap()
        .truncate(1);
    let reply = app
        .admin("POST", "/bills/import?provider=primary", Some(corrected))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let reply = app
        .admin(
            "GET",
            "/bills/drift?provider=primary&from=2026-12-01&to=2026-12-02",
            None,
        )
        .await;
    // 0.00015 on day 1, 0.00027 on day 2.
    assert_eq!(reply.body["providers"][0]["bill_cost"], "0.00042");
}

#[actix_web::test]
async fn a_bad_export_is_refused_naming_what_is_wrong_and_nothing_is_kept() {
    let app = spawn_app(setup()).await;
    let mut string_amount: Value = serde_json::from_str(&fixture("openai-costs.json")).unwrap();
    string_amount["data"][1]["results"][0]["amount"]["value"] = json!("0.00009");
    let mut no_tokens: Value =
        serde_json::from_str(&fixture("anthropic-usage-page1.json")).unwrap();
    no_tokens["data"][0]["results"][0]
        .as_object_mut()
        .unwrap()
        .remove("output_tokens");
    let mut bad_cents: Value = serde_json::from_str(&fixture("anthropic-cost.json")).unwrap();
    bad_cents["data"][0]["results"][2]["amount"] = json!("0,03");
    let mut euros: Value = serde_json::from_str(&fixture("anthropic-cost.json")).unwrap();
    for result in euros["data"][0]["results"].as_array_mut().unwrap() {
        result["currency"] = json!("EUR");
    }
    let cases = [
        ("primary", json!({"pages": []}), "no `data`"),
        (
            "primary",
            json!({"data": [{"start_time": 1}]}),
            "data[0].end_time: missing",
        ),
        (
            "primary",
            string_amount,
            "data[1].results[0].amount.value: \"0.00009\" is a string, not a number",
        ),
        (
            "claude",
            no_tokens,
            "data[0].results[0].output_tokens: missing",
        ),
        (
            "claude",
            bad_cents,
            "data[0].results[2].amount: `0,03` is not a decimal number",
        ),
        (
            "claude",
            euros,
            "its amounts are in EUR, the ledger's in USD",
        ),
        (
            "nobody",
            json!({"data": []}),
            "`nobody` is not a configured provider",
        ),
    ];
    for (provider, body, expected) in cases {
        let reply = app
            .admin(
                "POST",
                &format!("/bills/import?provider={provider}"),
                Some(body),
            )
            .await;
        assert_eq!(reply.status, 400, "{}", reply.raw);
        assert!(
            reply.error_message().contains(expected),
            "{expected}: {}",
            reply.raw
        );
    }
    // A page given twice in one import would be summed twice.
    let twice = import(&app, "primary", &["openai-costs.json", "openai-costs.json"]).await;
    assert_eq!(twice.status, 400, "{}", twice.raw);
    assert!(
        twice
            .error_message()
            .contains("body[1]: its bucket starting at 1796083200000 ms is in body[0] too"),
        "{}",
        twice.raw
    );
    let lines = entity::bill_line::Entity::find()
        .all(app.gateway.directory.db())
        .await
        .unwrap();
    assert!(lines.is_empty(), "{lines:?}");
    let missing = app.admin("GET", "/bills/drift?from=2026-12-01", None).await;
    assert_eq!(missing.status, 400, "{}", missing.raw);
    assert!(
        missing.error_message().contains("to: required"),
        "{}",
        missing.raw
    );
}

#[actix_web::test]
async fn the_cli_imports_an_export_s_pages_and_prints_the_drift() {
    let setup = setup();
    let env = setup.env_vars().clone();
    let (_dir, config) = write_config(&setup, "http://127.0.0.1:9");
    let page = |name: &str| format!("{}/tests/fixtures/bills/{name}", env!("CARGO_MANIFEST_DIR"));
    let imported = cli(
        &config,
        &env,
        &[
            "bill",
            "import",
            "--provider",
            "primary",
            "--file",
            &page("openai-costs.json"),
        ],
    );
    let imported: Value = serde_json::from_str(&imported).unwrap();
    assert_eq!(
        imported["reports"][0]["report"], "openai_costs",
        "{imported}"
    );
    let drift = cli(
        &config,
        &env,
        &[
            "bill",
            "drift",
            "--provider",
            "primary",
            "--from",
            "2026-12-01",
            "--to",
            "2026-12-02",
            "--json",
        ],
    );
    let drift: Value = serde_json::from_str(&drift).unwrap();
    assert_eq!(drift["providers"][0]["bill_cost"], "0.10972", "{drift}");
    assert_eq!(drift["providers"][0]["ledger_cost"], "0", "{drift}");
    let table = cli(
        &config,
        &env,
        &[
            "bill",
            "drift",
            "--from",
            "2026-12-01",
            "--to",
            "2026-12-01",
        ],
    );
    assert!(table.contains("key_other"), "{table}");
    assert!(table.contains("middle falls in"), "{table}");
}
