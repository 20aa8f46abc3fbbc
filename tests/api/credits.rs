//! Prepaid credits: a tenant or a key spends a balance instead of a monthly
//! budget. Every top-up is a ledger row written once per idempotency key; the
//! balance is the top-ups less the ledger's spend, held before each call like
//! any budget, on the book and on Redis (with `TOLLGATE_TEST_REDIS=1`; the
//! replica test always runs there), and after a kill -9.

use std::process::Stdio;

use futures_util::future::join_all;
use serde_json::{Value, json};
use tollgate::money::Nanos;

use crate::support::process::{GatewayProcess, free_port};
use crate::support::redis::RedisServer;
use crate::support::{
    ADMIN_TOKEN, TestApp, TestSetup, chat_body, configured_database_url, spawn_app, spawn_replica,
    unique_tenant, write_config,
};

/// Each call costs 0.000322 (1 prompt token at 2/M, 40 completion at 8/M) and
/// holds a little more than 0.0004 (50 output tokens at 8/M): 0.001 of credit
/// admits exactly two calls.
const TOP_UP: &str = "0.001";

fn setup(route: &str) -> TestSetup {
    TestSetup::new()
        .route(route, &["primary/usage-1-0-40"])
        .tier("prepaid", &[route], 100_000, 50)
}

fn nanos(value: &Value) -> i64 {
    Nanos::parse_decimal(value.as_str().unwrap_or("?"))
        .unwrap_or_else(|_| panic!("not an amount: {value}"))
        .to_db()
}

fn top_up(amount: &str, idempotency_key: &str) -> Value {
    json!({"amount": amount, "idempotency_key": idempotency_key, "reason": "card payment", "added_by": "billing"})
}

fn charged(rows: &[entity::usage::Model]) -> i64 {
    rows.iter().map(|row| row.charged_nanos).sum()
}

#[actix_web::test]
async fn a_top_up_is_added_once_and_a_tenant_on_credits_spends_its_balance_and_no_more() {
    let route = "credits-spend";
    let app = spawn_app(setup(route)).await;
    let (tenant, key) = app
        .tenant_with_key("prepaid", json!({"credits": true}))
        .await;

    // Nothing added yet: the first call is refused before any upstream call.
    let empty = app.chat(&key, &chat_body(route)).await;
    assert_eq!(empty.status, 402, "{}", empty.raw);
    assert_eq!(empty.error_code(), "budget_exceeded");
    assert!(
        empty.error_message().contains("credit balance"),
        "{}",
        empty.raw
    );

    let path = format!("/tenants/{tenant}/credits");
    let first = app
        .admin("POST", &path, Some(top_up(TOP_UP, "pay-1")))
        .await;
    assert_eq!(first.status, 201, "{}", first.raw);
    assert_eq!(first.body["replayed"], false);
    assert_eq!(first.body["credit"]["added_by"], "billing");
    let again = app
        .admin("POST", &path, Some(top_up(TOP_UP, "pay-1")))
        .await;
    assert_eq!(again.status, 200, "{}", again.raw);
    assert_eq!(again.body["replayed"], true);
    assert_eq!(again.body["credit"]["id"], first.body["credit"]["id"]);
    let reused = app.admin("POST", &path, Some(top_up("5", "pay-1"))).await;
    assert_eq!(reused.status, 409, "{}", reused.raw);
    let zero = app.admin("POST", &path, Some(top_up("0", "pay-0"))).await;
    assert_eq!(zero.status, 400, "{}", zero.raw);

    let balance = app.admin("GET", &path, None).await;
    assert_eq!(balance.status, 200, "{}", balance.raw);
    assert_eq!(nanos(&balance.body["added"]), 1_000_000);
    assert_eq!(balance.body["grants"].as_array().unwrap().len(), 1);
    assert_eq!(balance.body["on_credits"], true);

    for _ in 0..2 {
        let ok = app.chat(&key, &chat_body(route)).await;
        assert_eq!(ok.status, 200, "{}", ok.raw);
    }
    let spent_out = app.chat(&key, &chat_body(route)).await;
    assert_eq!(spent_out.status, 402, "{}", spent_out.raw);
    assert!(
        spent_out
            .error_message()
            .contains("credit balance exhausted (tenant's credit balance): balance 0.000356"),
        "{}",
        spent_out.raw
    );

    let rows = app.ledger_rows_eventually(&tenant, 2).await;
    assert_eq!(rows.len(), 2);
    assert!(charged(&rows) <= 1_000_000);
    let balance = app.admin("GET", &path, None).await;
    assert_eq!(
        nanos(&balance.body["spent"]),
        charged(&rows),
        "{}",
        balance.raw
    );
    assert_eq!(nanos(&balance.body["reserved"]), 0);
    assert_eq!(
        nanos(&balance.body["balance"]),
        1_000_000 - charged(&rows),
        "{}",
        balance.raw
    );

    // Another top-up is spendable at once, and never resets what was spent.
    let more = app
        .admin("POST", &path, Some(top_up(TOP_UP, "pay-2")))
        .await;
    assert_eq!(more.status, 201, "{}", more.raw);
    assert_eq!(
        nanos(&more.body["balance"]["balance"]),
        2_000_000 - charged(&rows)
    );
    assert_eq!(app.chat(&key, &chat_body(route)).await.status, 200);
}

#[actix_web::test]
async fn a_key_on_credits_spends_its_own_balance_inside_its_tenants_budget() {
    let route = "credits-key";
    let app = spawn_app(setup(route)).await;
    let (tenant, plain) = app
        .tenant_with_key("prepaid", json!({"monthly_budget": "1"}))
        .await;
    let issued = app
        .admin(
            "POST",
            &format!("/tenants/{tenant}/keys"),
            Some(json!({"credits": true})),
        )
        .await;
    assert_eq!(issued.status, 201, "{}", issued.raw);
    let (key_id, key) = (
        issued.body["id"].as_str().unwrap().to_owned(),
        issued.body["key"].as_str().unwrap().to_owned(),
    );
    let both = app
        .admin(
            "PATCH",
            &format!("/keys/{key_id}"),
            Some(json!({"monthly_budget": "1"})),
        )
        .await;
    assert_eq!(both.status, 400, "{}", both.raw);

    let refused = app.chat(&key, &chat_body(route)).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert!(
        refused
            .error_message()
            .contains(&format!("key `{key_id}`'s credit balance")),
        "{}",
        refused.raw
    );
    // The tenant's other key is not on credits.
    assert_eq!(app.chat(&plain, &chat_body(route)).await.status, 200);

    let path = format!("/keys/{key_id}/credits");
    let added = app
        .admin("POST", &path, Some(top_up(TOP_UP, "key-pay-1")))
        .await;
    assert_eq!(added.status, 201, "{}", added.raw);
    for _ in 0..2 {
        let ok = app.chat(&key, &chat_body(route)).await;
        assert_eq!(ok.status, 200, "{}", ok.raw);
    }
    assert_eq!(app.chat(&key, &chat_body(route)).await.status, 402);

    let rows = app.ledger_rows_eventually(&tenant, 3).await;
    let key_rows: Vec<_> = rows.into_iter().filter(|r| r.key_id == key_id).collect();
    assert_eq!(key_rows.len(), 2);
    let balance = app.admin("GET", &path, None).await;
    assert_eq!(balance.status, 200, "{}", balance.raw);
    assert_eq!(balance.body["key_id"], key_id.as_str());
    assert_eq!(nanos(&balance.body["spent"]), charged(&key_rows));
    assert_eq!(balance.body["grants"].as_array().unwrap().len(), 1);
    // The tenant's own balance has no top-ups: the key's are the key's.
    let tenant_balance = app
        .admin("GET", &format!("/tenants/{tenant}/credits"), None)
        .await;
    assert_eq!(tenant_balance.body["grants"].as_array().unwrap().len(), 0);
}

/// `n` concurrent calls spread over `apps` in turn; each is answered 200 or
/// 402 (a balance spent). Returns how many were admitted.
pub(crate) async fn calls_across(apps: &[&TestApp], key: &str, route: &str, n: usize) -> usize {
    let replies = join_all((0..n).map(|call| {
        let app = apps[call % apps.len()];
        async move { app.chat(key, &chat_body(route)).await }
    }))
    .await;
    let ok = replies.iter().filter(|r| r.status == 200).count();
    let refused = replies.iter().filter(|r| r.status == 402).count();
    assert_eq!(
        ok + refused,
        replies.len(),
        "{:?}",
        replies.iter().map(|r| &r.raw).collect::<Vec<_>>()
    );
    ok
}

pub(crate) async fn wait_for_key(app: &TestApp, key: &str) {
    crate::support::wait_until(
        std::time::Duration::from_secs(5),
        "a replica to learn the key",
        async || {
            let status = app.get("/v1/models", key).await.status;
            crate::support::done_if(status == 200, status)
        },
    )
    .await;
}

#[actix_web::test]
async fn three_replicas_on_one_redis_spend_one_balance_and_no_more() {
    let redis = RedisServer::start().await;
    let route = "credits-replicas";
    let setup = setup(route)
        .redis(&redis.url(), 3)
        .set("storage.redis_timeout_ms", 10_000);
    let first = spawn_app(setup.clone()).await;
    let others = [
        spawn_replica(&first, &setup).await,
        spawn_replica(&first, &setup).await,
    ];
    let (tenant, key) = first
        .tenant_with_key("prepaid", json!({"credits": true}))
        .await;
    let apps: Vec<&TestApp> = std::iter::once(&first).chain(others.iter()).collect();
    for app in &apps {
        wait_for_key(app, &key).await;
    }
    // Added on one replica, spent on all three: 0.01 is 31 calls at most.
    let added = others[1]
        .admin(
            "POST",
            &format!("/tenants/{tenant}/credits"),
            Some(top_up("0.01", "replicas-1")),
        )
        .await;
    assert_eq!(added.status, 201, "{}", added.raw);
    let ok = calls_across(&apps, &key, route, 90).await;
    assert!(ok >= 20, "only {ok} calls were admitted");
    let mut rows = Vec::new();
    for app in &apps {
        rows.extend(app.ledger_rows(&tenant).await);
    }
    let mut ids: Vec<&str> = rows.iter().map(|r| r.event_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), ok, "one row per admitted call");
    let spent: i64 = {
        let mut seen = std::collections::HashSet::new();
        rows.iter()
            .filter(|r| seen.insert(r.event_id.clone()))
            .map(|r| r.charged_nanos)
            .sum()
    };
    assert!(spent <= 10_000_000, "spent {spent} of 10,000,000");
    let balance = first
        .admin("GET", &format!("/tenants/{tenant}/credits"), None)
        .await;
    assert_eq!(nanos(&balance.body["spent"]), spent, "{}", balance.raw);
    assert_eq!(nanos(&balance.body["reserved"]), 0, "{}", balance.raw);
}

async fn admin_call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = awc::Client::default();
    let url = format!("http://{addr}/admin/v1{path}");
    let request = match method {
        "POST" => client.post(url),
        _ => client.get(url),
    }
    .insert_header(("authorization", format!("Bearer {ADMIN_TOKEN}")));
    let mut response = match body {
        Some(body) => request.send_json(&body).await.unwrap(),
        None => request.send().await.unwrap(),
    };
    let status = response.status().as_u16();
    let body = response
        .json::<Value>()
        .limit(1 << 20)
        .await
        .unwrap_or(Value::Null);
    (status, body)
}

#[actix_web::test]
async fn the_balance_is_the_ledgers_sum_after_a_kill_9_and_a_restart() {
    let fake = fake_upstream::start(
        fake_upstream::FakeConfig::default(),
        ([127, 0, 0, 1], 0).into(),
        1,
    )
    .unwrap();
    let addr = free_port();
    let route = "credits-kill";
    let setup = TestSetup::new()
        .route(route, &["primary/usage-1-0-40+delay-20ms"])
        .tier("prepaid", &[route], 100_000, 50)
        .listen(addr);
    let env = setup.env_vars().clone();
    let (dir, config) = write_config(&setup, &fake.base_url());
    let tenant = unique_tenant("credits-kill");
    let gateway = GatewayProcess::serve(&config, &env, addr, Stdio::null()).await;
    let (status, _) = admin_call(
        addr,
        "POST",
        "/tenants",
        Some(json!({"id": tenant, "tier": "prepaid", "credits": true})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, issued) = admin_call(
        addr,
        "POST",
        &format!("/tenants/{tenant}/keys"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 201);
    let key = issued["key"].as_str().unwrap().to_owned();
    let path = format!("/tenants/{tenant}/credits");
    for _ in 0..2 {
        let (status, _) = admin_call(addr, "POST", &path, Some(top_up("0.005", "kill-1"))).await;
        assert!(status == 201 || status == 200, "{status}");
    }

    // Calls in flight when the process dies: their reservations die with it.
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let key = key.clone();
            actix_rt::spawn(async move {
                let client = awc::Client::default();
                for _ in 0..50 {
                    let sent = client
                        .post(format!("http://{addr}/v1/chat/completions"))
                        .insert_header(("authorization", format!("Bearer {key}")))
                        .send_json(&chat_body(route))
                        .await;
                    if sent.is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    crate::support::wait_until(
        std::time::Duration::from_secs(10),
        "8 calls upstream",
        async || {
            let requests = fake.stats.requests();
            crate::support::done_if(requests >= 8, requests)
        },
    )
    .await;
    gateway.kill_9().await;
    for caller in callers {
        let _ = caller.await;
    }

    let gateway = GatewayProcess::serve(&config, &env, addr, Stdio::null()).await;
    let (status, _) = admin_call(addr, "POST", &path, Some(top_up("0.005", "kill-1"))).await;
    assert_eq!(status, 200, "the repeated top-up after the restart");
    let (status, balance) = admin_call(addr, "GET", &path, None).await;
    assert_eq!(status, 200, "{balance}");
    let db = tollgate::storage::connect(&configured_database_url(&config), 1)
        .await
        .unwrap();
    let rows =
        tollgate::ledger::repo::tenant_rows(&db, &tollgate::ids::TenantId::new(tenant.as_str()))
            .await
            .unwrap();
    assert!(!rows.is_empty());
    let ledger_sum = charged(&rows);
    assert_eq!(nanos(&balance["added"]), 5_000_000, "{balance}");
    assert_eq!(nanos(&balance["spent"]), ledger_sum, "{balance}");
    assert_eq!(nanos(&balance["reserved"]), 0, "{balance}");
    assert_eq!(
        nanos(&balance["balance"]),
        5_000_000 - ledger_sum,
        "{balance}"
    );
    assert!(ledger_sum <= 5_000_000);
    drop(gateway);
    drop(dir);
}
