//! Quotas on a real Redis Cluster: six nodes (three primaries with a replica
//! each). The replicas' rate and budget tests hold on it, a slot moved to
//! another primary is followed, a killed primary's replica takes over and
//! no budget is passed meanwhile, and a restarted replica finds its
//! reservations on every primary.

use std::time::{Duration, Instant};

use tollgate::clock::monotonic;

use futures_util::future::join_all;
use serde_json::json;
use tollgate::ids::{RequestId, TenantId};
use tollgate::money::Nanos;
use tollgate::tenant::ReservationMeta;

use crate::shared_quota;
use crate::support::cluster::{NODE_TIMEOUT_MS, RedisCluster, slot_of};
use crate::support::{TestSetup, chat_body, now_ms, spawn_app, spawn_replica};
use crate::tenant_actor;

#[test]
fn slots_are_those_redis_computes() {
    // From the Redis Cluster specification's examples.
    assert_eq!(slot_of("123456789"), 12_739);
    assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
}

#[actix_web::test]
async fn rates_budgets_and_breakers_hold_across_replicas_on_a_cluster() {
    let cluster = RedisCluster::start().await;
    shared_quota::four_replicas_admit_exactly_30_of_120_at_30_rpm(&cluster.url()).await;
    shared_quota::two_hundred_requests_over_three_replicas_never_pass_the_budget(&cluster.url())
        .await;
    shared_quota::a_breaker_opened_on_one_replica_is_followed_by_the_other(&cluster.url()).await;
}

fn committed(budget: &serde_json::Value) -> i64 {
    Nanos::parse_decimal(budget["committed"].as_str().unwrap())
        .unwrap()
        .to_db()
}

#[actix_web::test]
async fn a_tenants_slot_moved_to_another_primary_is_followed() {
    let cluster = RedisCluster::start().await;
    let app = spawn_app(
        TestSetup::new()
            .route("rc-fast", &["primary/usage-100-0-10"])
            .tier("free", &["rc-fast"], 100_000, 100)
            .redis(&cluster.url(), 1),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1"}))
        .await;
    for _ in 0..5 {
        assert_eq!(app.chat(&key, &chat_body("rc-fast")).await.status, 200);
    }
    let slot = slot_of(&format!("tg:{{{tenant}}}:m"));
    let (from, to) = cluster.move_slot(slot);
    assert_eq!(cluster.primary_of(slot).id, to.id, "moved from {}", from.id);

    // The next calls meet MOVED at the old primary and follow it.
    for _ in 0..5 {
        let reply = app.chat(&key, &chat_body("rc-fast")).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 10);
    let charged: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    let budget = app.budget(&tenant).await;
    assert_eq!(committed(&budget), charged, "{budget}");
    assert_eq!(budget["reserved"], "0", "{budget}");
}

#[actix_web::test]
async fn a_killed_primary_is_replaced_and_no_budget_is_passed() {
    let mut cluster = RedisCluster::start().await;
    let setup = TestSetup::new()
        .route("rc-max", &["primary/usage-max+delay-5ms"])
        .tier("free", &["rc-max"], 1_000_000, 100)
        .redis(&cluster.url(), 3)
        .set("storage.redis_timeout_ms", 200);
    let first = spawn_app(setup.clone()).await;
    let apps = vec![
        spawn_replica(&first, &setup).await,
        spawn_replica(&first, &setup).await,
        first,
    ];
    let (tenant, key) = apps[0]
        .tenant_with_key("free", json!({"monthly_budget": "3"}))
        .await;
    for app in &apps {
        crate::support::wait_until(
            Duration::from_secs(5),
            "a replica to learn the key",
            async || {
                let status = app.get("/v1/models", &key).await.status;
                crate::support::done_if(status == 200, status)
            },
        )
        .await;
    }
    let mut body = chat_body("rc-max");
    // 10,000 output tokens at 8 per 1M: about 0.08 a call, so 37 fit in 3.
    body["max_tokens"] = json!(10_000);
    let primary = cluster.primary_of(slot_of(&format!("tg:{{{tenant}}}:m")));

    let mut statuses = Vec::new();
    let mut killed_at = None;
    let mut back_after = None;
    // Bounded: the failover takes a few node timeouts; 30 s is far past them.
    for round in 0..5_000 {
        if killed_at.is_some_and(|at: Instant| at.elapsed() > Duration::from_secs(30)) {
            break;
        }
        if round == 10 {
            cluster.node_mut(primary.port).kill();
            killed_at = Some(monotonic());
        }
        let replies = join_all(apps.iter().map(|app| app.chat(&key, &body))).await;
        let served = replies.iter().any(|r| r.status == 200);
        if let (Some(at), None, true) = (killed_at, back_after, served && round > 10) {
            back_after = Some(at.elapsed());
        }
        statuses.extend(replies.iter().map(|r| r.status));
        if back_after.is_some() && replies.iter().all(|r| r.status == 402) {
            break;
        }
        // Rounds paced on the real clock: the failover is measured in time.
        crate::support::let_real_time_pass(Duration::from_millis(20)).await;
    }
    let back_after = back_after.expect("the cluster never served again after the kill");
    let refused = statuses.iter().filter(|s| **s == 503).count();
    eprintln!(
        "failover: served again {} ms after the kill (node timeout {NODE_TIMEOUT_MS} ms); {refused} requests refused meanwhile",
        back_after.as_millis()
    );
    assert!(
        statuses.iter().all(|s| [200, 402, 503].contains(s)),
        "{statuses:?}"
    );
    let replaced = cluster.primary_of(slot_of(&format!("tg:{{{tenant}}}:m")));
    assert_ne!(replaced.port, primary.port, "a replica took the slots over");

    for app in &apps {
        app.flush_ledger().await;
    }
    let rows = apps[0].ledger_rows(&tenant).await;
    let charged: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(rows.len(), ok, "one row per served call");
    assert!(
        charged <= 3_000_000_000,
        "charged {charged} on a budget of 3"
    );
    assert!(
        ok >= 30,
        "the budget was spent, not refused away: {ok} served"
    );
}

#[actix_web::test]
async fn a_replicas_reservations_are_found_on_every_primary() {
    let cluster = RedisCluster::start().await;
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/ok"])
            .tier("free", &["fast"], 600, 100)
            .redis(&cluster.url(), 1),
    )
    .await;
    let mut held = Vec::new();
    let mut primaries = std::collections::HashSet::new();
    for _ in 0..12 {
        let (handle, record) = tenant_actor::tenant(&app, "10").await;
        primaries.insert(
            cluster
                .primary_of(slot_of(&format!("tg:{{{}}}:h", record.id)))
                .port,
        );
        let meta = ReservationMeta {
            request_id: RequestId::generate(),
            replica: "rc-replica".to_owned(),
            ..tenant_actor::meta()
        };
        let request = meta.request_id.to_string();
        let guard = handle
            .reserve(tenant_actor::request(100, now_ms() + 60_000), meta)
            .await
            .unwrap();
        held.push((record.id.clone(), request, guard));
    }
    assert!(
        primaries.len() >= 2,
        "the tenants' slots are on one primary only"
    );
    let store = app.gateway.quota_store.as_ref().unwrap();
    let mut found = store.held_by_replica("rc-replica").await.unwrap();
    found.sort();
    let mut expected: Vec<(TenantId, String)> = held
        .iter()
        .map(|(tenant, request, _)| (tenant.clone(), request.clone()))
        .collect();
    expected.sort();
    assert_eq!(found, expected);
}
