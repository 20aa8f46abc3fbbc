//! Usage exported to a billing system exactly once (`[[export.sinks]]`):
//! through a receiver that drops connections, answers too late and answers
//! 500 after it recorded a batch, every exported ledger row arrives, every
//! copy of it under the same key with the same payload, so that after
//! de-duplication by key (as OpenMeter and Stripe do) each row is there once
//! and nothing else is; the sink's cursor and monthly totals equal the
//! ledger's. The same across a SIGKILL of the sending replica.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use sea_orm::EntityTrait;
use serde_json::{Value, json};
use toml::Table;

use tollgate::calendar::{Calendar, Period};
use tollgate::export::outbox;

use crate::support::receiver::{Answer, FlakyReceiver, Received, form_fields};
use crate::support::{
    TestApp, TestSetup, chat_body, done_if, entry, spawn_app, unique_tenant, wait_until,
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
