use serde_json::json;

use crate::support::{LogCapture, TestSetup, Upstream, chat_body, spawn_app, spawn_app_with_logs};

#[actix_web::test]
async fn primary_503_is_retried_then_fails_over_and_every_attempt_is_recorded() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/status-503", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-provider"), Some("secondary"));
    let rows = app.ledger_rows(&tenant).await;
    let summary: Vec<(&str, i32, i64)> = rows
        .iter()
        .map(|r| (r.status.as_str(), r.attempt, r.charged_nanos))
        .collect();
    // Two attempts on the primary (the default max_attempts), then the fallback.
    // 10 prompt at 2 per 1M + 5 completion at 8 per 1M = 0.00006
    assert_eq!(
        summary,
        vec![
            ("upstream_error", 1, 0),
            ("upstream_error", 2, 0),
            ("fallback_ok", 3, 60_000)
        ]
    );
    assert_eq!(rows[0].upstream_status, Some(503));
    assert!(rows.iter().all(|r| r.request_id == rows[0].request_id));
}

#[actix_web::test]
async fn primary_400_is_returned_and_the_fallback_never_called() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/status-400", "secondary/never-called"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 400, "{}", reply.raw);
    assert!(
        reply.body["error"]["message"].as_str().is_some(),
        "the upstream's own envelope: {}",
        reply.raw
    );
    assert_eq!(app.fake.stats.requests_for_model("never-called"), 0);
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, "client_error");
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
}

/// A provider that refuses the gateway's own key (401, 403) has failed, not
/// the caller: the route fails over, the breaker counts it, and where no
/// target is left the caller gets 502 naming the provider's key setting,
/// never a 401 that reads as its own key failing.
#[actix_web::test]
async fn a_provider_refusing_the_gateways_key_fails_over_and_is_never_the_callers_401() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/status-401", "secondary/usage-10-0-5"])
            .route("alone", &["primary/status-403"])
            .tier("free", &["fast", "alone"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-provider"), Some("secondary"));
    let rows = app.ledger_rows(&tenant).await;
    assert!(
        rows.iter().any(|r| r.provider == "primary"
            && r.status == "upstream_error"
            && r.charged_nanos == 0),
        "{rows:?}"
    );

    let alone = app.chat(&key, &chat_body("alone")).await;

    assert_eq!(alone.status, 502, "{}", alone.raw);
    assert_eq!(alone.error_code(), "upstream_failed");
    assert!(
        alone
            .error_message()
            .contains("providers.primary.api_key_env"),
        "{}",
        alone.raw
    );
}

#[actix_web::test]
async fn all_targets_failing_gives_502_with_the_last_error() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/status-500", "secondary/status-429"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1"}))
        .await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 502, "{}", reply.raw);
    assert_eq!(reply.error_code(), "upstream_failed");
    assert!(
        reply.error_message().contains("secondary answered 429"),
        "{}",
        reply.raw
    );
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(
        rows.iter().map(|r| r.status.as_str()).collect::<Vec<_>>(),
        vec!["upstream_error"; 4],
        "two attempts on each target"
    );
    let budget = app.budget(&tenant).await;
    assert_eq!(
        (budget["committed"].as_str(), budget["reserved"].as_str()),
        (Some("0"), Some("0"))
    );
}

#[actix_web::test]
async fn an_unset_key_env_var_disables_the_provider_with_a_warning_and_503_naming_it() {
    let logs = LogCapture::default();
    let app = spawn_app_with_logs(
        TestSetup::new()
            .provider(
                "ghost",
                "openai",
                Upstream::At("http://127.0.0.1:9".to_owned()),
            )
            .set("providers.ghost.api_key_env", "TOLLGATE_TEST_GHOST_KEY")
            .route("fast", &["ghost/model-a"])
            .tier("free", &["fast"], 1000, 100),
        Some(&logs),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let startup = logs.text();
    let warning = startup
        .lines()
        .find(|line| line.contains("WARN") && line.contains("TOLLGATE_TEST_GHOST_KEY"))
        .unwrap_or_else(|| panic!("no start-up warning naming the variable in:\n{startup}"));
    assert!(warning.contains("ghost"), "{warning}");
    let lines = startup
        .lines()
        .filter(|line| line.contains("TOLLGATE_TEST_GHOST_KEY"))
        .count();
    assert_eq!(lines, 1, "one line: {startup}");

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 503, "{}", reply.raw);
    assert_eq!(reply.error_code(), "provider_unavailable");
    assert!(
        reply.error_message().contains("TOLLGATE_TEST_GHOST_KEY"),
        "{}",
        reply.raw
    );
}

#[actix_web::test]
async fn a_malformed_base_url_gives_500_naming_the_setting_without_failover() {
    let app = spawn_app(
        TestSetup::new()
            .provider("broken", "openai", Upstream::At("not a url".to_owned()))
            .route("fast", &["broken/model-b", "secondary/never-after-broken"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 500, "{}", reply.raw);
    assert_eq!(reply.error_code(), "provider_misconfigured");
    assert!(reply.error_message().contains("base_url"), "{}", reply.raw);
    assert!(
        reply.error_message().contains("providers.broken"),
        "{}",
        reply.raw
    );
    assert_eq!(app.fake.stats.requests_for_model("never-after-broken"), 0);
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, "local_error");
}

#[actix_web::test]
async fn an_empty_provider_key_gives_500_naming_its_env_var() {
    let app = spawn_app(
        TestSetup::new()
            .provider(
                "blank",
                "openai",
                Upstream::At("http://127.0.0.1:9".to_owned()),
            )
            .set("providers.blank.api_key_env", "TEST_BLANK_KEY")
            .route("fast", &["blank/model-c", "secondary/never-after-blank"])
            .tier("free", &["fast"], 1000, 100)
            .env("TEST_BLANK_KEY", " "),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 500, "{}", reply.raw);
    assert!(
        reply.error_message().contains("TEST_BLANK_KEY"),
        "{}",
        reply.raw
    );
    assert_eq!(app.fake.stats.requests_for_model("never-after-blank"), 0);
}

#[actix_web::test]
async fn a_full_provider_queue_fails_fast_to_the_next_target() {
    let app = spawn_app(
        TestSetup::new()
            .provider("narrow", "openai", Upstream::Fake)
            .set("providers.narrow.max_concurrency", 1)
            .set("providers.narrow.max_queue", 0)
            .route("fast", &["narrow/delay-800ms", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let body = chat_body("fast");
    let (slow, fast) = tokio::join!(app.chat(&key, &body), async {
        // The second call arrives while the first holds narrow's only slot.
        crate::support::wait_until(
            std::time::Duration::from_secs(5),
            "the first call upstream",
            async || {
                let requests = app.fake.stats.requests_for_model("delay-800ms");
                crate::support::done_if(requests > 0, requests)
            },
        )
        .await;
        app.chat(&key, &body).await
    });

    assert_eq!(slow.header("x-tollgate-provider"), Some("narrow"));
    assert_eq!(fast.header("x-tollgate-provider"), Some("secondary"));
    assert_eq!(
        app.fake.stats.requests_for_model("delay-800ms"),
        1,
        "the full queue was not waited on"
    );
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 2, "a skipped provider is no attempt");
}

#[actix_web::test]
async fn a_queued_call_gets_the_slot_when_it_frees() {
    let app = spawn_app(
        TestSetup::new()
            .provider("narrow", "openai", Upstream::Fake)
            .set("providers.narrow.max_concurrency", 1)
            .set("providers.narrow.max_queue", 4)
            .set("providers.narrow.queue_timeout_ms", 5000)
            .route(
                "fast",
                &["narrow/delay-300ms", "secondary/never-after-queue"],
            )
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let body = chat_body("fast");
    let replies = futures_util::future::join_all((0..3).map(|_| app.chat(&key, &body))).await;

    assert!(
        replies
            .iter()
            .all(|r| r.header("x-tollgate-provider") == Some("narrow"))
    );
    assert_eq!(app.fake.stats.requests_for_model("never-after-queue"), 0);
}

#[actix_web::test]
async fn a_flaky_provider_is_retried_before_failing_over_and_every_attempt_is_recorded() {
    let app = spawn_app(
        TestSetup::new()
            .provider("retrier", "openai", Upstream::Fake)
            .set("providers.retrier.max_attempts", 3)
            .set("providers.retrier.retry_base_delay_ms", 10)
            .route(
                "fast",
                &["retrier/flaky-2", "secondary/never-after-retries"],
            )
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-provider"), Some("retrier"));
    assert_eq!(app.fake.stats.requests_for_model("never-after-retries"), 0);
    let rows = app.ledger_rows(&tenant).await;
    let statuses: Vec<(&str, i32)> = rows
        .iter()
        .map(|r| (r.status.as_str(), r.attempt))
        .collect();
    assert_eq!(
        statuses,
        vec![("upstream_error", 1), ("upstream_error", 2), ("ok", 3)]
    );
}

#[actix_web::test]
async fn the_retry_budget_caps_retries_during_an_outage() {
    let app = spawn_app(
        TestSetup::new()
            .provider("down", "openai", Upstream::Fake)
            .set("providers.down.max_attempts", 2)
            .set("providers.down.retry_base_delay_ms", 1)
            .set("providers.down.retry_budget_percent", 20)
            .set("providers.down.retry_burst", 2)
            .set("providers.down.breaker_failures", 1000)
            .set("providers.down.breaker_error_rate_percent", 0)
            .route("fast", &["down/status-503", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    for _ in 0..20 {
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    }

    // 20 first attempts; retries: the burst of 2 plus 20% of 20 requests, never one per request.
    let down = app.fake.stats.requests_for_model("status-503");
    assert!(
        (21..=26).contains(&down),
        "{down} attempts on the failing provider"
    );
}

#[actix_web::test]
async fn retry_after_from_the_upstream_is_honoured_within_the_deadline() {
    let app = spawn_app(
        TestSetup::new()
            .provider("limited", "openai", Upstream::Fake)
            .set("providers.limited.max_attempts", 2)
            .set("providers.limited.retry_base_delay_ms", 1)
            .route(
                "fast",
                &["limited/status-429+retry-after-1", "secondary/usage-10-0-5"],
            )
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 200);
    let rows = app.ledger_rows(&tenant).await;
    // The retry waited for the upstream's Retry-After: the second attempt started a second later.
    let gap = rows[1].created_at_ms - rows[0].created_at_ms;
    assert_eq!(
        rows.iter().map(|r| r.status.as_str()).collect::<Vec<_>>(),
        vec!["upstream_error", "upstream_error", "fallback_ok"]
    );
    assert!(gap >= 1000, "retried after {gap} ms");
}
