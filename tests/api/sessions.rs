//! A budget per agent run: a tier's `session` template caps what one run
//! (`X-Tollgate-Session`, Claude Code's `X-Claude-Code-Session-Id`, Codex's
//! `session-id`) may spend, decided in the same hold as every other scope
//! (memory, and Redis when the suite runs with it); rows keep the run, and
//! spend reports group by it.

use serde_json::json;

use crate::support::{TestSetup, chat_body, spawn_app};

const ROUTE: &str = "session-capped";
const MODEL: &str = "primary/usage-1000-0-40";

fn setup() -> TestSetup {
    // A call costs 1,000 × 10/M + 40 × 100/M = 0.014; its hold is about 0.0102
    // (its prompt and the tier's 100 tokens of output).
    TestSetup::new()
        .route(ROUTE, &[MODEL])
        .price(MODEL, "10", "10", "100")
        .tier("free", &[ROUTE], 1000, 100)
        .set("tiers.free.session.budget", "0.05")
        .set("tiers.free.session.idle_minutes", 60)
}

#[actix_web::test]
async fn a_runaway_agent_run_stops_at_its_session_cap_and_reports_group_by_run() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "10"}))
        .await;
    let call = |header: &'static str, id: String| {
        let app = &app;
        let key = key.clone();
        async move {
            app.chat_with(&key, &chat_body(ROUTE), &[(header, id.as_str())])
                .await
        }
    };
    // Three calls of run `loop-1` spend 0.042; the fourth would pass 0.05.
    for _ in 0..3 {
        let reply = call("x-tollgate-session", "loop-1".into()).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }
    let refused = call("x-tollgate-session", "loop-1".into()).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert_eq!(refused.error_code(), "budget_exceeded");
    assert!(
        refused.error_message().contains("session `loop-1`"),
        "{}",
        refused.raw
    );
    // Another run, the agents' own headers, and a call naming no run go on.
    for (header, id) in [
        ("x-tollgate-session", "loop-2".to_owned()),
        ("x-claude-code-session-id", "cc-run".to_owned()),
        ("session-id", "codex-run".to_owned()),
        ("x-tollgate-session", "r".repeat(300)),
    ] {
        let reply = call(header, id).await;
        assert_eq!(reply.status, 200, "{header}: {}", reply.raw);
    }
    let none = app.chat(&key, &chat_body(ROUTE)).await;
    assert_eq!(none.status, 200, "{}", none.raw);

    let rows = app.ledger_rows_eventually(&tenant, 8).await;
    let mut runs: Vec<String> = rows
        .iter()
        .map(|r| r.session.clone().unwrap_or_default())
        .collect();
    runs.sort();
    runs.dedup();
    let hashed = runs.iter().find(|r| r.starts_with("sha256:")).cloned();
    assert!(
        hashed.is_some(),
        "a 300-byte id is kept as its hash: {runs:?}"
    );
    let report = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/spend?group_by=session"),
            None,
        )
        .await;
    assert_eq!(report.status, 200, "{}", report.raw);
    let groups: Vec<(String, u64)> = report.body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_owned(),
                r["requests"].as_u64().unwrap(),
            )
        })
        .collect();
    for (run, requests) in [
        ("loop-1", 3),
        ("loop-2", 1),
        ("cc-run", 1),
        ("codex-run", 1),
        ("", 1),
    ] {
        assert!(
            groups.contains(&(run.to_owned(), requests)),
            "{run}: {groups:?}"
        );
    }
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
}

/// The cap counts what a run's calls hold as well as what they spent: two
/// calls in flight at once cannot both take the last of it.
#[actix_web::test]
async fn calls_of_one_run_in_flight_together_share_its_cap() {
    let app = spawn_app(
        TestSetup::new()
            .route("slow-run", &["primary/usage-1000-0-40+delay-300ms"])
            .price("primary/usage-1000-0-40+delay-300ms", "10", "10", "100")
            .tier("free", &["slow-run"], 1000, 100)
            .set("tiers.free.session.budget", "0.015"),
    )
    .await;
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "10"}))
        .await;
    let headers = [("x-tollgate-session", "together")];
    let body = chat_body("slow-run");
    let (a, b) = futures_util::future::join(
        app.chat_with(&key, &body, &headers),
        app.chat_with(&key, &body, &headers),
    )
    .await;
    let mut statuses = [a.status, b.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 402], "{} / {}", a.raw, b.raw);
}

/// Without a session header, the run is read from the body where the agents
/// put it: Claude Code's JSON `metadata.user_id` (`session_id`) on the
/// Messages door, Codex's `client_metadata.session_id` on the Responses door.
#[actix_web::test]
async fn the_run_is_read_from_the_agents_own_body_fields_when_no_header_names_it() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "10"}))
        .await;
    let user_id = r#"{"device_id":"d-1","account_uuid":"","session_id":"cc-body"}"#;
    let message = json!({"model": ROUTE, "max_tokens": 50,
        "metadata": {"user_id": user_id},
        "messages": [{"role": "user", "content": "hi"}]});
    let reply = app.post_json("/v1/messages", &key, &message).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let response = json!({"model": ROUTE, "input": "hi",
        "client_metadata": {"session_id": "codex-body"}});
    let reply = app.post_json("/v1/responses", &key, &response).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let rows = app.ledger_rows_eventually(&tenant, 2).await;
    let mut runs: Vec<String> = rows.iter().filter_map(|r| r.session.clone()).collect();
    runs.sort();
    assert_eq!(runs, ["cc-body", "codex-body"], "{rows:?}");
}
