use futures_util::future::join_all;
use serde_json::json;

use crate::support::{TestSetup, Upstream, chat_body, entry, spawn_app};

#[actix_web::test]
async fn budget_of_5_with_calls_costing_4_allows_one_then_402() {
    // 500000 completion tokens at 8 per 1M cost exactly 4.
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-0-0-500000"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "5"}))
        .await;
    let mut body = chat_body("fast");
    body["max_tokens"] = json!(200_000);

    let first = app.chat(&key, &body).await;
    assert_eq!(first.status, 200, "{}", first.raw);
    assert_eq!(first.header("x-tollgate-cost"), Some("4"));
    assert_eq!(first.header("x-tollgate-budget-remaining"), Some("1"));

    // 4 committed + a worst case of 1.6 would pass 5: a soft cap would have admitted it.
    let second = app.chat(&key, &body).await;
    assert_eq!(second.status, 402, "{}", second.raw);
    assert_eq!(second.error_code(), "budget_exceeded");
    assert_eq!(second.body["error"]["type"], "insufficient_quota");
    assert_eq!(second.header("x-should-retry"), Some("false"));
    assert!(
        second.error_message().contains("remaining 1,"),
        "{}",
        second.raw
    );
    assert!(
        second.error_message().contains("needs up to 1.6"),
        "{}",
        second.raw
    );

    assert_eq!(
        app.fake.stats.requests(),
        1,
        "the refused request never reached the upstream"
    );
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(
        rows.iter().map(|r| r.charged_nanos).sum::<i64>(),
        4_000_000_000
    );
    let budget = app.budget(&tenant).await;
    assert_eq!(
        budget,
        json!({"budget": "5", "committed": "4", "reserved": "0", "remaining": "1", "period": budget["period"]})
    );
}

#[actix_web::test]
async fn fifty_concurrent_requests_never_commit_more_than_the_budget() {
    // The tenant's actor on the worker that first served it (the default), its
    // requests arriving over both workers.
    fifty_concurrent_requests_on_a_budget_of_one(TestSetup::new()).await;
}

#[actix_web::test]
async fn fifty_concurrent_requests_never_commit_more_than_the_budget_with_tenant_arbiters() {
    fifty_concurrent_requests_on_a_budget_of_one(TestSetup::new().set("server.tenant_arbiters", 2))
        .await;
}

async fn fifty_concurrent_requests_on_a_budget_of_one(setup: TestSetup) {
    // usage-max: the upstream bills every output token it was allowed.
    let app = spawn_app(setup.route("fast", &["primary/usage-max+delay-20ms"]).tier(
        "free",
        &["fast"],
        1000,
        100,
    ))
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1"}))
        .await;
    let mut body = chat_body("fast");
    // 10000 output tokens at 8 per 1M: about 0.08 a call, so about 12 fit in 1.
    body["max_tokens"] = json!(10_000);

    let replies = join_all((0..50).map(|_| app.chat(&key, &body))).await;

    let ok = replies.iter().filter(|r| r.status == 200).count();
    let refused = replies.iter().filter(|r| r.status == 402).count();
    assert_eq!(
        ok + refused,
        50,
        "{:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert!((1..=12).contains(&ok), "{ok} admitted");
    let rows = app.ledger_rows(&tenant).await;
    let charged: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert!(
        charged <= 1_000_000_000,
        "charged {charged} nanos on a budget of 1"
    );
    assert_eq!(rows.len(), ok);
    assert_eq!(app.fake.stats.requests(), ok as u64);
    let budget = app.budget(&tenant).await;
    assert_eq!(budget["reserved"], "0");
    assert_eq!(
        tollgate::money::Nanos::parse_decimal(budget["committed"].as_str().unwrap())
            .unwrap()
            .to_db(),
        charged
    );
}

#[actix_web::test]
async fn clamp_mode_lowers_max_tokens_sent_upstream() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-10-0-10"])
            .price("primary/usage-10-0-10", "0", "0", "8")
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    // 0.008 affords exactly 1000 output tokens at 8 per 1M (input is free here).
    let (_tenant, key) = app
        .tenant_with_key(
            "free",
            json!({"monthly_budget": "0.008", "budget_mode": "clamp"}),
        )
        .await;
    let mut body = chat_body("fast");
    body["max_tokens"] = json!(5000);

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-max-tokens-clamped"), Some("1000"));
    assert_eq!(app.fake.stats.captured()[0].body["max_tokens"], 1000);
}

#[actix_web::test]
async fn a_budget_raised_through_the_admin_api_takes_effect_at_once() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-0-0-500000"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1"}))
        .await;
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 402);

    let patched = app
        .admin(
            "PATCH",
            &format!("/tenants/{tenant}"),
            Some(json!({"monthly_budget": "10"})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.raw);

    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
}

#[actix_web::test]
async fn a_reservation_that_expires_unsettled_is_committed_as_orphaned_never_twice() {
    let clock = std::sync::Arc::new(tollgate::clock::ManualClock::new(crate::support::now_ms()));
    let app = spawn_app(
        TestSetup::new()
            .route("slow", &["primary/usage-10-0-10+delay-2500ms"])
            .tier("free", &["slow"], 1000, 100)
            .clock(clock.clone()),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "5"}))
        .await;

    let body = chat_body("slow");
    let call = app.chat(&key, &body);
    let expire = async {
        crate::support::wait_until(
            std::time::Duration::from_secs(5),
            "the call to reach the upstream",
            async || {
                let requests = app.fake.stats.requests();
                crate::support::done_if(requests > 0, requests)
            },
        )
        .await;
        let held = app.budget(&tenant).await;
        // Past the request deadline (20 s) and the margin (30 s): the sweep must act.
        clock.advance_ms(60_000);
        held
    };
    let (reply, held) = tokio::join!(call, expire);

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let reserved = held["reserved"].as_str().unwrap().to_owned();
    assert_ne!(reserved, "0");
    let rows = app.ledger_rows(&tenant).await;
    let mut statuses: Vec<(&str, i64)> = rows
        .iter()
        .map(|r| (r.status.as_str(), r.charged_nanos))
        .collect();
    statuses.sort_unstable();
    let reserved_nanos = tollgate::money::Nanos::parse_decimal(&reserved)
        .unwrap()
        .to_db();
    // The late settle changes nothing: the orphaned row carries the charge, once.
    assert_eq!(statuses, vec![("ok", 0), ("orphaned", reserved_nanos)]);
    let budget = app.budget(&tenant).await;
    assert_eq!(budget["committed"], reserved.as_str());
    assert_eq!(budget["reserved"], "0");
}

#[actix_web::test]
async fn a_feature_budget_refuses_its_features_requests_while_other_features_pass() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-0-0-125000"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "100"}))
        .await;
    let set = app
        .admin(
            "PUT",
            &format!("/tenants/{tenant}/features/search/budget"),
            Some(json!({"monthly_budget": "1"})),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.raw);
    assert_eq!(set.body["feature_budgets"]["search"], "1");
    let search = [("x-tollgate-feature", "search")];
    let chat = [("x-tollgate-feature", "chat")];

    // Each call costs exactly 1 (125000 × 8 / 1M); the worst case of 100 output tokens is tiny.
    assert_eq!(
        app.chat_with(&key, &chat_body("fast"), &search)
            .await
            .status,
        200
    );
    let refused = app.chat_with(&key, &chat_body("fast"), &search).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert!(
        refused.error_message().contains("feature `search`"),
        "{}",
        refused.raw
    );
    for _ in 0..3 {
        assert_eq!(
            app.chat_with(&key, &chat_body("fast"), &chat).await.status,
            200
        );
    }

    let cleared = app
        .admin(
            "DELETE",
            &format!("/tenants/{tenant}/features/search/budget"),
            None,
        )
        .await;
    assert_eq!(cleared.status, 200);
    assert_eq!(
        app.chat_with(&key, &chat_body("fast"), &search)
            .await
            .status,
        200
    );
}

#[actix_web::test]
async fn a_key_budget_caps_that_key_only() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-0-0-125000"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "100"}))
        .await;
    let capped = app
        .admin(
            "POST",
            &format!("/tenants/{tenant}/keys"),
            Some(json!({"name": "ci", "monthly_budget": "1"})),
        )
        .await;
    assert_eq!(capped.status, 201, "{}", capped.raw);
    let capped_key = capped.body["key"].as_str().unwrap().to_owned();
    let capped_id = capped.body["id"].as_str().unwrap().to_owned();

    assert_eq!(app.chat(&capped_key, &chat_body("fast")).await.status, 200);
    let refused = app.chat(&capped_key, &chat_body("fast")).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert!(
        refused
            .error_message()
            .contains(&format!("key `{capped_id}`")),
        "{}",
        refused.raw
    );
    assert_eq!(
        app.chat(&key, &chat_body("fast")).await.status,
        200,
        "the tenant's other key is not capped"
    );

    let raised = app
        .admin(
            "PATCH",
            &format!("/keys/{capped_id}"),
            Some(json!({"monthly_budget": "10"})),
        )
        .await;
    assert_eq!(raised.status, 200, "{}", raised.raw);
    assert_eq!(raised.body["monthly_budget"], "10");
    assert_eq!(app.chat(&capped_key, &chat_body("fast")).await.status, 200);
}

#[actix_web::test]
async fn alert_mode_passes_and_the_webhook_fires_once_at_80_and_once_at_100_percent() {
    use std::sync::{Arc, Mutex};
    let received: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let sink = received.clone();
    let receiver = actix_web::HttpServer::new(move || {
        let sink = sink.clone();
        actix_web::App::new().route(
            "/hook",
            actix_web::web::post().to(move |body: actix_web::web::Json<serde_json::Value>| {
                let sink = sink.clone();
                async move {
                    sink.lock().unwrap().push(body.into_inner());
                    actix_web::HttpResponse::Ok().finish()
                }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .bind("127.0.0.1:0")
    .unwrap();
    let hook = format!("http://{}/hook", receiver.addrs()[0]);
    actix_rt::spawn(receiver.run());
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-0-0-125000"])
            .tier("free", &["fast"], 1000, 100)
            .set("alerts.webhook_url", hook),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key(
            "free",
            json!({"monthly_budget": "5", "budget_mode": "alert"}),
        )
        .await;

    // Each call costs 1: 4 reach 80%, 5 reach 100%, alert mode lets the 6th pass at 120%.
    for _ in 0..6 {
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    }

    crate::support::wait_until(
        std::time::Duration::from_secs(5),
        "two alerts",
        async || {
            let received = received.lock().unwrap().len();
            crate::support::done_if(received >= 2, received)
        },
    )
    .await;
    // A pause on the real clock: a duplicate alert would arrive within it.
    crate::support::let_real_time_pass(std::time::Duration::from_millis(300)).await;
    let alerts = received.lock().unwrap().clone();
    let thresholds: Vec<u64> = alerts
        .iter()
        .map(|a| a["threshold"].as_u64().unwrap())
        .collect();
    assert_eq!(thresholds, vec![80, 100], "{alerts:?}");
    assert_eq!(alerts[0]["tenant"], tenant.as_str());
    assert_eq!(alerts[0]["committed"], "4");
    assert_eq!(alerts[0]["budget"], "5");
    assert_eq!(alerts[1]["committed"], "5");
    assert!(alerts[0]["period"].as_str().is_some());
    assert_eq!(app.budget(&tenant).await["committed"], "6");
}

/// The "needs up to" amount of a 402, in nanos.
fn needed_nanos(reply: &crate::support::Reply) -> i64 {
    let message = reply.error_message();
    let amount = message.rsplit("needs up to ").next().unwrap();
    tollgate::money::Nanos::parse_decimal(amount.trim())
        .unwrap()
        .to_db()
}

#[actix_web::test]
async fn the_estimate_uses_each_models_encoding_and_each_providers_safety_factor() {
    let app = spawn_app(
        TestSetup::new()
            .provider("strict_tok", "openai", Upstream::Fake)
            .set("providers.strict_tok.tokenizer_safety_percent", 200)
            .route("o200k", &["primary/ok"])
            .route("cl100k", &["primary/cl"])
            .route("doubled", &["strict_tok/ok"])
            // 1 per 1M input tokens, output free: "needs up to" is the input estimate in micro-units.
            .price("primary/ok", "1", "1", "0")
            .price("primary/cl", "1", "1", "0")
            .price("strict_tok/ok", "1", "1", "0")
            .price_field("primary/cl", "encoding", "cl100k_base")
            .tier("free", &["o200k", "cl100k", "doubled"], 1000, 100),
    )
    .await;
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.000001"}))
        .await;
    let text = "Grüße aus 東京 und 北京, 你好世界! ".repeat(20);
    let tokens = |route: &str| {
        let body = json!({"model": route, "max_tokens": 1, "messages": [{"role": "user", "content": text}]});
        let app = &app;
        let key = key.clone();
        async move {
            let reply = app.chat(&key, &body).await;
            assert_eq!(reply.status, 402, "{}", reply.raw);
            needed_nanos(&reply) / 1000
        }
    };
    let raw = |bpe: &tiktoken_rs::CoreBPE| {
        // Reply priming + one message's overhead + its content.
        3 + 4 + i64::try_from(bpe.encode_ordinary(&text).len()).unwrap()
    };
    let o200k = raw(tiktoken_rs::o200k_base_singleton());
    let cl100k = raw(tiktoken_rs::cl100k_base_singleton());
    assert_ne!(o200k, cl100k);
    // The default safety factor is 110%, rounded up.
    assert_eq!(tokens("o200k").await, (o200k * 110 + 99) / 100);
    assert_eq!(tokens("cl100k").await, (cl100k * 110 + 99) / 100);
    assert_eq!(tokens("doubled").await, o200k * 2);
}

#[actix_web::test]
async fn a_long_prompt_reserves_and_is_charged_at_the_long_context_tier() {
    let app = spawn_app(
        TestSetup::new()
            .route("long", &["primary/usage-2000-0-100"])
            .tier("free", &["long"], 1000, 100)
            .price("primary/usage-2000-0-100", "2", "2", "8")
            .price_field(
                "primary/usage-2000-0-100",
                "long_context",
                entry([
                    ("above_tokens", 1000.into()),
                    ("input", "20".into()),
                    ("output", "80".into()),
                ]),
            ),
    )
    .await;
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "10"}))
        .await;
    let short = app.chat(&key, &chat_body("long")).await;
    assert_eq!(short.status, 200, "{}", short.raw);
    // The upstream reports 2000 prompt tokens: every token at the long rates.
    // 2000 × 20 + 100 × 80 per 1M = 0.048.
    assert_eq!(short.header("x-tollgate-cost"), Some("0.048"));

    // A prompt the estimate puts above the threshold reserves at the long rates too.
    let (_poor, poor_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.03"}))
        .await;
    let long_text = "budget ".repeat(1200);
    let body = json!({"model": "long", "max_tokens": 100, "messages": [{"role": "user", "content": long_text}]});
    let refused = app.chat(&poor_key, &body).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    let needed = needed_nanos(&refused);
    // More than 1000 tokens at 20 per 1M is already more than 0.02, and the output adds 0.008.
    assert!(needed > 28_000_000, "needed {needed} nanos");
}

#[actix_web::test]
async fn a_long_prompt_is_bounded_by_its_bytes_far_from_a_limit_and_counted_near_one() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-10-0-1"])
            .price("primary/usage-10-0-1", "2", "2", "8")
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let long_text = "budget ".repeat(1200);
    let mut body = json!({"model": "fast", "messages": [{"role": "user", "content": long_text}]});
    body["max_tokens"] = json!(1);

    // Far from any limit the 8,400 bytes are the count (× 1.1): about 0.0185 held.
    let (rich, rich_key) = app.tenant_with_key("free", json!({})).await;
    assert_eq!(app.chat(&rich_key, &body).await.status, 200);
    let held = app.ledger_rows(&rich).await[0].reserved_nanos;
    assert!(held > 18_000_000, "held {held} nanos");

    // Near a limit the bound would refuse; the exact count (about 1,200 tokens, 0.0027) fits.
    let (poor, poor_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.01"}))
        .await;
    let reply = app.chat(&poor_key, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let held = app.ledger_rows(&poor).await[0].reserved_nanos;
    assert!(held < 3_000_000, "held {held} nanos");
    assert_eq!(app.budget(&poor).await["reserved"], "0");
}
