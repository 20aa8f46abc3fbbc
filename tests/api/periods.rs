//! Budget periods for the tenant's, a key's and a feature's budgets: a day,
//! an ISO week or a month of the billing time zone, or a lifetime, chosen per
//! budget. Spend before a boundary counts for its own period only; a restarted
//! replica finds the period's spend in the ledger; at the boundary, under
//! concurrent load, each period admits exactly what fits it. Runs on the book,
//! and on Redis with `TOLLGATE_TEST_REDIS=1`.

use std::sync::Arc;

use futures_util::future::join_all;
use serde_json::json;
use tollgate::clock::ManualClock;
use tollgate::period::parse_instant;

use crate::support::{TestApp, TestSetup, chat_body, spawn_app, spawn_replica};

/// Each call costs 0.000322 and holds a little more than 0.0004: a cap of
/// 0.001 admits exactly two calls a period, however many arrive at once.
const CAP: &str = "0.001";

#[derive(Clone, Copy, Debug)]
enum Scope {
    Tenant,
    Key,
    Feature,
}

fn setup(route: &str, timezone: &str, clock: Arc<ManualClock>) -> TestSetup {
    TestSetup::new()
        .route(route, &["primary/usage-1-0-40"])
        .tier("periods", &[route], 100_000, 50)
        .set("billing.timezone", timezone)
        .clock(clock)
}

/// A tenant and key whose `scope` has a budget of `CAP` over `period`.
async fn capped(app: &TestApp, scope: Scope, period: &str) -> (String, String) {
    let budget = json!({"monthly_budget": CAP, "budget_period": period});
    match scope {
        Scope::Tenant => app.tenant_with_key("periods", budget).await,
        Scope::Key => {
            let (tenant, _) = app.tenant_with_key("periods", json!({})).await;
            let issued = app
                .admin("POST", &format!("/tenants/{tenant}/keys"), Some(budget))
                .await;
            assert_eq!(issued.status, 201, "{}", issued.raw);
            (tenant, issued.body["key"].as_str().unwrap().to_owned())
        }
        Scope::Feature => {
            let (tenant, key) = app.tenant_with_key("periods", json!({})).await;
            let set = app
                .admin(
                    "PUT",
                    &format!("/tenants/{tenant}/features/search/budget"),
                    Some(json!({"monthly_budget": CAP, "period": period})),
                )
                .await;
            assert_eq!(set.status, 200, "{}", set.raw);
            (tenant, key)
        }
    }
}

async fn call(app: &TestApp, key: &str, route: &str) -> crate::support::Reply {
    app.chat_with(key, &chat_body(route), &[("x-tollgate-feature", "search")])
        .await
}

fn scope_named(scope: Scope, refused: &crate::support::Reply) -> bool {
    let message = refused.error_message();
    match scope {
        Scope::Tenant => message.contains("budget exceeded (tenant)"),
        Scope::Key => message.contains("budget exceeded (key `"),
        Scope::Feature => message.contains("budget exceeded (feature `search`)"),
    }
}

/// Spends the cap just before `boundary`, then checks whether a call just
/// after it fits: `resets` says whether the period changed there.
async fn across(scope: Scope, timezone: &str, period: &str, boundary: &str, resets: bool) {
    let at = parse_instant(boundary).unwrap();
    let clock = Arc::new(ManualClock::new(at - 60_000));
    let route = format!("period-{scope:?}-{period}-{}", timezone.replace('/', "-")).to_lowercase();
    let app = spawn_app(setup(&route, timezone, clock.clone())).await;
    let (_, key) = capped(&app, scope, period).await;
    for _ in 0..2 {
        let ok = call(&app, &key, &route).await;
        assert_eq!(ok.status, 200, "{}", ok.raw);
    }
    clock.set_ms(at - 1);
    let refused = call(&app, &key, &route).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert!(scope_named(scope, &refused), "{scope:?}: {}", refused.raw);
    clock.set_ms(at);
    let after = call(&app, &key, &route).await;
    let expected = if resets { 200 } else { 402 };
    assert_eq!(
        after.status, expected,
        "{scope:?} {period} in {timezone} at {boundary}: {}",
        after.raw
    );
}

#[actix_web::test]
async fn a_day_begins_at_local_midnight_for_the_tenants_a_keys_and_a_features_budget() {
    for scope in [Scope::Tenant, Scope::Key, Scope::Feature] {
        // Midnight in Shanghai is 16:00 UTC; in UTC that instant is mid-day.
        across(scope, "Asia/Shanghai", "day", "2026-12-02T16:00:00Z", true).await;
        across(scope, "UTC", "day", "2026-12-02T16:00:00Z", false).await;
        across(scope, "UTC", "day", "2026-12-03T00:00:00Z", true).await;
    }
}

#[actix_web::test]
async fn weeks_begin_on_monday_months_on_the_local_first_and_a_lifetime_never_resets() {
    for scope in [Scope::Tenant, Scope::Key, Scope::Feature] {
        // 2026-12-07 is a Monday.
        across(scope, "UTC", "week", "2026-12-07T00:00:00Z", true).await;
        across(scope, "UTC", "week", "2026-12-06T00:00:00Z", false).await;
        across(
            scope,
            "Asia/Shanghai",
            "month",
            "2026-12-31T16:00:00Z",
            true,
        )
        .await;
        across(scope, "UTC", "month", "2026-12-31T16:00:00Z", false).await;
        across(scope, "UTC", "lifetime", "2027-01-01T00:00:00Z", false).await;
    }
}

#[actix_web::test]
async fn a_replica_started_later_finds_todays_spend_in_the_ledger() {
    let at = parse_instant("2026-12-02T10:00:00Z").unwrap();
    let clock = Arc::new(ManualClock::new(at));
    let route = "period-restart";
    let setup = setup(route, "Asia/Shanghai", clock.clone());
    let first = spawn_app(setup.clone()).await;
    let (tenant, key) = capped(&first, Scope::Tenant, "day").await;
    for _ in 0..2 {
        assert_eq!(call(&first, &key, route).await.status, 200);
    }
    first.ledger_rows_eventually(&tenant, 2).await;
    let later = spawn_replica(&first, &setup).await;
    crate::support::wait_until(
        std::time::Duration::from_secs(5),
        "the replica to learn the key",
        async || {
            let status = later.get("/v1/models", &key).await.status;
            crate::support::done_if(status == 200, status)
        },
    )
    .await;
    let refused = call(&later, &key, route).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    let status = later
        .admin("GET", &format!("/tenants/{tenant}/budget"), None)
        .await;
    assert_eq!(status.body["period"], "2026-12-02", "{}", status.raw);
    assert_eq!(status.body["committed"], "0.000644", "{}", status.raw);
}

#[actix_web::test]
async fn at_midnight_under_concurrent_load_each_day_admits_exactly_what_fits_it() {
    let midnight = parse_instant("2026-12-02T16:00:00Z").unwrap();
    let clock = Arc::new(ManualClock::new(midnight - 1));
    let route = "period-load";
    let app = spawn_app(setup(route, "Asia/Shanghai", clock.clone())).await;
    let (tenant, key) = capped(&app, Scope::Tenant, "day").await;
    let burst = || join_all((0..20).map(|_| call(&app, &key, route)));
    let before = burst().await;
    clock.set_ms(midnight);
    let after = burst().await;
    let admitted = |replies: &[crate::support::Reply]| {
        assert!(
            replies.iter().all(|r| r.status == 200 || r.status == 402),
            "{:?}",
            replies.iter().map(|r| &r.raw).collect::<Vec<_>>()
        );
        replies.iter().filter(|r| r.status == 200).count()
    };
    assert_eq!(admitted(&before), 2, "the day before midnight");
    assert_eq!(admitted(&after), 2, "the day after midnight");
    let rows = app.ledger_rows_eventually(&tenant, 4).await;
    let on_each_side = |after: bool| {
        rows.iter()
            .filter(|r| (u64::try_from(r.created_at_ms).unwrap() >= midnight) == after)
            .map(|r| r.charged_nanos)
            .sum::<i64>()
    };
    let cap = tollgate::money::Nanos::parse_decimal(CAP).unwrap().to_db();
    assert!(on_each_side(false) <= cap);
    assert!(on_each_side(true) <= cap);
    assert_eq!(rows.len(), 4);
}

#[actix_web::test]
async fn a_call_held_across_the_months_end_still_counts_in_the_new_month() {
    let month_end = parse_instant("2026-12-01T00:00:00Z").unwrap();
    let clock = Arc::new(ManualClock::new(month_end - 1_000));
    let route = "period-held";
    let setup = TestSetup::new()
        .route(route, &["primary/usage-1-0-40+delay-1500ms"])
        .tier("periods", &[route], 100_000, 50)
        .clock(clock.clone());
    let app = spawn_app(setup).await;
    // Room for one hold of 0.0004, not two.
    let (_, key) = app
        .tenant_with_key("periods", json!({"monthly_budget": "0.0006"}))
        .await;
    let held = call(&app, &key, route);
    let next_month = async {
        // The first call holds its reserve once it is upstream.
        crate::support::wait_until(
            std::time::Duration::from_secs(5),
            "the first call upstream",
            async || {
                let requests = app.fake.stats.requests();
                crate::support::done_if(requests >= 1, requests)
            },
        )
        .await;
        clock.set_ms(month_end + 1_000);
        call(&app, &key, route).await
    };
    let (held, second) = futures_util::future::join(held, next_month).await;
    assert_eq!(held.status, 200, "{}", held.raw);
    assert_eq!(
        second.status, 402,
        "the call held since last month was forgotten: {}",
        second.raw
    );
}
