//! The tenant actor through its handle, with a manual clock, on every quota
//! store: the in-memory book, one Redis and a Redis Cluster give the same
//! answers to the same questions (the `QuotaStore` seam), so every scenario
//! here runs on each.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;
use tollgate::clock::{Clock, ManualClock};
use tollgate::directory::TenantRecord;
use tollgate::ids::{KeyId, RequestId, TenantId};
use tollgate::ledger::AttemptStatus;
use tollgate::money::{Nanos, PricePerMTok};
use tollgate::tenant::{QuotaError, ReservationMeta, ReserveRequest, TenantHandle};

use crate::support::cluster::RedisCluster;
use crate::support::redis::RedisServer;
use crate::support::{TestApp, TestSetup, now_ms, spawn_app};

/// Which store decides.
enum Store {
    Book,
    Redis(RedisServer),
    Cluster(RedisCluster),
}

async fn app_on(store: &Store, clock: Arc<ManualClock>) -> TestApp {
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 600, 100)
        .clock(clock);
    let setup = match store {
        // Memory quotas even when the suite runs with Redis: this is the book's run.
        Store::Book => setup.set("storage.redis_url", ""),
        Store::Redis(redis) => setup.redis(&redis.url(), 1),
        Store::Cluster(cluster) => setup.redis(&cluster.url(), 1),
    };
    let app = spawn_app(setup).await;
    let on_redis = !matches!(store, Store::Book);
    assert_eq!(
        app.gateway.quota_store.is_some(),
        on_redis,
        "the store under test"
    );
    app
}

async fn stores() -> [Store; 3] {
    [
        Store::Book,
        Store::Redis(RedisServer::start().await),
        Store::Cluster(RedisCluster::start().await),
    ]
}

fn name(store: &Store) -> &'static str {
    match store {
        Store::Book => "book",
        Store::Redis(_) => "redis",
        Store::Cluster(_) => "cluster",
    }
}

pub(crate) async fn tenant(app: &TestApp, budget: &str) -> (TenantHandle, TenantRecord) {
    let (id, _key) = app
        .tenant_with_key("free", json!({ "monthly_budget": budget }))
        .await;
    let record = app
        .gateway
        .directory
        .tenant(&TenantId::new(id.as_str()))
        .unwrap();
    let handle = app.gateway.tenants.handle(&record).unwrap();
    (handle, (*record).clone())
}

/// A request whose worst case is `output_tokens` at 1 unit per thousand tokens.
pub(crate) fn request(output_tokens: u32, expires_at_ms: u64) -> ReserveRequest {
    ReserveRequest {
        input_tokens: 0,
        input_price: PricePerMTok::parse_decimal("0").unwrap(),
        output_price: PricePerMTok::parse_decimal("1000").unwrap(),
        max_tokens: output_tokens,
        choices: 1,
        expires_at_ms,
        key: KeyId::new("key_actor"),
        key_budget: None,
        feature: String::new(),
        end_user: None,
        key_credits: false,
        fees: Nanos::ZERO,
        session: None,
        key_period: tollgate::calendar::Period::Month,
    }
}

pub(crate) fn meta() -> ReservationMeta {
    ReservationMeta {
        request_id: RequestId::generate(),
        key: KeyId::new("key_actor"),
        feature: String::new(),
        end_user: None,
        session: None,
        api: tollgate::ledger::Api::Chat,
        route: "fast".to_owned(),
        client_request_id: None,
        trace_id: None,
        replica: String::new(),
        plan: None,
        cost_nanos: None,
    }
}

fn units(n: &str) -> Nanos {
    Nanos::parse_decimal(n).unwrap()
}

#[actix_web::test]
async fn twenty_concurrent_reservations_hold_exactly_what_the_budget_covers_on_every_store() {
    for store in stores().await {
        let clock = Arc::new(ManualClock::new(now_ms()));
        let app = app_on(&store, clock.clone()).await;
        let (handle, _) = tenant(&app, "1").await;
        let expiry = clock.now_ms() + 60_000;
        // Each holds 0.3 of a budget of 1: three fit, the fourth would pass it.
        let asks = (0..20).map(|_| handle.reserve(request(300, expiry), meta()));
        let results = join_all(asks).await;
        let granted: Vec<_> = results.into_iter().filter_map(Result::ok).collect();
        assert_eq!(granted.len(), 3, "{}: admitted", name(&store));
        for guard in &granted {
            assert_eq!(guard.granted().amount, units("0.3"), "{}", name(&store));
        }
        let status = handle.status().await.unwrap();
        assert_eq!(status.reserved, units("0.9"), "{}", name(&store));

        let mut granted = granted.into_iter();
        let first = granted.next().unwrap();
        let reply = first.settle(units("0.1"), 100).await.unwrap();
        assert_eq!(reply.remaining, Some(units("0.3")), "{}", name(&store));
        granted.next().unwrap().release();
        // A release is not waited for; the next decision sees it.
        let status = handle.status().await.unwrap();
        assert_eq!(status.committed, units("0.1"), "{}", name(&store));
        assert_eq!(status.reserved, units("0.3"), "{}", name(&store));
        assert_eq!(status.remaining, Some(units("0.6")), "{}", name(&store));
        drop(granted);
    }
}

#[actix_web::test]
async fn a_refusal_names_the_budget_and_what_the_request_needed_on_every_store() {
    for store in stores().await {
        let clock = Arc::new(ManualClock::new(now_ms()));
        let app = app_on(&store, clock.clone()).await;
        let (handle, _) = tenant(&app, "0.5").await;
        let refused = handle
            .reserve(request(600, clock.now_ms() + 60_000), meta())
            .await
            .err()
            .expect("0.6 does not fit in 0.5");
        let QuotaError::Refused(refused) = refused else {
            panic!("{}: not a budget refusal: {refused:?}", name(&store));
        };
        assert_eq!(refused.remaining, units("0.5"), "{}", name(&store));
        assert_eq!(refused.needed, units("0.6"), "{}", name(&store));
        let status = handle.status().await.unwrap();
        assert_eq!(
            status.reserved,
            Nanos::ZERO,
            "{}: a refusal holds nothing",
            name(&store)
        );
    }
}

#[actix_web::test]
async fn a_reservation_past_its_expiry_is_committed_whole_with_an_orphan_row_on_every_store() {
    for store in stores().await {
        let clock = Arc::new(ManualClock::new(now_ms()));
        let app = app_on(&store, clock.clone()).await;
        let (handle, record) = tenant(&app, "1").await;
        // On a plan: the hold at the providers' prices is 0.3 of its 0.4.
        let priced = ReservationMeta {
            cost_nanos: Some(units("0.3").get()),
            ..meta()
        };
        let held = handle
            .reserve(request(400, clock.now_ms() + 1_000), priced)
            .await
            .unwrap();
        // Time passes on the manual clock only; the actor's sweep sees it.
        clock.advance_ms(2_000);
        let committed = crate::support::wait_until(
            Duration::from_secs(5),
            "the sweep to commit the lapsed hold",
            async || {
                let committed = handle.status().await.unwrap().committed;
                crate::support::done_if(committed > Nanos::ZERO, committed)
            },
        )
        .await;
        assert_eq!(
            committed,
            units("0.4"),
            "{}: the lapsed hold is spent",
            name(&store)
        );
        // The late settle changes nothing: the orphan already paid for it.
        let reply = held.settle(units("0.1"), 10).await.unwrap();
        assert!(
            !tollgate::tenant::handle::committed(&reply),
            "{}: settled twice",
            name(&store)
        );
        let status = handle.status().await.unwrap();
        assert_eq!(status.committed, units("0.4"), "{}", name(&store));
        assert_eq!(status.reserved, Nanos::ZERO, "{}", name(&store));
        let tenant = record.id.to_string();
        let rows = app.ledger_rows_eventually(&tenant, 1).await;
        assert_eq!(rows.len(), 1, "{}: {rows:?}", name(&store));
        assert_eq!(
            rows[0].status,
            AttemptStatus::Orphaned.as_str(),
            "{}",
            name(&store)
        );
        assert_eq!(
            rows[0].charged_nanos,
            i64::try_from(units("0.4").get()).unwrap(),
            "{}",
            name(&store)
        );
        assert_eq!(
            rows[0].cost_nanos,
            Some(i64::try_from(units("0.3").get()).unwrap()),
            "{}",
            name(&store)
        );
    }
}
