//! Provider resilience: the circuit breaker's skip and ramp, seen from the
//! fake upstream's request counts.

use std::sync::Arc;

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
