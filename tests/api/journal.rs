//! The ledger journal: whatever happens to the gateway process or its
//! database, every upstream call ends up as exactly one ledger row.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::rc::Rc;
use std::time::Duration;

use serde_json::{Value, json};

use fake_upstream::{self, FakeConfig};
use tollgate::config::FsyncMode;
use tollgate::ids::{EventId, KeyId, RequestId, TenantId};
use tollgate::journal::{Journal, JournalOptions};
use tollgate::ledger::{AttemptStatus, Journaled, UsageEvent, UsageKind, repo};
use tollgate::money::Nanos;
use tollgate::pricing::Usage;

use crate::support::postgres::PrivateServer;
use crate::support::process::{GatewayProcess, free_port, tenant_with_key};
use crate::support::{
    ADMIN_TOKEN, Backend, TestSetup, chat_body, configured_database_url, metric_value, spawn_app,
    unique_tenant, wait_until, write_config,
};

fn options(dir: &std::path::Path, segment_bytes: u64) -> JournalOptions {
    JournalOptions {
        dir: dir.join("journal"),
        fsync: FsyncMode::Batch,
        group_commit_ms: 1,
        fsync_interval_ms: 100,
        segment_bytes,
    }
}

fn event(tenant: &str, request: &str, status: AttemptStatus, charged: u64) -> UsageEvent {
    UsageEvent {
        event_id: EventId::generate(),
        request_id: RequestId::new(request),
        client_request_id: None,
        trace_id: None,
        tenant: TenantId::new(tenant),
        key: KeyId::new("k"),
        feature: "unknown".to_owned(),
        end_user: None,
        session: None,
        api: tollgate::ledger::Api::Chat,
        route: "fast".to_owned(),
        provider: "primary".to_owned(),
        model: "ok".to_owned(),
        attempt: 1,
        status,
        upstream_status: Some(200),
        usage: Usage {
            prompt_tokens: 10,
            completion_tokens: 10,
            ..Usage::default()
        },
        usage_kind: UsageKind::Reported,
        reserved: Nanos::new(5_000),
        charged: Nanos::new(charged),
        cost: None,
        plan: None,
        price_version: "v1".to_owned(),
        latency_ms: 3,
        ttft_ms: None,
        error: None,
        cache: None,
        created_at_ms: crate::support::now_ms(),
    }
}

/// The row replay writes if `attempt` never settles: the pipeline's `reserve` record.
fn orphan_of(attempt: &UsageEvent) -> UsageEvent {
    UsageEvent {
        status: AttemptStatus::Orphaned,
        usage: Usage::default(),
        usage_kind: UsageKind::None,
        charged: attempt.reserved,
        cost: None,
        plan: None,
        error: Some("in flight".to_owned()),
        ..attempt.clone()
    }
}

async fn rows(db: &sea_orm::DatabaseConnection, tenant: &str) -> Vec<entity::usage::Model> {
    repo::tenant_rows(db, &TenantId::new(tenant)).await.unwrap()
}

fn assert_unique_event_ids(rows: &[entity::usage::Model]) {
    let ids: HashSet<&str> = rows.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(ids.len(), rows.len(), "an event id appears twice");
}

#[actix_web::test]
async fn a_batch_replayed_after_its_commit_but_before_its_checkpoint_changes_no_row_count() {
    let dir = tempfile::tempdir().unwrap();
    let db = tollgate::storage::connect_and_migrate(
        &Backend::selected().fresh_database_url(dir.path()),
        2,
    )
    .await
    .unwrap();
    let tenant = unique_tenant("replay");
    let options = options(dir.path(), 64 * 1024 * 1024);

    // A first run: 20 attempts reserved and settled, one still in flight.
    let (journal, recovered) = Journal::open(&options).unwrap();
    assert_eq!(recovered.events.len(), 0);
    let mut delivered = Vec::new();
    for i in 0..20 {
        let settled = event(&tenant, &format!("r{i}"), AttemptStatus::Ok, 1_000 + i);
        journal.append_reserve(&orphan_of(&settled), 0).await;
        journal.append_settle(settled, |event, seq| {
            delivered.push(Journaled { seq, event });
        });
    }
    let in_flight = event(&tenant, "r-in-flight", AttemptStatus::Ok, 0);
    journal.append_reserve(&orphan_of(&in_flight), 0).await;
    assert_eq!(journal.open_reserves(), 1);
    // The flusher commits the batch and dies before its checkpoint.
    repo::insert_batch(&db, &delivered, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    drop(journal);
    assert_eq!(rows(&db, &tenant).await.len(), 20);

    // The restart replays the batch the database already holds, and the orphan.
    let (journal, recovered) = Journal::open(&options).unwrap();
    assert_eq!((recovered.settles, recovered.orphans), (20, 1));
    repo::insert_batch(&db, &recovered.events, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    let after = rows(&db, &tenant).await;
    assert_eq!(after.len(), 21);
    assert_unique_event_ids(&after);
    let orphan = after.iter().find(|r| r.status == "orphaned").unwrap();
    assert_eq!(
        (orphan.request_id.as_str(), orphan.charged_nanos),
        ("r-in-flight", 5_000)
    );
    assert_eq!(
        after.iter().map(|r| r.charged_nanos).sum::<i64>(),
        (0..20).map(|i| 1_000 + i).sum::<i64>() + 5_000
    );

    // A crash during that replay, before its segments were retired: the same rows again, no change.
    drop(journal);
    let (_journal, again) = Journal::open(&options).unwrap();
    assert_eq!(again.events.len(), 21);
    repo::insert_batch(&db, &again.events, &tollgate::calendar::Calendar::utc())
        .await
        .unwrap();
    assert_eq!(rows(&db, &tenant).await.len(), 21);
}

#[actix_web::test]
async fn checkpoints_delete_old_segments_but_carry_open_reserves_forward() {
    let dir = tempfile::tempdir().unwrap();
    let options = options(dir.path(), 4096);
    let (journal, _) = Journal::open(&options).unwrap();
    let long = event("t", "long-stream", AttemptStatus::Ok, 0);
    journal.append_reserve(&orphan_of(&long), 0).await;
    let mut last_seq = 0;
    for i in 0..200 {
        let settled = event("t", &format!("r{i}"), AttemptStatus::Ok, 1);
        journal.append_reserve(&orphan_of(&settled), 0).await;
        journal.append_settle(settled, |_, seq| last_seq = seq);
    }
    let before = journal.segments();
    assert!(before > 3, "{before} segments: the test needs rotations");
    journal.checkpoint(last_seq);
    assert_eq!(journal.segments(), 1);
    let on_disk = std::fs::read_dir(&options.dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("seg".as_ref()))
        .count();
    assert_eq!(on_disk, 1);
    drop(journal);

    // Everything settled is behind the checkpoint; the long stream is still open.
    let (_journal, recovered) = Journal::open(&options).unwrap();
    assert_eq!((recovered.settles, recovered.orphans), (0, 1));
    assert_eq!(recovered.events[0].request_id.as_str(), "long-stream");
    // A request's orphan row has one id whoever writes it (see `EventId::orphan_of`).
    assert_eq!(
        recovered.events[0].event_id,
        tollgate::ids::EventId::orphan_of(&long.request_id)
    );
}

#[actix_web::test]
async fn many_open_reserves_do_not_make_every_append_rotate() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(&options(dir.path(), 4096)).unwrap();
    // Twenty long streams in flight: more than a segment's worth of reserves.
    for i in 0..20 {
        let stream = event("t", &format!("stream-{i}"), AttemptStatus::Ok, 0);
        journal.append_reserve(&orphan_of(&stream), 0).await;
    }
    let after_reserves = journal.segments();
    for i in 0..3 {
        journal.append_settle(
            event("t", &format!("r{i}"), AttemptStatus::Ok, 1),
            |_, _| {},
        );
    }
    assert_eq!(journal.segments(), after_reserves);
    assert_eq!(journal.open_reserves(), 20);
}

#[actix_web::test]
async fn a_torn_tail_is_ignored_and_an_orphan_settled_in_process_is_not_replayed_twice() {
    let dir = tempfile::tempdir().unwrap();
    let options = options(dir.path(), 64 * 1024 * 1024);
    let (journal, _) = Journal::open(&options).unwrap();
    // The tenant actor committed this reservation as orphaned while its attempt hung.
    let hung = event("t", "hung", AttemptStatus::Ok, 0);
    journal.append_reserve(&orphan_of(&hung), 0).await;
    let expired = UsageEvent {
        event_id: EventId::generate(),
        ..orphan_of(&hung)
    };
    journal.append_settle(expired, |_, _| {});
    for i in 0..3 {
        journal.append_settle(
            event("t", &format!("r{i}"), AttemptStatus::Ok, 1),
            |_, _| {},
        );
    }
    drop(journal);
    // A crash in the middle of the last write.
    let segment = std::fs::read_dir(&options.dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension() == Some("seg".as_ref()))
        .unwrap();
    // Segments are zero-filled ahead of the records: the last record ends at
    // the last non-zero byte, and a torn write leaves zeros where it stopped.
    let mut bytes = std::fs::read(&segment).unwrap();
    let end = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
    bytes[end - 7..end].fill(0);
    std::fs::write(&segment, &bytes).unwrap();

    let (_journal, recovered) = Journal::open(&options).unwrap();
    assert!(recovered.torn_bytes > 0);
    // The in-process orphan and r0, r1; r2 was torn; no second orphan for `hung`.
    assert_eq!((recovered.settles, recovered.orphans), (3, 0));
    let requests: Vec<&str> = recovered
        .events
        .iter()
        .map(|e| e.request_id.as_str())
        .collect();
    assert_eq!(requests, ["hung", "r0", "r1"]);
}

/// A W3C traceparent whose trace id the ledger keeps and the fake upstream sees.
fn traceparent(n: u64) -> (String, String) {
    let trace = format!("{:032x}", 0xabc0_0000_u64 + n);
    (format!("00-{trace}-{:016x}-01", n + 1), trace)
}

#[actix_web::test]
async fn kill_9_under_load_leaves_exactly_one_row_per_upstream_call() {
    let fake = fake_upstream::start(FakeConfig::default(), ([127, 0, 0, 1], 0).into(), 2).unwrap();
    let addr = free_port();
    let setup = TestSetup::new()
        .route("fast", &["primary/usage-10-0-10+delay-20ms"])
        .route("long", &["primary/chunks-40+chunk-delay-50ms"])
        .tier("load", &["fast", "long"], 100_000, 100)
        .listen(addr);
    let env = setup.env_vars().clone();
    let (dir, config) = write_config(&setup, &fake.base_url());
    let tenant = unique_tenant("kill");
    let key = tenant_with_key(&config, &env, &tenant, "load");
    let log = std::fs::File::create(dir.path().join("gateway-1.log")).unwrap();
    let gateway = GatewayProcess::serve(&config, &env, addr, Stdio::from(log)).await;

    // Eight callers, each alternating short answers and two-second streams.
    let completed: Rc<std::cell::RefCell<Vec<String>>> = Rc::default();
    let mut callers = Vec::new();
    for caller in 0..8u64 {
        let key = key.clone();
        let completed = completed.clone();
        callers.push(actix_rt::spawn(async move {
            let client = awc::Client::builder()
                .timeout(Duration::from_secs(30))
                .finish();
            for i in 0.. {
                let (header, trace) = traceparent(caller * 10_000 + i);
                let body = if (caller + i) % 2 == 0 {
                    chat_body("fast")
                } else {
                    json!({"model": "long", "stream": true, "messages": [{"role": "user", "content": "Hi"}]})
                };
                let sent = client
                    .post(format!("http://{addr}/v1/chat/completions"))
                    .insert_header(("authorization", format!("Bearer {key}")))
                    .insert_header(("traceparent", header))
                    .send_json(&body)
                    .await;
                let Ok(mut response) = sent else { return };
                let status = response.status();
                let Ok(bytes) = response.body().limit(1 << 20).await else {
                    return;
                };
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
                let whole = body["stream"] != true || bytes.ends_with(b"data: [DONE]\n\n");
                if whole {
                    completed.borrow_mut().push(trace);
                }
            }
        }));
    }
    // Kill while streams are in flight and plenty of rows are settled.
    wait_until(
        Duration::from_secs(12),
        "40 calls upstream, 12 of them streams",
        async || {
            let seen = (fake.stats.requests(), fake.stats.streams_started());
            crate::support::done_if(seen.0 >= 40 && seen.1 >= 12, seen)
        },
    )
    .await;
    gateway.kill_9().await;
    for caller in callers {
        caller.await.unwrap();
    }
    let upstream_calls = fake.stats.requests();
    let upstream_traces: Vec<String> = fake
        .stats
        .captured()
        .iter()
        .map(|c| {
            c.header("traceparent")
                .unwrap()
                .split('-')
                .nth(1)
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(upstream_traces.len() as u64, upstream_calls);

    // Restart on the same journal and database: replay runs before it is ready.
    let log = std::fs::File::create(dir.path().join("gateway-2.log")).unwrap();
    let mut gateway = GatewayProcess::serve(&config, &env, addr, Stdio::from(log)).await;
    let db = tollgate::storage::connect(&configured_database_url(&config), 1)
        .await
        .unwrap();
    let rows = rows(&db, &tenant).await;
    assert_unique_event_ids(&rows);
    let mut by_trace: HashMap<&str, Vec<&entity::usage::Model>> = HashMap::new();
    for row in &rows {
        by_trace
            .entry(row.trace_id.as_deref().unwrap())
            .or_default()
            .push(row);
    }
    for trace in &upstream_traces {
        let found = by_trace.get(trace.as_str()).map_or(0, Vec::len);
        assert_eq!(found, 1, "upstream call {trace} has {found} ledger rows");
    }
    // A row no upstream call matches was reserved and never sent: it can only be an orphan.
    let upstream: HashSet<&str> = upstream_traces.iter().map(String::as_str).collect();
    for row in &rows {
        let trace = row.trace_id.as_deref().unwrap();
        assert!(
            upstream.contains(trace) || row.status == "orphaned",
            "{trace}: a {} row without an upstream call",
            row.status
        );
    }
    for trace in completed.borrow().iter() {
        let row = by_trace[trace.as_str()][0];
        assert_eq!(row.status, "ok", "{trace} was answered in full");
    }
    let orphaned = rows.iter().filter(|r| r.status == "orphaned").count();
    let settled = rows.iter().filter(|r| r.status == "ok").count();
    assert!(orphaned >= 1, "no call was in flight at the kill");
    assert!(settled >= completed.borrow().len() && settled >= 20);
    for row in rows.iter().filter(|r| r.status == "orphaned") {
        assert_eq!(row.charged_nanos, row.reserved_nanos);
        assert!(row.charged_nanos > 0);
        assert!(row.error.as_deref().unwrap().contains("reconcile"));
    }

    // Those orphans are the restart's replay, nothing else.
    let metrics = awc::Client::default()
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .body()
        .await
        .unwrap();
    let metrics = String::from_utf8_lossy(&metrics);
    assert_eq!(
        metric_value(
            &metrics,
            "tollgate_journal_replayed_events_total{kind=\"orphan\"}"
        ),
        orphaned as u64
    );

    // The ledger checkpointed its committed batches: only rows past the last
    // checkpoint were replayed, not every settled one.
    let replayed_settles = metric_value(
        &metrics,
        "tollgate_journal_replayed_events_total{kind=\"settle\"}",
    );
    assert!(
        replayed_settles < settled as u64,
        "{replayed_settles} of {settled}"
    );

    // The restarted gateway's committed spend is the ledger's sum.
    let budget: Value = awc::Client::default()
        .get(format!("http://{addr}/admin/v1/tenants/{tenant}/budget"))
        .insert_header(("authorization", format!("Bearer {ADMIN_TOKEN}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let committed = Nanos::parse_decimal(budget["committed"].as_str().unwrap()).unwrap();
    let ledger_sum: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert_eq!(committed.to_db(), ledger_sum);

    gateway.terminate();
    assert_eq!(gateway.exit_status().await.code(), Some(0));
}

#[actix_web::test]
async fn sigterm_lets_long_streams_finish_writes_their_rows_and_exits_0() {
    let fake = fake_upstream::start(FakeConfig::default(), ([127, 0, 0, 1], 0).into(), 1).unwrap();
    let addr = free_port();
    let setup = TestSetup::new()
        .route("long", &["primary/chunks-30+chunk-delay-100ms"])
        .tier("free", &["long"], 1000, 100)
        .listen(addr);
    let env = setup.env_vars().clone();
    let (_dir, config) = write_config(&setup, &fake.base_url());
    let tenant = unique_tenant("term");
    let key = tenant_with_key(&config, &env, &tenant, "free");
    let mut gateway = GatewayProcess::serve(&config, &env, addr, Stdio::null()).await;

    let mut streams = Vec::new();
    for _ in 0..3 {
        let key = key.clone();
        streams.push(actix_rt::spawn(async move {
            let client = awc::Client::builder()
                .timeout(Duration::from_secs(30))
                .finish();
            let mut response = client
                .post(format!("http://{addr}/v1/chat/completions"))
                .insert_header(("authorization", format!("Bearer {key}")))
                .send_json(&json!({"model": "long", "stream": true, "messages": [{"role": "user", "content": "Hi"}]}))
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.body().limit(1 << 20).await.unwrap())
        }));
    }
    wait_until(Duration::from_secs(5), "3 streams upstream", async || {
        let streams = fake.stats.streams_started();
        crate::support::done_if(streams == 3, streams)
    })
    .await;
    gateway.terminate();

    for stream in streams {
        let (status, body) = stream.await.unwrap();
        assert_eq!(status, 200);
        let text = String::from_utf8_lossy(&body);
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        // Thirty content chunks after the role chunk's empty content.
        let contents = text.matches("\"content\":").count();
        let empty = text.matches("\"content\":\"\"").count();
        assert_eq!((contents, empty), (31, 1), "{text}");
    }
    assert_eq!(gateway.exit_status().await.code(), Some(0));
    assert_eq!(fake.stats.streams_completed(), 3);

    let db = tollgate::storage::connect(&configured_database_url(&config), 1)
        .await
        .unwrap();
    let rows = rows(&db, &tenant).await;
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert_eq!(row.status, "ok");
        assert!(row.charged_nanos > 0);
    }
}

/// Runs `f` off the test's runtime thread (starting and stopping PostgreSQL blocks).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    actix_web::rt::task::spawn_blocking(f).await.unwrap()
}

async fn readyz(app: &crate::support::TestApp) -> (u16, Value) {
    let reply = app.get("/readyz", "").await;
    (reply.status, reply.body)
}

/// The directory sync re-reads the keys of a tenant changed since the last
/// sync (a new one too) on their next use: one request after a sync has run
/// leaves the key cached, so the outage below tests the ledger, not key lookup.
async fn key_cached_across_a_sync(app: &crate::support::TestApp, key: &str) {
    // A pause on the real clock: the sync runs every 100 ms and shows no sign
    // of having run, so four intervals pass.
    crate::support::let_real_time_pass(Duration::from_millis(400)).await;
    assert_eq!(app.chat(key, &chat_body("fast")).await.status, 200);
}

#[actix_web::test]
async fn a_database_outage_fills_the_backlog_then_refuses_then_backfills_every_row_once() {
    let mut pg = blocking(PrivateServer::start).await;
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-10-0-10"])
            .tier("free", &["fast"], 100_000, 100)
            .env("TOLLGATE_DATABASE_URL", &pg.url())
            .set("ledger.max_backlog_events", 8),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    key_cached_across_a_sync(&app, &key).await;
    for _ in 0..2 {
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    }
    assert_eq!(app.ledger_rows(&tenant).await.len(), 3);

    let pg = {
        blocking(move || {
            pg.stop();
            pg
        })
        .await
    };
    // The journal buffers: the gateway stays in the load balancer's pool.
    let (status, body) = readyz(&app).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("degraded")),
        "{body}"
    );
    assert_eq!(body["database"], "unreachable");
    // Quota decisions never wait on the ledger's database: traffic flows, streams too.
    for i in 0..8 {
        let reply = if i % 4 == 3 {
            let body = json!({"model": "fast", "stream": true, "messages": [{"role": "user", "content": "Hi"}]});
            app.chat(&key, &body).await
        } else {
            app.chat(&key, &chat_body("fast")).await
        };
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }
    wait_until(
        Duration::from_secs(10),
        "8 events in the backlog",
        async || {
            let backlog = app.gateway.ledger.backlog();
            crate::support::done_if(backlog == 8, backlog)
        },
    )
    .await;
    let (status, body) = readyz(&app).await;
    assert_eq!(
        (status, &body["status"]),
        (503, &json!("unavailable")),
        "{body}"
    );
    assert_eq!(body["ledger"]["backlog_events"], 8);
    assert_eq!(body["ledger"]["backlog_full"], true);

    // The bound is reached: new paid requests get 503 with Retry-After, and no row.
    let refused = app.chat(&key, &chat_body("fast")).await;
    assert_eq!(refused.status, 503, "{}", refused.raw);
    assert_eq!(refused.error_code(), "overloaded");
    assert_eq!(refused.header("retry-after"), Some("1"));
    let metrics = app.get("/metrics", "").await.raw;
    // Metrics are per process and tests share it: at least this test's own.
    assert!(
        metric_value(
            &metrics,
            "tollgate_ledger_backlog_full_total{action=\"refused\"}"
        ) >= 1
    );
    // The backlog can fill before the first write attempt has timed out.
    wait_until(
        Duration::from_secs(30),
        "a failed ledger write",
        async || {
            let errors = metric_value(
                &app.gateway.metrics.render(),
                "tollgate_ledger_write_errors_total",
            );
            crate::support::done_if(errors >= 1, errors)
        },
    )
    .await;

    let mut pg = pg;
    let pg = blocking(move || {
        pg.restart();
        pg
    })
    .await;
    wait_until(Duration::from_mins(1), "the backfill", async || {
        let backlog = app.gateway.ledger.backlog();
        crate::support::done_if(backlog == 0, backlog)
    })
    .await;
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 11);
    assert_unique_event_ids(&rows);
    assert!(rows.iter().all(|r| r.status == "ok"));
    assert_eq!(readyz(&app).await.1["ledger"]["backlog_full"], false);
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    let committed =
        Nanos::parse_decimal(app.budget(&tenant).await["committed"].as_str().unwrap()).unwrap();
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 12);
    assert_eq!(
        committed.to_db(),
        rows.iter().map(|r| r.charged_nanos).sum::<i64>()
    );
    drop(app);
    blocking(move || drop(pg)).await;
}

#[actix_web::test]
async fn on_backlog_full_continue_serves_on_and_keeps_rows_past_the_bound_in_the_journal() {
    let mut pg = blocking(PrivateServer::start).await;
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-10-0-10"])
            .tier("free", &["fast"], 100_000, 100)
            .env("TOLLGATE_DATABASE_URL", &pg.url())
            .set("ledger.max_backlog_events", 2)
            .set("ledger.on_backlog_full", "continue"),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    key_cached_across_a_sync(&app, &key).await;
    assert_eq!(app.ledger_rows(&tenant).await.len(), 1);
    let pg = blocking(move || {
        pg.stop();
        pg
    })
    .await;
    for _ in 0..5 {
        let reply = app.chat(&key, &chat_body("fast")).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }
    app.settled().await;
    assert_eq!(app.gateway.ledger.backlog(), 5);
    let (status, body) = readyz(&app).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("degraded")),
        "{body}"
    );
    assert_eq!(body["ledger"]["backlog_full"], true);
    // Past the bound the rows are no longer held in memory, only in the journal.
    assert_eq!(body["ledger"]["journal_only"], true);
    let metrics = app.get("/metrics", "").await.raw;
    assert!(
        metric_value(
            &metrics,
            "tollgate_ledger_backlog_full_total{action=\"continued\"}"
        ) >= 3
    );
    let mut pg = pg;
    let pg = blocking(move || {
        pg.restart();
        pg
    })
    .await;
    wait_until(Duration::from_mins(1), "the backfill", async || {
        let backlog = app.gateway.ledger.backlog();
        crate::support::done_if(backlog == 0, backlog)
    })
    .await;
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 6);
    assert_unique_event_ids(&rows);
    assert!(!app.gateway.ledger.journal_only());
    // Rows recorded after the catch-up take the usual path.
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    assert_eq!(app.ledger_rows(&tenant).await.len(), 7);
    drop(app);
    blocking(move || drop(pg)).await;
}

#[actix_web::test]
async fn a_caller_that_leaves_mid_call_still_leaves_one_row_for_the_upstream_call() {
    let app = spawn_app(
        TestSetup::new()
            .route("slow", &["primary/usage-10-0-10+delay-1500ms"])
            .tier("free", &["slow"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let impatient = awc::Client::builder()
        .timeout(Duration::from_millis(300))
        .finish();
    let left = impatient
        .post(format!("{}/v1/chat/completions", app.base_url))
        .insert_header(("authorization", format!("Bearer {key}")))
        .send_json(&chat_body("slow"))
        .await;
    assert!(left.is_err(), "the caller was meant to give up first");
    let rows = wait_until(
        Duration::from_secs(5),
        "the abandoned call's row",
        async || {
            let rows = app.ledger_rows(&tenant).await;
            let requests = app.fake.stats.requests();
            crate::support::done_if(!rows.is_empty() && requests == 1, rows)
        },
    )
    .await;
    assert_eq!(app.fake.stats.requests(), 1);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let journal = app.gateway.ledger.journal().unwrap();
    assert_eq!(journal.open_reserves(), 0);
    let committed =
        Nanos::parse_decimal(app.budget(&tenant).await["committed"].as_str().unwrap()).unwrap();
    // The handler ran on after its caller left: the row is the call's own, settled.
    assert_eq!(
        (rows[0].status.as_str(), rows[0].charged_nanos),
        ("ok", 100_000)
    );
    assert_eq!(committed.to_db(), rows[0].charged_nanos);
}

#[actix_web::test]
async fn every_fsync_mode_keeps_what_reached_the_os() {
    for fsync in [FsyncMode::Batch, FsyncMode::Interval, FsyncMode::Off] {
        let dir = tempfile::tempdir().unwrap();
        let options = JournalOptions {
            fsync,
            ..options(dir.path(), 64 * 1024 * 1024)
        };
        let (journal, _) = Journal::open(&options).unwrap();
        let settled = event("t", "done", AttemptStatus::Ok, 7);
        journal.append_reserve(&orphan_of(&settled), 0).await;
        journal.append_settle(settled.clone(), |_, _| {});
        let open = event("t", "open", AttemptStatus::Ok, 0);
        journal.append_reserve(&orphan_of(&open), 0).await;
        // Another process can hold the directory only once this one let go.
        assert!(Journal::open(&options).is_err(), "{fsync:?}");
        drop(journal);
        let (_journal, recovered) = Journal::open(&options).unwrap();
        let replayed: Vec<(&str, AttemptStatus)> = recovered
            .events
            .iter()
            .map(|e| (e.request_id.as_str(), e.status))
            .collect();
        assert_eq!(
            replayed,
            [
                ("done", AttemptStatus::Ok),
                ("open", AttemptStatus::Orphaned)
            ],
            "{fsync:?}"
        );
        assert_eq!(recovered.events[0].event_id, settled.event_id, "{fsync:?}");
    }
}

#[actix_web::test]
async fn while_serving_segments_below_the_checkpoint_are_deleted() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-10-0-10"])
            .tier("free", &["fast"], 100_000, 100)
            .set("ledger.journal_segment_bytes", 4096),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    for _ in 0..40 {
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    }
    // A reserve and a settle per request, ~1 KB each: about twenty segments were written.
    assert_eq!(app.ledger_rows(&tenant).await.len(), 40);
    let journal = app.gateway.ledger.journal().unwrap();
    assert!(journal.segments() <= 2, "{} segments", journal.segments());
    // Segments are named by their first sequence number: the journal did rotate.
    let first_seqs: Vec<u64> = std::fs::read_dir(app.dir.path().join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension() == Some("seg".as_ref()))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(first_seqs.len(), journal.segments());
    assert!(first_seqs.iter().all(|&seq| seq > 40), "{first_seqs:?}");
    assert_eq!(journal.open_reserves(), 0);
}

#[actix_web::test]
async fn a_cursor_reads_settles_back_in_order_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(&options(dir.path(), 4096)).unwrap();
    let mut seqs = Vec::new();
    for i in 0..60 {
        let settled = event("t", &format!("r{i}"), AttemptStatus::Ok, 1);
        journal.append_reserve(&orphan_of(&settled), 0).await;
        let seq = journal.append_settle(settled, |_, _| {});
        seqs.push((seq, format!("r{i}")));
    }
    assert!(journal.segments() > 5);
    // From the 11th settle on, up to the 50th, seven at a time.
    let upto = seqs[49].0;
    let mut cursor = journal.cursor(seqs[10].0);
    let mut read = Vec::new();
    loop {
        let batch = cursor.next_batch(upto, 7).unwrap();
        assert!(batch.len() <= 7);
        if batch.is_empty() {
            break;
        }
        read.extend(
            batch
                .into_iter()
                .map(|j| (j.seq, j.event.request_id.to_string())),
        );
    }
    assert_eq!(read, seqs[10..50]);
    // Later settles come once the caller's bound moves.
    let rest = cursor.next_batch(journal.last_seq(), 100).unwrap();
    assert_eq!(rest.len(), 10);
}

#[actix_web::test]
async fn every_attempt_of_a_failover_settles_its_own_reserve() {
    let app = spawn_app(
        TestSetup::new()
            .route("fo", &["primary/status-503", "secondary/usage-10-0-10"])
            .tier("free", &["fo"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let reply = app.chat(&key, &chat_body("fo")).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let rows = app.ledger_rows(&tenant).await;
    let statuses: Vec<&str> = rows.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(rows.len() as u64, app.fake.stats.requests(), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&"fallback_ok"));
    assert!(statuses.len() >= 2, "{statuses:?}");
    assert_eq!(app.gateway.ledger.journal().unwrap().open_reserves(), 0);
}

#[actix_web::test]
async fn after_a_failed_attempt_only_the_attempt_in_flight_becomes_an_orphan() {
    let dir = tempfile::tempdir().unwrap();
    let options = options(dir.path(), 64 * 1024 * 1024);
    let (journal, _) = Journal::open(&options).unwrap();
    let first = UsageEvent {
        status: AttemptStatus::UpstreamError,
        charged: Nanos::ZERO,
        cost: None,
        plan: None,
        ..event("t", "failover", AttemptStatus::Ok, 0)
    };
    journal.append_reserve(&orphan_of(&first), 0).await;
    journal.append_settle(first, |_, _| {});
    let second = UsageEvent {
        attempt: 2,
        provider: "secondary".to_owned(),
        ..event("t", "failover", AttemptStatus::Ok, 0)
    };
    journal.append_reserve(&orphan_of(&second), 0).await;
    drop(journal);
    let (_journal, recovered) = Journal::open(&options).unwrap();
    assert_eq!((recovered.settles, recovered.orphans), (1, 1));
    let orphan = &recovered.events[1];
    assert_eq!(
        (
            orphan.event_id,
            orphan.attempt,
            orphan.status,
            orphan.charged
        ),
        (
            tollgate::ids::EventId::orphan_of(&second.request_id),
            2,
            AttemptStatus::Orphaned,
            Nanos::new(5_000)
        )
    );
}

#[actix_web::test]
async fn an_attempt_killed_while_settling_in_the_shared_store_replays_at_its_cost() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments: the settling row must survive rotations and checkpoints.
    let options = options(dir.path(), 4096);
    let (journal, _) = Journal::open(&options).unwrap();
    // Killed between the shared store's commit and the row's own settle.
    let settling = event("t", "settling", AttemptStatus::Ok, 1_234);
    journal.append_reserve(&orphan_of(&settling), 0).await;
    journal.append_settling(&settling);
    // Settled in full: its settling record changes nothing.
    let settled = event("t", "settled", AttemptStatus::Ok, 77);
    journal.append_reserve(&orphan_of(&settled), 0).await;
    journal.append_settling(&settled);
    journal.append_settle(settled.clone(), |_, _| {});
    // Still in flight upstream: an orphan at its reserved amount.
    let in_flight = event("t", "in-flight", AttemptStatus::Ok, 0);
    journal.append_reserve(&orphan_of(&in_flight), 0).await;
    // No open reserve (its request was orphaned meanwhile): not journaled at all.
    let unreserved = event("t", "unreserved", AttemptStatus::Ok, 9);
    journal.append_settling(&unreserved);
    let mut last_seq = 0;
    for i in 0..100 {
        let other = event("t", &format!("r{i}"), AttemptStatus::Ok, 1);
        journal.append_reserve(&orphan_of(&other), 0).await;
        journal.append_settle(other, |_, seq| last_seq = seq);
    }
    journal.checkpoint(last_seq);
    assert_eq!(journal.segments(), 1, "the old segments are gone");
    assert_eq!(journal.open_reserves(), 2);
    drop(journal);

    let (_journal, recovered) = Journal::open(&options).unwrap();
    assert_eq!((recovered.settles, recovered.orphans), (1, 1));
    let by_request: HashMap<&str, &UsageEvent> = recovered
        .events
        .iter()
        .map(|e| (e.request_id.as_str(), e))
        .collect();
    assert_eq!(by_request.len(), 2);
    let row = by_request["settling"];
    assert_eq!(
        (row.status, row.charged, row.usage, row.event_id),
        (
            AttemptStatus::Ok,
            Nanos::new(1_234),
            settling.usage,
            EventId::orphan_of(&settling.request_id)
        )
    );
    let orphan = by_request["in-flight"];
    assert_eq!(
        (orphan.status, orphan.charged),
        (AttemptStatus::Orphaned, Nanos::new(5_000))
    );
}

#[actix_web::test]
async fn a_run_that_wrote_nothing_does_not_make_the_next_one_lose_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let options = options(dir.path(), 64 * 1024 * 1024);
    // Started and stopped with no traffic: an empty first segment stays behind.
    drop(Journal::open(&options).unwrap());
    let (journal, recovered) = Journal::open(&options).unwrap();
    assert!(recovered.events.is_empty());
    journal.retire(&recovered.segments);
    journal.append_settle(
        event("t", "after-idle-run", AttemptStatus::Ok, 1),
        |_, _| {},
    );
    drop(journal);
    let (_journal, recovered) = Journal::open(&options).unwrap();
    assert_eq!(recovered.settles, 1);
    assert_eq!(recovered.events[0].request_id.as_str(), "after-idle-run");
}
