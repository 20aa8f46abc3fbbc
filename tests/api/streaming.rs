use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::support::{TestApp, TestSetup, Upstream, metric_value, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .provider("slowstart", "openai", Upstream::Fake)
        .set("providers.slowstart.first_token_timeout_ms", 300)
        .provider("canceller", "openai", Upstream::Fake)
        .set("providers.canceller.on_client_disconnect", "cancel")
        .route("paced", &["primary/usage-100-20-30+chunks-5+chunk-delay-200ms"])
        .route("quick", &["primary/usage-100-20-30+chunks-3"])
        .route("slowfirst", &["slowstart/ttft-3000ms", "secondary/usage-10-0-5+chunks-2"])
        // Its own name in the suite: a test counts its requests by route.
        .route("cut3", &["primary/chunks-8+cut-after-3"])
        .route("garbled", &["primary/chunks-8+malformed-after-2"])
        .route("drain", &["primary/usage-100-0-40+chunks-6+chunk-delay-150ms"])
        .route("cancel", &["canceller/usage-100-0-40+chunks-20+chunk-delay-150ms"])
        // Paced: unpaced, its 400 chunks fit in the loopback's socket buffers and the
        // upstream could finish writing before the gateway's cut reached it.
        .route("runaway", &["primary/usage-100-0-40+chunks-400+chunk-delay-10ms"])
        .route("silent", &["primary/no-usage+chunks-3"])
        .tier(
            "free",
            &["paced", "quick", "slowfirst", "cut3", "garbled", "drain", "cancel", "runaway", "silent"],
            1000,
            100,
        )
}

fn stream_body(model: &str, include_usage: bool) -> Value {
    let mut body = json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "Tell me a story"}]});
    if include_usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// The `data:` payloads of an SSE body, in order.
fn events(raw: &str) -> Vec<String> {
    raw.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

/// A chunk without the fields that differ between two calls (id, created).
fn normalized(event: &str) -> Value {
    let mut value: Value = serde_json::from_str(event).unwrap_or(Value::String(event.to_owned()));
    if let Some(object) = value.as_object_mut() {
        object.remove("id");
        object.remove("created");
    }
    value
}

fn open(app: &TestApp, key: &str, body: &Value) -> awc::SendClientRequest {
    app.client
        .post(format!("{}/v1/chat/completions", app.base_url))
        .insert_header(("authorization", format!("Bearer {key}")))
        .send_json(body)
}

async fn read_all<S>(response: &mut awc::ClientResponse<S>) -> String
where
    S: futures_util::Stream<Item = Result<Bytes, awc::error::PayloadError>> + Unpin,
{
    let mut raw = Vec::new();
    while let Some(chunk) = response.next().await {
        match chunk {
            Ok(bytes) => raw.extend_from_slice(&bytes),
            Err(_) => break,
        }
    }
    String::from_utf8(raw).unwrap()
}

/// How long a test waits on the upstream: the whole suite shares two cores,
/// and an upstream learns of a cancel only when its next write fails.
const UPSTREAM_BOUND: Duration = Duration::from_secs(10);

#[actix_web::test]
async fn chunks_arrive_in_order_identical_to_the_upstreams_and_unbuffered() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let mut response = open(&app, &key, &stream_body("paced", false))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    assert_eq!(
        response.headers().get("x-tollgate-provider").unwrap(),
        "primary"
    );
    let first = response.next().await.unwrap().unwrap();
    // The caller holds a chunk while the upstream has not finished sending.
    assert_eq!(app.fake.stats.streams_completed(), 0);
    let mut raw = String::from_utf8(first.to_vec()).unwrap();
    raw.push_str(&read_all(&mut response).await);

    // What the upstream itself sent for the same request, minus the usage chunk it was asked for.
    let direct = awc::Client::new()
        .post(format!("{}/v1/chat/completions", app.fake.base_url()))
        .send_json(&app.fake.stats.captured()[0].body)
        .await
        .unwrap()
        .body()
        .await
        .unwrap();
    let upstream: Vec<Value> = events(std::str::from_utf8(&direct).unwrap())
        .iter()
        .map(|e| normalized(e))
        .filter(|e| e.get("usage").is_none())
        .collect();
    let relayed: Vec<Value> = events(&raw).iter().map(|e| normalized(e)).collect();
    assert_eq!(relayed, upstream);
    assert_eq!(relayed.last().unwrap(), &Value::String("[DONE]".into()));

    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].status.as_str(), rows[0].usage_kind.as_str()),
        ("ok", "reported")
    );
    assert!(rows[0].ttft_ms.is_some());
}

#[actix_web::test]
async fn the_usage_chunk_is_stripped_unless_asked_and_the_exact_cost_is_charged_either_way() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let mut plain = open(&app, &key, &stream_body("quick", false))
        .await
        .unwrap();
    let plain = read_all(&mut plain).await;
    let mut with_usage = open(&app, &key, &stream_body("quick", true)).await.unwrap();
    let with_usage = read_all(&mut with_usage).await;

    assert!(!plain.contains("\"usage\""), "{plain}");
    let usage_events: Vec<Value> = events(&with_usage)
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter(|e| e.get("usage").is_some())
        .collect();
    assert_eq!(usage_events.len(), 1, "{with_usage}");
    assert_eq!(usage_events[0]["usage"]["completion_tokens"], 30);
    assert_eq!(usage_events[0]["choices"], json!([]));
    // Both upstream requests asked for usage, whatever the caller said.
    for captured in app.fake.stats.captured() {
        assert_eq!(captured.body["stream_options"]["include_usage"], true);
        assert_eq!(captured.body["max_tokens"], 100);
    }
    // 80 uncached at 2/M + 20 cached at 0.04/M + 30 out at 8/M = 0.0004008
    let rows = app.ledger_rows_eventually(&tenant, 2).await;
    assert_eq!(
        rows.iter().map(|r| r.charged_nanos).collect::<Vec<_>>(),
        vec![400_800, 400_800]
    );
    assert!(rows.iter().all(|r| r.usage_kind == "reported"));
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
}

#[actix_web::test]
async fn a_first_token_timeout_fails_over_before_anything_reaches_the_caller() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let mut response = open(&app, &key, &stream_body("slowfirst", false))
        .await
        .unwrap();

    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers().get("x-tollgate-provider").unwrap(),
        "secondary"
    );
    let raw = read_all(&mut response).await;
    assert!(raw.ends_with("data: [DONE]\n\n"), "{raw}");
    let rows = app.ledger_rows_eventually(&tenant, 3).await;
    let statuses: Vec<&str> = rows.iter().map(|r| r.status.as_str()).collect();
    // The slow start is retried once (default max_attempts) before failing over.
    assert_eq!(
        statuses,
        vec!["upstream_error", "upstream_error", "fallback_ok"]
    );
    assert!(
        rows[0].error.as_deref().unwrap().contains("first chunk"),
        "{:?}",
        rows[0].error
    );
}

#[actix_web::test]
async fn a_stream_cut_after_n_chunks_ends_with_an_error_event_and_is_charged_its_hold() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let mut response = open(&app, &key, &stream_body("cut3", false)).await.unwrap();
    let raw = read_all(&mut response).await;

    let events = events(&raw);
    let last: Value =
        serde_json::from_str(events.last().unwrap_or_else(|| panic!("{raw:?}"))).unwrap();
    assert_eq!(last["error"]["code"], "stream_interrupted", "{raw}");
    assert!(!events.iter().any(|e| e == "[DONE]"), "{raw}");
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    // The provider went on past what reached the relay, for all it says: the
    // attempt is charged what was held for it, and listed for reconciliation.
    assert_eq!(
        (row.status.as_str(), row.usage_kind.as_str()),
        ("partial", "unknown")
    );
    assert_eq!(row.completion_tokens, 100, "the held output");
    assert_eq!(row.charged_nanos, row.reserved_nanos);
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
    // Counted by how it ended, not by its 200 headers.
    let metrics = app.get("/metrics", "").await.raw;
    let requests = |status: &str| {
        metric_value(
            &metrics,
            &format!("tollgate_requests_total{{route=\"cut3\",status=\"{status}\"}}"),
        )
    };
    assert_eq!(
        (requests("stream_interrupted"), requests("ok")),
        (1, 0),
        "{metrics}"
    );
}

#[actix_web::test]
async fn a_malformed_line_ends_the_stream_as_partial() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let mut response = open(&app, &key, &stream_body("garbled", false))
        .await
        .unwrap();
    let raw = read_all(&mut response).await;

    assert!(raw.contains("stream_interrupted"), "{raw}");
    assert!(
        !raw.contains("oops"),
        "the broken line is not relayed: {raw}"
    );
    assert_eq!(
        app.ledger_rows_eventually(&tenant, 1).await[0].status,
        "partial"
    );
}

#[actix_web::test]
async fn a_caller_leaving_mid_stream_with_drain_is_billed_the_upstreams_reported_usage() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "1"}))
        .await;

    let mut response = open(&app, &key, &stream_body("drain", false))
        .await
        .unwrap();
    response.next().await.unwrap().unwrap();
    response.next().await.unwrap().unwrap();
    drop(response);

    crate::support::wait_until(UPSTREAM_BOUND, "the drained stream to end", async || {
        let seen = app.fake.stats.streams_completed();
        crate::support::done_if(seen == 1, seen)
    })
    .await;
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(
        (row.status.as_str(), row.usage_kind.as_str()),
        ("client_cancelled", "reported")
    );
    assert_eq!(row.completion_tokens, 40);
    assert_eq!(app.fake.stats.streams_cancelled(), 0);
    let budget = app.budget(&tenant).await;
    assert_eq!(budget["reserved"], "0");
    assert_eq!(
        tollgate::money::Nanos::parse_decimal(budget["committed"].as_str().unwrap())
            .unwrap()
            .to_db(),
        row.charged_nanos
    );
}

#[actix_web::test]
async fn a_caller_leaving_mid_stream_with_cancel_stops_the_upstream_and_is_charged_its_hold() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let mut response = open(&app, &key, &stream_body("cancel", false))
        .await
        .unwrap();
    response.next().await.unwrap().unwrap();
    response.next().await.unwrap().unwrap();
    drop(response);

    crate::support::wait_until(
        UPSTREAM_BOUND,
        "the upstream to see the cancellation",
        async || {
            let seen = app.fake.stats.streams_cancelled();
            crate::support::done_if(seen == 1, seen)
        },
    )
    .await;
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    // Cancelled without the provider's usage: what it generated before the
    // cancel landed is unknown, so the hold is charged.
    assert_eq!(
        (row.status.as_str(), row.usage_kind.as_str()),
        ("client_cancelled", "unknown")
    );
    assert_eq!(row.charged_nanos, row.reserved_nanos);
    assert_eq!(app.fake.stats.streams_completed(), 0);
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
    assert_eq!(
        app.gateway
            .active_drains
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

#[actix_web::test]
async fn a_stream_that_ignores_its_limit_is_cut_at_the_hold() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut body = stream_body("runaway", true);
    body["max_tokens"] = json!(10);
    body["n"] = json!(2);

    let mut response = open(&app, &key, &body).await.unwrap();
    let raw = read_all(&mut response).await;

    let events = events(&raw);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{raw}");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
        .filter_map(|choice| choice["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    // The hold covers 2 choices × 10 tokens; the upstream would have sent 400 words.
    let estimator = app.gateway.estimator;
    assert!(estimator.count_completion(&text) <= 20, "{text:?}");
    assert!(!text.is_empty());
    let finish = &chunks[chunks.len() - 2];
    let reasons: Vec<&Value> = finish["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["finish_reason"])
        .collect();
    assert_eq!(reasons, [&json!("length"), &json!("length")], "{finish}");
    let usage = &chunks[chunks.len() - 1]["usage"];
    assert_eq!(usage["completion_tokens"], 20, "{raw}");
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    let row = &rows[0];
    assert_eq!((row.status.as_str(), row.completion_tokens), ("ok", 20));
    assert!(row.charged_nanos <= row.reserved_nanos, "{row:?}");
    assert!(
        row.error.as_deref().unwrap_or("").contains("hold"),
        "{row:?}"
    );
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
    // The upstream call was cancelled, not read to its end.
    crate::support::wait_until(UPSTREAM_BOUND, "the upstream's cancel", async || {
        let seen = app.fake.stats.streams_cancelled();
        crate::support::done_if(seen >= 1, seen)
    })
    .await;
}

#[actix_web::test]
async fn a_finished_stream_leaves_its_upstream_connection_open_for_the_next_call() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    for n in 1..=3 {
        let mut response = open(&app, &key, &stream_body("quick", false))
            .await
            .unwrap();
        assert!(read_all(&mut response).await.ends_with("data: [DONE]\n\n"));
        app.ledger_rows_eventually(&tenant, n).await;
    }
    // One connection for the three calls: a stream dropped half-read closes its
    // connection, and the next call would open a new one (a new TLS handshake
    // before its first token, with a real provider).
    assert_eq!(app.fake.stats.streams_completed(), 3);
    assert_eq!(app.fake.stats.connections(), 1);
}

/// A stream that ends well but without the provider's usage is charged what
/// the relay counted, unless the request asked the model to reason: its
/// reasoning is billed output a stream never shows, so it is charged its hold.
#[actix_web::test]
async fn a_reasoning_stream_without_usage_is_charged_its_hold_and_a_plain_one_its_count() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let plain = stream_body("silent", false);
    let mut reasoning = plain.clone();
    reasoning["reasoning_effort"] = json!("high");

    for body in [&plain, &reasoning] {
        let mut response = open(&app, &key, body).await.unwrap();
        let raw = read_all(&mut response).await;
        assert!(raw.ends_with("data: [DONE]\n\n"), "{raw}");
    }

    let rows = app.ledger_rows_eventually(&tenant, 2).await;
    let kinds: Vec<&str> = rows.iter().map(|r| r.usage_kind.as_str()).collect();
    assert_eq!(kinds, ["estimated", "unknown"]);
    assert!(
        rows[0].charged_nanos < rows[0].reserved_nanos,
        "{:?}",
        rows[0]
    );
    assert_eq!(rows[1].charged_nanos, rows[1].reserved_nanos);
    assert_eq!(rows[1].completion_tokens, 100, "the held output");
}

/// A stream is admitted with one step of output held, not its whole
/// `max_tokens`, where its model streams all it bills; the upstream still
/// gets the caller's limit; the hold grows a step ahead of what was passed
/// on, and when the budget cannot fund the next step the gateway ends the
/// stream at its hold (`length`) and cancels the upstream. Nothing passes
/// the budget.
#[actix_web::test]
async fn a_stream_s_hold_grows_with_it_and_it_is_cut_where_the_budget_ends() {
    let app = spawn_app(
        TestSetup::new()
            .route("grows-ok", &["primary/usage-1000-0-40+chunks-30"])
            .route(
                "grows-on",
                &["primary/usage-1000-0-40+chunks-6000+chunk-delay-1ms"],
            )
            .route("grows-not", &["secondary/usage-1000-0-40+chunks-30"])
            .price("primary/usage-1000-0-40+chunks-30", "10", "10", "400")
            .price_field("primary/usage-1000-0-40+chunks-30", "hidden_output", "none")
            .price(
                "primary/usage-1000-0-40+chunks-6000+chunk-delay-1ms",
                "10",
                "10",
                "400",
            )
            .price_field(
                "primary/usage-1000-0-40+chunks-6000+chunk-delay-1ms",
                "hidden_output",
                "none",
            )
            .price("secondary/usage-1000-0-40+chunks-30", "10", "10", "400")
            .set("billing.stream_step_tokens", 256)
            .tier("free", &["grows-ok", "grows-on", "grows-not"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.5"}))
        .await;
    let body = |model: &str| {
        let mut body = stream_body(model, true);
        body["max_tokens"] = json!(32000);
        body
    };
    // Its whole limit (12.8 of output) is more than the budget: refused.
    let refused = open(&app, &key, &body("grows-not")).await.unwrap();
    assert_eq!(refused.status(), 402);

    // One step (256 tokens, 0.1024) admits it; it ends well and costs its usage.
    let mut response = open(&app, &key, &body("grows-ok")).await.unwrap();
    let raw = read_all(&mut response).await;
    assert!(raw.contains("\"finish_reason\":\"stop\""), "{raw}");
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(rows[0].charged_nanos, 26_000_000, "{rows:?}");

    // A runaway: steps are granted while the budget funds them, then it is cut.
    let mut response = open(&app, &key, &body("grows-on")).await.unwrap();
    let raw = read_all(&mut response).await;
    let events = events(&raw);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{raw}");
    assert!(raw.contains("\"finish_reason\":\"length\""), "{raw}");
    let text: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    // 0.474 left funds the first step and three more: 1,024 held, and
    // what was passed on stays a step behind.
    let passed = app.gateway.estimator.count_completion(&text);
    assert!((512..=768).contains(&passed), "{passed} tokens passed on");
    let rows = app.ledger_rows_eventually(&tenant, 2).await;
    let cut = rows.iter().find(|r| r.route == "grows-on").unwrap();
    assert_eq!(cut.completion_tokens, 1024, "{cut:?}");
    assert!(cut.charged_nanos <= cut.reserved_nanos, "{cut:?}");
    assert!(
        cut.error.as_deref().unwrap_or("").contains("hold"),
        "{cut:?}"
    );
    crate::support::wait_until(UPSTREAM_BOUND, "the upstream's cancel", async || {
        let seen = app.fake.stats.streams_cancelled();
        crate::support::done_if(seen >= 1, seen)
    })
    .await;
    // The upstream had the caller's limit each time.
    let sent: Vec<Value> = app
        .fake
        .stats
        .captured()
        .iter()
        .map(|c| c.body["max_tokens"].clone())
        .collect();
    assert_eq!(sent, [json!(32000), json!(32000)]);
    let budget = app.budget(&tenant).await;
    assert_eq!(budget["reserved"], "0", "{budget}");
    let spent: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    assert!(spent <= 500_000_000, "{spent}");
    let metrics = app.get("/metrics", "").await.raw;
    let steps = |route: &str, outcome: &str| {
        metric_value(
            &metrics,
            &format!("tollgate_stream_hold_steps_total{{route=\"{route}\",outcome=\"{outcome}\"}}"),
        )
    };
    // The short stream grew once (its first token needs a step ahead).
    assert_eq!(steps("grows-ok", "granted"), 1, "{metrics}");
    assert_eq!(
        (steps("grows-on", "granted"), steps("grows-on", "refused")),
        (3, 1)
    );
    // What is left cannot fund a step: refused before anything is sent.
    let refused = open(&app, &key, &body("grows-ok")).await.unwrap();
    assert_eq!(refused.status(), 402);
}

/// The steps of a growing hold are decided against every scope the call was
/// admitted under: a key's budget, an end user's, a prepaid balance each
/// end the runaway at their own limit, and the next stream is refused by
/// that scope.
#[actix_web::test]
async fn a_growing_hold_stops_at_the_key_s_the_end_user_s_and_the_credits_limit() {
    let model = "primary/usage-1000-0-40+chunks-6000+chunk-delay-1ms";
    let setup = || {
        TestSetup::new()
            .route("scoped-grows", &[model])
            .price(model, "10", "10", "400")
            .price_field(model, "hidden_output", "none")
            .set("billing.stream_step_tokens", 256)
            .tier("free", &["scoped-grows"], 1000, 100)
            .set("tiers.free.end_user.budget", "0.5")
            .set("tiers.free.end_user.period", "day")
    };
    let mut body = stream_body("scoped-grows", true);
    body["max_tokens"] = json!(32000);
    for scope in ["key", "end_user", "credits"] {
        let app = spawn_app(setup()).await;
        let tenant_budget = if scope == "credits" {
            json!({"credits": true})
        } else {
            json!({"monthly_budget": "100"})
        };
        let (tenant, tenant_key) = app.tenant_with_key("free", tenant_budget).await;
        let key = match scope {
            "key" => {
                let capped = app
                    .admin(
                        "POST",
                        &format!("/tenants/{tenant}/keys"),
                        Some(json!({"name": "agent", "monthly_budget": "0.5"})),
                    )
                    .await;
                assert_eq!(capped.status, 201, "{}", capped.raw);
                capped.body["key"].as_str().unwrap().to_owned()
            }
            "credits" => {
                let top_up = json!({"amount": "0.5", "idempotency_key": "pay-1", "reason": "card", "added_by": "billing"});
                let added = app
                    .admin("POST", &format!("/tenants/{tenant}/credits"), Some(top_up))
                    .await;
                assert_eq!(added.status, 201, "{}", added.raw);
                tenant_key
            }
            _ => tenant_key,
        };
        // Only the end user's case names one: elsewhere its budget is not the limit.
        let user = if scope == "end_user" { "u-1" } else { "" };
        let send = || {
            let mut request = app
                .client
                .post(format!("{}/v1/chat/completions", app.base_url))
                .insert_header(("authorization", format!("Bearer {key}")));
            if !user.is_empty() {
                request = request.insert_header(("x-tollgate-end-user", user));
            }
            request.send_json(&body)
        };
        let mut response = send().await.unwrap();
        assert_eq!(response.status(), 200, "{scope}");
        let raw = read_all(&mut response).await;
        assert!(
            raw.contains("\"finish_reason\":\"length\""),
            "{scope}: {raw}"
        );
        let rows = app.ledger_rows_eventually(&tenant, 1).await;
        let row = &rows[0];
        assert_eq!(row.completion_tokens, 1024, "{scope}: {row:?}");
        assert!(row.charged_nanos <= 500_000_000, "{scope}: {row:?}");
        assert!(row.charged_nanos <= row.reserved_nanos, "{scope}: {row:?}");
        let refused = send().await.unwrap();
        assert_eq!(refused.status(), 402, "{scope}");
        assert_eq!(app.budget(&tenant).await["reserved"], "0", "{scope}");
    }
}
