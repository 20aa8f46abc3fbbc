//! Budgets per end user: a tier's template caps every end user of a tenant
//! on its own, in the billing time zone's periods, on every door, and
//! eviction from memory never resets a cap. Runs on the in-memory book, and
//! on Redis with `TOLLGATE_TEST_REDIS=1` (the 3-replica test always does).

use std::sync::Arc;

use futures_util::future::join_all;
use serde_json::{Value, json};
use tollgate::clock::ManualClock;
use tollgate::money::Nanos;
use tollgate::period::parse_instant;

use crate::support::redis::{RedisServer, suite_on_redis};
use crate::support::{TestApp, TestSetup, chat_body, metric_value, spawn_app, spawn_replica};

/// Each call costs 0.000322 (1 prompt token at 2/M, 40 completion at 8/M) and
/// holds a little more than 0.0004 (50 output tokens at 8/M): a cap of 0.001
/// admits exactly two a period.
const CAP: &str = "0.001";

fn setup(route: &str, period: &str) -> TestSetup {
    with_rpm(route, period, 1000)
}

fn with_rpm(route: &str, period: &str, rpm: u32) -> TestSetup {
    TestSetup::new()
        .route(route, &["primary/usage-1-0-40"])
        .tier("free", &[route], rpm, 50)
        .set("tiers.free.end_user.budget", CAP)
        .set("tiers.free.end_user.period", period)
}

async fn as_user(app: &TestApp, key: &str, route: &str, user: &str) -> crate::support::Reply {
    app.chat_with(key, &chat_body(route), &[("x-tollgate-end-user", user)])
        .await
}

fn sum_charged(rows: &[entity::usage::Model], user: &str) -> i64 {
    rows.iter()
        .filter(|row| row.end_user.as_deref() == Some(user))
        .map(|row| row.charged_nanos)
        .sum()
}

#[actix_web::test]
async fn each_end_user_has_their_own_cap_and_the_402_names_them() {
    let route = "eu-cap";
    let app = spawn_app(setup(route, "day")).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    for _ in 0..2 {
        let ok = as_user(&app, &key, route, "alice").await;
        assert_eq!(ok.status, 200, "{}", ok.raw);
    }
    let refused = as_user(&app, &key, route, "alice").await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert_eq!(refused.error_code(), "budget_exceeded");
    assert!(
        refused.error_message().contains("end user `alice`"),
        "{}",
        refused.raw
    );
    // Another end user of the same tenant and key is untouched, named in the body this time.
    let mut body = chat_body(route);
    body["user"] = json!("bob");
    assert_eq!(app.chat(&key, &body).await.status, 200);

    let rows = app.ledger_rows_eventually(&tenant, 3).await;
    assert_eq!(
        rows.iter()
            .filter(|r| r.end_user.as_deref() == Some("alice"))
            .count(),
        2
    );
    assert_eq!(
        rows.iter()
            .filter(|r| r.end_user.as_deref() == Some("bob"))
            .count(),
        1
    );
    assert!(sum_charged(&rows, "alice") <= Nanos::parse_decimal(CAP).unwrap().to_db());
    assert_eq!(app.budget(&tenant).await["reserved"], "0");

    let report = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/spend?group_by=end_user"),
            None,
        )
        .await;
    assert_eq!(report.status, 200, "{}", report.raw);
    let cost_of = |user: &str| {
        report.body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["key"] == user)
            .map(|row| {
                Nanos::parse_decimal(row["cost"].as_str().unwrap())
                    .unwrap()
                    .to_db()
            })
    };
    assert_eq!(
        cost_of("alice"),
        Some(sum_charged(&rows, "alice")),
        "{}",
        report.raw
    );
    assert_eq!(
        cost_of("bob"),
        Some(sum_charged(&rows, "bob")),
        "{}",
        report.raw
    );

    // The daily report's top end users name their tenant (ids are the tenant's own).
    let today = tollgate::period::Date::from_unix_ms(crate::support::now_ms()).day_key();
    let daily = app
        .admin("GET", &format!("/reports/daily?date={today}"), None)
        .await;
    assert_eq!(daily.status, 200, "{}", daily.raw);
    let top: Vec<&str> = daily.body["top_end_users"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|row| row["key"].as_str())
        .collect();
    assert!(top.contains(&format!("{tenant}:alice").as_str()), "{top:?}");
    assert!(top.iter().all(|key| !key.ends_with(':')), "{top:?}");
}

#[actix_web::test]
async fn a_tier_that_requires_an_end_user_refuses_a_request_without_one_on_every_door() {
    let route = "eu-required";
    let app = spawn_app(
        TestSetup::new()
            .route(route, &["primary/usage-1-0-40"])
            .tier("free", &[route], 1000, 50)
            .set("tiers.free.end_user_required", true)
            .set("tiers.free.end_user_sources", vec!["header"]),
    )
    .await;
    let (_, key) = app.tenant_with_key("free", json!({})).await;

    let missing = app.chat(&key, &chat_body(route)).await;
    assert_eq!(missing.status, 400, "{}", missing.raw);
    assert_eq!(missing.error_code(), "end_user_required");
    assert!(missing.error_message().contains("X-Tollgate-End-User"));
    // The body's `user` is not a source this tier trusts.
    let mut body = chat_body(route);
    body["user"] = json!("mallory");
    assert_eq!(
        app.chat(&key, &body).await.error_code(),
        "end_user_required"
    );
    // Past the length cap an id is kept as its hash; a control character is refused.
    let long = "u".repeat(129);
    assert_eq!(as_user(&app, &key, route, &long).await.status, 200);
    let broken = as_user(&app, &key, route, "car\tol").await;
    assert_eq!(
        (broken.status, broken.error_code()),
        (400, "invalid_request")
    );
    assert_eq!(as_user(&app, &key, route, "carol").await.status, 200);

    let messages = json!({"model": route, "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    let refused = app.post_json("/v1/messages", &key, &messages).await;
    assert_eq!(refused.status, 400, "{}", refused.raw);
    assert_eq!(refused.body["type"], "error", "{}", refused.raw);
    assert_eq!(refused.body["error"]["type"], "invalid_request_error");
    // count_tokens is a call like any other: the same end user is required.
    let count = json!({"model": route, "messages": [{"role": "user", "content": "hi"}]});
    let uncounted = app
        .post_json("/v1/messages/count_tokens", &key, &count)
        .await;
    assert_eq!(uncounted.status, 400, "{}", uncounted.raw);
    assert!(
        uncounted.raw.contains("X-Tollgate-End-User"),
        "{}",
        uncounted.raw
    );
}

#[actix_web::test]
async fn the_messages_door_reads_the_end_user_from_metadata_user_id() {
    let route = "eu-messages";
    let app = spawn_app(setup(route, "day")).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let body = json!({"model": route, "max_tokens": 50, "metadata": {"user_id": "dave"},
        "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..2 {
        let ok = app.post_json("/v1/messages", &key, &body).await;
        assert_eq!(ok.status, 200, "{}", ok.raw);
    }
    let refused = app.post_json("/v1/messages", &key, &body).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert_eq!(
        refused.body["error"]["type"], "billing_error",
        "{}",
        refused.raw
    );
    assert!(refused.raw.contains("end user `dave`"), "{}", refused.raw);
    let rows = app.ledger_rows_eventually(&tenant, 2).await;
    assert!(rows.iter().all(|r| r.end_user.as_deref() == Some("dave")));
}

/// Claude Code's `metadata.user_id` as it sends it: JSON of 150 bytes and more.
fn claude_code_user_id(account: &str) -> String {
    json!({"device_id": "d".repeat(64), "account_uuid": account,
           "session_id": "5d6a0f94-4b0f-4b53-9d36-7c0e2a7e1c11"})
    .to_string()
}

/// Where end users are capped, Claude Code's JSON id names its account (the
/// session changes every run, the account does not), and an id past the
/// length cap is a stable hash of itself rather than a 400. Where they are
/// not, an unusable body id is ignored: it decides nothing there.
#[actix_web::test]
async fn claude_code_s_json_user_id_names_its_account_and_a_long_id_is_hashed() {
    let route = "eu-claude-code";
    let app = spawn_app(
        setup(route, "day")
            .route("plain", &["primary/usage-1-0-40"])
            .tier("open", &["plain"], 1000, 50),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let body = |model: &str, user: &str| {
        json!({"model": model, "max_tokens": 50, "metadata": {"user_id": user},
               "messages": [{"role": "user", "content": "hi"}]})
    };
    let long = "u".repeat(300);
    for user in [claude_code_user_id("acct-7"), long.clone(), long] {
        let reply = app
            .post_json("/v1/messages", &key, &body(route, &user))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }
    let rows = app.ledger_rows_eventually(&tenant, 3).await;
    let users: Vec<_> = rows.iter().map(|r| r.end_user.clone().unwrap()).collect();
    assert_eq!(users[0], "acct-7");
    assert!(
        users[1].starts_with("sha256:") && users[1].len() < 128,
        "{users:?}"
    );
    assert_eq!(users[1], users[2], "the same id is the same end user");

    let (open, open_key) = app.tenant_with_key("open", json!({})).await;
    let broken = format!("{{\"device_id\": \"{}\u{7}\"}}", "d".repeat(200));
    let reply = app
        .post_json("/v1/messages", &open_key, &body("plain", &broken))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let rows = app.ledger_rows_eventually(&open, 1).await;
    assert_eq!(rows[0].end_user, None);
}

#[actix_web::test]
async fn an_end_users_requests_per_minute_are_their_own() {
    let route = "eu-rpm";
    let app = spawn_app(
        TestSetup::new()
            .route(route, &["primary/usage-1-0-40"])
            .tier("free", &[route], 1000, 50)
            .set("tiers.free.end_user.rpm", 2),
    )
    .await;
    let (_, key) = app.tenant_with_key("free", json!({})).await;
    for _ in 0..2 {
        assert_eq!(as_user(&app, &key, route, "erin").await.status, 200);
    }
    let limited = as_user(&app, &key, route, "erin").await;
    assert_eq!(limited.status, 429, "{}", limited.raw);
    assert!(
        limited.error_message().contains("end user `erin`"),
        "{}",
        limited.raw
    );
    assert!(limited.header("retry-after").is_some());
    assert_eq!(as_user(&app, &key, route, "frank").await.status, 200);
}

/// Spends an end user's cap just before `boundary`, then checks who may spend
/// just after it: `resets` says whether the period changed there.
async fn across(timezone: &str, period: &str, boundary: &str, resets: bool) {
    let at = parse_instant(boundary).unwrap();
    let clock = Arc::new(ManualClock::new(at - 60_000));
    let route = format!("eu-{period}-{}", timezone.replace('/', "-").to_lowercase());
    let app = spawn_app(
        setup(&route, period)
            .set("billing.timezone", timezone)
            .clock(clock.clone()),
    )
    .await;
    let (_, key) = app.tenant_with_key("free", json!({})).await;
    for _ in 0..2 {
        assert_eq!(as_user(&app, &key, &route, "gina").await.status, 200);
    }
    clock.set_ms(at - 1);
    assert_eq!(as_user(&app, &key, &route, "gina").await.status, 402);
    clock.set_ms(at);
    let after = as_user(&app, &key, &route, "gina").await;
    let expected = if resets { 200 } else { 402 };
    assert_eq!(
        after.status, expected,
        "{period} in {timezone} at {boundary}: {}",
        after.raw
    );
}

#[actix_web::test]
async fn a_day_begins_at_midnight_in_the_billing_time_zone() {
    // Midnight in Shanghai is 16:00 UTC; in UTC that instant is mid-day.
    across("Asia/Shanghai", "day", "2026-12-02T16:00:00Z", true).await;
    across("UTC", "day", "2026-12-02T16:00:00Z", false).await;
    across("UTC", "day", "2026-12-03T00:00:00Z", true).await;
}

#[actix_web::test]
async fn weeks_begin_on_monday_and_months_on_the_first_and_a_lifetime_never_resets() {
    // 2026-12-07 is a Monday.
    across("UTC", "week", "2026-12-07T00:00:00Z", true).await;
    across("UTC", "week", "2026-12-06T00:00:00Z", false).await;
    across("Asia/Shanghai", "month", "2026-12-31T16:00:00Z", true).await;
    across("UTC", "month", "2026-12-31T16:00:00Z", false).await;
    across("UTC", "lifetime", "2027-01-01T00:00:00Z", false).await;
}

#[actix_web::test]
async fn end_users_evicted_from_memory_come_back_with_their_spend() {
    let route = "eu-evict";
    let clock = Arc::new(ManualClock::new(crate::support::now_ms()));
    let app = spawn_app(
        // The tenant's own rate would refuse first: the manual clock hardly moves.
        with_rpm(route, "day", 1_000_000)
            .set("billing.end_users_in_memory", 100)
            .clock(clock.clone()),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let loads = |exposition: &str| metric_value(exposition, "tollgate_end_user_loads_total");
    let before = loads(&app.get("/metrics", "").await.raw);
    let users: Vec<String> = (0..1000).map(|i| format!("user-{i}")).collect();
    // Two rounds spend each cap; the third must find every cap spent. 10 ms
    // pass per call, so an end user is idle (evictable) 100 calls after theirs.
    for round in 0..3 {
        for user in &users {
            let status = as_user(&app, &key, route, user).await.status;
            let expected = if round < 2 { 200 } else { 402 };
            assert_eq!(status, expected, "{user} in round {round}");
            clock.advance_ms(10);
        }
    }
    let after = loads(&app.get("/metrics", "").await.raw);
    if !suite_on_redis() {
        // A map of about 100 holding 1,000 users in turn: every call reloads
        // its user (other tests of the process only add to the count).
        assert!(after - before >= 2_900, "{} loads", after - before);
    }
    let rows = app.ledger_rows_eventually(&tenant, 2000).await;
    let cap = Nanos::parse_decimal(CAP).unwrap().to_db();
    for user in &users {
        assert!(sum_charged(&rows, user) <= cap, "{user} passed their cap");
    }
}

#[actix_web::test]
async fn three_replicas_on_one_redis_keep_fifty_end_users_each_under_their_cap() {
    let redis = RedisServer::start().await;
    let route = "eu-replicas";
    // A thousand calls at once on a shared machine: a 1 s store timeout would
    // turn a slow Redis reply into a fail-closed 503, which is not what this checks.
    let setup = setup(route, "day")
        .redis(&redis.url(), 3)
        .set("storage.redis_timeout_ms", 10_000);
    let first = spawn_app(setup.clone()).await;
    let others = [
        spawn_replica(&first, &setup).await,
        spawn_replica(&first, &setup).await,
    ];
    let (tenant, key) = first
        .tenant_with_key("free", json!({"monthly_budget": "0.02"}))
        .await;
    let apps: Vec<&TestApp> = std::iter::once(&first).chain(others.iter()).collect();
    for app in &apps {
        crate::support::wait_until(
            std::time::Duration::from_secs(5),
            "a replica to learn the key",
            async || {
                let status = app.get("/v1/models", &key).await.status;
                crate::support::done_if(status == 200, status)
            },
        )
        .await;
    }
    let calls = (0..50).flat_map(|user| (0..20).map(move |call| (user, call)));
    let replies: Vec<(u16, String)> = join_all(calls.map(|(user, call)| {
        let app = apps[(user + call) % apps.len()];
        let key = key.clone();
        async move {
            let reply = as_user(app, &key, route, &format!("user-{user}")).await;
            (
                reply.status,
                format!("{}: {}", reply.error_code(), reply.error_message()),
            )
        }
    }))
    .await;
    let statuses: Vec<u16> = replies.iter().map(|(status, _)| *status).collect();
    let others: Vec<&(u16, String)> = replies
        .iter()
        .filter(|(status, _)| *status != 200 && *status != 402)
        .collect();
    assert!(others.is_empty(), "{others:?}");
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 402),
        "{statuses:?}"
    );
    assert!(
        ok > 0 && ok <= 100,
        "{ok} calls passed: at most 2 per end user"
    );
    let rows = first.ledger_rows_eventually(&tenant, ok).await;
    let cap = Nanos::parse_decimal(CAP).unwrap().to_db();
    for user in 0..50 {
        let id = format!("user-{user}");
        assert!(sum_charged(&rows, &id) <= cap, "{id} passed their cap");
    }
    let total: i64 = rows.iter().map(|row| row.charged_nanos).sum();
    assert!(
        total <= Nanos::parse_decimal("0.02").unwrap().to_db(),
        "{total}"
    );
    let budget: Value = first.budget(&tenant).await;
    assert_eq!(budget["reserved"], "0", "{budget}");
}

fn nanos(value: &Value) -> i64 {
    Nanos::parse_decimal(value.as_str().unwrap_or(""))
        .unwrap()
        .to_db()
}

#[actix_web::test]
async fn an_admin_override_changes_one_end_users_limits_or_blocks_them() {
    let route = "eu-override";
    let app = spawn_app(setup(route, "day")).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let path = |user: &str| format!("/tenants/{tenant}/end-users/{user}");

    let fresh = app.admin("GET", &path("hana"), None).await;
    assert_eq!(fresh.status, 200, "{}", fresh.raw);
    assert_eq!(
        (
            fresh.body["committed"].as_str(),
            fresh.body["budget"].as_str()
        ),
        (Some("0"), Some(CAP))
    );
    assert_eq!(fresh.body["period"], "day");
    assert_eq!(fresh.body["override"], Value::Null);

    assert_eq!(as_user(&app, &key, route, "hana").await.status, 200);
    let raised = app
        .admin("PUT", &path("hana"), Some(json!({"budget": "0.002"})))
        .await;
    assert_eq!(raised.status, 200, "{}", raised.raw);
    // The template's cap admits two calls a day; hana's own admits more.
    for call in 2..=4 {
        let reply = as_user(&app, &key, route, "hana").await;
        assert_eq!(reply.status, 200, "call {call}: {}", reply.raw);
    }
    let rows = app.ledger_rows_eventually(&tenant, 4).await;
    let status = app.admin("GET", &path("hana"), None).await;
    assert_eq!(
        nanos(&status.body["committed"]),
        sum_charged(&rows, "hana"),
        "{}",
        status.raw
    );
    assert_eq!(status.body["budget"], "0.002");
    assert_eq!(status.body["override"]["budget"], "0.002");
    assert_eq!(status.body["reserved"], "0");

    // Back to the template: what hana spent today is over it.
    assert_eq!(app.admin("DELETE", &path("hana"), None).await.status, 200);
    assert_eq!(as_user(&app, &key, route, "hana").await.status, 402);

    let blocked = app
        .admin("PUT", &path("ivan"), Some(json!({"blocked": true})))
        .await;
    assert_eq!(blocked.status, 200, "{}", blocked.raw);
    let refused = as_user(&app, &key, route, "ivan").await;
    assert_eq!(
        (refused.status, refused.error_code()),
        (403, "end_user_blocked"),
        "{}",
        refused.raw
    );
    let count = app
        .client
        .post(format!("{}/v1/messages/count_tokens", app.base_url))
        .insert_header(("authorization", format!("Bearer {key}")))
        .insert_header(("x-tollgate-end-user", "ivan"))
        .send_json(&json!({"model": route, "messages": [{"role": "user", "content": "hi"}]}))
        .await
        .unwrap();
    let count = crate::support::reply(count).await;
    assert_eq!(
        count.status, 403,
        "a blocked end user counts nothing either: {}",
        count.raw
    );
    assert_eq!(as_user(&app, &key, route, "jill").await.status, 200);
    let rows = app.ledger_rows_eventually(&tenant, 5).await;
    assert!(rows.iter().all(|r| r.end_user.as_deref() != Some("ivan")));

    let bad = app
        .admin("PUT", &path("hana"), Some(json!({"period": "fortnight"})))
        .await;
    assert_eq!(bad.status, 400, "{}", bad.raw);
    let long = app.admin("GET", &path(&"u".repeat(129)), None).await;
    assert_eq!(long.status, 400, "{}", long.raw);
}

#[actix_web::test]
async fn an_override_to_a_longer_period_counts_what_was_spent_earlier_in_it() {
    let route = "eu-period";
    let clock = Arc::new(ManualClock::new(
        parse_instant("2026-12-09T10:00:00Z").unwrap(),
    ));
    let app = spawn_app(setup(route, "day").clock(clock.clone())).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    // Two calls on Wednesday spend the day's cap.
    for _ in 0..2 {
        assert_eq!(as_user(&app, &key, route, "kim").await.status, 200);
    }
    clock.set_ms(parse_instant("2026-12-10T10:00:00Z").unwrap());
    assert_eq!(as_user(&app, &key, route, "kim").await.status, 200);
    // A weekly cap of the same size: Wednesday's and Thursday's spend are this week's.
    let path = format!("/tenants/{tenant}/end-users/kim");
    let set = app
        .admin("PUT", &path, Some(json!({"period": "week"})))
        .await;
    assert_eq!(set.status, 200, "{}", set.raw);
    let refused = as_user(&app, &key, route, "kim").await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    let status = app.admin("GET", &path, None).await;
    assert_eq!(status.body["window"], "2026-W50", "{}", status.raw);
    let rows = app.ledger_rows_eventually(&tenant, 3).await;
    assert_eq!(nanos(&status.body["committed"]), sum_charged(&rows, "kim"));
}

#[actix_web::test]
async fn an_end_users_daily_tokens_are_their_own_and_start_again_at_midnight() {
    let route = "eu-tokens";
    let clock = Arc::new(ManualClock::new(
        parse_instant("2026-12-09T23:00:00Z").unwrap(),
    ));
    let app = spawn_app(
        TestSetup::new()
            .route(route, &["primary/usage-1-0-40"])
            .tier("free", &[route], 1000, 50)
            // Each call holds its prompt and 50 output tokens, then uses 41.
            .set("tiers.free.end_user.daily_tokens", 150)
            .clock(clock.clone()),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    for call in 1..=3 {
        let reply = as_user(&app, &key, route, "lee").await;
        assert_eq!(reply.status, 200, "call {call}: {}", reply.raw);
    }
    let limited = as_user(&app, &key, route, "lee").await;
    assert_eq!(limited.status, 429, "{}", limited.raw);
    assert_eq!(limited.error_code(), "token_limit_exceeded");
    assert!(
        limited.error_message().contains("end user `lee`"),
        "{}",
        limited.raw
    );
    // An hour to midnight: Retry-After says so.
    let retry: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(retry, 3_600, "{}", limited.raw);
    assert_eq!(as_user(&app, &key, route, "mia").await.status, 200);

    clock.set_ms(parse_instant("2026-12-10T00:00:00Z").unwrap());
    assert_eq!(as_user(&app, &key, route, "lee").await.status, 200);
    let rows = app.ledger_rows_eventually(&tenant, 5).await;
    let tokens: i64 = rows
        .iter()
        .filter(|r| r.end_user.as_deref() == Some("lee"))
        .map(|r| r.prompt_tokens + r.completion_tokens)
        .sum();
    assert_eq!(tokens, 4 * 41);
}

#[actix_web::test]
async fn an_end_users_tokens_per_minute_refill_with_the_clock() {
    let route = "eu-tpm";
    let clock = Arc::new(ManualClock::new(crate::support::now_ms()));
    let app = spawn_app(
        TestSetup::new()
            .route(route, &["primary/usage-1-0-40"])
            .tier("free", &[route], 1000, 50)
            // A call holds its prompt and 50 output tokens, then gives back all but 41.
            .set("tiers.free.end_user.tpm", 150)
            .clock(clock.clone()),
    )
    .await;
    let (_, key) = app.tenant_with_key("free", json!({})).await;
    for call in 1..=3 {
        let reply = as_user(&app, &key, route, "noa").await;
        assert_eq!(reply.status, 200, "call {call}: {}", reply.raw);
    }
    let limited = as_user(&app, &key, route, "noa").await;
    assert_eq!(limited.status, 429, "{}", limited.raw);
    assert_eq!(limited.error_code(), "token_limit_exceeded");
    assert!(
        limited.error_message().contains("end user `noa`"),
        "{}",
        limited.raw
    );
    assert!(
        limited.error_message().contains("tokens per minute"),
        "{}",
        limited.raw
    );
    let retry: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{}", limited.raw);
    assert_eq!(as_user(&app, &key, route, "olu").await.status, 200);
    // A minute later the bucket is full again.
    clock.advance_ms(60_000);
    assert_eq!(as_user(&app, &key, route, "noa").await.status, 200);
}
