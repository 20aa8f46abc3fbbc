//! Provider resilience: the circuit breaker's skip and ramp, seen from the
//! fake upstream's request counts.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::clock::ManualClock;

use crate::support::{TestApp, TestSetup, chat_body, now_ms, spawn_app};

const BREAKER: &str = "[providers.brk]\nkind = \"openai\"\nbase_url = \"FAKE\"\nmax_attempts = 1\nbreaker_failures = 5\nbreaker_error_rate_percent = 0\nbreaker_cooldown_ms = 10000\nbreaker_ramp_window_ms = 1000";

/// Sends `n` requests one after another; returns how many the named provider answered.
async fn served_by(app: &TestApp, key: &str, n: usize, provider: &str) -> usize {
    let mut count = 0;
    for _ in 0..n {
        let reply = app.chat(key, &chat_body("fast")).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        if reply.header("x-tollgate-provider") == Some(provider) {
            count += 1;
        }
    }
    count
}

#[actix_web::test]
async fn the_breaker_skips_a_failing_provider_then_ramps_20_50_100() {
    let clock = Arc::new(ManualClock::new(now_ms()));
    let app = spawn_app(
        TestSetup::new()
            .provider(BREAKER)
            .route("fast", &["brk/flaky-5", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100)
            .clock(clock.clone()),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let upstream_calls = || app.fake.stats.requests_for_model("flaky-5");

    assert_eq!(served_by(&app, &key, 5, "secondary").await, 5);
    assert_eq!(upstream_calls(), 5);

    // Open: later requests go straight to the next target, the provider is not touched.
    assert_eq!(served_by(&app, &key, 10, "secondary").await, 10);
    assert_eq!(upstream_calls(), 5, "an open breaker sends nothing");

    // Half-open after the cooldown: 2 of 10, then 5 of 10, then all.
    clock.advance_ms(10_000);
    assert_eq!(served_by(&app, &key, 10, "brk").await, 2);
    assert_eq!(upstream_calls(), 7);
    clock.advance_ms(1000);
    assert_eq!(served_by(&app, &key, 10, "brk").await, 5);
    clock.advance_ms(1000);
    assert_eq!(served_by(&app, &key, 10, "brk").await, 10);
    clock.advance_ms(1000);
    assert_eq!(served_by(&app, &key, 10, "brk").await, 10);
    assert_eq!(upstream_calls(), 32);
}

#[actix_web::test]
async fn a_failed_probe_opens_the_breaker_again() {
    let clock = Arc::new(ManualClock::new(now_ms()));
    let app = spawn_app(
        TestSetup::new()
            .provider(BREAKER)
            .route("fast", &["brk/status-503", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100)
            .clock(clock.clone()),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let upstream_calls = || app.fake.stats.requests_for_model("status-503");

    served_by(&app, &key, 5, "secondary").await;
    assert_eq!(upstream_calls(), 5);
    clock.advance_ms(10_000);
    assert_eq!(served_by(&app, &key, 10, "secondary").await, 10);
    assert_eq!(
        upstream_calls(),
        6,
        "one probe, which failed and re-opened it"
    );
    clock.advance_ms(9_999);
    served_by(&app, &key, 3, "secondary").await;
    assert_eq!(upstream_calls(), 6, "a new full cooldown");
    let rows = app.ledger_rows(&tenant).await;
    let failed = rows.iter().filter(|r| r.status == "upstream_error").count();
    assert_eq!(
        failed, 6,
        "each call that went out is a ledger row; skips are not"
    );
}

/// A provider on `FAKE` with these settings, no retries.
fn timed(name: &str, settings: &str) -> String {
    format!(
        "[providers.{name}]\nkind = \"openai\"\nbase_url = \"FAKE\"\nmax_attempts = 1\n{settings}"
    )
}

#[actix_web::test]
async fn a_connect_timeout_fails_over_to_the_next_target() {
    // A listener that never accepts, with its one-entry accept queue taken:
    // the kernel leaves further handshakes unanswered.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    for _ in 0..3 {
        let connect = tokio::net::TcpStream::connect(addr);
        if let Ok(Ok(stream)) = actix_rt::time::timeout(Duration::from_millis(200), connect).await {
            queued.push(stream);
        }
    }
    let app = spawn_app(
        TestSetup::new()
            .provider(&format!(
                "[providers.unreachable]\nkind = \"openai\"\nbase_url = \"http://{addr}\"\nmax_attempts = 1\nconnect_timeout_ms = 150"
            ))
            .route("fast", &["unreachable/m", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-provider"), Some("secondary"));
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows[0].provider, "unreachable");
    assert_eq!(
        rows[0].error.as_deref(),
        Some("unreachable: no connection within 150 ms")
    );
    drop((queued, listener));
}

#[actix_web::test]
async fn a_first_byte_timeout_fails_over_to_the_next_target() {
    let app = spawn_app(
        TestSetup::new()
            .provider(&timed(
                "sluggish",
                "first_byte_timeout_ms = 200\ntimeout_ms = 10000",
            ))
            .route("fast", &["sluggish/delay-3000ms", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.header("x-tollgate-provider"), Some("secondary"));
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(
        rows[0].error.as_deref(),
        Some("sluggish: no response within 200 ms")
    );
    assert_eq!(rows[1].status, "fallback_ok");
}

#[actix_web::test]
async fn the_total_timeout_bounds_a_complete_call() {
    let app = spawn_app(
        TestSetup::new()
            .provider(&timed(
                "capped",
                "timeout_ms = 200\nfirst_byte_timeout_ms = 10000",
            ))
            .route("fast", &["capped/delay-3000ms", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.header("x-tollgate-provider"), Some("secondary"));
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(
        rows[0].error.as_deref(),
        Some("capped: timed out after 200 ms")
    );
}

#[actix_web::test]
async fn the_total_timeout_ends_a_stream_that_trickles_on() {
    let app = spawn_app(
        TestSetup::new()
            .provider(&timed(
                "capped",
                "timeout_ms = 400\nfirst_token_timeout_ms = 5000",
            ))
            .route("paced", &["capped/chunks-30+chunk-delay-100ms"])
            .tier("free", &["paced"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let body = json!({"model": "paced", "stream": true, "messages": [{"role": "user", "content": "Tell me a story"}]});

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 200);
    assert!(reply.raw.contains("data: "), "{}", reply.raw);
    assert!(!reply.raw.contains("[DONE]"), "{}", reply.raw);
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(rows[0].status, "partial");
    assert!(
        rows[0].error.as_deref().unwrap_or("").contains("timed out"),
        "{:?}",
        rows[0].error
    );
}
