//! A provider account's concurrency across the fleet
//! (`providers.<name>.fleet_max_concurrency`): replicas on one Redis never
//! have more than the cap in flight at the provider together; a call that
//! finds it full goes to the next target, or gets the busy answer (503 with
//! `Retry-After`) when no target can take it. Without a shared store the cap
//! bounds each replica.

use std::process::Stdio;
use std::time::Duration;

use fake_upstream::FakeConfig;
use futures_util::future::join_all;
use serde_json::json;

use crate::support::process::{self, GatewayProcess};
use crate::support::redis::RedisServer;
use crate::support::{
    Reply, TestApp, TestSetup, chat_body, done_if, metric_value, spawn_app, spawn_replica,
    unique_tenant, wait_until,
};

/// Long enough that every call sent together arrives while the first ones run.
const SLOW: &str = "delay-1500ms";

fn setup() -> TestSetup {
    TestSetup::new()
        .route("slow", &[&format!("primary/{SLOW}")])
        .route(
            "spill",
            &[&format!("primary/{SLOW}"), &format!("secondary/{SLOW}")],
        )
        .route("quick", &["primary/ok"])
        .tier("open", &["slow", "spill", "quick"], 1000, 100)
        .set("providers.primary.fleet_max_concurrency", 2)
}

async fn fleet(setup: &TestSetup, n: usize) -> (Vec<TestApp>, String) {
    let first = spawn_app(setup.clone()).await;
    let mut apps = vec![first];
    for _ in 1..n {
        apps.push(spawn_replica(&apps[0], setup).await);
    }
    let (_tenant, key) = apps[0].tenant_with_key("open", json!({})).await;
    for app in &apps {
        wait_until(
            Duration::from_secs(5),
            "a replica to learn the key",
            async || {
                let status = app.get("/v1/models", &key).await.status;
                done_if(status == 200, status)
            },
        )
        .await;
    }
    (apps, key)
}

fn statuses(replies: &[Reply]) -> Vec<u16> {
    replies.iter().map(|r| r.status).collect()
}

fn count(replies: &[Reply], status: u16) -> usize {
    replies.iter().filter(|r| r.status == status).count()
}

#[actix_web::test]
async fn three_replicas_never_have_more_than_the_fleet_cap_of_two_at_the_provider() {
    let redis = RedisServer::start().await;
    let (apps, key) = fleet(&setup().redis(&redis.url(), 3), 3).await;
    let full = "tollgate_provider_fleet_full_total{provider=\"primary\"}";
    let before = metric_value(&apps[0].get("/metrics", "").await.raw, full);

    let body = chat_body("slow");
    let replies = join_all((0..6).map(|i| apps[i % 3].chat(&key, &body))).await;

    assert_eq!(count(&replies, 200), 2, "{:?}", statuses(&replies));
    assert_eq!(count(&replies, 503), 4, "{:?}", statuses(&replies));
    for busy in replies.iter().filter(|r| r.status == 503) {
        assert_eq!(busy.error_code(), "provider_unavailable", "{}", busy.raw);
        assert_eq!(busy.header("retry-after"), Some("1"), "{}", busy.raw);
        assert!(
            busy.error_message().contains("across the fleet"),
            "{}",
            busy.raw
        );
    }
    let fake = &apps[0].fake.stats;
    assert_eq!(fake.requests(), 2);
    assert_eq!(fake.peak_in_flight(), 2);
    // The suite's tests share one registry: at least these four.
    let after = metric_value(&apps[0].get("/metrics", "").await.raw, full);
    assert!(after >= before + 4, "{before} → {after}");
    // The leases went back with the calls.
    let again = join_all((0..3).map(|i| apps[i].chat(&key, &body))).await;
    assert_eq!(count(&again, 200), 2, "{:?}", statuses(&again));
    assert!(fake.peak_in_flight() <= 2);
}

#[actix_web::test]
async fn a_provider_full_across_the_fleet_fails_over_to_the_next_target() {
    let redis = RedisServer::start().await;
    let (apps, key) = fleet(&setup().redis(&redis.url(), 3), 3).await;

    let body = chat_body("spill");
    let replies = join_all((0..6).map(|i| apps[i % 3].chat(&key, &body))).await;

    assert_eq!(count(&replies, 200), 6, "{:?}", statuses(&replies));
    let by = |provider: &str| {
        replies
            .iter()
            .filter(|r| r.header("x-tollgate-provider") == Some(provider))
            .count()
    };
    assert_eq!((by("primary"), by("secondary")), (2, 4));
}

#[actix_web::test]
async fn a_dead_replicas_fleet_leases_expire() {
    let redis = RedisServer::start().await;
    let setup = setup()
        .redis(&redis.url(), 2)
        .set("providers.primary.fleet_max_concurrency", 1);
    let (apps, key) = fleet(&setup, 1).await;
    // What a replica that died mid-call leaves: its lease, never given back.
    let expires_at = crate::support::now_ms() + 2000;
    redis.cli(&[
        "ZADD",
        "tg:{fleet:primary}:leases",
        &expires_at.to_string(),
        "dead-replica-call",
    ]);

    let refused = apps[0].chat(&key, &chat_body("quick")).await;
    assert_eq!(refused.status, 503, "{}", refused.raw);
    let passed = wait_until(
        Duration::from_secs(5),
        "the dead call's lease to expire",
        async || {
            let reply = apps[0].chat(&key, &chat_body("quick")).await;
            done_if(reply.status == 200, reply.status)
        },
    )
    .await;
    assert_eq!(passed, 200);
}

#[actix_web::test]
async fn without_a_shared_store_the_fleet_cap_bounds_each_replica() {
    let setup = setup()
        .set("providers.primary.fleet_max_concurrency", 1)
        .set("providers.primary.max_queue", 0);
    let app = spawn_app(setup).await;
    let (_tenant, key) = app.tenant_with_key("open", json!({})).await;

    let body = chat_body("slow");
    let replies = join_all((0..3).map(|_| app.chat(&key, &body))).await;

    assert_eq!(count(&replies, 200), 1, "{:?}", statuses(&replies));
    assert_eq!(count(&replies, 503), 2, "{:?}", statuses(&replies));
    assert_eq!(app.fake.stats.peak_in_flight(), 1);
}

/// Two gateway processes on one Redis and one database; the one killed
/// mid-call never gives back its call's slot nor its fleet lease: both
/// expire after the request's deadline, and the other replica's calls pass.
#[actix_web::test]
async fn a_replica_killed_mid_call_leaves_slot_and_lease_that_expire() {
    let redis = RedisServer::start().await;
    let fake = fake_upstream::start(FakeConfig::default(), ([127, 0, 0, 1], 0).into(), 1).unwrap();
    let setup = setup()
        .route("stuck", &["primary/delay-20000ms"])
        .tier("one", &["stuck", "quick"], 1000, 100)
        .set("tiers.one.max_in_flight", 1)
        .tier("many", &["quick"], 1000, 100)
        .set("providers.primary.fleet_max_concurrency", 1)
        .request_timeout_ms(2000)
        .set("providers.primary.timeout_ms", 30_000)
        .redis(&redis.url(), 2);
    let env = setup.env_vars().clone();
    let (_dir, [(doomed_config, doomed_addr), (live_config, live_addr)]) =
        process::two_replicas(&setup, &fake.base_url());
    let doomed = GatewayProcess::serve(&doomed_config, &env, doomed_addr, Stdio::null()).await;
    let _live = GatewayProcess::serve(&live_config, &env, live_addr, Stdio::null()).await;
    let capped = process::tenant_with_key(&doomed_config, &env, &unique_tenant("one"), "one");
    let open = process::tenant_with_key(&doomed_config, &env, &unique_tenant("many"), "many");
    let client = awc::Client::default();
    let call = |addr: std::net::SocketAddr, key: &str, model: &str| {
        client
            .post(format!("http://{addr}/v1/chat/completions"))
            .insert_header(("authorization", format!("Bearer {key}")))
            .send_json(&chat_body(model))
    };
    for (addr, key) in [
        (doomed_addr, &capped),
        (live_addr, &capped),
        (live_addr, &open),
    ] {
        let _ready = wait_until(
            Duration::from_secs(5),
            "a replica to learn the key",
            async || {
                let status = call(addr, key, "quick").await.map(|r| r.status().as_u16());
                done_if(status.as_ref().is_ok_and(|s| *s == 200), status)
            },
        )
        .await;
    }

    let stuck = actix_rt::spawn(call(doomed_addr, &capped, "stuck"));
    wait_until(
        Duration::from_secs(5),
        "the call at the provider",
        async || done_if(fake.stats.in_flight() == 1, fake.stats.in_flight()),
    )
    .await;
    let killed_at = tollgate::clock::monotonic();
    doomed.kill_9().await;
    let _ = stuck.await;

    let status = |addr, key: String| {
        let call = call(addr, &key, "quick");
        async move { call.await.map_or(0, |r| r.status().as_u16()) }
    };
    assert_eq!(
        status(live_addr, capped.clone()).await,
        429,
        "the dead call's slot"
    );
    assert_eq!(
        status(live_addr, open.clone()).await,
        503,
        "the dead call's fleet lease"
    );
    for key in [capped, open] {
        wait_until(
            Duration::from_secs(15),
            "the dead call's leases to expire",
            async || {
                let seen = status(live_addr, key.clone()).await;
                done_if(seen == 200, seen)
            },
        )
        .await;
    }
    // Deadline 2 s after the call began, then the leases' 5 s margin.
    assert!(tollgate::clock::monotonic() - killed_at >= Duration::from_secs(4));
}
