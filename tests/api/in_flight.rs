//! Caps on calls in flight: a tier's `max_in_flight` (or a tenant's own),
//! and a key's. A call over its cap is refused with 429 and `Retry-After`
//! before anything is held or sent, and its slot comes back when it ends,
//! however it ends. On Redis (`TOLLGATE_TEST_REDIS=1`, and the replica
//! tests) the cap is one for every replica.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::support::redis::RedisServer;
use crate::support::{
    Reply, TestApp, TestSetup, Upstream, chat_body, done_if, metric_value, spawn_app,
    spawn_replica, wait_until,
};

/// Long enough that five calls sent together all arrive while the first two run.
const SLOW_MS: u64 = 1500;

fn setup() -> TestSetup {
    TestSetup::new()
        .route("slow", &[&format!("primary/delay-{SLOW_MS}ms")])
        .route("quick", &["primary/ok"])
        .provider("canceller", "openai", Upstream::Fake)
        .set("providers.canceller.on_client_disconnect", "cancel")
        .route(
            "paced",
            &["canceller/usage-100-0-40+chunks-40+chunk-delay-100ms"],
        )
        .tier("capped", &["slow", "quick", "paced"], 1000, 100)
        .set("tiers.capped.max_in_flight", 2)
        .tier("open", &["slow", "quick", "paced"], 1000, 100)
}

/// The statuses of `replies`, and how many were answered and refused.
fn tally(replies: &[Reply]) -> (usize, usize) {
    let ok = replies.iter().filter(|r| r.status == 200).count();
    let refused = replies.iter().filter(|r| r.status == 429).count();
    (ok, refused)
}

fn assert_refusals(replies: &[Reply], code: &str) {
    for reply in replies.iter().filter(|r| r.status == 429) {
        assert_eq!(reply.error_code(), code, "{}", reply.raw);
        assert_eq!(reply.header("retry-after"), Some("1"), "{}", reply.raw);
        assert!(
            reply.error_message().contains("cap of 2 calls in flight"),
            "{}",
            reply.raw
        );
    }
}

async fn refusals(app: &TestApp, scope: &str) -> u64 {
    let scrape = app.get("/metrics", "").await.raw;
    metric_value(
        &scrape,
        &format!("tollgate_in_flight_refusals_total{{scope=\"{scope}\"}}"),
    )
}

#[actix_web::test]
async fn a_tenant_capped_at_two_calls_in_flight_answers_two_of_five_then_passes_once_they_end() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("capped", json!({})).await;
    let before = refusals(&app, "tenant").await;

    let body = chat_body("slow");
    let replies = join_all((0..5).map(|_| app.chat(&key, &body))).await;

    assert_eq!(tally(&replies), (2, 3), "{:?}", statuses(&replies));
    assert_refusals(&replies, "tenant_in_flight_limit_exceeded");
    assert_eq!(app.fake.stats.requests(), 2, "refused calls never left");
    // The suite's tests share one registry: at least these three.
    assert!(refusals(&app, "tenant").await >= before + 3);
    // Their slots came back with their answers.
    let again = join_all((0..2).map(|_| app.chat(&key, &body))).await;
    assert_eq!(tally(&again), (2, 0), "{:?}", statuses(&again));
}

#[actix_web::test]
async fn the_messages_door_refuses_in_anthropics_envelope() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("capped", json!({})).await;
    let body =
        json!({"model": "slow", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]});
    let send = || {
        let request = app
            .client
            .post(format!("{}/v1/messages", app.base_url))
            .insert_header(("x-api-key", key.as_str()))
            .send_json(&body);
        async move { crate::support::reply(request.await.unwrap()).await }
    };

    let replies = join_all((0..3).map(|_| send())).await;

    assert_eq!(tally(&replies), (2, 1), "{:?}", statuses(&replies));
    let refused = replies.iter().find(|r| r.status == 429).unwrap();
    assert_eq!(refused.body["type"], "error", "{}", refused.raw);
    assert_eq!(
        refused.body["error"]["type"], "rate_limit_error",
        "{}",
        refused.raw
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
}

#[actix_web::test]
async fn a_tenants_own_cap_replaces_its_tiers() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app
        .tenant_with_key("open", json!({"max_in_flight": 2}))
        .await;
    let body = chat_body("slow");

    let replies = join_all((0..5).map(|_| app.chat(&key, &body))).await;
    assert_eq!(tally(&replies), (2, 3), "{:?}", statuses(&replies));

    let lifted = app
        .admin(
            "PATCH",
            &format!("/tenants/{tenant}"),
            Some(json!({"max_in_flight": null})),
        )
        .await;
    assert_eq!(lifted.status, 200, "{}", lifted.raw);
    assert_eq!(lifted.body["max_in_flight"], Value::Null);
    let replies = join_all((0..5).map(|_| app.chat(&key, &body))).await;
    assert_eq!(tally(&replies), (5, 0), "{:?}", statuses(&replies));
}

#[actix_web::test]
async fn a_key_capped_at_two_answers_two_of_five_while_its_tenants_other_key_passes() {
    let app = spawn_app(setup()).await;
    let (tenant, other) = app.tenant_with_key("open", json!({})).await;
    let issued = app
        .admin(
            "POST",
            &format!("/tenants/{tenant}/keys"),
            Some(json!({"max_in_flight": 2})),
        )
        .await;
    assert_eq!(issued.status, 201, "{}", issued.raw);
    let key = issued.body["key"].as_str().unwrap().to_owned();
    let body = chat_body("slow");
    let before = refusals(&app, "key").await;

    let capped = join_all((0..5).map(|_| app.chat(&key, &body)));
    let free = join_all((0..3).map(|_| app.chat(&other, &body)));
    let (capped, free) = futures_util::future::join(capped, free).await;

    assert_eq!(tally(&capped), (2, 3), "{:?}", statuses(&capped));
    assert_refusals(&capped, "key_in_flight_limit_exceeded");
    assert_eq!(tally(&free), (3, 0), "the cap is the key's alone");
    assert!(refusals(&app, "key").await >= before + 3);
    let again = join_all((0..2).map(|_| app.chat(&key, &body))).await;
    assert_eq!(tally(&again), (2, 0), "{:?}", statuses(&again));
    let listed = app
        .admin("GET", &format!("/tenants/{tenant}/keys"), None)
        .await;
    let caps: Vec<&Value> = listed.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| &k["max_in_flight"])
        .collect();
    assert!(caps.contains(&&json!(2)), "{}", listed.raw);
}

#[actix_web::test]
async fn a_stream_its_caller_drops_gives_its_slot_back() {
    let app = spawn_app(setup().set("tiers.capped.max_in_flight", 1)).await;
    let (_tenant, key) = app.tenant_with_key("capped", json!({})).await;
    let body = json!({"model": "paced", "stream": true, "messages": [{"role": "user", "content": "Tell me a story"}]});

    let mut response = app
        .client
        .post(format!("{}/v1/chat/completions", app.base_url))
        .insert_header(("authorization", format!("Bearer {key}")))
        .send_json(&body)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.next().await.unwrap().unwrap();
    let meanwhile = app.chat(&key, &chat_body("quick")).await;
    assert_eq!(meanwhile.status, 429, "the stream holds the only slot");
    drop(response);

    // 40 chunks 100 ms apart: the stream would hold its slot for 4 s more.
    let passed = wait_until(
        Duration::from_secs(3),
        "the dropped stream's slot",
        async || {
            let reply = app.chat(&key, &chat_body("quick")).await;
            done_if(reply.status == 200, reply.status)
        },
    )
    .await;
    assert_eq!(passed, 200);
}

#[actix_web::test]
async fn three_replicas_on_one_redis_share_one_cap_of_two() {
    let redis = RedisServer::start().await;
    let setup = setup().redis(&redis.url(), 3);
    let first = spawn_app(setup.clone()).await;
    let mut apps = vec![first];
    for _ in 0..2 {
        apps.push(spawn_replica(&apps[0], &setup).await);
    }
    let (_tenant, key) = apps[0].tenant_with_key("capped", json!({})).await;
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
    let body = chat_body("slow");

    let replies = join_all((0..6).map(|i| apps[i % 3].chat(&key, &body))).await;

    assert_eq!(tally(&replies), (2, 4), "{:?}", statuses(&replies));
    assert_refusals(&replies, "tenant_in_flight_limit_exceeded");
    assert_eq!(apps[0].fake.stats.requests(), 2);
    let again = join_all((0..3).map(|i| apps[i].chat(&key, &body))).await;
    assert_eq!(tally(&again), (2, 1), "{:?}", statuses(&again));
}

#[actix_web::test]
async fn a_dead_replicas_slots_expire() {
    let redis = RedisServer::start().await;
    let app = spawn_app(
        setup()
            .redis(&redis.url(), 2)
            .set("tiers.capped.max_in_flight", 1),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("capped", json!({})).await;
    // What a replica that died mid-call leaves: its lease, never given back.
    let expires_at = crate::support::now_ms() + 2000;
    let set = format!("tg:{{{tenant}}}:f");
    redis.cli(&["ZADD", &set, &expires_at.to_string(), "12345"]);

    let refused = app.chat(&key, &chat_body("quick")).await;
    assert_eq!(refused.status, 429, "{}", refused.raw);
    let passed = wait_until(
        Duration::from_secs(5),
        "the dead call's lease to expire",
        async || {
            let reply = app.chat(&key, &chat_body("quick")).await;
            done_if(reply.status == 200, reply.status)
        },
    )
    .await;
    assert_eq!(passed, 200);
}

fn statuses(replies: &[Reply]) -> Vec<u16> {
    replies.iter().map(|r| r.status).collect()
}
