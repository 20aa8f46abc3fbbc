//! Usage exported to a billing system exactly once (`[[export.sinks]]`):
//! through a receiver that drops connections, answers too late and answers
//! 500 after it recorded a batch, every exported ledger row arrives, every
//! copy of it under the same key with the same payload, so that after
//! de-duplication by key (as OpenMeter and Stripe do) each row is there once
//! and nothing else is; the sink's cursor and monthly totals equal the
//! ledger's. The same across a SIGKILL of the sending replica.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::Duration;

use sea_orm::EntityTrait;
use serde_json::{Value, json};
use toml::Table;

use tollgate::calendar::{Calendar, Period};
use tollgate::export::outbox;
use tollgate::ids::TenantId;
use tollgate::ledger::repo;

use crate::support::process::{self, GatewayProcess};
use crate::support::receiver::{Answer, FlakyReceiver, Received, form_fields};
use crate::support::{
    TestApp, TestSetup, chat_body, configured_database_url, done_if, entry, spawn_app,
    unique_tenant, wait_until,
};

const TARGET: &str = "primary/usage-120-0-30";
const SINK: &str = "billing";

fn setup() -> TestSetup {
    TestSetup::new()
        .route("metered", &[TARGET])
        .price(TARGET, "3", "1", "7")
        .tier("open", &["metered"], 10_000, 100)
        .set("export.poll_interval_ms", 50)
        .set("export.lease_ms", 1_500)
        .set("export.max_backoff_ms", 200)
}

/// Every misbehaviour, then some answers in time, over and over.
fn flaky_script() -> Vec<Answer> {
    vec![
        Answer::Ok,
        Answer::Drop,
        Answer::RecordThen500,
        Answer::Ok,
        Answer::RecordThenDelay(Duration::from_millis(600)),
        Answer::Ok,
        Answer::RecordThen500,
    ]
}

fn cloudevents_sink(url: &str) -> Table {
    entry([
        ("name", SINK.into()),
        ("kind", "cloudevents".into()),
        ("url", url.into()),
        ("timeout_ms", 300.into()),
        ("batch_rows", 4.into()),
    ])
}

fn stripe_sink(url: &str, customers: &[(String, String)]) -> Table {
    let customers: Table = customers
        .iter()
        .map(|(tenant, customer)| (tenant.clone(), customer.clone().into()))
        .collect();
    entry([
        ("name", SINK.into()),
        ("kind", "stripe".into()),
        ("url", url.into()),
        ("timeout_ms", 300.into()),
        ("event_name", "llm_charge".into()),
        ("customers", customers.into()),
    ])
}

/// One recorded event: its idempotency key, its payload, its tenant (as the
/// receiver tells it) and the charge it carries.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    key: String,
    payload: Value,
    charge: i64,
}

fn cloud_events(received: &[Received]) -> Vec<Event> {
    received
        .iter()
        .flat_map(|request| {
            assert_eq!(request.content_type, "application/cloudevents-batch+json");
            let batch: Vec<Value> = serde_json::from_slice(&request.body).unwrap();
            batch
        })
        .map(|event| {
            assert_eq!(event["specversion"], "1.0");
            Event {
                key: event["id"].as_str().unwrap().to_owned(),
                charge: event["data"]["charge_nanos"].as_i64().unwrap(),
                payload: event,
            }
        })
        .collect()
}

fn stripe_events(received: &[Received]) -> Vec<Event> {
    received
        .iter()
        .map(|request| {
            assert_eq!(request.content_type, "application/x-www-form-urlencoded");
            let fields: BTreeMap<String, String> = form_fields(&request.body).into_iter().collect();
            let key = fields["identifier"].clone();
            assert_eq!(request.header("idempotency-key"), Some(key.as_str()));
            assert_eq!(
                request.header("authorization"),
                Some("Bearer sk_test_export")
            );
            Event {
                key,
                charge: fields["payload[value]"].parse().unwrap(),
                payload: json!(fields),
            }
        })
        .collect()
}

/// The ledger rows an export carries: those with a charge or some usage.
fn exported(rows: &[entity::usage::Model]) -> Vec<&entity::usage::Model> {
    rows.iter()
        .filter(|r| r.charged_nanos != 0 || r.prompt_tokens != 0 || r.completion_tokens != 0)
        .collect()
}

/// Each key's copies are identical; the keys are exactly the rows'; each
/// copy's charge is its row's. Returns how many copies were duplicates.
fn assert_exactly_once(events: &[Event], rows: &[&entity::usage::Model]) -> usize {
    let mut by_key: BTreeMap<&str, &Event> = BTreeMap::new();
    for event in events {
        let first = by_key.entry(&event.key).or_insert(event);
        assert_eq!(*first, event, "two copies of {} differ", event.key);
    }
    let expected: BTreeMap<String, i64> = rows
        .iter()
        .map(|r| (format!("tollgate-{SINK}-{}", r.id), r.charged_nanos))
        .collect();
    let got: BTreeMap<String, i64> = by_key
        .iter()
        .map(|(key, event)| ((*key).to_owned(), event.charge))
        .collect();
    assert_eq!(got, expected, "after de-duplication by key");
    events.len() - by_key.len()
}

/// The sink's cursor and its monthly totals hold exactly the ledger's rows.
async fn assert_cursor_matches(db: &sea_orm::DatabaseConnection, rows: &[&entity::usage::Model]) {
    let calendar = Calendar::utc();
    let mut months: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for row in rows {
        let month = calendar
            .window(Period::Month, u64::try_from(row.created_at_ms).unwrap())
            .key;
        let sum = months.entry(month).or_default();
        sum.0 += 1;
        sum.1 += u64::try_from(row.charged_nanos).unwrap();
    }
    for (month, (count, nanos)) in &months {
        let totals = tollgate::export::delivered_totals(db, SINK, month)
            .await
            .unwrap();
        assert_eq!(
            (totals.rows, totals.nanos.get()),
            (*count, *nanos),
            "{month}"
        );
    }
    let sink = entity::export_sink::Entity::find_by_id(SINK.to_owned())
        .one(db)
        .await
        .unwrap()
        .unwrap();
    let all: (u64, u64) = months.values().fold((0, 0), |a, m| (a.0 + m.0, a.1 + m.1));
    assert_eq!(
        (
            u64::try_from(sink.rows).unwrap(),
            u64::try_from(sink.nanos).unwrap()
        ),
        all
    );
    let last = rows.iter().map(|r| r.id).max().unwrap();
    assert_eq!(sink.delivered_through, last);
}

async fn tenant(app: &TestApp, id: &str) -> String {
    let created = app
        .admin(
            "POST",
            "/tenants",
            Some(json!({"id": id, "name": id, "tier": "open"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.raw);
    let key = app
        .admin("POST", &format!("/tenants/{id}/keys"), Some(json!({})))
        .await;
    assert_eq!(key.status, 201, "{}", key.raw);
    key.body["key"].as_str().unwrap().to_owned()
}

/// Calls `n` times per key; every one must pass.
async fn calls(app: &TestApp, keys: &[String], n: usize) {
    for _ in 0..n {
        for key in keys {
            let reply = app.chat(key, &chat_body("metered")).await;
            assert_eq!(reply.status, 200, "{}", reply.raw);
        }
    }
}

/// The replica holding the sink's lease, if any.
async fn sink_owner(db: &sea_orm::DatabaseConnection) -> Option<String> {
    entity::export_sink::Entity::find_by_id(SINK.to_owned())
        .one(db)
        .await
        .unwrap()
        .and_then(|row| row.owner)
}

async fn wait_drained(db: &sea_orm::DatabaseConnection, sendable: Option<&[String]>) {
    wait_until(Duration::from_mins(1), "the outbox to drain", async || {
        let pending = outbox::pending(db, SINK, sendable).await.unwrap();
        done_if(pending.rows == pending.waiting, pending)
    })
    .await;
}

#[actix_web::test]
async fn cloudevents_arrive_exactly_once_through_a_flaky_receiver() {
    let receiver = FlakyReceiver::start(flaky_script()).await;
    let app = spawn_app(setup().push("export.sinks", cloudevents_sink(&receiver.url))).await;
    let tenants = [unique_tenant("ce"), unique_tenant("ce")];
    let mut keys = Vec::new();
    for id in &tenants {
        keys.push(tenant(&app, id).await);
    }
    let end_user = app
        .chat_with(
            &keys[0],
            &chat_body("metered"),
            &[("x-tollgate-end-user", "user-7")],
        )
        .await;
    assert_eq!(end_user.status, 200, "{}", end_user.raw);
    calls(&app, &keys, 9).await;
    let mut rows = Vec::new();
    for id in &tenants {
        rows.extend(app.ledger_rows(id).await);
    }
    let db = app.gateway.directory.db();
    wait_drained(db, None).await;
    let rows = exported(&rows);
    assert_eq!(rows.len(), 19);
    let events = cloud_events(&receiver.recorded());
    let duplicates = assert_exactly_once(&events, &rows);
    assert!(duplicates > 0, "the receiver made the sender repeat itself");
    // The subject is the end user where the call named one, else the tenant.
    let subjects: BTreeSet<&str> = events
        .iter()
        .map(|e| e.payload["subject"].as_str().unwrap())
        .collect();
    let expected: BTreeSet<&str> = ["user-7", &tenants[0], &tenants[1]].into_iter().collect();
    assert_eq!(subjects, expected);
    assert_cursor_matches(db, &rows).await;
    assert_month_checks_out(&app, &rows).await;
}

/// The month's check puts the sink's delivered amount beside the ledger's
/// and the invoices': they agree once the outbox is drained.
async fn assert_month_checks_out(app: &crate::support::TestApp, rows: &[&entity::usage::Model]) {
    let months: BTreeSet<String> = rows.iter().map(|row| row.period.clone()).collect();
    for month in months {
        let checked = app
            .admin("GET", &format!("/invoices/check?month={month}"), None)
            .await;
        assert_eq!(checked.status, 200, "{}", checked.raw);
        assert_eq!(checked.body["agrees"], true, "{}", checked.raw);
        let names: Vec<&str> = checked.body["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&format!("export sink `{SINK}`").as_str()),
            "{names:?}"
        );
    }
}

#[actix_web::test]
async fn stripe_meter_events_arrive_exactly_once_and_unmapped_tenants_wait() {
    let receiver = FlakyReceiver::start(flaky_script()).await;
    let (mapped, unmapped) = (unique_tenant("st"), unique_tenant("st"));
    let customers = vec![(mapped.clone(), "cus_mapped".to_owned())];
    let app = spawn_app(
        setup()
            .env("STRIPE_TEST_KEY", "sk_test_export")
            .push("export.sinks", {
                let mut sink = stripe_sink(&receiver.url, &customers);
                sink.insert("auth_env".into(), "STRIPE_TEST_KEY".into());
                sink
            }),
    )
    .await;
    let keys = [tenant(&app, &mapped).await, tenant(&app, &unmapped).await];
    calls(&app, &keys, 8).await;
    let rows = app.ledger_rows(&mapped).await;
    let waiting = app.ledger_rows(&unmapped).await;
    let db = app.gateway.directory.db();
    let sendable = [mapped.clone()];
    wait_drained(db, Some(&sendable)).await;
    let rows = exported(&rows);
    assert_eq!(rows.len(), 8);
    let events = stripe_events(&receiver.recorded());
    for event in &events {
        assert_eq!(event.payload["payload[stripe_customer_id]"], "cus_mapped");
        assert_eq!(event.payload["event_name"], "llm_charge");
    }
    let duplicates = assert_exactly_once(&events, &rows);
    assert!(duplicates > 0, "the receiver made the sender repeat itself");
    assert_cursor_matches(db, &rows).await;
    // The unmapped tenant's rows are kept, counted as waiting, not dropped.
    let pending = outbox::pending(db, SINK, Some(&sendable)).await.unwrap();
    assert_eq!(
        pending.waiting,
        u64::try_from(exported(&waiting).len()).unwrap()
    );
    let status = app.admin("GET", "/export/sinks", None).await;
    assert_eq!(status.status, 200, "{}", status.raw);
    assert_eq!(
        status.body["sinks"][0]["pending"]["waiting"],
        json!(pending.waiting)
    );
    assert_eq!(status.body["sinks"][0]["delivered_rows"], json!(8));
}

/// The acknowledgement is fenced by the lease: a replica whose lease lapsed
/// and was taken over books nothing of what it sent (the new holder sends
/// those rows again under the same keys and books them), and a row is
/// counted once however often it is acknowledged. A replayed ledger batch
/// queues no row twice.
#[actix_web::test]
async fn a_replica_that_lost_the_sink_books_nothing_and_a_row_counts_once() {
    use tollgate::export::lease;
    use tollgate::money::Nanos;
    let app = spawn_app(setup()).await;
    let db = app.gateway.directory.db();
    let calendar = Calendar::utc();
    let fenced = unique_tenant("fence");
    let now = crate::support::now_ms();
    let rows: Vec<_> = (0..3)
        .map(|i| {
            let charged = Nanos::from_db(1_000 + i);
            crate::support::settled_row(&fenced, "k", charged, charged, now)
        })
        .collect();
    let sinks = ["manual".to_owned()];
    for _ in 0..2 {
        tollgate::ledger::repo::insert_exported_batch(db, &rows, &calendar, &sinks)
            .await
            .unwrap();
    }
    let queued = outbox::next_rows(db, "manual", None, 10).await.unwrap();
    assert_eq!(queued.len(), 3, "{queued:?}");
    // This gateway has no sink: its own calls queue nothing.
    let key = tenant(&app, &unique_tenant("nosink")).await;
    calls(&app, &[key], 2).await;
    app.flush_ledger().await;
    let outbox_rows = entity::export_outbox::Entity::find().all(db).await.unwrap();
    assert_eq!(outbox_rows.len(), 3, "only the rows queued by hand");
    let ids: Vec<i64> = queued.iter().map(|r| r.id).collect();

    lease::ensure(db, "manual").await.unwrap();
    assert!(
        lease::claim(db, "manual", "a", now, now + 1_000)
            .await
            .unwrap()
    );
    assert!(
        !lease::claim(db, "manual", "b", now + 500, now + 1_500)
            .await
            .unwrap()
    );
    // `a` stalls past its lease; `b` takes the sink over.
    assert!(
        lease::claim(db, "manual", "b", now + 2_000, now + 3_000)
            .await
            .unwrap()
    );
    let late = outbox::acknowledge(db, "manual", "a", &ids, &calendar, now, now + 2_500).await;
    assert_eq!(
        late.unwrap(),
        None,
        "a replica without the lease books nothing"
    );
    let booked = outbox::acknowledge(db, "manual", "b", &ids, &calendar, now, now + 2_500)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((booked.rows, booked.nanos.get()), (3, 3_003));
    let again = outbox::acknowledge(db, "manual", "b", &ids, &calendar, now, now + 2_600)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.rows, 0, "a row acknowledged twice is counted once");
    let month = calendar.window(Period::Month, now).key;
    let totals = tollgate::export::delivered_totals(db, "manual", &month)
        .await
        .unwrap();
    assert_eq!((totals.rows, totals.nanos.get()), (3, 3_003));
}

/// Two `tollgate serve` processes on one database: the one sending to the
/// sink is killed with SIGKILL while a slow receiver takes its batches; the
/// other takes the sink over once the lease lapses and delivers the rest,
/// and each row is still there exactly once with the cursor at the ledger's.
#[actix_web::test]
async fn the_sink_survives_a_sigkill_of_the_sending_replica() {
    let receiver = FlakyReceiver::start(vec![
        Answer::RecordThenDelay(Duration::from_millis(150)),
        Answer::RecordThenDelay(Duration::from_millis(150)),
        Answer::RecordThen500,
    ])
    .await;
    let fake = fake_upstream::start(
        fake_upstream::FakeConfig::default(),
        ([127, 0, 0, 1], 0).into(),
        1,
    )
    .unwrap();
    let mut sink = cloudevents_sink(&receiver.url);
    sink.insert("timeout_ms".into(), 1_000.into());
    sink.insert("batch_rows".into(), 2.into());
    let setup = setup().push("export.sinks", sink);
    let env = setup.env_vars().clone();
    let (_dir, [(doomed_config, doomed_addr), (live_config, live_addr)]) =
        process::two_replicas(&setup, &fake.base_url());
    let db = sea_orm::Database::connect(configured_database_url(&doomed_config))
        .await
        .unwrap();
    let doomed = GatewayProcess::serve(&doomed_config, &env, doomed_addr, Stdio::null()).await;
    let sender = wait_until(
        Duration::from_secs(10),
        "a replica to hold the sink",
        async || {
            let owner = sink_owner(&db).await;
            done_if(owner.is_some(), owner)
        },
    )
    .await
    .unwrap();
    let _live = GatewayProcess::serve(&live_config, &env, live_addr, Stdio::null()).await;
    let tenant = unique_tenant("kill");
    let key = process::tenant_with_key(&live_config, &env, &tenant, "open");
    let client = awc::Client::default();
    for _ in 0..24 {
        let status = client
            .post(format!("http://{live_addr}/v1/chat/completions"))
            .insert_header(("authorization", format!("Bearer {key}")))
            .send_json(&chat_body("metered"))
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
    }
    let ledger = TenantId::new(tenant.as_str());
    let rows = wait_until(Duration::from_secs(10), "24 ledger rows", async || {
        let rows = repo::tenant_rows(&db, &ledger).await.unwrap();
        done_if(rows.len() == 24, rows)
    })
    .await;
    wait_until(
        Duration::from_secs(30),
        "the doomed replica mid-delivery",
        async || {
            let recorded = cloud_events(&receiver.recorded()).len();
            done_if(recorded >= 6, recorded)
        },
    )
    .await;
    doomed.kill_9().await;
    let keys_before: BTreeSet<String> = cloud_events(&receiver.recorded())
        .into_iter()
        .map(|e| e.key)
        .collect();
    wait_drained(&db, None).await;
    let owner = sink_owner(&db).await;
    assert!(owner.is_some() && owner != Some(sender), "{owner:?}");
    let rows = exported(&rows);
    assert_eq!(rows.len(), 24);
    let events = cloud_events(&receiver.recorded());
    assert!(
        keys_before.len() < 24,
        "the kill came before the last batch"
    );
    assert_exactly_once(&events, &rows);
    assert_cursor_matches(&db, &rows).await;
    let status: Value =
        serde_json::from_str(&process::cli(&live_config, &env, &["export", "status"])).unwrap();
    let sink = &status["sinks"][0];
    assert_eq!(sink["name"], SINK);
    assert_eq!(sink["owner"].as_str(), owner.as_deref());
    assert_eq!(sink["delivered_rows"], 24);
    assert_eq!(sink["pending"]["rows"], 0);
}

#[actix_web::test]
async fn a_replica_that_stops_hands_its_sink_over_at_once() {
    let receiver = FlakyReceiver::start(vec![Answer::Ok]).await;
    let fake = fake_upstream::start(
        fake_upstream::FakeConfig::default(),
        ([127, 0, 0, 1], 0).into(),
        1,
    )
    .unwrap();
    // A lease far longer than the test waits: only a hand-over can pass it on.
    let setup = setup()
        .push("export.sinks", cloudevents_sink(&receiver.url))
        .set("export.lease_ms", 120_000);
    let env = setup.env_vars().clone();
    let (_dir, [(first_config, first_addr), (second_config, second_addr)]) =
        process::two_replicas(&setup, &fake.base_url());
    let db = sea_orm::Database::connect(configured_database_url(&first_config))
        .await
        .unwrap();
    let mut first = GatewayProcess::serve(&first_config, &env, first_addr, Stdio::null()).await;
    let holder = wait_until(
        Duration::from_secs(10),
        "the first replica to hold the sink",
        async || {
            let holder = sink_owner(&db).await;
            done_if(holder.is_some(), holder)
        },
    )
    .await;
    let _second = GatewayProcess::serve(&second_config, &env, second_addr, Stdio::null()).await;
    first.terminate();
    assert!(first.exit_status().await.success());
    let taken = wait_until(
        Duration::from_secs(15),
        "the second replica to take the sink",
        async || {
            let now = sink_owner(&db).await;
            done_if(now.is_some() && now != holder, now)
        },
    )
    .await;
    assert_ne!(taken, holder);
}
