//! Quotas shared by replicas through a real `redis-server`: separate gateway
//! instances (each with its own actors, arbiters and HTTP server) on one
//! Redis and one database.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Value, json};
use tollgate::clock::{Clock, ManualClock};
use tollgate::money::Nanos;

use crate::support::redis::RedisServer;
use crate::support::{
    Reply, TestApp, TestSetup, Upstream, chat_body, now_ms, spawn_app, spawn_replica, wait_until,
};

/// Long enough for any request with a 100 ms store timeout; a Redis that
/// hangs a request would blow through it.
const NO_HANG: Duration = Duration::from_secs(3);

/// The store timeout of the tests about what replicas admit together: they
/// are about budgets and rates, not a slow store, and on a test machine
/// running a Redis Cluster beside them a call can wait past the default
/// 100 ms, which fails closed (503; the outage tests cover that).
const BUSY_MACHINE_TIMEOUT_MS: i64 = 1000;

/// Waits until every replica's key cache has the key (they poll the database).
async fn until_known(apps: &[TestApp], key: &str) {
    for app in apps {
        crate::support::wait_until(
            Duration::from_secs(5),
            "a replica to learn the key",
            async || {
                let status = app.get("/v1/models", key).await.status;
                crate::support::done_if(status == 200, status)
            },
        )
        .await;
    }
}

async fn replicas(setup: &TestSetup, n: usize) -> Vec<TestApp> {
    let first = spawn_app(setup.clone()).await;
    let mut apps = Vec::with_capacity(n);
    for _ in 1..n {
        apps.push(spawn_replica(&first, setup).await);
    }
    apps.insert(0, first);
    apps
}

fn committed(budget: &Value) -> i64 {
    Nanos::parse_decimal(budget["committed"].as_str().unwrap())
        .unwrap()
        .to_db()
}

async fn chat_within(app: &TestApp, key: &str, body: &Value) -> Reply {
    actix_rt::time::timeout(NO_HANG, app.chat(key, body))
        .await
        .unwrap_or_else(|_| panic!("a request waited on an unreachable Redis"))
}

async fn readyz_store(app: &TestApp) -> String {
    let reply = app.get("/readyz", "").await;
    reply.body["quota_store"].as_str().unwrap_or("").to_owned()
}

async fn until_store(app: &TestApp, state: &str) {
    crate::support::wait_until(
        Duration::from_secs(5),
        &format!("/readyz to report quota_store = {state}"),
        async || {
            let seen = readyz_store(app).await;
            crate::support::done_if(seen == state, seen)
        },
    )
    .await;
}

#[actix_web::test]
async fn four_replicas_on_one_redis_admit_exactly_30_of_120_requests_at_30_rpm() {
    let redis = RedisServer::start().await;
    four_replicas_admit_exactly_30_of_120_at_30_rpm(&redis.url()).await;
}

/// Also run on a Redis Cluster (`redis_cluster.rs`).
pub async fn four_replicas_admit_exactly_30_of_120_at_30_rpm(redis_url: &str) {
    // A frozen clock: the bucket does not refill while the test runs.
    let clock = Arc::new(ManualClock::new(now_ms()));
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 30, 100)
        .redis(redis_url, 4)
        .clock(clock)
        .set("storage.redis_timeout_ms", BUSY_MACHINE_TIMEOUT_MS);
    let apps = replicas(&setup, 4).await;
    let (_tenant, key) = apps[0].tenant_with_key("free", json!({})).await;
    until_known(&apps, &key).await;

    let body = chat_body("fast");
    let replies = join_all((0..120).map(|i| apps[i % 4].chat(&key, &body))).await;

    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        30,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        90,
        "{statuses:?}"
    );
    // Each replica got 30 of the requests: with limits of its own each would
    // have admitted all of them. Which replica wins the shared tokens is a race.
    let refused_by =
        (0..4)
            .filter(|r| {
                replies.iter().skip(*r).step_by(4).any(|x| {
                    x.status == 429 && x.header("x-ratelimit-limit-requests") == Some("30")
                })
            })
            .count();
    assert!(refused_by >= 1, "{statuses:?}");
    assert_eq!(apps[0].fake.stats.requests(), 30);
}

#[actix_web::test]
async fn two_hundred_concurrent_requests_over_three_replicas_never_pass_the_budget() {
    let redis = RedisServer::start().await;
    two_hundred_requests_over_three_replicas_never_pass_the_budget(&redis.url()).await;
}

/// Also run on a Redis Cluster (`redis_cluster.rs`).
pub async fn two_hundred_requests_over_three_replicas_never_pass_the_budget(redis_url: &str) {
    let setup = TestSetup::new()
        // usage-max: the upstream bills every output token it was allowed.
        .route("fast", &["primary/usage-max+delay-20ms"])
        .tier("free", &["fast"], 100_000, 100)
        .redis(redis_url, 3)
        .set("storage.redis_timeout_ms", BUSY_MACHINE_TIMEOUT_MS);
    let apps = replicas(&setup, 3).await;
    let (tenant, key) = apps[0]
        .tenant_with_key("free", json!({"monthly_budget": "0.8"}))
        .await;
    until_known(&apps, &key).await;
    let mut body = chat_body("fast");
    // 10000 output tokens at 8 per 1M: about 0.08 a call, so about 10 fit in 0.8.
    body["max_tokens"] = json!(10_000);

    let replies = join_all((0..200).map(|i| apps[i % 3].chat(&key, &body))).await;

    let ok = replies.iter().filter(|r| r.status == 200).count();
    let refused: Vec<&Reply> = replies.iter().filter(|r| r.status == 402).collect();
    let others: Vec<&str> = replies
        .iter()
        .filter(|r| r.status != 200 && r.status != 402)
        .map(|r| r.raw.as_str())
        .collect();
    assert_eq!(ok + refused.len(), 200, "{others:?}");
    assert!((1..=10).contains(&ok), "{ok} admitted");
    assert!(refused.iter().all(
        |r| r.error_code() == "budget_exceeded" && r.header("x-should-retry") == Some("false")
    ));
    let rows = apps[0].ledger_rows(&tenant).await;
    let mut charged = 0;
    for app in &apps[1..] {
        app.flush_ledger().await;
    }
    let rows = if rows.len() < ok {
        apps[0].ledger_rows(&tenant).await
    } else {
        rows
    };
    for row in &rows {
        charged += row.charged_nanos;
    }
    assert_eq!(rows.len(), ok, "one row per admitted call");
    assert!(
        charged <= 800_000_000,
        "charged {charged} nanos on a budget of 0.8"
    );
    for app in &apps {
        let budget = app.budget(&tenant).await;
        assert_eq!(budget["reserved"], "0", "{budget}");
        assert_eq!(
            committed(&budget),
            charged,
            "every replica sees the ledger's total"
        );
    }
}

#[actix_web::test]
async fn two_hundred_concurrent_requests_with_retries_and_timeouts_never_pass_the_budget() {
    let redis = RedisServer::start().await;
    let setup = TestSetup::new()
        .provider("impatient", "openai", Upstream::Fake)
        .set("providers.impatient.timeout_ms", 200)
        .set("providers.impatient.max_attempts", 1)
        // A third of the calls time out after sending (charged their hold) and fail over;
        // a third meet 503s (free) and are retried; a third go straight through.
        .route("timeout", &["impatient/usage-max+delay-1000ms", "primary/usage-max+delay-20ms"])
        .route("retry", &["primary/usage-max+flaky-40", "secondary/usage-max+delay-20ms"])
        .route("fast", &["primary/usage-max+delay-20ms"])
        .tier("free", &["timeout", "retry", "fast"], 100_000, 100)
        .redis(&redis.url(), 3)
        .set("storage.redis_timeout_ms", BUSY_MACHINE_TIMEOUT_MS);
    let apps = replicas(&setup, 3).await;
    let (tenant, key) = apps[0]
        .tenant_with_key("free", json!({"monthly_budget": "0.8"}))
        .await;
    until_known(&apps, &key).await;
    let bodies: Vec<Value> = ["timeout", "retry", "fast"]
        .iter()
        .map(|route| {
            let mut body = chat_body(route);
            // 10,000 output tokens at 8 per 1M: a hold of about 0.08.
            body["max_tokens"] = json!(10_000);
            body
        })
        .collect();

    let replies = join_all((0..200).map(|i| apps[i % 3].chat(&key, &bodies[(i / 3) % 3]))).await;

    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert!(
        statuses.iter().all(|s| [200, 402, 502].contains(s)),
        "{statuses:?}"
    );
    assert!(statuses.contains(&200), "{statuses:?}");
    for app in &apps {
        app.flush_ledger().await;
    }
    let rows = apps[0].ledger_rows(&tenant).await;
    let charged: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert!(
        charged <= 800_000_000,
        "charged {charged} nanos on a budget of 0.8: {rows:?}"
    );
    assert!(
        rows.iter().any(|r| r.usage_kind == "unknown"),
        "some attempts timed out after sending"
    );
    for app in &apps {
        let budget = app.budget(&tenant).await;
        assert_eq!(budget["reserved"], "0", "{budget}");
        assert_eq!(
            committed(&budget),
            charged,
            "every replica sees the ledger's total"
        );
    }
}

fn outage_setup(redis: &RedisServer) -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("closed", &["fast"], 1000, 100)
        .tier("shared_out", &["fast"], 20, 100)
        .set("tiers.shared_out.on_store_error", "local")
        .redis(&redis.url(), 2)
}

#[actix_web::test]
async fn with_redis_killed_fail_closed_tenants_get_503_local_ones_their_share_and_it_recovers() {
    let mut redis = RedisServer::start().await;
    let clock = Arc::new(ManualClock::new(now_ms()));
    let app = spawn_app(outage_setup(&redis).clock(clock.clone())).await;
    let (closed, closed_key) = app
        .tenant_with_key("closed", json!({"monthly_budget": "10"}))
        .await;
    let (local, local_key) = app
        .tenant_with_key("shared_out", json!({"monthly_budget": "10"}))
        .await;
    let body = chat_body("fast");
    assert_eq!(app.chat(&closed_key, &body).await.status, 200);
    for _ in 0..4 {
        assert_eq!(app.chat(&local_key, &body).await.status, 200);
    }
    assert_eq!(readyz_store(&app).await, "redis");

    redis.kill();

    let refused = chat_within(&app, &closed_key, &body).await;
    assert_eq!(refused.status, 503, "{}", refused.raw);
    assert_eq!(refused.error_code(), "quota_unavailable");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        refused.error_message().contains("quota store"),
        "{}",
        refused.raw
    );
    // 20 rpm over 2 replicas: this replica may admit 10 (burst 20 / 2) on its own.
    let mut served = 0;
    for _ in 0..15 {
        let reply = chat_within(&app, &local_key, &body).await;
        assert!(matches!(reply.status, 200 | 429), "{}", reply.raw);
        if reply.status == 200 {
            served += 1;
            assert_eq!(reply.header("x-ratelimit-limit-requests"), Some("10"));
        }
    }
    assert_eq!(served, 10, "the local share is half of the tier's 20");
    assert_eq!(readyz_store(&app).await, "redis_unreachable");
    assert_eq!(
        app.get("/readyz", "").await.status,
        200,
        "the replica still serves"
    );

    redis.restart().await;
    until_store(&app, "redis").await;
    clock.advance_ms(60_000);

    let back = chat_within(&app, &closed_key, &body).await;
    assert_eq!(back.status, 200, "{}", back.raw);
    assert_eq!(chat_within(&app, &local_key, &body).await.status, 200);
    // The empty Redis was reseeded from the ledger: what it says is the ledger's total.
    for tenant in [&closed, &local] {
        let rows = app.ledger_rows(tenant).await;
        let charged: i64 = rows.iter().map(|r| r.charged_nanos).sum();
        let budget = app.budget(tenant).await;
        assert_eq!(committed(&budget), charged, "{tenant}: {budget}");
        assert_eq!(budget["reserved"], "0");
    }
    let metrics = app.get("/metrics", "").await.raw;
    assert!(metrics.contains("tollgate_quota_store_fallbacks_total{policy=\"fail_closed\"}"));
    assert!(metrics.contains("tollgate_quota_store_fallbacks_total{policy=\"local\"}"));
}

#[actix_web::test]
async fn a_frozen_redis_holds_no_request_and_thawing_it_resumes_shared_decisions() {
    let redis = RedisServer::start().await;
    let app = spawn_app(outage_setup(&redis)).await;
    let (_closed, closed_key) = app.tenant_with_key("closed", json!({})).await;
    let (_local, local_key) = app.tenant_with_key("shared_out", json!({})).await;
    // A tenant's own policy overrides its tier's.
    let (overridden, overridden_key) = app
        .tenant_with_key("closed", json!({"on_store_error": "local"}))
        .await;
    let bad = app
        .admin(
            "PATCH",
            &format!("/tenants/{overridden}"),
            Some(json!({"on_store_error": "sometimes"})),
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.raw);
    assert!(
        bad.error_message().contains("on_store_error"),
        "{}",
        bad.raw
    );
    let body = chat_body("fast");
    assert_eq!(app.chat(&closed_key, &body).await.status, 200);
    assert_eq!(app.chat(&local_key, &body).await.status, 200);

    redis.freeze();

    let served = chat_within(&app, &overridden_key, &body).await;
    assert_eq!(served.status, 200, "{}", served.raw);

    // Connections stay open and nothing answers: only the store timeout ends the wait.
    let replies = join_all((0..6).map(|i| {
        let key = if i % 2 == 0 { &closed_key } else { &local_key };
        chat_within(&app, key, &body)
    }))
    .await;
    for (i, reply) in replies.iter().enumerate() {
        let expected = if i % 2 == 0 { 503 } else { 200 };
        assert_eq!(reply.status, expected, "request {i}: {}", reply.raw);
    }

    redis.thaw();
    until_store(&app, "redis").await;
    assert_eq!(chat_within(&app, &closed_key, &body).await.status, 200);
    assert_eq!(chat_within(&app, &local_key, &body).await.status, 200);
}

#[actix_web::test]
async fn a_feature_budget_in_redis_refuses_only_its_feature() {
    let redis = RedisServer::start().await;
    let setup = TestSetup::new()
        .route("fast", &["primary/usage-max"])
        .tier("free", &["fast"], 1000, 100)
        .redis(&redis.url(), 2);
    let apps = replicas(&setup, 2).await;
    let (tenant, key) = apps[0]
        .tenant_with_key("free", json!({"monthly_budget": "100"}))
        .await;
    let put = apps[0]
        .admin(
            "PUT",
            &format!("/tenants/{tenant}/features/search/budget"),
            Some(json!({"monthly_budget": "0.5"})),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.raw);
    until_known(&apps, &key).await;
    // The replica's directory polls the database for the new feature budget.
    let id = tollgate::ids::TenantId::new(tenant.as_str());
    crate::support::wait_until(
        Duration::from_secs(5),
        "the feature budget on the second replica",
        async || {
            let budgets = apps[1]
                .gateway
                .directory
                .tenant(&id)
                .map(|t| t.feature_budgets.clone());
            crate::support::done_if(
                budgets.as_ref().is_some_and(|b| b.contains_key("search")),
                budgets,
            )
        },
    )
    .await;
    let mut body = chat_body("fast");
    body["max_tokens"] = json!(100_000);

    let search = apps[1]
        .chat_with(&key, &body, &[("x-tollgate-feature", "search")])
        .await;
    assert_eq!(search.status, 402, "{}", search.raw);
    assert!(
        search.error_message().contains("feature `search`"),
        "{}",
        search.raw
    );
    let chat = apps[1]
        .chat_with(&key, &body, &[("x-tollgate-feature", "chat")])
        .await;
    assert_eq!(chat.status, 200, "{}", chat.raw);
}

#[actix_web::test]
async fn the_suite_runs_on_redis_when_asked_and_in_memory_otherwise() {
    let app = spawn_app(TestSetup::new().route("fast", &["primary/ok"])).await;
    let expected = if crate::support::redis::suite_on_redis() {
        "redis"
    } else {
        "memory"
    };
    assert_eq!(readyz_store(&app).await, expected);
}

#[actix_web::test]
async fn a_breaker_opened_on_one_replica_makes_the_others_skip_the_provider_too() {
    let redis = RedisServer::start().await;
    a_breaker_opened_on_one_replica_is_followed_by_the_other(&redis.url()).await;
}

/// Also run on a Redis Cluster (`redis_cluster.rs`).
pub async fn a_breaker_opened_on_one_replica_is_followed_by_the_other(redis_url: &str) {
    let setup = TestSetup::new()
        .provider("brk", "openai", Upstream::Fake)
        .set("providers.brk.max_attempts", 1)
        .set("providers.brk.breaker_failures", 5)
        .set("providers.brk.breaker_error_rate_percent", 0)
        .set("providers.brk.breaker_cooldown_ms", 60_000)
        .route("fast", &["brk/status-503", "secondary/usage-10-0-5"])
        .tier("free", &["fast"], 1000, 100)
        .redis(redis_url, 2);
    let apps = replicas(&setup, 2).await;
    let (_tenant, key) = apps[0].tenant_with_key("free", json!({})).await;
    until_known(&apps, &key).await;
    let failing_calls = || apps[0].fake.stats.requests_for_model("status-503");
    let body = chat_body("fast");

    for _ in 0..5 {
        let reply = apps[0].chat(&key, &body).await;
        assert_eq!(reply.header("x-tollgate-provider"), Some("secondary"));
    }
    assert_eq!(
        failing_calls(),
        5,
        "five failures open the first replica's breaker"
    );

    // The second replica never saw a failure; it follows the first within a poll or two.
    // A pause on the real clock: its poll shows outside only in its calls, and
    // a call before it follows would reach the failing provider.
    crate::support::let_real_time_pass(Duration::from_secs(1)).await;
    for _ in 0..10 {
        let reply = apps[1].chat(&key, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        assert_eq!(reply.header("x-tollgate-provider"), Some("secondary"));
    }
    assert_eq!(
        failing_calls(),
        5,
        "the second replica did not touch the failing provider"
    );
}

/// A shared reservation of a request the ledger already has rows for (its
/// replica wrote them and died before its Redis settle) is charged what the
/// rows say, with no orphan row; one with no row is an orphan.
#[actix_web::test]
async fn the_expiry_sweep_asks_the_ledger_before_committing_an_orphan() {
    use tollgate::config::StoreErrorPolicy;
    use tollgate::directory::BudgetMode;
    use tollgate::ids::{EventId, KeyId, RequestId, ReservationId, TenantId};
    use tollgate::ledger::{AttemptStatus, UsageEvent, UsageKind, repo};
    use tollgate::money::PricePerMTok;
    use tollgate::pricing::Usage;
    use tollgate::tenant::book::{Limits, Seed};
    use tollgate::tenant::shared::{Reserved, expiry};
    use tollgate::tenant::{ReservationMeta, ReserveRequest, TokenLimits};

    let redis = RedisServer::start().await;
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/ok"])
            .tier("free", &["fast"], 1000, 100)
            .redis(&redis.url(), 1),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let tenant = TenantId::new(tenant);
    let store = app.gateway.quota_store.clone().unwrap();
    let quota = store.tenant(&tenant);
    let db = app.gateway.directory.db();
    let now = now_ms();
    quota.seed(&Seed::default(), &[], now).await.unwrap();
    let limits = Limits {
        rpm: 1000,
        burst: 1000,
        budget: Some(Nanos::parse_decimal("100").unwrap()),
        mode: BudgetMode::Strict,
        clamp_floor_tokens: 1,
        feature_budgets: std::collections::BTreeMap::new(),
        tokens: TokenLimits::default(),
        on_store_error: StoreErrorPolicy::FailClosed,
        calendar: tollgate::calendar::Calendar::utc(),
        end_users_in_memory: 1_000,
        period: tollgate::calendar::Period::Month,
        feature_periods: std::collections::BTreeMap::new(),
        credits: false,
        rate_mode: tollgate::directory::RateMode::Enforce,
        alert_webhook_url: None,
        alert_thresholds_percent: vec![80, 100],
    };
    let key_id = KeyId::new(key.split('_').nth(1).unwrap());

    for id in [1u64, 2] {
        let request = ReserveRequest {
            input_tokens: 0,
            input_price: PricePerMTok::parse_decimal("0").unwrap(),
            output_price: PricePerMTok::parse_decimal("1000").unwrap(),
            max_tokens: 1000,
            choices: 1,
            expires_at_ms: now + 1000,
            key: key_id.clone(),
            key_budget: None,
            feature: "default".to_owned(),
            end_user: None,
            key_credits: false,
            fees: Nanos::ZERO,
            session: None,
            key_period: tollgate::calendar::Period::Month,
        };
        let meta = ReservationMeta {
            request_id: RequestId::new(format!("req-{id}")),
            key: key_id.clone(),
            feature: "default".to_owned(),
            end_user: None,
            session: None,
            api: tollgate::ledger::Api::Chat,
            route: "fast".to_owned(),
            client_request_id: None,
            trace_id: None,
            replica: "gone".to_owned(),
            plan: None,
            cost_nanos: None,
        };
        let meta = serde_json::to_string(&meta).unwrap();
        let reserved = quota
            .reserve(ReservationId(id), &request, &limits, &meta, now)
            .await
            .unwrap();
        assert!(matches!(reserved, Reserved::Granted(_)), "{reserved:?}");
    }
    // req-1's replica wrote its row (charged 0.25) before dying; req-2 has none.
    let row = UsageEvent {
        event_id: EventId::generate(),
        request_id: RequestId::new("req-1"),
        client_request_id: None,
        trace_id: None,
        tenant: tenant.clone(),
        key: key_id.clone(),
        feature: "default".to_owned(),
        end_user: None,
        session: None,
        api: tollgate::ledger::Api::Chat,
        route: "fast".to_owned(),
        provider: "primary".to_owned(),
        model: "ok".to_owned(),
        attempt: 1,
        status: AttemptStatus::Ok,
        upstream_status: Some(200),
        usage: Usage::default(),
        usage_kind: UsageKind::Reported,
        reserved: Nanos::parse_decimal("1").unwrap(),
        charged: Nanos::parse_decimal("0.25").unwrap(),
        cost: None,
        plan: None,
        price_version: String::new(),
        latency_ms: 1,
        ttft_ms: None,
        error: None,
        cache: None,
        created_at_ms: now,
    };
    repo::insert_batch(db, &[row], &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();

    let orphaned = expiry::sweep(&quota, db, &tenant, now + 2000)
        .await
        .unwrap();
    assert_eq!(
        orphaned.len(),
        1,
        "only the request with no row is an orphan"
    );
    assert_eq!(orphaned[0].meta.request_id.as_str(), "req-2");
    assert_eq!(orphaned[0].amount, Nanos::parse_decimal("1").unwrap());
    let (committed, reserved) = quota
        .status(tollgate::calendar::Period::Month, now + 2000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(committed, Nanos::parse_decimal("1.25").unwrap());
    assert_eq!(reserved, Nanos::ZERO);
    // A second sweep finds nothing left.
    assert!(
        expiry::sweep(&quota, db, &tenant, now + 3000)
            .await
            .unwrap()
            .is_empty()
    );
}

#[actix_web::test]
async fn the_gateway_keeps_as_many_redis_connections_as_its_pool_size_on_each_thread() {
    let redis = RedisServer::start().await;
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 1000, 100)
        .redis(&redis.url(), 1)
        .set("storage.redis_pool_size", 3);
    let app = spawn_app(setup).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let body = chat_body("fast");
    let replies = join_all((0..12).map(|_| app.chat(&key, &body))).await;
    assert!(replies.iter().all(|r| r.status == 200));
    // At most the pool's size in multiplexed connections for each thread that
    // calls the store (the two workers, and the main thread for its health
    // checks), each used in turn; nothing else stays open.
    let open = redis.connected_clients();
    assert!((1..=9).contains(&open), "{open} connections");

    // Three times the calls: still within the bound, not a connection per call.
    let replies = join_all((0..36).map(|_| app.chat(&key, &body))).await;
    assert!(replies.iter().all(|r| r.status == 200));
    let after = redis.connected_clients();
    assert!(
        (open..=9).contains(&after),
        "{open}, then {after} connections"
    );
}

#[actix_web::test]
async fn an_answer_goes_out_before_its_settlement_reaches_redis() {
    let redis = RedisServer::start().await;
    // A store timeout far past the client's (5 s): a settle the answer waited
    // for would hold it until the client gave up.
    let setup = TestSetup::new()
        .route("slow", &["primary/delay-1000ms"])
        .tier("t", &["slow"], 1000, 100)
        .redis(&redis.url(), 1)
        .set("storage.redis_timeout_ms", 30_000);
    let app = spawn_app(setup).await;
    let (tenant, key) = app
        .tenant_with_key("t", json!({"monthly_budget": "10"}))
        .await;
    let body = chat_body("slow");
    let first = app.chat(&key, &body).await;
    assert_eq!(first.status, 200, "{}", first.raw);

    // Redis stops answering once the second call is admitted: only its settle is left.
    let freeze = async {
        wait_until(
            Duration::from_secs(5),
            "the upstream to receive the second call",
            async || {
                let requests = app.fake.stats.requests();
                crate::support::done_if(requests == 2, requests)
            },
        )
        .await;
        redis.freeze();
    };
    let (second, ()) = tokio::join!(app.chat(&key, &body), freeze);
    assert_eq!(second.status, 200, "{}", second.raw);

    redis.thaw();
    app.settled().await;
    let budget = app.budget(&tenant).await;
    assert_eq!(
        budget["reserved"], "0",
        "the settle reached Redis: {budget}"
    );
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    let charged: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert!(rows.iter().all(|r| r.charged_nanos > 0), "{rows:?}");
    assert_eq!(committed(&budget), charged, "{budget}");
    // The budget left the answer reported: its admission's figure and its own refund.
    let remaining = Nanos::parse_decimal(second.header("x-tollgate-budget-remaining").unwrap())
        .unwrap()
        .to_db();
    assert_eq!(remaining, 10_000_000_000 - charged, "{}", second.raw);
}

fn nanos_header(reply: &Reply, name: &str) -> i64 {
    let value = reply
        .header(name)
        .unwrap_or_else(|| panic!("no {name}: {}", reply.raw));
    Nanos::parse_decimal(value).unwrap().to_db()
}

#[actix_web::test]
async fn back_to_back_calls_each_see_the_refund_of_the_one_before_in_redis() {
    let redis = RedisServer::start().await;
    // Several connections per thread, so a settle and the next decision
    // could travel on different ones.
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("t", &["fast"], 100_000, 100)
        .redis(&redis.url(), 1)
        .set("storage.redis_pool_size", 4);
    let app = spawn_app(setup).await;
    let (tenant, key) = app
        .tenant_with_key("t", json!({"monthly_budget": "10"}))
        .await;
    let body = chat_body("fast");
    let mut left = 10_000_000_000;
    for call in 0..40 {
        let reply = app.chat(&key, &body).await;
        assert_eq!(reply.status, 200, "call {call}: {}", reply.raw);
        left -= nanos_header(&reply, "x-tollgate-cost");
        // Each admission saw every earlier settle: only its own hold was out.
        assert_eq!(
            nanos_header(&reply, "x-tollgate-budget-remaining"),
            left,
            "call {call}"
        );
    }
    let rows = app.ledger_rows_eventually(&tenant, 40).await;
    let charged: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert_eq!(charged, 10_000_000_000 - left);
}

/// Redis restarted empty while a call is in flight: its settle finds neither
/// the hold nor a mark that it was closed, so the store lost it. That is never
/// a discount: the row keeps what its usage costs (the ledger is the truth),
/// the loss is counted and Redis counts the charge; and until that call has
/// settled nothing is decided on Redis, so nothing is admitted on the budget
/// it still holds.
#[actix_web::test]
async fn a_call_in_flight_when_redis_restarts_empty_keeps_its_charge() {
    let mut redis = RedisServer::start().await;
    let app = spawn_app(
        TestSetup::new()
            .route("slow", &["primary/usage-10-0-5+delay-1500ms"])
            .route("quick", &["primary/usage-10-0-5"])
            .tier("free", &["slow", "quick"], 1000, 100)
            .redis(&redis.url(), 1),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1"}))
        .await;
    let slow = chat_body("slow");
    let call = app.chat(&key, &slow);
    let restart = async {
        wait_until(
            Duration::from_secs(5),
            "the call to reach the upstream",
            async || {
                let requests = app.fake.stats.requests();
                crate::support::done_if(requests == 1, requests)
            },
        )
        .await;
        redis.restart().await;
        // The replica notices the restart within a probe and decides nothing
        // on Redis until the call in flight has settled: refused 503, free.
        until_store(&app, "redis_restarted").await;
        let paused = app.chat(&key, &chat_body("quick")).await;
        assert_eq!(paused.status, 503, "{}", paused.raw);
        assert_eq!(paused.error_code(), "quota_unavailable");
        until_store(&app, "redis").await;
        app.chat(&key, &chat_body("quick")).await
    };

    let (reply, quick) = futures_util::future::join(call, restart).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(quick.status, 200, "{}", quick.raw);
    app.settled().await;
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    // 10 prompt at 2 per 1M + 5 completion at 8 per 1M, each.
    assert!(
        rows.iter()
            .all(|r| r.charged_nanos == 60_000 && r.error.is_none()),
        "{rows:?}"
    );
    let metrics = app.get("/metrics", "").await.raw;
    assert!(
        crate::support::metric_value(&metrics, "tollgate_quota_holds_lost_total") >= 1,
        "{metrics}"
    );
    // What Redis decides on is what the ledger has: both calls.
    assert_eq!(committed(&app.budget(&tenant).await), 120_000);
    assert_eq!(app.chat(&key, &chat_body("quick")).await.status, 200);
    app.settled().await;
    assert_eq!(committed(&app.budget(&tenant).await), 180_000);
}

/// Redis restarted empty under load on three replicas. Six calls hold the
/// budget (0.05, about 0.008 each) when Redis comes back empty; six more
/// follow. Before, the new Redis was started from a ledger that lacked the
/// six in flight and admitted a budget again. Now every replica decides
/// nothing on Redis until the holds it lost have settled, then starts from a
/// ledger that has them: the second six are refused, no row carrying usage is
/// charged 0, and the ledger stays within the budget.
#[actix_web::test]
async fn redis_restarted_empty_under_load_on_three_replicas_keeps_the_ledger_within_the_budget() {
    let mut redis = RedisServer::start().await;
    let setup = TestSetup::new()
        .route("slow", &["primary/usage-max+delay-2500ms"])
        .tier("free", &["slow"], 1000, 1000)
        .redis(&redis.url(), 3)
        .set("storage.redis_timeout_ms", BUSY_MACHINE_TIMEOUT_MS);
    let apps = replicas(&setup, 3).await;
    let (tenant, key) = apps[0]
        .tenant_with_key("free", json!({"monthly_budget": "0.05"}))
        .await;
    until_known(&apps, &key).await;
    let body = chat_body("slow");
    let upstream = || -> u64 { apps.iter().map(|a| a.fake.stats.requests()).sum() };

    let first = join_all((0..6).map(|i| apps[i % 3].chat(&key, &body)));
    let restart = async {
        wait_until(Duration::from_secs(5), "six calls upstream", async || {
            let calls = upstream();
            crate::support::done_if(calls == 6, calls)
        })
        .await;
        redis.restart().await;
        for app in &apps {
            until_store(app, "redis_restarted").await;
        }
        // Refused while the lost holds settle (free of charge)...
        for app in &apps {
            let paused = chat_within(app, &key, &body).await;
            assert_eq!(paused.error_code(), "quota_unavailable", "{}", paused.raw);
        }
        // ...then decided again, from a ledger that has the six.
        for app in &apps {
            until_store(app, "redis").await;
        }
        join_all((0..6).map(|i| chat_within(&apps[i % 3], &key, &body))).await
    };
    let (first, second) = futures_util::future::join(first, restart).await;

    let raw = |replies: &[Reply]| replies.iter().map(|r| r.raw.clone()).collect::<Vec<_>>();
    assert!(first.iter().all(|r| r.status == 200), "{:?}", raw(&first));
    let statuses: Vec<u16> = second.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [402; 6], "{:?}", raw(&second));
    for app in &apps {
        app.settled().await;
        app.flush_ledger().await;
    }
    let rows = apps[0].ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.completion_tokens > 0 && r.charged_nanos > 0),
        "{rows:?}"
    );
    let charged: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert!(
        charged <= 50_000_000,
        "the ledger passed the budget: {charged}"
    );
    assert_eq!(upstream(), 6, "nothing more left");
}

/// Holds open longer than a tenant actor's idle time (long streams, their
/// tenant quiet meanwhile) keep the actor that granted them: a settle and a
/// release reach it and Redis commits the one and gives the other back,
/// instead of both being lost with a stopped actor and the holds lapsing
/// into charges of their whole amounts.
#[actix_web::test]
async fn a_hold_open_past_the_actor_s_idle_time_is_still_given_back() {
    let redis = RedisServer::start().await;
    let clock = Arc::new(ManualClock::new(now_ms()));
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 100, 100)
        .redis(&redis.url(), 1)
        .clock(clock.clone())
        .set("storage.redis_timeout_ms", BUSY_MACHINE_TIMEOUT_MS);
    let app = spawn_app(setup).await;
    let (tenant, _key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1"}))
        .await;
    let record = app
        .gateway
        .directory
        .tenant(&tollgate::ids::TenantId::new(tenant.as_str()))
        .unwrap();
    let handle = app.gateway.tenants.handle(&record).unwrap();
    let hour = 3_600_000;
    let request = crate::tenant_actor::request(100, clock.now_ms() + hour);
    let guard = handle
        .reserve(request.clone(), crate::tenant_actor::meta())
        .await
        .unwrap();
    let settled = handle
        .reserve(request, crate::tenant_actor::meta())
        .await
        .unwrap();
    assert_eq!(guard.granted().amount, Nanos::new(100_000_000));

    // Ten quiet minutes: the actor's sweep (each second, on the test's
    // clock) would find it idle, with nothing of its own in its book.
    clock.advance_ms(10 * 60 * 1000);
    // A pause on the real clock: the sweep ticks each real second, and two
    // ticks must pass without the actor letting go of the holds.
    crate::support::let_real_time_pass(Duration::from_millis(2_500)).await;
    let reply = settled.settle(Nanos::new(30_000_000), 30).await;
    assert!(reply.is_ok_and(|r| tollgate::tenant::handle::committed(&r)));
    guard.release();

    // The release is a message: read until it has landed, a while at most.
    let status =
        crate::support::wait_until(Duration::from_secs(5), "the release to land", async || {
            let status = handle.status().await.unwrap();
            crate::support::done_if(status.reserved == Nanos::ZERO, status)
        })
        .await;
    assert_eq!(status.committed, Nanos::new(30_000_000));
}
