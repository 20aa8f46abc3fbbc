//! No path spends more than it held: `n`, two output limits, every attempt
//! under a hold, and the request's deadline.

use futures_util::future::join_all;
use serde_json::json;

use crate::support::{TestSetup, Upstream, chat_body, spawn_app};

/// A provider that gives up on an answer after 300 ms, once the request has left.
/// A provider that gives up after 300 ms, without retrying.
fn impatient(setup: TestSetup) -> TestSetup {
    setup
        .provider("impatient", "openai", Upstream::Fake)
        .set("providers.impatient.timeout_ms", 300)
        .set("providers.impatient.max_attempts", 1)
}

fn committed_nanos(budget: &serde_json::Value) -> i64 {
    tollgate::money::Nanos::parse_decimal(budget["committed"].as_str().unwrap())
        .unwrap()
        .to_db()
}

#[actix_web::test]
async fn n_of_4_with_usage_of_4_times_the_limit_never_passes_the_budget() {
    // Each call bills 4 × 10,000 output tokens at 8 per 1M = 0.32: three fit in 1.
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-0-0-40000+delay-20ms"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1"}))
        .await;
    let mut body = chat_body("fast");
    body["max_tokens"] = json!(10_000);
    body["n"] = json!(4);

    let replies = join_all((0..20).map(|_| app.chat(&key, &body))).await;

    let ok = replies.iter().filter(|r| r.status == 200).count();
    let refused = replies.iter().filter(|r| r.status == 402).count();
    assert_eq!(ok + refused, 20);
    assert!((1..=3).contains(&ok), "{ok} admitted");
    let rows = app.ledger_rows(&tenant).await;
    let charged: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert!(
        charged <= 1_000_000_000,
        "charged {charged} on a budget of 1"
    );
    // The hold covered all four choices.
    assert!(
        rows.iter().all(|r| r.reserved_nanos >= 320_000_000),
        "{rows:?}"
    );
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
}

#[actix_web::test]
async fn n_above_the_tier_cap_is_refused_naming_the_field() {
    let app = spawn_app(TestSetup::new().route("fast", &["primary/ok"]).tier(
        "free",
        &["fast"],
        1000,
        100,
    ))
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut body = chat_body("fast");
    body["n"] = json!(9);

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 400, "{}", reply.raw);
    assert_eq!(reply.body["error"]["param"], "n");
    assert!(reply.error_message().contains("at most 8"), "{}", reply.raw);
    assert_eq!(app.fake.stats.requests(), 0);
}

#[actix_web::test]
async fn a_body_with_both_output_limits_leaves_with_one_coherent_value() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut body = chat_body("fast");
    body["max_completion_tokens"] = json!(50);
    body["max_tokens"] = json!(100_000);

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let sent = &app.fake.stats.captured()[0].body;
    assert_eq!(
        (&sent["max_completion_tokens"], &sent["max_tokens"]),
        (&json!(50), &json!(50)),
        "{sent}"
    );
    // The hold is the one for 50 output tokens (at 8 per 1M: 0.0004), not 100,000.
    let rows = app.ledger_rows(&tenant).await;
    assert!(rows[0].reserved_nanos < 1_000_000, "{:?}", rows[0]);
}

#[actix_web::test]
async fn a_timed_out_primary_and_an_answering_fallback_are_charged_both_holds() {
    let app = spawn_app(
        TestSetup::new()
            .with(impatient)
            .route(
                "fast",
                &["impatient/delay-2000ms", "secondary/usage-10-0-5"],
            )
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut body = chat_body("fast");
    body["max_tokens"] = json!(100_000);

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-provider"), Some("secondary"));
    assert_eq!(app.fake.stats.requests_for_model("delay-2000ms"), 1);
    let rows = app.ledger_rows(&tenant).await;
    let summary: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.status.as_str(), r.usage_kind.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![("upstream_error", "unknown"), ("fallback_ok", "reported")]
    );
    // The timed-out attempt reached the provider: it is charged its whole hold.
    assert!(rows[0].reserved_nanos > 800_000_000, "{:?}", rows[0]);
    assert_eq!(rows[0].charged_nanos, rows[0].reserved_nanos);
    // 10 prompt at 2 per 1M + 5 completion at 8 per 1M = 0.00006
    assert_eq!(rows[1].charged_nanos, 60_000);
    let budget = app.budget(&tenant).await;
    assert_eq!(budget["reserved"], "0");
    assert_eq!(committed_nanos(&budget), rows[0].reserved_nanos + 60_000);
    // The reconciliation report lists it, by provider, for the provider's bill.
    let report = app
        .admin("GET", &format!("/reconciliation?tenant={tenant}"), None)
        .await;
    assert_eq!(report.status, 200, "{}", report.raw);
    assert_eq!(
        report.body["rows"].as_array().unwrap().len(),
        1,
        "{}",
        report.raw
    );
    assert_eq!(
        report.body["rows"][0]["event_id"],
        rows[0].event_id.as_str()
    );
    assert_eq!(report.body["rows"][0]["usage_kind"], "unknown");
    assert_eq!(report.body["by_provider"][0]["provider"], "impatient");
    let charged = tollgate::money::Nanos::parse_decimal(
        report.body["by_provider"][0]["charged"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(charged.to_db(), rows[0].reserved_nanos);
}

#[actix_web::test]
async fn with_a_budget_for_one_hold_the_fallback_after_a_timeout_is_not_tried() {
    let app = spawn_app(
        TestSetup::new()
            .with(impatient)
            .route(
                "fast",
                &["impatient/delay-2000ms", "secondary/never-called"],
            )
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    // One hold of about 0.8 fits in 1.2; a second does not.
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1.2"}))
        .await;
    let mut body = chat_body("fast");
    body["max_tokens"] = json!(100_000);

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 502, "{}", reply.raw);
    assert!(
        reply.error_message().contains("cannot hold another"),
        "{}",
        reply.raw
    );
    assert_eq!(app.fake.stats.requests_for_model("never-called"), 0);
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].usage_kind, "unknown");
    let budget = app.budget(&tenant).await;
    assert_eq!(committed_nanos(&budget), rows[0].reserved_nanos);
    assert!(committed_nanos(&budget) <= 1_200_000_000);
}

#[actix_web::test]
async fn a_refused_connection_costs_nothing_and_its_hold_serves_the_fallback() {
    let app = spawn_app(
        TestSetup::new()
            .provider(
                "closed",
                "openai",
                Upstream::At("http://127.0.0.1:1".to_owned()),
            )
            .set("providers.closed.max_attempts", 1)
            .route("fast", &["closed/ok", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1.2"}))
        .await;
    let mut body = chat_body("fast");
    body["max_tokens"] = json!(100_000);

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let rows = app.ledger_rows(&tenant).await;
    let summary: Vec<(&str, &str, i64)> = rows
        .iter()
        .map(|r| (r.status.as_str(), r.usage_kind.as_str(), r.charged_nanos))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("upstream_error", "none", 0),
            ("fallback_ok", "reported", 60_000)
        ]
    );
}

#[actix_web::test]
async fn the_request_deadline_bounds_an_attempt_the_provider_would_wait_longer_for() {
    // The provider would wait 5 s; the request's deadline is 1 s.
    let app = spawn_app(
        TestSetup::new()
            .request_timeout_ms(1000)
            .route("fast", &["primary/delay-3000ms", "secondary/never-called"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("fast")).await;

    assert_eq!(reply.status, 502, "{}", reply.raw);
    assert!(reply.error_message().contains("deadline"), "{}", reply.raw);
    assert_eq!(app.fake.stats.requests_for_model("never-called"), 0);
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1, "no attempt after the deadline: {rows:?}");
    assert_eq!(rows[0].usage_kind, "unknown");
    assert_eq!(rows[0].charged_nanos, rows[0].reserved_nanos);
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
}

/// An upstream on a raw socket that reads each whole request (headers and
/// `Content-Length` bytes of body) and answers garbage, then hangs up.
/// Returns its address and the number of requests it read.
fn garbling_upstream() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::atomic::{AtomicU64, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let read = std::sync::Arc::new(AtomicU64::new(0));
    let counter = read.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if line == "\r\n" {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok() {
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = stream.write_all(b"NOT HTTP AT ALL\r\n\r\n");
            }
        }
    });
    (addr, read)
}

/// The provider read the whole request and answered garbage: it may have
/// billed the call, so the attempt is charged its hold (`unknown`), and the
/// next one needs a hold of its own.
#[actix_web::test]
async fn a_garbled_answer_after_the_whole_request_left_is_charged_its_hold() {
    let (addr, read) = garbling_upstream();
    let app = spawn_app(
        TestSetup::new()
            .provider("garbling", "openai", Upstream::At(format!("http://{addr}")))
            .set("providers.garbling.max_attempts", 1)
            .route("fast", &["garbling/m", "secondary/usage-10-0-5"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    // One hold of about 0.8 fits in 1.2; a second does not.
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1.2"}))
        .await;
    let mut body = chat_body("fast");
    body["max_tokens"] = json!(100_000);

    let reply = app.chat(&key, &body).await;

    assert_eq!(reply.status, 502, "{}", reply.raw);
    assert_eq!(read.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(app.fake.stats.requests_for_model("usage-10-0-5"), 0);
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].status.as_str(), rows[0].usage_kind.as_str()),
        ("upstream_error", "unknown")
    );
    assert!(rows[0].reserved_nanos > 800_000_000, "{:?}", rows[0]);
    assert_eq!(rows[0].charged_nanos, rows[0].reserved_nanos);
    let budget = app.budget(&tenant).await;
    assert_eq!(committed_nanos(&budget), rows[0].reserved_nanos);
    assert_eq!(budget["reserved"], "0");
}

/// About a megabyte of one character in a message: the tokenizer's regex
/// overflows its stack on such a run (a panic inside the crate), and its
/// merge step costs the square of the run. Streamed without the provider's
/// usage (the relay counts the prompt itself), refused for the budget (the
/// exact count near a limit) and counted by count_tokens: each answers, the
/// gateway keeps serving, and the tokenizer was never handed the run.
#[actix_web::test]
async fn a_megabyte_of_spaces_neither_crashes_nor_stalls_the_counting() {
    let app = spawn_app(
        TestSetup::new()
            .body_limit(4 * 1024 * 1024)
            .route("fast", &["primary/no-usage"])
            .tier("free", &["fast"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let spaces = " ".repeat(1 << 20);
    let mut body = chat_body("fast");
    body["messages"] = json!([{"role": "user", "content": format!("hi{spaces}there")}]);
    body["stream"] = json!(true);

    let streamed = app.chat(&key, &body).await;
    assert_eq!(streamed.status, 200, "{}", streamed.raw);
    assert!(streamed.raw.contains("[DONE]"), "{}", streamed.raw);

    let (_poor, poor_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.000001"}))
        .await;
    body["stream"] = json!(false);
    let refused = app.chat(&poor_key, &body).await;
    assert_eq!(refused.status, 402, "{}", refused.raw);

    let count = json!({"model": "fast", "messages": [{"role": "user", "content": spaces}]});
    let counted = app
        .post_json("/v1/messages/count_tokens", &key, &count)
        .await;
    assert_eq!(counted.status, 200, "{}", counted.raw);
    // Held at no less than its bytes: a run of one character is its bytes at most.
    assert!(counted.body["input_tokens"].as_u64().unwrap() >= 1 << 20);

    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    let rows = app.ledger_rows_eventually(&tenant, 2).await;
    assert!(rows.iter().all(|r| r.charged_nanos > 0), "{rows:?}");
    let metrics = app.get("/metrics", "").await.raw;
    assert!(
        metrics
            .lines()
            .any(|l| l == "tollgate_tokenizer_failures_total 0"),
        "the tokenizer failed on a piece it was handed"
    );
}
