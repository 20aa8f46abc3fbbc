//! Credit grants: paid and promotional credit with a start, an expiry and a
//! priority, drawn in order inside the same all-or-nothing hold as a plain
//! balance; what an expired grant left is booked once as breakage. The
//! gateway's clock is a manual one, so expiries and starts are exact. On the
//! book, and on Redis with `TOLLGATE_TEST_REDIS=1`; the replica test always
//! runs there.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use tollgate::clock::ManualClock;
use tollgate::money::Nanos;

use crate::credits::{calls_across, wait_for_key};
use crate::support::redis::RedisServer;
use crate::support::{
    TestApp, TestSetup, chat_body, done_if, now_ms, spawn_app, spawn_replica, wait_until,
};

/// A call costs 0.000322 (1 prompt token at 2/M, 40 completion at 8/M) and
/// holds 0.000402 (its prompt and 50 output tokens at 8/M).
const CALL: i64 = 322_000;
const HOUR_MS: u64 = 3_600_000;

fn setup(route: &str, clock: Arc<ManualClock>) -> TestSetup {
    TestSetup::new()
        .route(route, &["primary/usage-1-0-40"])
        .tier("prepaid", &[route], 100_000, 50)
        .clock(clock)
}

fn nanos(value: &Value) -> i64 {
    Nanos::parse_decimal(value.as_str().unwrap_or("?"))
        .unwrap_or_else(|_| panic!("not an amount: {value}"))
        .to_db()
}

async fn grant(app: &TestApp, path: &str, body: Value) -> i64 {
    let added = app.admin("POST", path, Some(body)).await;
    assert_eq!(added.status, 201, "{}", added.raw);
    added.body["credit"]["id"].as_i64().unwrap()
}

/// Each grant of the balance at `path` by id: (drawn, remaining, state).
async fn grants(app: &TestApp, path: &str) -> Vec<(i64, i64, i64, String)> {
    let balance = app.admin("GET", path, None).await;
    assert_eq!(balance.status, 200, "{}", balance.raw);
    balance.body["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["id"].as_i64().unwrap(),
                nanos(&g["drawn"]),
                nanos(&g["remaining"]),
                g["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A gateway on a manual clock, and a tenant on credits with no grant yet.
struct Prepaid {
    app: TestApp,
    clock: Arc<ManualClock>,
    start: u64,
    tenant: String,
    key: String,
    /// The tenant's balance in the admin API.
    path: String,
}

async fn prepaid(route: &str) -> Prepaid {
    let start = now_ms();
    let clock = Arc::new(ManualClock::new(start));
    let app = spawn_app(setup(route, clock.clone())).await;
    let (tenant, key) = app
        .tenant_with_key("prepaid", json!({"credits": true}))
        .await;
    let path = format!("/tenants/{tenant}/credits");
    Prepaid {
        app,
        clock,
        start,
        tenant,
        key,
        path,
    }
}

/// The tenant's breakage rows, once there is one (within `bound`).
async fn booked_breakage(
    app: &TestApp,
    tenant: &str,
    bound: Duration,
) -> Vec<entity::credit_breakage::Model> {
    let db = app.gateway.directory.db();
    wait_until(bound, "the breakage booked", async || {
        let rows = entity::credit_breakage::Entity::find()
            .filter(entity::credit_breakage::Column::TenantId.eq(tenant))
            .all(db)
            .await
            .unwrap();
        done_if(!rows.is_empty(), rows)
    })
    .await
}

async fn call_ok(app: &TestApp, key: &str, route: &str) {
    let reply = app.chat(key, &chat_body(route)).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
}

#[actix_web::test]
async fn promotional_credit_is_drawn_first_and_what_it_left_at_expiry_is_booked_once_as_breakage() {
    let route = "grants-order";
    let Prepaid {
        app,
        clock,
        start,
        tenant,
        key,
        path,
    } = prepaid(route).await;
    let paid = grant(
        &app,
        &path,
        json!({"amount": "0.001", "idempotency_key": "paid"}),
    )
    .await;
    let expires = start + HOUR_MS;
    let promo = grant(
        &app,
        &path,
        json!({"amount": "0.0004", "idempotency_key": "promo", "kind": "promotional", "expires_at_ms": expires}),
    )
    .await;

    call_ok(&app, &key, route).await;
    let drawn = grants(&app, &path).await;
    assert_eq!(
        drawn,
        vec![
            (promo, CALL, 400_000 - CALL, "active".to_owned()),
            (paid, 0, 1_000_000, "active".to_owned()),
        ]
    );

    // Expired: it counts what was drawn from it, no more, and the next call draws the paid grant.
    clock.set_ms(expires);
    let balance = app.admin("GET", &path, None).await;
    assert_eq!(
        nanos(&balance.body["balance"]),
        1_000_000,
        "{}",
        balance.raw
    );
    call_ok(&app, &key, route).await;
    let drawn = grants(&app, &path).await;
    assert_eq!(drawn[0], (promo, CALL, 0, "expired".to_owned()));
    assert_eq!(
        drawn[1],
        (paid, CALL, 1_000_000 - CALL, "active".to_owned())
    );

    // Once no call admitted before the expiry can settle, its rest is breakage, once.
    clock.set_ms(expires + 24 * HOUR_MS);
    let booked = booked_breakage(&app, &tenant, Duration::from_secs(10)).await;
    assert_eq!(booked.len(), 1);
    assert_eq!(
        (booked[0].credit_id, booked[0].amount_nanos),
        (promo, 400_000 - CALL)
    );
    let balance = app.admin("GET", &path, None).await;
    let shown = &balance.body["grants"][0];
    assert_eq!(shown["state"], "closed", "{}", balance.raw);
    assert_eq!(nanos(&shown["breakage"]), 400_000 - CALL);
    assert_eq!(nanos(&balance.body["balance"]), 1_000_000 - CALL);
}

#[actix_web::test]
async fn a_grant_that_starts_later_is_not_spent_before_and_the_402_says_when_it_starts() {
    let route = "grants-start";
    let Prepaid {
        app,
        clock,
        start,
        key,
        path,
        ..
    } = prepaid(route).await;
    let used = grant(
        &app,
        &path,
        json!({"amount": "0.0005", "idempotency_key": "now"}),
    )
    .await;
    let starts = start + HOUR_MS;
    let later = grant(
        &app,
        &path,
        json!({"amount": "0.001", "idempotency_key": "later", "starts_at_ms": starts}),
    )
    .await;
    call_ok(&app, &key, route).await;
    let refused = app.chat(&key, &chat_body(route)).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    let message = refused.error_message();
    assert!(message.contains("balance 0.000178"), "{message}");
    assert!(
        message.contains(&format!("the next, grant {later}, starts at")),
        "{message}"
    );
    assert_eq!(grants(&app, &path).await[1].3, "scheduled");

    clock.set_ms(starts);
    call_ok(&app, &key, route).await;
    let drawn = grants(&app, &path).await;
    // The older grant had 0.000178 left: the call drew it, then the new one.
    assert_eq!(drawn[0], (used, 500_000, 0, "used_up".to_owned()));
    assert_eq!(drawn[1].1, 2 * CALL - 500_000);
}

#[actix_web::test]
async fn a_key_s_grants_are_drawn_beside_its_tenant_s_and_a_priority_goes_first() {
    let clock = Arc::new(ManualClock::new(now_ms()));
    let route = "grants-key";
    let app = spawn_app(setup(route, clock)).await;
    let (tenant, _) = app
        .tenant_with_key("prepaid", json!({"credits": true}))
        .await;
    let issued = app
        .admin(
            "POST",
            &format!("/tenants/{tenant}/keys"),
            Some(json!({"credits": true})),
        )
        .await;
    assert_eq!(issued.status, 201, "{}", issued.raw);
    let key_id = issued.body["id"].as_str().unwrap().to_owned();
    let key = issued.body["key"].as_str().unwrap().to_owned();
    let tenant_path = format!("/tenants/{tenant}/credits");
    let key_path = format!("/keys/{key_id}/credits");
    let tenant_grant = grant(
        &app,
        &tenant_path,
        json!({"amount": "0.01", "idempotency_key": "t"}),
    )
    .await;
    let promo = grant(
        &app,
        &key_path,
        json!({"amount": "0.001", "idempotency_key": "k-promo", "kind": "promotional"}),
    )
    .await;
    let first = grant(
        &app,
        &key_path,
        json!({"amount": "0.001", "idempotency_key": "k-first", "priority": -1}),
    )
    .await;

    call_ok(&app, &key, route).await;
    // The charge draws the tenant's balance and the key's, each in its own order.
    assert_eq!(grants(&app, &tenant_path).await[0].0, tenant_grant);
    assert_eq!(grants(&app, &tenant_path).await[0].1, CALL);
    let key_grants = grants(&app, &key_path).await;
    assert_eq!((key_grants[0].0, key_grants[0].1), (first, CALL));
    assert_eq!((key_grants[1].0, key_grants[1].1), (promo, 0));
}

#[actix_web::test]
async fn a_grant_s_terms_are_checked_and_a_bad_one_is_named() {
    let Prepaid {
        app,
        start: now,
        path,
        ..
    } = prepaid("grants-terms").await;
    for (body, field) in [
        (
            json!({"amount": "1", "idempotency_key": "a", "kind": "gift"}),
            "kind",
        ),
        (
            json!({"amount": "1", "idempotency_key": "b", "expires_at_ms": now - 1}),
            "expires_at_ms",
        ),
        (
            json!({"amount": "1", "idempotency_key": "c", "starts_at_ms": now + 10, "expires_at_ms": now + 5}),
            "expires_at_ms",
        ),
        (
            json!({"amount": "1", "idempotency_key": "d", "priority": 2_000_000}),
            "priority",
        ),
    ] {
        let refused = app.admin("POST", &path, Some(body)).await;
        assert_eq!(refused.status, 400, "{}", refused.raw);
        assert!(refused.raw.contains(field), "{field}: {}", refused.raw);
    }
}

#[actix_web::test]
async fn three_replicas_on_one_redis_draw_one_tenant_s_grants_in_order_to_the_last_nano_unit() {
    let redis = RedisServer::start().await;
    let route = "grants-replicas";
    let clock = Arc::new(ManualClock::new(now_ms()));
    let setup = setup(route, clock)
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
    let path = format!("/tenants/{tenant}/credits");
    // 0.01 in three grants, added on three replicas: 31 calls at most.
    let paid = grant(
        &others[0],
        &path,
        json!({"amount": "0.005", "idempotency_key": "paid"}),
    )
    .await;
    let promo = grant(
        &others[1],
        &path,
        json!({"amount": "0.003", "idempotency_key": "promo", "kind": "promotional"}),
    )
    .await;
    let first_paid = grant(
        &first,
        &path,
        json!({"amount": "0.002", "idempotency_key": "first", "priority": -1}),
    )
    .await;
    let ok = calls_across(&apps, &key, route, 90).await;
    assert!(ok >= 20, "only {ok} calls were admitted");
    // One database: each replica's rows are there once it has written them.
    let rows = first.ledger_rows_eventually(&tenant, ok).await;
    let spent: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert_eq!(rows.len(), ok, "one row per admitted call");
    assert!(spent <= 10_000_000, "spent {spent} of 10,000,000");
    // Every nano-unit spent was drawn from a grant, in order: priority -1,
    // then promotional, then paid.
    let drawn = grants(&first, &path).await;
    let ids: Vec<i64> = drawn.iter().map(|g| g.0).collect();
    assert_eq!(ids, vec![first_paid, promo, paid]);
    assert_eq!(drawn.iter().map(|g| g.1).sum::<i64>(), spent, "{drawn:?}");
    assert_eq!(drawn[0].1, 2_000_000, "{drawn:?}");
    assert_eq!(drawn[1].1, 3_000_000, "{drawn:?}");
    assert_eq!(drawn[2].1, spent - 5_000_000, "{drawn:?}");
}

#[actix_web::test]
async fn a_customer_who_never_comes_back_still_has_its_promotional_credit_broken() {
    let route = "grants-idle";
    let Prepaid {
        app,
        clock,
        start,
        tenant,
        key,
        path,
    } = prepaid(route).await;
    let expires = start + HOUR_MS;
    let promo = grant(
        &app,
        &path,
        json!({"amount": "0.0005", "idempotency_key": "promo", "kind": "promotional", "expires_at_ms": expires}),
    )
    .await;
    call_ok(&app, &key, route).await;
    app.ledger_rows_eventually(&tenant, 1).await;

    // The customer goes quiet: its actor stops, and nothing of it runs.
    clock.set_ms(start + 10 * 60_000);
    let tenants = &app.gateway.tenants;
    wait_until(
        Duration::from_secs(10),
        "the idle actor to stop",
        async || {
            let running = tenants.running_tenants();
            done_if(!running.iter().any(|t| t.as_str() == tenant), running)
        },
    )
    .await;
    clock.set_ms(expires + 24 * HOUR_MS);
    let booked = booked_breakage(&app, &tenant, Duration::from_secs(30)).await;
    assert_eq!(
        (booked[0].credit_id, booked[0].amount_nanos),
        (promo, 500_000 - CALL)
    );
}
