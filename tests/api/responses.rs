//! `POST /v1/responses`: the Responses door, translated to the chat
//! pipeline and back, under the same ceiling.

use serde_json::{Value, json};

use crate::support::{TestSetup, Upstream, run_sdk, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .provider("responder_sdk", "openai", Upstream::FakeV1)
        .set("providers.responder_sdk.api_key_env", "TEST_PRIMARY_KEY")
        .set("providers.responder_sdk.responses", true)
        .route("quick", &["primary/usage-100-20-30+chunks-4"])
        .route("runaway", &["primary/usage-100-0-40+chunks-400"])
        .route("responses_cut3", &["primary/chunks-8+cut-after-3"])
        .route("direct", &["responder_sdk/usage-60-0-10-9+chunks-4"])
        .route(
            "direct_runaway",
            &["responder_sdk/chunks-400+chunk-delay-5ms"],
        )
        .tier(
            "free",
            &[
                "quick",
                "runaway",
                "responses_cut3",
                "direct",
                "direct_runaway",
            ],
            1000,
            100,
        )
}

#[actix_web::test]
async fn the_official_openai_python_sdk_creates_streams_and_uses_tools_through_responses() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let (_poor, poor_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.01"}))
        .await;
    let base = format!("{}/v1", app.base_url);
    let seen = run_sdk(
        "python3",
        "openai_responses.py",
        vec![base.clone(), key.clone(), poor_key.clone()],
    )
    .await;
    assert!(
        seen["plain"]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{seen}"
    );
    assert_eq!(seen["plain"]["status"], "completed");
    assert_eq!(
        (
            &seen["plain"]["input_tokens"],
            &seen["plain"]["output_tokens"],
            &seen["plain"]["cached"]
        ),
        (&json!(100), &json!(30), &json!(20))
    );
    assert_eq!(seen["tool"]["tools"], json!(["lookup"]));
    let expected: String = (0..4).map(fake_upstream::chunk_text).collect();
    assert_eq!(seen["stream"]["text"], expected.as_str());
    assert_eq!(seen["stream"]["final_text"], expected.as_str());
    assert_eq!(seen["poor"], json!([402, "budget_exceeded"]));
    assert_eq!(seen["stateful"], "previous_response_id");

    // The tool round trip reached the upstream as chat messages.
    let captured = app.fake.stats.captured();
    let tool_call = captured
        .iter()
        .find(|c| c.body["tools"].is_array())
        .expect("the request with tools");
    let messages = tool_call.body["messages"].as_array().unwrap();
    assert_eq!(messages[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "a gate where a toll is paid"})
    );
    assert_eq!(tool_call.body["tools"][0]["function"]["name"], "lookup");

    // Passed through: the provider's own ids, objects and events, parsed by the SDK.
    let direct = &seen["direct"];
    for id in [&direct["id"], &direct["stream_id"]] {
        assert!(
            id.as_str().is_some_and(|id| id.starts_with("resp_fake_")),
            "{seen}"
        );
    }
    assert_eq!(direct["effort"], "low", "{seen}");
    assert!(direct["text"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(direct["stream_text"], expected.as_str(), "{seen}");
    assert_eq!(direct["final_text"], expected.as_str(), "{seen}");
    assert_eq!(
        (
            &direct["input_tokens"],
            &direct["cached"],
            &direct["output_tokens"]
        ),
        (&json!(60), &json!(10), &json!(9))
    );
    assert_eq!(
        seen["direct_cut"],
        json!([
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete"
        ]),
        "{seen}"
    );
    assert_eq!(seen["direct_cut_reason"], "max_output_tokens", "{seen}");
    let upstream = captured.iter().find(|c| c.path == "/v1/responses");
    assert_eq!(
        upstream.map(|c| c.body["reasoning"].clone()),
        Some(json!({"effort": "low"}))
    );

    // Every call is a ledger row under its door; the stream's completed usage is the row's.
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.api == "responses" && r.status == "ok")
    );
    assert_eq!(
        (rows[2].prompt_tokens, rows[2].completion_tokens),
        (100, 30)
    );
    for row in &rows[3..5] {
        assert_eq!(
            (
                row.provider.as_str(),
                row.prompt_tokens,
                row.cached_tokens,
                row.completion_tokens
            ),
            ("responder_sdk", 60, 10, 9)
        );
    }
}

#[actix_web::test]
async fn a_responses_stream_that_ignores_its_limit_ends_incomplete_at_the_hold() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "runaway", "input": "go on", "max_output_tokens": 10, "stream": true}),
        )
        .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let kinds: Vec<&str> = reply
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{}", reply.raw);
    assert_eq!(kinds.last(), Some(&"response.incomplete"), "{}", reply.raw);
    let last = reply
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .unwrap();
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(last["response"]["usage"]["output_tokens"], 10);
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(
        (rows[0].api.as_str(), rows[0].completion_tokens),
        ("responses", 10)
    );
    assert!(rows[0].charged_nanos <= rows[0].reserved_nanos);
}

#[actix_web::test]
async fn the_official_openai_node_sdk_streams_chat_and_responses() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let base = format!("{}/v1", app.base_url);
    let seen = run_sdk(
        "node",
        "openai_streams.mjs",
        vec![base.clone(), key.clone()],
    )
    .await;
    let expected: String = (0..4).map(fake_upstream::chunk_text).collect();
    assert_eq!(seen["chat"]["text"], expected.as_str(), "{seen}");
    assert_eq!(seen["chat"]["completion_tokens"], 30);
    assert_eq!(seen["responses"]["text"], expected.as_str(), "{seen}");
    assert_eq!(seen["responses"]["output_tokens"], 30);
    let rows = app.ledger_rows(&tenant).await;
    let doors: Vec<&str> = rows.iter().map(|r| r.api.as_str()).collect();
    assert_eq!(doors, ["chat", "responses"]);
}

/// The Responses door in front of an `anthropic` provider: Responses → chat →
/// Messages on the way out, and back, under the same hold.
fn anthropic_setup() -> TestSetup {
    TestSetup::new()
        .provider("claude", "anthropic", Upstream::Anthropic)
        .set("providers.claude.api_key_env", "TEST_ANTHROPIC_KEY")
        .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
        .route("claude", &["claude/usage-40-0-0-12"])
        .route("claude-runaway", &["claude/words-400"])
        .price("claude/usage-40-0-0-12", "3", "0.3", "15")
        .price("claude/words-400", "3", "0.3", "15")
        .tier("free", &["claude", "claude-runaway"], 1000, 100)
}

#[actix_web::test]
async fn responses_reach_an_anthropic_provider_as_messages_and_come_back_as_a_response() {
    let app = spawn_app(anthropic_setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let body = json!({
        "model": "claude",
        "instructions": "Answer briefly.",
        "input": [{"role": "user", "content": "Say hello."}],
        "max_output_tokens": 64,
    });

    let reply = app.post_json("/v1/responses", &key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["object"], "response");
    assert_eq!(reply.body["status"], "completed");
    let text = reply.body["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(!text.is_empty(), "{}", reply.raw);
    assert_eq!(reply.body["usage"]["input_tokens"], 40);
    assert_eq!(reply.body["usage"]["output_tokens"], 12);
    let captured = app.anthropic.state.captured();
    let sent = &captured[0].body;
    assert_eq!(sent["max_tokens"], 64, "{sent}");
    assert_eq!(sent["system"], json!("Answer briefly."), "{sent}");
    assert_eq!(sent["messages"][0]["role"], "user", "{sent}");
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].api.as_str(),
            rows[0].prompt_tokens,
            rows[0].completion_tokens
        ),
        ("responses", 40, 12)
    );
    // 40 in at 3 + 12 out at 15, per 1M.
    assert_eq!(rows[0].charged_nanos, 300_000);
}

#[actix_web::test]
async fn a_runaway_anthropic_stream_through_responses_ends_incomplete_at_the_hold() {
    let app = spawn_app(anthropic_setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let body = json!({
        "model": "claude-runaway",
        "input": "go on",
        "max_output_tokens": 10,
        "stream": true,
    });

    let reply = app.post_json("/v1/responses", &key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let kinds: Vec<&str> = reply
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{}", reply.raw);
    assert_eq!(kinds.last(), Some(&"response.incomplete"), "{}", reply.raw);
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(rows[0].api.as_str(), "responses");
    assert!(rows[0].completion_tokens <= 10, "{:?}", rows[0]);
    assert!(
        rows[0].charged_nanos <= rows[0].reserved_nanos,
        "{:?}",
        rows[0]
    );
}

#[actix_web::test]
async fn a_budget_refusal_and_unkept_state_get_openai_errors_at_the_responses_door() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.0000001"}))
        .await;
    let refused = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "quick", "input": "hi"}),
        )
        .await;
    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert_eq!(
        refused.body["error"]["code"], "budget_exceeded",
        "{}",
        refused.raw
    );
    // The gateway stores responses itself; what it does not keep is refused
    // by name, and a reference to nothing it stored is not found.
    for (field, value, says) in [
        (
            "conversation",
            json!("conv_1"),
            "keeps responses, not conversations",
        ),
        (
            "background",
            json!(true),
            "keeps responses, not conversations",
        ),
        ("previous_response_id", json!("resp_1"), "not found"),
    ] {
        let mut body = json!({"model": "quick", "input": "hi"});
        body[field] = value;
        let reply = app.post_json("/v1/responses", &key, &body).await;
        assert_eq!(reply.status, 400, "{field}: {}", reply.raw);
        assert_eq!(reply.body["error"]["param"], field, "{}", reply.raw);
        assert!(reply.error_message().contains(says), "{}", reply.raw);
    }
}

#[actix_web::test]
async fn a_responses_stream_the_upstream_breaks_ends_with_an_error_event_and_a_partial_row() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "responses_cut3", "input": "go on", "stream": true}),
        )
        .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let kinds: Vec<&str> = reply
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds.last(), Some(&"error"), "{}", reply.raw);
    assert!(!kinds.contains(&"response.completed"), "{}", reply.raw);
    let last = reply
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .unwrap();
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["code"], "stream_interrupted", "{}", reply.raw);
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(
        (rows[0].api.as_str(), rows[0].status.as_str()),
        ("responses", "partial")
    );
    assert!(rows[0].charged_nanos > 0, "{:?}", rows[0]);
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
}

// === passthrough ===

/// A provider that speaks OpenAI's Responses API: the door passes the
/// caller's body through to it. Route and provider names are this file's own
/// (metrics are process-wide in the test binary).
fn passthrough_setup() -> TestSetup {
    let responder = |setup: TestSetup, name: &str| {
        let field = |field: &str| format!("providers.{name}.{field}");
        setup
            .provider(name, "openai", Upstream::FakeV1)
            .set(&field("api_key_env"), "TEST_PRIMARY_KEY")
            .set(&field("timeout_ms"), 5000)
            .set(&field("responses"), true)
    };
    let whole = "responder/usage-300-50-200-40+reasoning-30";
    TestSetup::new()
        .with(|setup| responder(setup, "responder"))
        .set("providers.responder.max_tokens_ceiling", 256)
        .with(|setup| responder(setup, "responder_tenant"))
        .set("providers.responder_tenant.tenant_id_as", "user")
        .route("rp_whole", &[whole])
        .price(whole, "2", "0.5", "8")
        .price_field(whole, "cache_write", "2.5")
        .route("rp_no_usage", &["responder/no-usage"])
        .route(
            "rp_stream",
            &["responder_tenant/usage-120-0-20-25+chunks-6"],
        )
        .route(
            "rp_runaway",
            &["responder/usage-100-0-0-40+chunks-400+chunk-delay-10ms"],
        )
        .route("rp_broken", &["responder/chunks-8+cut-after-3"])
        .route(
            "rp_failed",
            &["responder/usage-100-0-0-60+reasoning-50+chunks-8+failed-after-2"],
        )
        .route("rp_poor", &["responder/usage-10-0-0-10"])
        .tier(
            "free",
            &[
                "rp_whole",
                "rp_no_usage",
                "rp_stream",
                "rp_runaway",
                "rp_broken",
                "rp_failed",
                "rp_poor",
            ],
            1000,
            100,
        )
}

/// The typed events of a Responses stream: `event:` name and parsed `data:`.
fn typed_events(raw: &str) -> Vec<(String, Value)> {
    raw.split("\n\n")
        .filter(|event| !event.trim().is_empty())
        .map(|event| {
            let name = event
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or_default();
            let data = event
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or("null");
            (name.to_owned(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

/// Every event's `sequence_number` is its position: nothing lost, nothing repeated.
fn assert_numbered_in_order(events: &[(String, Value)], raw: &str) {
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str(), "{raw}");
        assert_eq!(data["sequence_number"], i, "{raw}");
    }
}

fn output_text(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter(|(name, _)| name == "response.output_text.delta")
        .filter_map(|(_, data)| data["delta"].as_str())
        .collect()
}

/// `body` as a JSON object without the members the passthrough rewrites.
fn without_rewritten(body: &Value) -> Value {
    let mut body = body.clone();
    for key in ["model", "max_output_tokens"] {
        body.as_object_mut().unwrap().remove(key);
    }
    body
}

#[actix_web::test]
async fn a_responses_provider_gets_the_caller_s_body_and_answers_with_its_own_response() {
    // A field no table knows leaves only where the route forwards unknown fields.
    let app =
        spawn_app(passthrough_setup().set("routes.rp_whole.forward_unknown_fields", true)).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    // What chat cannot carry: `reasoning`, `text`, `include` and a field the gateway does not know.
    let sent = json!({
        "model": "rp_whole",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
        "max_output_tokens": 5000,
        "reasoning": {"effort": "high", "summary": "auto"},
        "text": {"format": {"type": "text"}, "verbosity": "low"},
        "include": ["reasoning.encrypted_content"],
        "store": false,
        "x_tollgate_unknown": {"kept": [1, 2, 3]},
    });

    let reply = app.post_json("/v1/responses", &key, &sent).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let captured = app.fake.stats.captured();
    assert_eq!(captured.len(), 1);
    assert_eq!(captured[0].path, "/v1/responses");
    let upstream = &captured[0].body;
    assert_eq!(without_rewritten(upstream), without_rewritten(&sent));
    assert_eq!(upstream["model"], "usage-300-50-200-40+reasoning-30");
    // The held limit, lowered to the provider's ceiling, not the caller's 5000.
    assert_eq!(upstream["max_output_tokens"], 256);
    assert_eq!(upstream["reasoning"], sent["reasoning"]);
    assert_eq!(upstream["x_tollgate_unknown"], sent["x_tollgate_unknown"]);
    assert!(upstream.get("messages").is_none(), "{upstream}");

    // The upstream's own object: its id and its usage, details and all.
    assert_eq!(reply.body["id"], "resp_fake_1", "{}", reply.raw);
    assert_eq!(reply.body["reasoning"], sent["reasoning"]);
    assert_eq!(reply.body["max_output_tokens"], 256);
    let usage = &reply.body["usage"];
    assert_eq!(
        usage,
        &json!({"input_tokens": 300,
                "input_tokens_details": {"cached_tokens": 200, "cache_write_tokens": 50},
                "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 30},
                "total_tokens": 340})
    );

    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(
        (
            row.api.as_str(),
            row.status.as_str(),
            row.usage_kind.as_str()
        ),
        ("responses", "ok", "reported")
    );
    assert_eq!(
        (
            row.prompt_tokens,
            row.cached_tokens,
            row.cache_write_tokens,
            row.completion_tokens
        ),
        (300, 200, 50, 40)
    );
    // Per 1M: 50 uncached at 2, 200 cached at 0.5, 50 written at 2.5, 40 out
    // at 8 (the 30 reasoning tokens among them): 645 nano-units per token-million.
    assert_eq!(row.charged_nanos, 645_000);
    assert_eq!(reply.header("x-tollgate-cost"), Some("0.000645"));
}

#[actix_web::test]
async fn a_response_without_usage_is_charged_an_estimate_or_where_it_reasoned_its_hold() {
    let app = spawn_app(passthrough_setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "rp_no_usage", "input": "Hello there"}),
        )
        .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["usage"], Value::Null, "{}", reply.raw);
    let text = reply.body["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    let rows = app.ledger_rows(&tenant).await;
    let row = &rows[0];
    assert_eq!(row.usage_kind, "estimated");
    assert!(row.prompt_tokens > 0, "{row:?}");
    let counted = app.gateway.estimator.count_completion(text);
    assert_eq!(row.completion_tokens, i64::try_from(counted).unwrap());
    assert!(row.charged_nanos > 0, "{row:?}");

    // Asked to reason, the model may have billed reasoning the answer does
    // not show: without the provider's usage, the charge is the hold.
    let reasoned = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "rp_no_usage", "input": "Hello there", "max_output_tokens": 2000,
                    "reasoning": {"effort": "high"}}),
        )
        .await;
    assert_eq!(reasoned.status, 200, "{}", reasoned.raw);
    let rows = app.ledger_rows(&tenant).await;
    let row = &rows[1];
    assert_eq!(row.usage_kind, "unknown", "{row:?}");
    assert_eq!(row.charged_nanos, row.reserved_nanos, "{row:?}");
    // The output held: the caller's 2,000, lowered to the provider's ceiling.
    assert_eq!(row.completion_tokens, 256, "{row:?}");
}

/// `raw` with what differs between two answers to one request (the fake's
/// ordinal in its ids, the second it was made) made the same.
fn normalized(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find("\"created_at\":") {
        let (head, tail) = rest.split_at(at + "\"created_at\":".len());
        out.push_str(head);
        out.push('0');
        rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    (1..10).fold(out, |text, n| {
        text.replace(&format!("resp_fake_{n}\""), "resp_fake\"")
            .replace(&format!("resp_fake_{n}"), "resp_fake")
    })
}

#[actix_web::test]
async fn a_responses_stream_is_forwarded_unchanged_and_billed_from_its_completed_usage() {
    let app = spawn_app(passthrough_setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let sent = json!({"model": "rp_stream", "input": "Tell me a story", "stream": true,
                      "max_output_tokens": 64, "user": "someone"});

    let reply = app.post_json("/v1/responses", &key, &sent).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(
        reply.header("content-type"),
        Some("text/event-stream"),
        "{}",
        reply.raw
    );
    let captured = app.fake.stats.captured();
    let upstream = &captured[0].body;
    // This provider takes the tenant as `user`, in place of the caller's.
    assert_eq!(upstream["user"], tenant.as_str());
    assert!(upstream.get("stream_options").is_none(), "{upstream}");
    // The same request straight to the fake: the gateway changed no byte of its answer.
    let direct = app
        .client
        .post(format!("{}/v1/responses", app.fake.base_url()))
        .send_json(upstream)
        .await
        .unwrap();
    let direct = crate::support::reply(direct).await;
    assert_eq!(normalized(&reply.raw), normalized(&direct.raw));

    let events = typed_events(&reply.raw);
    assert_numbered_in_order(&events, &reply.raw);
    assert_eq!(events[0].0, "response.created");
    let expected: String = (0..6).map(fake_upstream::chunk_text).collect();
    assert_eq!(output_text(&events), expected);
    let (last, completed) = events.last().unwrap();
    assert_eq!(last, "response.completed");
    let usage = &completed["response"]["usage"];
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    let row = &rows[0];
    assert_eq!(
        (
            row.api.as_str(),
            row.status.as_str(),
            row.usage_kind.as_str()
        ),
        ("responses", "ok", "reported")
    );
    assert_eq!(
        (
            json!(row.prompt_tokens),
            json!(row.cached_tokens),
            json!(row.completion_tokens)
        ),
        (
            usage["input_tokens"].clone(),
            usage["input_tokens_details"]["cached_tokens"].clone(),
            usage["output_tokens"].clone()
        )
    );
    assert_eq!((row.prompt_tokens, row.completion_tokens), (120, 25));
    // 100 uncached at 2, 20 cached at 0.04, 25 out at 8, per 1M.
    assert_eq!(row.charged_nanos, 400_800);
}

#[actix_web::test]
async fn a_runaway_responses_stream_is_cut_at_the_hold_and_ends_incomplete() {
    let app = spawn_app(passthrough_setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let sent = json!({"model": "rp_runaway", "input": "go on", "stream": true,
                      "max_output_tokens": 10});

    let reply = app.post_json("/v1/responses", &key, &sent).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(app.fake.stats.captured()[0].body["max_output_tokens"], 10);
    let events = typed_events(&reply.raw);
    assert_numbered_in_order(&events, &reply.raw);
    let text = output_text(&events);
    assert!(!text.is_empty(), "{}", reply.raw);
    // The upstream would have sent 400 words; the hold is 10 tokens.
    assert!(
        app.gateway.estimator.count_completion(&text) <= 10,
        "{text:?}"
    );
    let tail: Vec<&str> = events
        .iter()
        .rev()
        .take(4)
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(
        tail,
        [
            "response.incomplete",
            "response.output_item.done",
            "response.content_part.done",
            "response.output_text.done",
        ],
        "{}",
        reply.raw
    );
    // Closed with exactly the text the caller got, as the translating path closes it.
    let done = &events[events.len() - 4].1;
    assert_eq!(done["text"], text.as_str());
    let incomplete = &events[events.len() - 1].1["response"];
    assert_eq!(incomplete["id"], events[0].1["response"]["id"]);
    assert_eq!(incomplete["status"], "incomplete");
    assert_eq!(
        incomplete["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(incomplete["output"][0]["content"][0]["text"], text.as_str());
    assert_eq!(incomplete["usage"]["output_tokens"], 10);

    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    let row = &rows[0];
    assert_eq!(
        (row.api.as_str(), row.status.as_str(), row.completion_tokens),
        ("responses", "ok", 10)
    );
    assert_eq!(incomplete["usage"]["input_tokens"], row.prompt_tokens);
    assert!(row.charged_nanos <= row.reserved_nanos, "{row:?}");
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
    crate::support::wait_until(
        std::time::Duration::from_secs(5),
        "the upstream's cancel",
        async || {
            let cancelled = app.fake.stats.streams_cancelled();
            crate::support::done_if(cancelled >= 1, cancelled)
        },
    )
    .await;
}

#[actix_web::test]
async fn a_responses_stream_the_upstream_breaks_through_the_passthrough_ends_with_the_door_s_error()
{
    let app = spawn_app(passthrough_setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "rp_broken", "input": "go on", "stream": true}),
        )
        .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let events = typed_events(&reply.raw);
    assert_numbered_in_order(&events, &reply.raw);
    // The upstream's own events (its response id), then the door's error.
    assert_eq!(
        events[0].1["response"]["id"], "resp_fake_1",
        "{}",
        reply.raw
    );
    let expected: String = (0..3).map(fake_upstream::chunk_text).collect();
    assert_eq!(output_text(&events), expected);
    let (last, error) = events.last().unwrap();
    assert_eq!(last, "error", "{}", reply.raw);
    assert_eq!(error["code"], "stream_interrupted", "{}", reply.raw);
    assert!(
        !events.iter().any(|(name, _)| name == "response.completed"),
        "{}",
        reply.raw
    );
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(
        (rows[0].api.as_str(), rows[0].status.as_str()),
        ("responses", "partial")
    );
    assert!(rows[0].charged_nanos > 0, "{:?}", rows[0]);
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
}

/// A reasoning stream the provider ends with `response.failed`: its usage
/// (reasoning it never streamed included) is what was billed, so it is the
/// charge, not the text the relay saw nor the whole hold.
#[actix_web::test]
async fn a_failed_responses_stream_is_charged_the_usage_its_failure_reports() {
    let app = spawn_app(passthrough_setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "rp_failed", "input": "think", "stream": true,
                    "reasoning": {"effort": "high"}, "max_output_tokens": 1000}),
        )
        .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let events = typed_events(&reply.raw);
    assert_eq!(events.last().unwrap().0, "error", "{}", reply.raw);
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    let row = &rows[0];
    assert_eq!(
        (row.status.as_str(), row.usage_kind.as_str()),
        ("partial", "reported")
    );
    assert_eq!((row.prompt_tokens, row.completion_tokens), (100, 60));
    // 100 in at 2 per 1M and 60 out at 8 per 1M.
    assert_eq!(row.charged_nanos, 680_000);
    assert!(row.charged_nanos < row.reserved_nanos, "{row:?}");
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
}

#[actix_web::test]
async fn a_budget_too_small_for_a_responses_provider_is_a_402_and_no_upstream_call() {
    let app = spawn_app(passthrough_setup()).await;
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.0000001"}))
        .await;

    let refused = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "rp_poor", "input": "hi", "stream": true}),
        )
        .await;

    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert_eq!(refused.error_code(), "budget_exceeded", "{}", refused.raw);
    assert_eq!(
        refused.body["error"]["type"], "insufficient_quota",
        "{}",
        refused.raw
    );
    assert_eq!(refused.header("x-should-retry"), Some("false"));
    assert_eq!(app.fake.stats.requests(), 0);
}

/// OpenAI's web search leaves a Responses passthrough only where the route
/// prices it, bounded by `max_tool_calls` (which the gateway sets, as it
/// sets the output limit); each search call in the output is charged its
/// fee, on a stream as on a complete answer. Other built-in tools are still
/// taken out of the offer, and a route that does not price search removes it.
#[actix_web::test]
async fn a_priced_web_search_leaves_bounded_by_max_tool_calls_and_each_call_is_charged() {
    const SEARCHING: &str = "responder/usage-500-0-0-20+searches-9+chunks-3";
    let app = spawn_app(
        passthrough_setup()
            .route("rp_search", &[SEARCHING])
            .price(SEARCHING, "2", "0.5", "8")
            .price_field(SEARCHING, "web_search", "0.025")
            .set("routes.rp_search.server_tools.web_search.max_uses", 2)
            .set(
                "routes.rp_search.server_tools.web_search.input_tokens_per_use",
                8000,
            )
            .tier("searcher", &["rp_search", "rp_poor"], 1000, 100),
    )
    .await;
    let (tenant, key) = app.tenant_with_key("searcher", json!({})).await;
    let body = |model: &str, stream: bool| {
        json!({"model": model, "input": "news?", "stream": stream, "max_tool_calls": 6,
               "tools": [{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}]})
    };

    for stream in [false, true] {
        let reply = app
            .post_json("/v1/responses", &key, &body("rp_search", stream))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        assert_eq!(
            reply.header("x-tollgate-removed-tools"),
            Some("code_interpreter")
        );
    }
    let unpriced = app
        .post_json("/v1/responses", &key, &body("rp_poor", false))
        .await;
    assert_eq!(unpriced.status, 200, "{}", unpriced.raw);
    assert_eq!(
        unpriced.header("x-tollgate-removed-tools"),
        Some("web_search, code_interpreter")
    );

    let captured = app.fake.stats.captured();
    for sent in &captured[..2] {
        assert_eq!(sent.body["tools"], json!([{"type": "web_search"}]));
        assert_eq!(sent.body["max_tool_calls"], 2);
    }
    assert!(
        captured[2].body.get("tools").is_none(),
        "{}",
        captured[2].body
    );
    let rows = app.ledger_rows_eventually(&tenant, 3).await;
    let searched: Vec<_> = rows.iter().filter(|r| r.route == "rp_search").collect();
    assert_eq!(searched.len(), 2);
    for row in searched {
        assert_eq!((row.web_searches, row.usage_kind.as_str()), (2, "reported"));
        // 500 in at 2 and 20 out at 8 (per 1M), two searches at 0.025.
        assert_eq!(
            row.charged_nanos,
            1_000_000 + 160_000 + 50_000_000,
            "{row:?}"
        );
    }
}

/// What Codex sends on every turn: function tools, a namespace of an MCP
/// server's tools, a free-form custom tool, and its earlier turn's reasoning,
/// namespaced call and custom call replayed. A translated route flattens the
/// namespace into chat functions and answers a call in the item the caller's
/// SDK expects; a passthrough route sends the body as it came. A tool chat
/// cannot carry (the local shell) fails only a translated route, naming it.
#[actix_web::test]
async fn codex_s_namespaces_and_custom_tools_work_translated_and_passed_through() {
    let app = spawn_app(
        passthrough_setup()
            .route("codex_chat", &["primary/usage-100-0-30+tool"])
            .tier("codex", &["codex_chat", "rp_poor"], 1000, 100),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("codex", json!({})).await;
    let body = |model: &str, extra_tool: Option<Value>| {
        let mut tools = vec![
            json!({"type": "namespace", "name": "mcp__docs", "description": "Docs",
                   "tools": [{"type": "function", "name": "search", "strict": false,
                              "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]}),
            json!({"type": "function", "name": "shell", "parameters": {"type": "object"}}),
            json!({"type": "custom", "name": "apply_patch", "description": "Edit files",
                   "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}),
        ];
        tools.extend(extra_tool);
        json!({"model": model, "store": false, "stream": false,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "thread-1",
        "tools": tools, "tool_choice": "auto",
        "input": [
            {"type": "message", "role": "developer", "content": "You are Codex."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"},
            {"type": "function_call", "call_id": "c1", "name": "search", "namespace": "mcp__docs",
             "arguments": "{\"q\":\"x\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "found"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"}
        ]})
    };

    let reply = app
        .post_json("/v1/responses", &key, &body("codex_chat", None))
        .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let output = reply.body["output"].as_array().unwrap();
    let call = output
        .iter()
        .find(|item| item["type"] == "function_call")
        .unwrap();
    assert_eq!(
        (&call["type"], &call["name"], &call["namespace"]),
        (
            &json!("function_call"),
            &json!("search"),
            &json!("mcp__docs")
        ),
        "{}",
        reply.raw
    );
    let captured = app.fake.stats.captured();
    let sent = &captured.last().unwrap().body;
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mcp__docs__search", "shell", "apply_patch"]);
    let replayed = &sent["messages"][2]["tool_calls"][0]["function"];
    assert_eq!(replayed["name"], "mcp__docs__search");
    let patched = &sent["messages"][4]["tool_calls"][0]["function"];
    assert_eq!(patched["arguments"], "{\"input\":\"*** Begin\"}");

    let local_shell = Some(json!({"type": "local_shell"}));
    let refused = app
        .post_json(
            "/v1/responses",
            &key,
            &body("codex_chat", local_shell.clone()),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.raw);
    assert_eq!(
        refused.body["error"]["param"], "tools[3]",
        "{}",
        refused.raw
    );
    let passed = app
        .post_json("/v1/responses", &key, &body("rp_poor", local_shell))
        .await;
    assert_eq!(passed.status, 200, "{}", passed.raw);
    let captured = app.fake.stats.captured();
    let upstream = &captured.last().unwrap().body;
    assert_eq!(upstream["tools"][0]["type"], "namespace");
    assert_eq!(upstream["tools"][3]["type"], "local_shell");
    assert_eq!(upstream["input"][2]["type"], "reasoning");
}
