use std::collections::BTreeMap;

use serde_json::json;

use crate::support::{TestApp, TestSetup, Upstream, chat_body, spawn_app};

/// The value of one series in a Prometheus text scrape, by name and labels.
fn series(scrape: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (head, value) = line.rsplit_once(' ')?;
            let (series_name, rest) = head.split_once('{').unwrap_or((head, "}"));
            if series_name != name {
                return None;
            }
            let found: BTreeMap<&str, &str> = rest
                .trim_end_matches('}')
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .map(|(k, v)| (k, v.trim_matches('"')))
                .collect();
            let wanted: BTreeMap<&str, &str> = labels.iter().copied().collect();
            (found == wanted).then(|| value.parse().ok()).flatten()
        })
}

async fn scrape(app: &TestApp) -> String {
    app.get("/metrics", "").await.raw
}

#[actix_web::test]
async fn three_calls_with_known_usage_move_the_token_and_cost_counters_by_exactly_that() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-100-20-30"])
            .route("shaky", &["primary/status-503", "secondary/usage-10-0-5"])
            .tier("free", &["fast", "shaky"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let t = tenant.as_str();

    for _ in 0..3 {
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    }
    assert_eq!(app.chat(&key, &chat_body("shaky")).await.status, 200);
    assert_eq!(app.chat(&key, &chat_body("nope")).await.status, 404);

    let text = scrape(&app).await;
    let tokens = |kind| {
        series(
            &text,
            "tollgate_tokens_total",
            &[("tenant", t), ("type", kind)],
        )
    };
    // 3 × (80 uncached + 20 cached + 30 out), plus the fallback call's 10 in and 5 out.
    assert_eq!(tokens("prompt"), Some(250.0));
    assert_eq!(tokens("cached"), Some(60.0));
    assert_eq!(tokens("completion"), Some(95.0));
    // 3 × 0.0004008 + 0.00006
    assert_eq!(
        series(&text, "tollgate_cost_nanos_total", &[("tenant", t)]),
        Some(1_262_400.0)
    );
    let fallback = [("route", "shaky"), ("from", "primary"), ("to", "secondary")];
    assert!(series(&text, "tollgate_fallbacks_total", &fallback).is_some_and(|n| n >= 1.0));
    assert!(
        series(
            &text,
            "tollgate_requests_total",
            &[("route", "none"), ("status", "model_not_found")]
        )
        .is_some()
    );
    assert!(
        text.contains("tollgate_gateway_overhead_seconds_bucket{route=\"fast\""),
        "{text}"
    );
    let budgetless = series(&text, "tollgate_reserved_nanos", &[("tenant", t)]);
    assert_eq!(
        budgetless,
        Some(0.0),
        "nothing stays reserved after the calls"
    );
}

#[actix_web::test]
async fn budget_utilization_follows_committed_spend() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-0-0-500000"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "8"}))
        .await;

    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    app.settled().await;

    let text = scrape(&app).await;
    // 4 committed of 8.
    let utilization = series(
        &text,
        "tollgate_budget_utilization_ratio",
        &[("tenant", tenant.as_str())],
    );
    assert_eq!(utilization, Some(0.5));
}

/// 2026-12-01T00:00:00Z.
const DECEMBER_MS: u64 = 1_796_083_200_000;

async fn utilization_becomes(app: &TestApp, tenant: &str, expected: f64, what: &str) {
    crate::support::wait_until(
        std::time::Duration::from_secs(5),
        &format!("budget utilization of {tenant} to become {expected}: {what}"),
        async || {
            let text = scrape(app).await;
            let labels = [("tenant", tenant)];
            let seen = series(&text, "tollgate_budget_utilization_ratio", &labels);
            crate::support::done_if(seen == Some(expected), seen)
        },
    )
    .await;
}

#[actix_web::test]
async fn budget_utilization_starts_again_at_zero_in_a_new_month_busy_or_idle() {
    let clock = std::sync::Arc::new(tollgate::clock::ManualClock::new(DECEMBER_MS - 120_000));
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-0-0-500000"])
            .tier("free", &["fast"], 1000, 100)
            .clock(clock.clone()),
    )
    .await;
    let (busy, busy_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "8"}))
        .await;
    let (idle, idle_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "8"}))
        .await;
    for key in [&busy_key, &idle_key] {
        assert_eq!(app.chat(key, &chat_body("fast")).await.status, 200);
    }
    utilization_becomes(&app, &busy, 0.5, "4 of 8 committed").await;
    utilization_becomes(&app, &idle, 0.5, "4 of 8 committed").await;

    // Past midnight, both actors still running (idle for a minute): each one's
    // sweep publishes the new month.
    clock.advance_ms(180_000);
    utilization_becomes(&app, &busy, 0.0, "a running actor in December").await;
    assert_eq!(app.chat(&busy_key, &chat_body("fast")).await.status, 200);
    utilization_becomes(&app, &busy, 0.5, "4 committed in December").await;

    // The idle tenant's actor stops in December showing December's 0; the busy one
    // keeps its December spend through the month, after its actor stopped too.
    clock.advance_ms(10 * 60_000);
    crate::support::wait_until(
        std::time::Duration::from_secs(5),
        "idle actors to stop",
        async || {
            let running = app.gateway.tenants.running();
            crate::support::done_if(running == 0, running)
        },
    )
    .await;
    utilization_becomes(&app, &busy, 0.5, "a stopped actor's gauge, same month").await;

    // January: nobody runs for these tenants, and their gauges still start again at 0.
    clock.advance_ms(31 * 24 * 3_600_000);
    utilization_becomes(&app, &busy, 0.0, "a stopped actor's gauge in January").await;
    utilization_becomes(&app, &idle, 0.0, "a stopped actor's gauge in January").await;
}

#[actix_web::test]
async fn an_upstream_429_counts_as_rate_limited_not_as_another_retryable_failure() {
    let app = spawn_app(
        TestSetup::new()
            .route("limited", &["primary/status-429", "secondary/ok"])
            .tier("free", &["limited"], 1000, 100),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let attempts = |text: &str, outcome| {
        series(
            text,
            "tollgate_upstream_attempts_total",
            &[("provider", "primary"), ("outcome", outcome)],
        )
        .unwrap_or(0.0)
    };
    let before = scrape(&app).await;
    assert_eq!(app.chat(&key, &chat_body("limited")).await.status, 200);
    let after = scrape(&app).await;
    // Other tests share the process's recorder: only this call's increase is certain.
    assert!(
        attempts(&after, "rate_limited") > attempts(&before, "rate_limited"),
        "{after}"
    );
}

#[actix_web::test]
async fn a_scrape_before_any_call_has_the_configured_series_at_zero() {
    let app = spawn_app(
        TestSetup::new()
            .provider("zeroes_a", "openai", Upstream::Fake)
            .provider("zeroes_b", "openai", Upstream::Fake)
            .route("zeroes_route", &["zeroes_a/ok", "zeroes_b/ok"])
            .cached_route("zeroes_route", 60_000)
            .tier("free", &["zeroes_route"], 1000, 100),
    )
    .await;
    let text = scrape(&app).await;
    let zero = |name: &str, labels: &[(&str, &str)]| {
        assert_eq!(series(&text, name, labels), Some(0.0), "{name} {labels:?}");
    };
    let route = ("route", "zeroes_route");
    zero("tollgate_requests_total", &[route, ("status", "ok")]);
    zero(
        "tollgate_fallbacks_total",
        &[route, ("from", "zeroes_a"), ("to", "zeroes_b")],
    );
    zero("tollgate_cache_requests_total", &[route, ("result", "hit")]);
    zero(
        "tollgate_cache_requests_total",
        &[route, ("result", "miss")],
    );
    for provider in ["zeroes_a", "zeroes_b"] {
        for outcome in ["ok", "retryable", "rate_limited", "rejected", "local_error"] {
            zero(
                "tollgate_upstream_attempts_total",
                &[("provider", provider), ("outcome", outcome)],
            );
        }
        for reason in ["cut_at_hold", "partial", "client_cancelled"] {
            zero(
                "tollgate_stream_interruptions_total",
                &[("provider", provider), ("reason", reason)],
            );
        }
    }
    // No fallback goes backwards.
    let backwards = [route, ("from", "zeroes_b"), ("to", "zeroes_a")];
    assert_eq!(series(&text, "tollgate_fallbacks_total", &backwards), None);
}

#[actix_web::test]
#[expect(
    clippy::float_arithmetic,
    reason = "the scrape's seconds are floats; no money is computed here"
)]
async fn the_gateways_overhead_leaves_out_retry_backoff_which_has_its_own_histogram() {
    let app = spawn_app(
        TestSetup::new()
            .provider("sleepy", "openai", Upstream::Fake)
            .set("providers.sleepy.max_attempts", 2)
            .set("providers.sleepy.retry_base_delay_ms", 400)
            .set("providers.sleepy.retry_max_delay_ms", 400)
            .route("backoff", &["sleepy/status-500"])
            .route("backoff-again", &["sleepy/status-500"])
            .tier("free", &["backoff", "backoff-again"], 1000, 100),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    for route in ["backoff", "backoff-again"] {
        let reply = app.chat(&key, &chat_body(route)).await;
        assert_eq!(reply.status, 502, "{}", reply.raw);
    }
    let text = scrape(&app).await;
    let sum = |name: &str, route: &str| series(&text, name, &[("route", route)]).unwrap();
    let durations = ["backoff", "backoff-again"]
        .map(|route| sum("tollgate_request_duration_seconds_sum", route));
    let overheads = ["backoff", "backoff-again"]
        .map(|route| sum("tollgate_gateway_overhead_seconds_sum", route));
    let (duration, overhead) = (durations.iter().sum::<f64>(), overheads.iter().sum::<f64>());
    let backoff = series(
        &text,
        "tollgate_retry_backoff_seconds_sum",
        &[("provider", "sleepy")],
    )
    .unwrap();
    // The backoff is jittered below its delay; the requests took at least that long.
    assert!(backoff > 0.0 && duration >= backoff, "{duration} {backoff}");
    assert!(
        overhead < duration - backoff + 1e-6,
        "overhead {overhead} of {duration} with {backoff} asleep"
    );
    // Measured to the microsecond, not in whole milliseconds: one overhead
    // may land on a whole millisecond (about one in a thousand), two
    // independent ones both only if they are rounded to it.
    assert!(
        overheads.iter().any(|o| (o * 1000.0).fract() != 0.0),
        "overheads {overheads:?} are whole numbers of milliseconds"
    );
}

#[actix_web::test]
async fn the_prompt_cache_hit_rate_is_in_the_spend_report_and_per_provider_metrics() {
    let app = spawn_app(
        TestSetup::new()
            .provider("cachy", "openai", Upstream::Fake)
            .route("cached", &["cachy/usage-100-40-10"])
            .tier("free", &["cached"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let tokens = |text: &str, kind: &str| {
        let series =
            format!("tollgate_provider_prompt_tokens_total{{provider=\"cachy\",type=\"{kind}\"}}");
        assert!(text.contains(&series), "no {series} in {text}");
        crate::support::metric_value(text, &series)
    };
    let before = scrape(&app).await;
    assert_eq!(tokens(&before, "cached"), 0, "exported at 0 from the start");
    for _ in 0..2 {
        assert_eq!(app.chat(&key, &chat_body("cached")).await.status, 200);
    }
    let after = scrape(&app).await;
    assert_eq!(tokens(&after, "cached"), 80, "{after}");
    assert_eq!(tokens(&after, "prompt"), 120, "{after}");
    app.ledger_rows_eventually(&tenant, 2).await;
    let report = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/spend?group_by=provider"),
            None,
        )
        .await;
    assert_eq!(report.status, 200, "{}", report.raw);
    assert_eq!(report.body["rows"][0]["key"], "cachy");
    assert_eq!(
        report.body["rows"][0]["prompt_cache_hit_rate"], 0.4,
        "{}",
        report.raw
    );
}
