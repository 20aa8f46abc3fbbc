use sea_orm::{ConnectionTrait, Database, DbBackend, TransactionTrait};
use serde_json::json;

use crate::support::{TestSetup, chat_body, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/usage-100-0-10"])
        .tier("free", &["fast"], 1000, 100)
}

#[actix_web::test]
async fn requests_are_served_while_the_database_is_write_locked() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    assert_eq!(app.ledger_rows(&tenant).await.len(), 1);

    // Another connection takes a write lock and holds it: on SQLite an open
    // write transaction (the database-wide write lock), on PostgreSQL a lock on
    // the usage table that blocks inserts and lets reads through.
    let locker = Database::connect(app.database_url.as_str()).await.unwrap();
    let txn = locker.begin().await.unwrap();
    let lock = match locker.get_database_backend() {
        DbBackend::Sqlite => {
            "INSERT INTO tenants (id, name, tier, budget_mode, created_at_ms, updated_at_ms) VALUES ('lock', 'lock', 'free', 'strict', 0, 0)"
        }
        DbBackend::Postgres => "LOCK TABLE usage IN EXCLUSIVE MODE",
        DbBackend::MySql => panic!("MySQL is not a Tollgate backend"),
    };
    txn.execute_unprepared(lock).await.unwrap();

    for _ in 0..5 {
        let reply = app.chat(&key, &chat_body("fast")).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }
    // Served, yet not written: the rows wait in the ledger, not in a handler.
    app.settled().await;
    assert!(
        app.gateway.ledger.backlog() >= 5,
        "backlog {}",
        app.gateway.ledger.backlog()
    );
    let written = tollgate::ledger::repo::tenant_rows(
        app.gateway.directory.db(),
        &tollgate::ids::TenantId::new(tenant.as_str()),
    )
    .await
    .unwrap();
    assert_eq!(written.len(), 1);

    txn.rollback().await.unwrap();
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 6);
    assert_eq!(app.gateway.ledger.backlog(), 0);
}

#[actix_web::test]
async fn a_served_call_is_found_by_the_spend_command() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let reply = app
        .chat_with(
            &key,
            &chat_body("fast"),
            &[("x-tollgate-feature", "cli-check")],
        )
        .await;
    assert_eq!(reply.status, 200);
    app.flush_ledger().await;

    let config = app.config_path.clone();
    let args = [
        "--config".to_owned(),
        config.display().to_string(),
        "spend".into(),
        "--tenant".into(),
        tenant,
        "--group-by".into(),
        "feature".into(),
    ];
    let output = actix_web::rt::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();

    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table = String::from_utf8(output.stdout).unwrap();
    let line = table
        .lines()
        .find(|l| l.starts_with("cli-check"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(line.ends_with("0.00028"), "{line}");
}

#[actix_web::test]
async fn reprice_recomputes_costs_from_kept_token_counts_without_touching_the_ledger() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    for _ in 0..3 {
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    }
    app.flush_ledger().await;
    // The same model at twice the output price: 100 in at 2 + 10 out at 16, per 1M.
    let prices = app.dir.path().join("prices.toml");
    std::fs::write(
        &prices,
        "[[prices]]\nprovider = \"primary\"\nmodel = \"usage-100-0-10\"\ninput = \"2\"\noutput = \"16\"\n",
    )
    .unwrap();

    let config = app.config_path.clone();
    let args = [
        "--config".to_owned(),
        config.display().to_string(),
        "reprice".into(),
        "--prices".into(),
        prices.display().to_string(),
        "--tenant".into(),
        tenant.clone(),
    ];
    let output = actix_web::rt::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();

    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["rows"], 3);
    assert_eq!(report["repriced"], 3);
    assert_eq!(report["current_total"], "0.00084");
    assert_eq!(report["repriced_total"], "0.00108");
    let rows = app.ledger_rows(&tenant).await;
    assert!(
        rows.iter().all(|r| r.charged_nanos == 280_000),
        "the ledger is not rewritten"
    );
}
