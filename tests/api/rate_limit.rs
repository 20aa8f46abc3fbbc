use std::sync::Arc;

use serde_json::json;
use tollgate::clock::ManualClock;

use crate::support::{TestSetup, chat_body, now_ms, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 1000, 100)
}

#[actix_web::test]
async fn a_5_rpm_tenant_gets_five_200s_then_429s_while_another_tenant_still_gets_200() {
    let app = spawn_app(setup()).await;
    let (_slow, slow_key) = app.tenant_with_key("free", json!({"rpm_limit": 5})).await;
    let (_other, other_key) = app.tenant_with_key("free", json!({})).await;

    for i in 0..5 {
        let reply = app.chat(&slow_key, &chat_body("fast")).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.raw);
        assert_eq!(reply.header("x-ratelimit-limit-requests"), Some("5"));
        assert_eq!(
            reply.header("x-ratelimit-remaining-requests"),
            Some((4 - i).to_string().as_str())
        );
    }
    for _ in 0..3 {
        let reply = app.chat(&slow_key, &chat_body("fast")).await;
        assert_eq!(reply.status, 429, "{}", reply.raw);
        assert_eq!(reply.error_code(), "rate_limit_exceeded");
        let retry_after: u64 = reply.header("retry-after").unwrap().parse().unwrap();
        assert!(
            (1..=12).contains(&retry_after),
            "5 rpm refills one request in 12 s: {retry_after}"
        );
        assert_eq!(reply.header("x-ratelimit-remaining-requests"), Some("0"));
    }
    assert_eq!(app.chat(&other_key, &chat_body("fast")).await.status, 200);
    assert_eq!(app.fake.stats.requests(), 6);
}

#[actix_web::test]
async fn the_token_bucket_refills_with_the_injected_clock() {
    let clock = Arc::new(ManualClock::new(now_ms()));
    let app = spawn_app(setup().clock(clock.clone())).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({"rpm_limit": 2})).await;

    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    let refused = app.chat(&key, &chat_body("fast")).await;
    assert_eq!(refused.status, 429);
    assert_eq!(
        refused.header("retry-after"),
        Some("30"),
        "2 rpm: one request every 30 s"
    );

    clock.advance_ms(29_999);
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 429);
    clock.advance_ms(1);
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 429);
}

#[actix_web::test]
async fn tokens_per_minute_are_charged_at_admission_corrected_after_and_refused_with_429() {
    let app = spawn_app(
        TestSetup::new()
            .route("long", &["primary/usage-10-0-900"])
            .tier("free", &["long"], 1000, 900),
    )
    .await;
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"tpm_limit": 1000}))
        .await;

    let first = app.chat(&key, &chat_body("long")).await;
    assert_eq!(first.status, 200, "{}", first.raw);
    assert_eq!(first.header("x-ratelimit-limit-tokens"), Some("1000"));
    let remaining: u64 = first
        .header("x-ratelimit-remaining-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!(remaining < 100, "about 900 tokens admitted: {remaining}");

    let second = app.chat(&key, &chat_body("long")).await;
    assert_eq!(second.status, 429, "{}", second.raw);
    assert_eq!(second.error_code(), "token_limit_exceeded");
    assert!(
        second.error_message().contains("tokens per minute"),
        "{}",
        second.raw
    );
    let retry_after: u64 = second.header("retry-after").unwrap().parse().unwrap();
    assert!((40..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(app.fake.stats.requests(), 1);
}

#[actix_web::test]
async fn a_daily_token_limit_counts_what_calls_really_used() {
    let app = spawn_app(
        TestSetup::new()
            .route("small", &["primary/usage-10-0-5"])
            .route("long", &["primary/usage-10-0-900"])
            .tier("free", &["small", "long"], 1000, 900),
    )
    .await;
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"daily_token_limit": 1500}))
        .await;

    // Each `small` call is admitted at about 910 tokens but uses 15: without the correction
    // at settlement the second one would already pass 1500.
    for _ in 0..5 {
        assert_eq!(app.chat(&key, &chat_body("small")).await.status, 200);
    }
    assert_eq!(app.chat(&key, &chat_body("long")).await.status, 200);
    let refused = app.chat(&key, &chat_body("long")).await;
    assert_eq!(refused.status, 429, "{}", refused.raw);
    assert!(
        refused.error_message().contains("daily tokens"),
        "{}",
        refused.raw
    );
}
