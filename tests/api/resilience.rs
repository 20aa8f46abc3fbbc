//! Provider resilience: the circuit breaker's skip and ramp, seen from the
//! fake upstream's request counts.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::clock::ManualClock;

use crate::support::{
    TestApp, TestSetup, Upstream, chat_body, edit_config, entry, now_ms, spawn_app,
};

/// A provider whose breaker opens after 5 failures in a row, for 10 s.
fn breaker(setup: TestSetup) -> TestSetup {
    setup
        .provider("brk", "openai", Upstream::Fake)
        .set("providers.brk.max_attempts", 1)
        .set("providers.brk.breaker_failures", 5)
        .set("providers.brk.breaker_error_rate_percent", 0)
        .set("providers.brk.breaker_cooldown_ms", 10_000)
        .set("providers.brk.breaker_ramp_window_ms", 1000)
}

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
            .with(breaker)
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
            .with(breaker)
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
/// A provider `name` on the fake that does not retry, for its timeouts to be set.
fn timed(setup: TestSetup, name: &str) -> TestSetup {
    setup
        .provider(name, "openai", Upstream::Fake)
        .set(&format!("providers.{name}.max_attempts"), 1)
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
            .provider(
                "unreachable",
                "openai",
                Upstream::At(format!("http://{addr}")),
            )
            .set("providers.unreachable.max_attempts", 1)
            .set("providers.unreachable.connect_timeout_ms", 150)
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
            .with(|setup| timed(setup, "sluggish"))
            .set("providers.sluggish.first_byte_timeout_ms", 200)
            .set("providers.sluggish.timeout_ms", 10_000)
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
            .with(|setup| timed(setup, "capped"))
            .set("providers.capped.timeout_ms", 200)
            .set("providers.capped.first_byte_timeout_ms", 10_000)
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
            .with(|setup| timed(setup, "capped"))
            .set("providers.capped.timeout_ms", 400)
            .set("providers.capped.first_token_timeout_ms", 5000)
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

#[actix_web::test]
async fn per_provider_options_reach_the_upstream_and_the_ceiling_lowers_the_reservation() {
    let app = spawn_app(
        TestSetup::new()
            .provider("capped", "openai", Upstream::Fake)
            .set("providers.capped.max_tokens_ceiling", 50)
            .set("providers.capped.tenant_id_as", "user_id")
            .set("providers.capped.extra_headers.X-Org", "acme")
            .provider("plain", "openai", Upstream::Fake)
            .set("providers.plain.tenant_id_as", "user")
            .route("capped", &["capped/usage-max"])
            .route("plain", &["plain/ordinary"])
            .price("capped/usage-max", "0.001", "0.001", "1000")
            .tier("free", &["capped", "plain"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.5"}))
        .await;

    // 1000 output tokens at 1000 per 1M would reserve 1 > 0.5; the ceiling makes it 0.05.
    let mut body = chat_body("capped");
    body["max_tokens"] = json!(1000);
    body["user"] = json!("end-user-7");
    let reply = app.chat(&key, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);

    let mut plain = chat_body("plain");
    plain["user"] = json!("end-user-7");
    assert_eq!(app.chat(&key, &plain).await.status, 200);

    let captured = app.fake.stats.captured();
    let capped = captured
        .iter()
        .find(|r| r.body["model"] == "usage-max")
        .unwrap();
    assert_eq!(capped.body["max_tokens"], 50);
    assert_eq!(capped.body["user_id"], json!(tenant));
    assert_eq!(
        capped.body["user"], "end-user-7",
        "user_id leaves user alone"
    );
    assert_eq!(capped.header("x-org"), Some("acme"));
    let plain = captured
        .iter()
        .find(|r| r.body["model"] == "ordinary")
        .unwrap();
    assert_eq!(plain.body["user"], json!(tenant));
    assert_eq!(plain.body.get("user_id"), None);
    assert_eq!(plain.header("x-org"), None);

    let rows = app.ledger_rows(&tenant).await;
    let capped_row = rows.iter().find(|r| r.model == "usage-max").unwrap();
    // 50 output tokens at 1000 per 1M is 0.05 (50 000 000 nanos), plus a sliver of input.
    assert!(
        (50_000_000..50_100_000).contains(&capped_row.reserved_nanos),
        "reserved {}",
        capped_row.reserved_nanos
    );
    assert_eq!(capped_row.completion_tokens, 50);
}

#[actix_web::test]
async fn anthropic_takes_the_tenant_id_as_metadata_user_id() {
    let app = spawn_app(
        TestSetup::new()
            .provider("claude", "anthropic", Upstream::Anthropic)
            .set("providers.claude.api_key_env", "TEST_ANTHROPIC_KEY")
            .set("providers.claude.tenant_id_as", "user")
            .set(
                "providers.claude.extra_headers.anthropic-beta",
                "prompt-caching-2024-07-31",
            )
            .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
            .route("claude", &["claude/sonnet"])
            .tier("free", &["claude"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut body = chat_body("claude");
    body["user"] = json!("end-user-7");

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let captured = app.anthropic.state.captured();
    assert_eq!(captured[0].body["metadata"], json!({"user_id": tenant}));
    assert_eq!(
        captured[0].header("anthropic-beta"),
        Some("prompt-caching-2024-07-31")
    );
}

fn degraded_setup() -> TestSetup {
    TestSetup::new()
        .route("deg", &["primary/status-503", "secondary/status-500"])
        .set(
            "routes.deg.degraded_answer",
            "We are busy; please try again soon.",
        )
        .tier("free", &["deg"], 1000, 100)
}

#[actix_web::test]
async fn when_every_target_fails_the_degraded_answer_is_served_marked_and_recorded() {
    let app = spawn_app(degraded_setup()).await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1"}))
        .await;

    let reply = app.chat(&key, &chat_body("deg")).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-degraded"), Some("true"));
    assert_eq!(reply.header("x-tollgate-cost"), Some("0"));
    assert_eq!(
        reply.body["choices"][0]["message"]["content"],
        "We are busy; please try again soon."
    );
    assert_eq!(reply.body["object"], "chat.completion");
    let rows = app.ledger_rows(&tenant).await;
    let statuses: Vec<&str> = rows.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(
        statuses,
        [
            "upstream_error",
            "upstream_error",
            "upstream_error",
            "upstream_error",
            "degraded"
        ]
    );
    let degraded = &rows[4];
    assert_eq!((degraded.charged_nanos, degraded.attempt), (0, 5));
    assert!(
        degraded
            .error
            .as_deref()
            .unwrap_or("")
            .contains("secondary answered 500"),
        "{:?}",
        degraded.error
    );
    let budget = app.budget(&tenant).await;
    assert_eq!(
        (budget["committed"].as_str(), budget["reserved"].as_str()),
        (Some("0"), Some("0"))
    );
}

#[actix_web::test]
async fn a_streamed_request_gets_the_degraded_answer_as_a_stream() {
    let app = spawn_app(degraded_setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let body =
        json!({"model": "deg", "stream": true, "messages": [{"role": "user", "content": "Hi"}]});

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-degraded"), Some("true"));
    assert!(
        reply.raw.contains("We are busy; please try again soon."),
        "{}",
        reply.raw
    );
    assert!(
        reply.raw.contains("\"finish_reason\":\"stop\""),
        "{}",
        reply.raw
    );
    assert!(reply.raw.ends_with("data: [DONE]\n\n"), "{}", reply.raw);
}

#[actix_web::test]
async fn targets_of_equal_rank_share_requests_by_weight() {
    let app = spawn_app(
        TestSetup::new()
            .set(
                "routes.lb.targets",
                vec![
                    entry([
                        ("target", "primary/w-a".into()),
                        ("weight", 3.into()),
                        ("rank", 0.into()),
                    ]),
                    entry([("target", "secondary/w-b".into()), ("rank", 0.into())]),
                    entry([("target", "secondary/w-c".into()), ("rank", 1.into())]),
                ],
            )
            .tier("free", &["lb"], 1000, 100),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    for _ in 0..100 {
        assert_eq!(app.chat(&key, &chat_body("lb")).await.status, 200);
    }

    let a = app.fake.stats.requests_for_model("w-a");
    let b = app.fake.stats.requests_for_model("w-b");
    assert_eq!(a + b, 100);
    // 3:1 means 75 expected; these bounds are more than 4 standard deviations wide.
    assert!((55..=95).contains(&a), "{a} of 100 on the weight-3 target");
    assert_eq!(
        app.fake.stats.requests_for_model("w-c"),
        0,
        "a later rank is only a fallback"
    );
}

#[actix_web::test]
async fn a_complexity_route_hands_each_class_to_its_route() {
    let app = spawn_app(
        TestSetup::new()
            .route("cheap", &["primary/cheap-model"])
            .route("smart", &["secondary/smart-model"])
            .set("routes.auto.complexity.simple", "cheap")
            .set("routes.auto.complexity.moderate", "cheap")
            .set("routes.auto.complexity.complex", "smart")
            .tier("free", &["auto"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let provider = |reply: &crate::support::Reply| {
        assert_eq!(reply.status, 200, "{}", reply.raw);
        reply.header("x-tollgate-provider").unwrap().to_owned()
    };

    let said_complex = app
        .chat_with(
            &key,
            &chat_body("auto"),
            &[("X-Tollgate-Complexity", "complex")],
        )
        .await;
    assert_eq!(provider(&said_complex), "secondary");
    let short = app.chat(&key, &chat_body("auto")).await;
    assert_eq!(provider(&short), "primary");
    let mut many_tools = chat_body("auto");
    many_tools["tools"] = (0..5)
        .map(|i| json!({"type": "function", "function": {"name": format!("tool{i}"), "parameters": {"type": "object"}}}))
        .collect();
    let tools = app.chat(&key, &many_tools).await;
    assert_eq!(provider(&tools), "secondary");
    let said_simple = app
        .chat_with(&key, &many_tools, &[("X-Tollgate-Complexity", "simple")])
        .await;
    assert_eq!(provider(&said_simple), "primary", "the header wins");

    let unknown = app
        .chat_with(
            &key,
            &chat_body("auto"),
            &[("X-Tollgate-Complexity", "hard")],
        )
        .await;
    assert_eq!(unknown.status, 400, "{}", unknown.raw);
    assert_eq!(unknown.body["error"]["param"], "X-Tollgate-Complexity");

    let routes: Vec<String> = app
        .ledger_rows(&tenant)
        .await
        .into_iter()
        .map(|r| r.route)
        .collect();
    assert_eq!(routes, ["smart", "cheap", "smart", "cheap"]);
}

/// Rewrites the running gateway's configuration file with `edit`.

#[actix_web::test]
async fn a_reload_switches_a_route_primary_without_failing_an_in_flight_request() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/delay-800ms"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    assert_eq!(
        app.chat(&key, &chat_body("fast"))
            .await
            .header("x-ratelimit-limit-requests"),
        Some("1000")
    );

    let body = chat_body("fast");
    let (in_flight, (reloaded, after)) = tokio::join!(app.chat(&key, &body), async {
        crate::support::wait_until(
            Duration::from_secs(5),
            "the in-flight call upstream",
            async || {
                let requests = app.fake.stats.requests_for_model("delay-800ms");
                crate::support::done_if(requests >= 2, requests)
            },
        )
        .await;
        edit_config(&app.config_path, |doc| {
            doc["routes"]["fast"]["targets"] = vec!["secondary/after-reload"].into();
            doc["tiers"]["free"]["rpm"] = 500.into();
            let price = entry([
                ("provider", "secondary".into()),
                ("model", "after-reload".into()),
                ("input", "2".into()),
                ("output", "8".into()),
            ]);
            doc["prices"].as_array_mut().unwrap().push(price.into());
        });
        let reloaded = app.admin("POST", "/reload", None).await;
        (reloaded, app.chat(&key, &body).await)
    });

    assert_eq!(reloaded.status, 200, "{}", reloaded.raw);
    assert_eq!(reloaded.body["providers_started"], json!([]));
    assert_eq!(
        reloaded.body["providers_kept"],
        json!(["primary", "secondary"])
    );
    assert_eq!(in_flight.status, 200, "{}", in_flight.raw);
    assert_eq!(in_flight.header("x-tollgate-provider"), Some("primary"));
    assert_eq!(after.status, 200, "{}", after.raw);
    assert_eq!(after.header("x-tollgate-provider"), Some("secondary"));
    assert_eq!(after.header("x-tollgate-model"), Some("after-reload"));
    assert_eq!(
        after.header("x-ratelimit-limit-requests"),
        Some("500"),
        "the running tenant actor got the new tier"
    );
    let rows = app.ledger_rows(&tenant).await;
    let mut statuses: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.model.as_str(), r.status.as_str()))
        .collect();
    // The in-flight call ends after the one sent once the reload was done.
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [
            ("after-reload", "ok"),
            ("delay-800ms", "ok"),
            ("delay-800ms", "ok")
        ]
    );
    let before = rows.iter().find(|r| r.model == "delay-800ms").unwrap();
    let after = rows.iter().find(|r| r.model == "after-reload").unwrap();
    assert_ne!(before.price_version, after.price_version);
}

#[actix_web::test]
async fn an_invalid_reload_is_refused_with_its_reason_and_the_old_config_kept() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    edit_config(&app.config_path, |doc| {
        doc["routes"]["fast"]["targets"] = vec!["ghost/usage-10-0-5"].into();
    });

    let refused = app.admin("POST", "/reload", None).await;

    assert_eq!(refused.status, 400, "{}", refused.raw);
    assert_eq!(
        refused.error_message(),
        "the new configuration was refused, the running one is kept: routes.fast.targets[0]: unknown provider `ghost`"
    );
    let reply = app.chat(&key, &chat_body("fast")).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-provider"), Some("primary"));
}

#[actix_web::test]
async fn a_changed_provider_gets_a_new_actor_and_an_unchanged_one_keeps_its_breaker() {
    let clock = Arc::new(ManualClock::new(now_ms()));
    let app = spawn_app(
        TestSetup::new()
            .with(breaker)
            .route("fast", &["brk/status-503", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100)
            .clock(clock.clone()),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    served_by(&app, &key, 5, "secondary").await;
    assert_eq!(app.fake.stats.requests_for_model("status-503"), 5);

    // A reload that leaves `brk` as it was keeps its open breaker.
    edit_config(&app.config_path, |doc| {
        doc["tiers"]["free"]["rpm"] = 999.into();
    });
    let kept = app.admin("POST", "/reload", None).await;
    assert_eq!(
        kept.body["providers_kept"],
        json!(["brk", "primary", "secondary"])
    );
    served_by(&app, &key, 3, "secondary").await;
    assert_eq!(app.fake.stats.requests_for_model("status-503"), 5);

    // Changing its settings starts it afresh, breaker closed.
    edit_config(&app.config_path, |doc| {
        doc["providers"]["brk"]["breaker_failures"] = 6.into();
    });
    let started = app.admin("POST", "/reload", None).await;
    assert_eq!(started.body["providers_started"], json!(["brk"]));
    served_by(&app, &key, 1, "secondary").await;
    assert_eq!(app.fake.stats.requests_for_model("status-503"), 6);
}

#[actix_web::test]
async fn the_adaptive_limit_falls_when_the_provider_slows_down() {
    let clock = Arc::new(ManualClock::new(now_ms()));
    let app = spawn_app(
        TestSetup::new()
            .provider("adaptive_probe", "openai", Upstream::Fake)
            .set("providers.adaptive_probe.max_concurrency", 8)
            .set("providers.adaptive_probe.adaptive_concurrency", true)
            .set("providers.adaptive_probe.adaptive_min_concurrency", 1)
            .set("providers.adaptive_probe.adaptive_window_ms", 1000)
            .route("quick", &["adaptive_probe/usage-10-0-5"])
            .route("slow", &["adaptive_probe/delay-800ms"])
            .tier("free", &["quick", "slow"], 1000, 100)
            .clock(clock.clone()),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let limit = || async {
        let scrape = app.get("/metrics", "").await.raw;
        scrape
            .lines()
            .find_map(|line| {
                line.strip_prefix(
                    "tollgate_provider_concurrency_limit{provider=\"adaptive_probe\"} ",
                )
            })
            .map(str::to_owned)
    };
    let call = |model: &'static str| {
        let app = &app;
        let key = &key;
        async move { assert_eq!(app.chat(key, &chat_body(model)).await.status, 200) }
    };

    // A first window of quick calls sets the baseline: the limit stays at the target.
    for _ in 0..3 {
        call("quick").await;
    }
    clock.advance_ms(1000);
    call("quick").await;
    assert_eq!(limit().await.as_deref(), Some("8"));

    // A window of one call far slower than the baseline: 8 × baseline / current,
    // floored at 1 (any baseline under 200 ms gives 1).
    clock.advance_ms(1000);
    call("slow").await;
    assert_eq!(limit().await.as_deref(), Some("1"));
}
