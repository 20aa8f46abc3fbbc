//! Alert-only rate limits (`rate_mode = "alert"`): a call over the tenant's
//! rpm or tpm passes, is counted, and the first of each limit in each clock
//! minute is posted to the alert targets; the in-memory book and the Redis
//! scripts decide it alike, and refuse alike where the mode enforces (a
//! differential case beside `differential.rs`, on a tier with a tpm, which
//! that one's has not).

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tollgate::clock::{Clock, ManualClock};
use tollgate::ids::{KeyId, TenantId};
use tollgate::money::{Nanos, PricePerMTok};
use tollgate::tenant::{ReservationGuard, ReserveRequest, TenantHandle};

use crate::support::redis::RedisServer;
use crate::support::{TestApp, TestSetup, chat_body, metric_value, spawn_app};
use crate::tenant_actor::meta;
use crate::tenant_alerts::Receiver;

const MINUTE_MS: u64 = 60_000;
/// Sequences the stores compare; odd ones on a tenant whose own mode enforces.
const SEEDS: u64 = 24;

/// A second into the current clock minute: the test's calls stay inside it.
fn start_of_a_minute() -> u64 {
    let now = crate::support::now_ms();
    now - now % MINUTE_MS + 1_000
}

/// rpm 2 (burst 2) and tpm 100, alert only: a call's estimate (its prompt
/// plus 100 `max_tokens`) is more than a minute's tokens, so each call is
/// over the tpm, and each after the second in a minute over the rpm.
fn alert_only(clock: Arc<ManualClock>) -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 2, 100)
        .set("tiers.free.burst", 2)
        .set("tiers.free.tpm", 100)
        .set("tiers.free.rate_mode", "alert")
        .clock(clock)
}

fn over_count(metrics: &str, tenant: &str, limit: &str) -> u64 {
    metric_value(
        metrics,
        &format!("tollgate_rate_over_limit_total{{tenant=\"{tenant}\",limit=\"{limit}\"}}"),
    )
}

fn rate_alerts(posts: &[(String, Value)]) -> Vec<(String, String, String)> {
    posts
        .iter()
        .map(|(key, notice)| {
            assert_eq!(notice["kind"], "rate", "{notice}");
            assert_eq!(key, notice["id"].as_str().unwrap());
            (
                notice["limit"].as_str().unwrap().to_owned(),
                notice["period"].as_str().unwrap().to_owned(),
                key.clone(),
            )
        })
        .collect()
}

/// On the suite's store: memory, or Redis with `TOLLGATE_TEST_REDIS=1`.
#[actix_web::test]
async fn an_alert_only_rate_passes_calls_over_rpm_and_tpm_and_alerts_once_per_limit_and_minute() {
    let (own, own_url) = Receiver::start(&[]);
    let clock = Arc::new(ManualClock::new(start_of_a_minute()));
    let app = spawn_app(alert_only(clock.clone())).await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"alert_webhook_url": own_url}))
        .await;

    for call in 0..5 {
        let reply = app.chat(&key, &chat_body("fast")).await;
        assert_eq!(reply.status, 200, "call {call}: {}", reply.raw);
    }
    let posts = own.wait_for(2).await;
    let mut alerts = rate_alerts(&posts);
    alerts.sort();
    assert_eq!(alerts.len(), 2, "one per limit in the minute: {posts:?}");
    assert_eq!((alerts[0].0.as_str(), alerts[1].0.as_str()), ("rpm", "tpm"));
    assert_eq!(alerts[0].1, alerts[1].1, "the same minute");
    let rpm_notice = &posts.iter().find(|(_, n)| n["limit"] == "rpm").unwrap().1;
    assert_eq!(rpm_notice["tenant"], tenant.as_str());
    assert_eq!(rpm_notice["scope"], "tenant");
    assert_eq!(rpm_notice["per_minute"], 2);
    let metrics = app.get("/metrics", "").await.raw;
    assert_eq!(over_count(&metrics, &tenant, "rpm"), 3, "calls 3 to 5");
    assert_eq!(over_count(&metrics, &tenant, "tpm"), 5, "every call");

    // The next minute: the bucket is full again, and the third call alerts anew.
    clock.advance_ms(MINUTE_MS);
    for _ in 0..3 {
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    }
    let posts = own.wait_for(4).await;
    let alerts = rate_alerts(&posts);
    assert_eq!(alerts.len(), 4, "{posts:?}");
    let mut ids: Vec<&str> = alerts.iter().map(|(_, _, id)| id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        4,
        "each minute's alert has its own id: {alerts:?}"
    );
    let metrics = app.get("/metrics", "").await.raw;
    assert_eq!(over_count(&metrics, &tenant, "rpm"), 4);
    assert_eq!(over_count(&metrics, &tenant, "tpm"), 8);
}

#[actix_web::test]
async fn an_enforced_rate_still_refuses_over_rpm_with_429() {
    let clock = Arc::new(ManualClock::new(start_of_a_minute()));
    let app = spawn_app(
        alert_only(clock)
            .set("tiers.free.tpm", 100_000)
            .set("tiers.free.rate_mode", "enforce"),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    for _ in 0..2 {
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    }
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 429);
    // A tenant's own mode overrides its tier's.
    let (_tenant, alerted) = app
        .tenant_with_key("free", json!({"rate_mode": "alert"}))
        .await;
    for _ in 0..3 {
        assert_eq!(app.chat(&alerted, &chat_body("fast")).await.status, 200);
    }
}

// ------------------------------------------------------------ differential

#[derive(Debug, Clone, Copy)]
enum Op {
    Rate,
    /// The rate check and a hold of `tokens` output tokens in one decision.
    RateAndHold {
        tokens: u32,
    },
    /// Settles the oldest open hold at `percent` of its tokens.
    Settle {
        percent: u64,
    },
    Clock {
        ms: u64,
    },
}

fn ops(seed: u64) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..40)
        .map(|_| match rng.random_range(0..10) {
            0..=2 => Op::Rate,
            3..=5 => Op::RateAndHold {
                tokens: rng.random_range(10..200),
            },
            6 | 7 => Op::Settle {
                percent: rng.random_range(0..150),
            },
            _ => Op::Clock {
                ms: rng.random_range(0..40_000),
            },
        })
        .collect()
}

struct Subject {
    app: TestApp,
    clock: Arc<ManualClock>,
}

async fn subject(redis: Option<&RedisServer>, start_ms: u64) -> Subject {
    let clock = Arc::new(ManualClock::new(start_ms));
    let setup = alert_only(clock.clone())
        .set("tiers.free.rpm", 3)
        .set("tiers.free.burst", 3)
        .set("tiers.free.tpm", 300);
    let setup = match redis {
        Some(redis) => setup.redis(&redis.url(), 1),
        None => setup.set("storage.redis_url", ""),
    };
    let app = spawn_app(setup).await;
    assert_eq!(app.gateway.quota_store.is_some(), redis.is_some());
    Subject { app, clock }
}

fn handle(app: &TestApp, tenant: &str) -> TenantHandle {
    let record = app
        .gateway
        .directory
        .tenant(&TenantId::new(tenant))
        .unwrap();
    app.gateway.tenants.handle(&record).unwrap()
}

fn request(tokens: u32, now: u64) -> ReserveRequest {
    ReserveRequest {
        input_tokens: 0,
        input_price: PricePerMTok::parse_decimal("0").unwrap(),
        output_price: PricePerMTok::parse_decimal("1").unwrap(),
        max_tokens: tokens,
        choices: 1,
        expires_at_ms: now + 10 * MINUTE_MS,
        key: KeyId::new("key_actor"),
        key_budget: None,
        key_period: tollgate::calendar::Period::Month,
        feature: String::new(),
        end_user: None,
        key_credits: false,
        fees: Nanos::ZERO,
        session: None,
    }
}

/// One store's answers to a sequence, a line per step.
async fn transcript(subject: &Subject, seed: u64, ops: &[Op]) -> Vec<String> {
    let tenant = format!("rate-{seed}");
    let mode = if seed.is_multiple_of(2) {
        "alert"
    } else {
        "enforce"
    };
    let body = json!({"id": tenant, "tier": "free", "rate_mode": mode});
    let created = subject.app.admin("POST", "/tenants", Some(body)).await;
    assert_eq!(created.status, 201, "{}", created.raw);
    let handle = handle(&subject.app, &tenant);
    let mut open: Vec<ReservationGuard> = Vec::new();
    let mut lines = Vec::new();
    for op in ops {
        let now = subject.clock.now_ms();
        let line = match *op {
            Op::Rate => {
                let rate = handle.check_rate().await.unwrap();
                format!(
                    "rate {} {:?} left {}",
                    rate.allowed, rate.over, rate.remaining
                )
            }
            Op::RateAndHold { tokens } => {
                let admitted = handle
                    .check_rate_and_reserve(request(tokens, now), meta())
                    .await
                    .unwrap();
                let rate = admitted.rate;
                let held = match admitted.reservation {
                    Some(Ok(guard)) => {
                        let granted = *guard.granted();
                        open.push(guard);
                        format!(
                            "held {:?} tokens left {:?}",
                            granted.over_tpm,
                            granted.tokens.map(|w| w.remaining)
                        )
                    }
                    Some(Err(error)) => format!("refused {error}"),
                    None => "not asked".to_owned(),
                };
                format!("rate {} {:?}, {held}", rate.allowed, rate.over)
            }
            Op::Settle { percent } if !open.is_empty() => {
                let guard = open.remove(0);
                let used = u64::from(guard.granted().max_tokens) * percent / 100;
                guard.settle(Nanos::ZERO, used).await.unwrap();
                format!("settled {used}")
            }
            Op::Settle { .. } => "nothing open".to_owned(),
            Op::Clock { ms } => {
                subject.clock.advance_ms(ms);
                format!("clock +{ms}")
            }
        };
        lines.push(line);
    }
    for guard in open {
        guard.release();
    }
    lines
}

#[actix_web::test]
async fn the_book_and_redis_pass_over_an_alert_only_rate_alike() {
    let redis = RedisServer::start().await;
    let start = start_of_a_minute();
    let book = subject(None, start).await;
    let shared = subject(Some(&redis), start).await;
    let mut passed_over = 0;
    for seed in 0..SEEDS {
        let ops = ops(seed);
        let at = book.clock.now_ms().max(shared.clock.now_ms());
        book.clock.set_ms(at);
        shared.clock.set_ms(at);
        let on_book = transcript(&book, seed, &ops).await;
        let on_redis = transcript(&shared, seed, &ops).await;
        if let Some(step) = (0..ops.len()).find(|&i| on_book[i] != on_redis[i]) {
            panic!(
                "seed {seed}: the book and Redis part at step {step} ({:?})\nbook:  {}\nredis: {}\nbefore:\n{}",
                ops[step],
                on_book[step],
                on_redis[step],
                (0..step)
                    .map(|i| format!("  {i} {:?}: {}", ops[i], on_book[i]))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        passed_over += on_book
            .iter()
            .filter(|l| l.contains("Some(PassedOver"))
            .count();
    }
    // The sequences must reach the alert-only path, or they compare nothing new.
    assert!(passed_over > 20, "{passed_over} calls passed over a limit");
    book.app.stop().await;
    shared.app.stop().await;
}
