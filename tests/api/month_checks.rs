//! Numbers finance checks across a close: a month's invoices, the ledger and
//! the FOCUS export agree to the nano-unit (`invoice --check --month`), late
//! rows and a reprice's adjustments included; a reprice over a closed month
//! is refused unless it writes adjustments, which it writes once.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::ConnectionTrait;
use serde_json::{Value, json};
use tollgate::clock::ManualClock;
use tollgate::export::outbox;
use tollgate::ledger::AttemptStatus;
use tollgate::money::Nanos;
use tollgate::period::parse_instant;

use crate::invoices::row;
use crate::support::receiver::{Answer, FlakyReceiver};
use crate::support::{TestApp, TestSetup, done_if, entry, spawn_app, wait_until};

async fn setup() -> (TestApp, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(
        parse_instant("2026-07-15T12:00:00Z").unwrap(),
    ));
    let app = spawn_app(
        TestSetup::new()
            .clock(clock.clone())
            .route("fast", &["primary/ok"])
            .tier("free", &["fast"], 1000, 100)
            .set("billing.timezone", "Asia/Shanghai"),
    )
    .await;
    (app, clock)
}

/// Writes rows of model `m` (10 prompt, 5 completion tokens) at the given
/// instants and charges.
async fn insert(app: &TestApp, tenant: &str, rows: &[(&str, i64)]) {
    insert_for_sinks(app, tenant, rows, &[]).await;
}

/// `insert`, as the ledger writes rows when export sinks are configured:
/// each queued for every sink in `sinks` in the transaction that writes it.
async fn insert_for_sinks(app: &TestApp, tenant: &str, rows: &[(&str, i64)], sinks: &[String]) {
    let events: Vec<_> = rows
        .iter()
        .map(|(at, charged)| row(tenant, "m", "chat", AttemptStatus::Ok, at, *charged))
        .collect();
    tollgate::ledger::repo::insert_exported_batch(
        app.gateway.directory.db(),
        &events,
        &tollgate::calendar::Calendar::utc(),
        sinks,
    )
    .await
    .unwrap();
}

fn nanos(value: &Value) -> i64 {
    Nanos::parse_decimal(value.as_str().unwrap_or("0"))
        .unwrap()
        .to_db()
}

/// An invoice's (total, credits, closed, adjustments' amount, adjustments'
/// credits), its own check matching.
async fn invoice(app: &TestApp, tenant: &str, month: &str) -> (i64, i64, bool, i64, i64) {
    let reply = app
        .admin("GET", &format!("/tenants/{tenant}/invoices/{month}"), None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["check"]["matches"], true, "{}", reply.raw);
    let invoice = &reply.body["invoice"];
    let adjusted: Vec<&Value> = invoice["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|line| line["adjustment"] == true)
        .collect();
    (
        nanos(&invoice["total"]),
        nanos(&invoice["credits"]),
        invoice["closed"].as_bool().unwrap(),
        adjusted.iter().map(|line| nanos(&line["amount"])).sum(),
        adjusted.iter().map(|line| nanos(&line["credit"])).sum(),
    )
}

/// Runs the CLI on the app's configuration: (exit success, stdout, stderr).
async fn run(app: &TestApp, args: &[&str]) -> (bool, String, String) {
    let mut command_line = vec!["--config".to_owned(), app.config_path.display().to_string()];
    command_line.extend(args.iter().map(|a| (*a).to_owned()));
    let output = actix_web::rt::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(&command_line)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    (
        output.status.success(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// `invoice --check --month`: its exit, and its report when it printed one.
async fn check(app: &TestApp, month: &str) -> (bool, Value, String) {
    let (ok, out, err) = run(app, &["invoice", "--check", "--month", month]).await;
    let report = serde_json::from_str(&out).unwrap_or(Value::Null);
    (ok, report, err)
}

#[actix_web::test]
async fn a_month_closed_with_late_rows_checks_out_and_a_charge_changed_behind_its_back_does_not() {
    let (app, _) = setup().await;
    let (a, _) = app.tenant_with_key("free", json!({})).await;
    let (b, _) = app.tenant_with_key("free", json!({})).await;
    insert(
        &app,
        &a,
        &[("2026-06-05T00:00:00Z", 3), ("2026-06-20T00:00:00Z", 7)],
    )
    .await;
    insert(&app, &b, &[("2026-06-10T00:00:00Z", 100)]).await;
    let closed = app.admin("POST", "/periods/2026-06/close", None).await;
    assert_eq!(closed.status, 200, "{}", closed.raw);

    // Written after the close: late rows stamped in June and in May (before
    // the ledger's first month, closed with June), and July's own.
    insert(&app, &a, &[("2026-05-20T00:00:00Z", 50_000)]).await;
    insert(
        &app,
        &a,
        &[("2026-06-25T00:00:00Z", 1_000), ("2026-07-03T00:00:00Z", 5)],
    )
    .await;
    insert(&app, &b, &[("2026-06-28T00:00:00Z", 20_000)]).await;
    assert_eq!(invoice(&app, &a, "2026-06").await, (10, 0, true, 0, 0));
    assert_eq!(invoice(&app, &b, "2026-06").await, (100, 0, true, 0, 0));
    assert_eq!(
        invoice(&app, &a, "2026-07").await,
        (51_005, 0, false, 51_000, 0)
    );
    assert_eq!(
        invoice(&app, &b, "2026-07").await,
        (20_000, 0, false, 20_000, 0)
    );

    // June's invoices hold its rows up to the close; its days hold the late ones too.
    let (ok, june, err) = check(&app, "2026-06").await;
    assert!(ok, "{err}\n{june}");
    assert_eq!(june["standing"], "closed");
    assert_eq!(nanos(&june["booked"]["debit"]), 110, "{june}");
    assert_eq!(nanos(&june["stamped"]["debit"]), 21_110, "{june}");
    assert_eq!(june["stamped"]["rows"], 5, "{june}");
    let (ok, july, err) = check(&app, "2026-07").await;
    assert!(ok, "{err}\n{july}");
    assert_eq!(july["standing"], "first_open");
    assert_eq!(nanos(&july["booked"]["debit"]), 71_005, "{july}");
    assert_eq!(nanos(&july["stamped"]["debit"]), 5, "{july}");
    let sources: Vec<&str> = july["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["invoices", "focus_export"]);
    let (ok, may, err) = check(&app, "2026-05").await;
    assert!(ok, "{err}\n{may}");
    assert_eq!(nanos(&may["stamped"]["debit"]), 50_000, "{may}");
    assert_eq!(nanos(&may["booked"]["debit"]), 0, "{may}");
    let api = app
        .admin("GET", "/invoices/check?month=2026-07", None)
        .await;
    assert_eq!(api.status, 200, "{}", api.raw);
    assert_eq!(api.body["agrees"], true, "{}", api.raw);
    let bad = app
        .admin("GET", "/invoices/check?month=2026-13", None)
        .await;
    assert_eq!(bad.status, 400, "{}", bad.raw);

    // A charge of closed June changed in the database, not through the ledger.
    app.gateway
        .directory
        .db()
        .execute_unprepared("UPDATE usage SET charged_nanos = 8 WHERE charged_nanos = 7")
        .await
        .unwrap();
    let (ok, june, err) = check(&app, "2026-06").await;
    assert!(!ok, "{june}");
    assert_eq!(june["agrees"], false, "{june}");
    assert!(
        err.contains("2026-06")
            && err.contains(&format!("invoices of tenant {a} says 0.00000001 in 2 rows"))
            && err.contains("the ledger's rows booked in the month 0.000000011 in 2 rows"),
        "{err}"
    );
    assert!(
        err.contains("invoices in total says 0.00000011 in 3 rows"),
        "{err}"
    );
    // The export reads the rows as they are now, as the ledger's sum does.
    assert!(!err.contains("focus_export"), "{err}");
    assert!(!err.contains(&format!("tenant {b}")), "{err}");
    let (ok, _, err) = check(&app, "2026-07").await;
    assert!(ok, "July holds none of June's own rows: {err}");
    let api = app
        .admin("GET", "/invoices/check?month=2026-06", None)
        .await;
    assert_eq!(api.body["agrees"], false, "{}", api.raw);
}

/// The price file of the reprice: `primary/m` at 1000 in and 2000 out per
/// 1M tokens, so each row of 10 in and 5 out is charged 0.02.
fn prices(app: &TestApp) -> String {
    let path = app.dir.path().join("reprice.toml");
    std::fs::write(
        &path,
        "[[prices]]\nprovider = \"primary\"\nmodel = \"m\"\ninput = \"1000\"\noutput = \"2000\"\n",
    )
    .unwrap();
    path.display().to_string()
}

#[actix_web::test]
async fn a_reprice_over_a_closed_month_writes_its_differences_once_on_the_first_open_month() {
    let (app, clock) = setup().await;
    let (tenant, _) = app.tenant_with_key("free", json!({})).await;
    insert(
        &app,
        &tenant,
        &[
            ("2026-06-05T00:00:00Z", 3),
            ("2026-06-20T00:00:00Z", 30_000_000),
        ],
    )
    .await;
    let closed = app.admin("POST", "/periods/2026-06/close", None).await;
    assert_eq!(closed.status, 200, "{}", closed.raw);
    insert(&app, &tenant, &[("2026-07-03T00:00:00Z", 5)]).await;
    let prices = prices(&app);
    let june = ["--from", "2026-06-01", "--to", "2026-06-30"];
    let reprice = |extra: &'static [&'static str]| {
        let mut args = vec!["reprice", "--prices", prices.as_str()];
        args.extend(june);
        args.extend(extra);
        args
    };

    let (ok, _, err) = run(&app, &reprice(&[])).await;
    assert!(!ok, "a closed month is repriced only into adjustments");
    assert!(
        err.contains("2026-06") && err.contains("--write-adjustments"),
        "{err}"
    );
    let api = app
        .admin(
            "POST",
            "/reprice",
            Some(json!({"from": "2026-06-01", "to": "2026-06-30"})),
        )
        .await;
    assert_eq!(api.status, 409, "{}", api.raw);
    assert!(api.raw.contains("2026-06"), "{}", api.raw);
    // July is open: reprice only reports, as before.
    let open = app
        .admin(
            "POST",
            "/reprice",
            Some(json!({"from": "2026-07-01", "to": "2026-07-31"})),
        )
        .await;
    assert_eq!(open.status, 200, "{}", open.raw);
    assert!(open.body.get("adjustments").is_none(), "{}", open.raw);

    let (ok, out, err) = run(&app, &reprice(&["--write-adjustments"])).await;
    assert!(ok, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let written = &report["adjustments"];
    assert_eq!(written["rows_written"], 2, "{report}");
    assert_eq!(nanos(&written["debit"]), 20_000_000 - 3, "{report}");
    assert_eq!(nanos(&written["credit"]), 10_000_000, "{report}");
    assert_eq!(written["by_key"][0]["key"], "key-1", "{report}");
    assert_eq!(written["by_key"][0]["model"], "m", "{report}");
    assert_eq!(report["closed_months"], json!(["2026-06"]));

    // June's invoice is as it closed; July's shows the differences with their reason.
    assert_eq!(
        invoice(&app, &tenant, "2026-06").await,
        (30_000_003, 0, true, 0, 0)
    );
    assert_eq!(
        invoice(&app, &tenant, "2026-07").await,
        (5 + 19_999_997, 10_000_000, false, 19_999_997, 10_000_000)
    );
    let july = app
        .admin("GET", &format!("/tenants/{tenant}/invoices/2026-07"), None)
        .await;
    let version = report["price_version"].as_str().unwrap();
    let reason = format!("repriced at price version {version}");
    assert!(
        july.body["invoice"]["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|line| line["reason"] == reason.as_str()),
        "{}",
        july.raw
    );

    // The same run again writes nothing; the rows are billed at the new prices now.
    let (ok, out, err) = run(&app, &reprice(&["--write-adjustments"])).await;
    assert!(ok, "{err}");
    let again: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(again["adjustments"]["rows_written"], 0, "{again}");
    assert_eq!(again["adjustments"]["by_key"], json!([]), "{again}");
    assert_eq!(again["current_total"], again["repriced_total"], "{again}");
    // Another run over part of the span has a key of its own and finds the
    // rows billed at the new prices already.
    let (ok, out, err) = run(
        &app,
        &[
            "reprice",
            "--prices",
            &prices,
            "--from",
            "2026-06-05",
            "--to",
            "2026-06-05",
            "--write-adjustments",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let part: Value = serde_json::from_str(&out).unwrap();
    assert_ne!(
        part["adjustments"]["run_key"],
        again["adjustments"]["run_key"]
    );
    assert_eq!(part["rows"], 1, "{part}");
    assert_eq!(part["adjustments"]["rows_written"], 0, "{part}");
    assert_eq!(
        invoice(&app, &tenant, "2026-07").await,
        (5 + 19_999_997, 10_000_000, false, 19_999_997, 10_000_000)
    );

    for month in ["2026-06", "2026-07"] {
        let (ok, report, err) = check(&app, month).await;
        assert!(ok, "{month}: {err}\n{report}");
    }
    // July closes with its adjustments kept, and still checks out.
    clock.set_ms(parse_instant("2026-08-02T00:00:00Z").unwrap());
    let closed = app.admin("POST", "/periods/2026-07/close", None).await;
    assert_eq!(closed.status, 200, "{}", closed.raw);
    assert_eq!(
        invoice(&app, &tenant, "2026-07").await,
        (5 + 19_999_997, 10_000_000, true, 19_999_997, 10_000_000)
    );
    let (ok, report, err) = check(&app, "2026-07").await;
    assert!(ok, "{err}\n{report}");
}

#[actix_web::test]
async fn what_an_export_sink_delivered_agrees_across_a_close_with_late_rows() {
    let sinks = ["billing".to_owned()];
    let receiver = FlakyReceiver::start(vec![Answer::Ok, Answer::RecordThen500]).await;
    let clock = Arc::new(ManualClock::new(
        parse_instant("2026-07-15T12:00:00Z").unwrap(),
    ));
    let sink = entry([
        ("name", "billing".into()),
        ("kind", "cloudevents".into()),
        ("url", receiver.url.clone().into()),
        ("timeout_ms", 1_000.into()),
        ("batch_rows", 2.into()),
    ]);
    let app = spawn_app(
        TestSetup::new()
            .clock(clock)
            .route("fast", &["primary/ok"])
            .tier("free", &["fast"], 1000, 100)
            .set("billing.timezone", "Asia/Shanghai")
            .push("export.sinks", sink),
    )
    .await;
    let (a, _) = app.tenant_with_key("free", json!({})).await;
    insert_for_sinks(
        &app,
        &a,
        &[("2026-06-05T00:00:00Z", 3), ("2026-06-20T00:00:00Z", 7)],
        &sinks,
    )
    .await;
    let closed = app.admin("POST", "/periods/2026-06/close", None).await;
    assert_eq!(closed.status, 200, "{}", closed.raw);
    insert_for_sinks(
        &app,
        &a,
        &[("2026-06-25T00:00:00Z", 1_000), ("2026-07-03T00:00:00Z", 5)],
        &sinks,
    )
    .await;
    let db = app.gateway.directory.db().clone();
    wait_until(Duration::from_mins(1), "the outbox to drain", async || {
        let pending = outbox::pending(&db, "billing", None).await.unwrap();
        done_if(pending.rows == 0, pending)
    })
    .await;

    for month in ["2026-06", "2026-07"] {
        let (ok, report, err) = check(&app, month).await;
        assert!(ok, "{month}: {report} {err}");
        let names: Vec<&str> = report["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"export sink `billing`"), "{names:?}");
    }
    // June's kept invoice has 10; the sink and the rows stamped in June, 1,010.
    assert_eq!(invoice(&app, &a, "2026-06").await, (10, 0, true, 0, 0));
    let june = tollgate::export::delivered_totals(&db, "billing", "2026-06")
        .await
        .unwrap();
    assert_eq!((june.rows, june.nanos.get()), (3, 1_010));

    // A sink that booked less than it was sent is a difference naming it.
    db.execute_unprepared(
        "UPDATE export_delivered SET nanos = nanos - 1 WHERE sink = 'billing' AND month = '2026-06'",
    )
    .await
    .unwrap();
    let (ok, report, err) = check(&app, "2026-06").await;
    assert!(!ok, "{report}");
    assert!(err.contains("export sink `billing`"), "{err}");
}
