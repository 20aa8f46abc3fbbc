//! `POST /v1/messages` and `/v1/messages/count_tokens`: the Messages door,
//! passed through to Anthropic-kind providers and translated for
//! OpenAI-kind ones, under the same pipeline; errors in Anthropic's envelope.

use serde_json::{Value, json};

use crate::support::{Reply, TestApp, TestSetup, Upstream, reply, run_sdk, spawn_app};

const CLAUDE: &str = "claude/usage-100-200-300-50";
const VERSION: &str = "2023-06-01";
const BETA: &str = "prompt-caching-2024-07-31";

fn setup() -> TestSetup {
    TestSetup::new()
        .provider("claude", "anthropic", Upstream::Anthropic)
        .set("providers.claude.api_key_env", "TEST_ANTHROPIC_KEY")
        .set("providers.claude.max_tokens_ceiling", 200)
        .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
        .route("claude", &[CLAUDE])
        .route("claude-tool", &["claude/tool"])
        .route("claude-runaway", &["claude/words-400"])
        .route("gpt", &["primary/usage-100-20-30+chunks-4"])
        .route("gpt-tool", &["primary/usage-100-20-30+tool"])
        .route("gpt-broken", &["primary/chunks-8+cut-after-2"])
        .route("mixed", &["claude/status-503", "primary/usage-100-20-30"])
        .route(
            "claude-refuses",
            &["claude/status-400", "primary/never-after-claude"],
        )
        .price(CLAUDE, "3", "0.3", "15")
        .price_field(CLAUDE, "cache_write", "3.75")
        .tier(
            "free",
            &[
                "claude",
                "claude-tool",
                "claude-runaway",
                "gpt",
                "gpt-tool",
                "gpt-broken",
                "mixed",
                "claude-refuses",
            ],
            1000,
            100,
        )
}

/// A Messages body with `cache_control` on a system block and a user block.
fn cached_request(model: &str) -> Value {
    json!({
        "model": model,
        "max_tokens": 300,
        "system": [
            {"type": "text", "text": "You are a weather assistant."},
            {"type": "text", "text": "Reference: long climate tables.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Weather in Paris?", "cache_control": {"type": "ephemeral", "ttl": "5m"}}
        ]}]
    })
}

/// A POST with the key in `x-api-key` (as the Anthropic SDKs send it) and any other headers.
async fn post(
    app: &TestApp,
    path: &str,
    key: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut request = app
        .client
        .post(format!("{}{path}", app.base_url))
        .insert_header(("content-type", "application/json"));
    if !key.is_empty() {
        request = request.insert_header(("x-api-key", key));
    }
    for (name, value) in headers {
        request = request.insert_header((*name, *value));
    }
    reply(request.send_body(body.to_vec()).await.unwrap()).await
}

async fn messages(app: &TestApp, key: &str, body: &Value) -> Reply {
    let headers = [("anthropic-version", VERSION), ("anthropic-beta", BETA)];
    post(
        app,
        "/v1/messages?beta=true",
        key,
        &headers,
        body.to_string().as_bytes(),
    )
    .await
}

/// A stream's events as `(name, data)`.
fn events(raw: &str) -> Vec<(String, Value)> {
    raw.split("\n\n")
        .filter_map(|event| {
            let mut name = None;
            let mut data = None;
            for line in event.lines() {
                if let Some(rest) = line.strip_prefix("event: ") {
                    name = Some(rest.to_owned());
                } else if let Some(rest) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(rest).ok();
                }
            }
            Some((name?, data?))
        })
        .collect()
}

/// A ledger row's door and charged usage: prompt, cached, cache-write, completion tokens.
fn charged(row: &entity::usage::Model) -> (&str, i64, i64, i64, i64) {
    (
        row.api.as_str(),
        row.prompt_tokens,
        row.cached_tokens,
        row.cache_write_tokens,
        row.completion_tokens,
    )
}

fn kinds(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

fn text_of(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter_map(|(_, data)| data["delta"]["text"].as_str())
        .collect()
}

#[actix_web::test]
async fn a_message_reaches_anthropic_as_sent_but_for_the_held_max_tokens_and_comes_back_unchanged()
{
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let sent = cached_request("claude");

    let reply = messages(&app, &key, &sent).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["type"], "message");
    assert_eq!(reply.body["model"], "usage-100-200-300-50");
    assert_eq!(
        reply.body["usage"],
        json!({"input_tokens": 100, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 300, "output_tokens": 50})
    );
    let captured = app.anthropic.state.captured();
    let upstream = &captured[0];
    assert_eq!(upstream.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(upstream.header("anthropic-version"), Some(VERSION));
    assert_eq!(upstream.header("anthropic-beta"), Some(BETA));
    assert_eq!(upstream.body["model"], "usage-100-200-300-50");
    // The caller asked for 300; the provider takes at most 200, which is what was held.
    assert_eq!(upstream.body["max_tokens"], 200);
    assert_eq!(
        upstream.body["system"], sent["system"],
        "cache_control unchanged"
    );
    assert_eq!(
        upstream.body["messages"], sent["messages"],
        "cache_control unchanged"
    );
    // 100 uncached at 3 + 300 cache reads at 0.3 + 200 cache writes at 3.75 + 50 out at 15, per 1M.
    assert_eq!(reply.header("x-tollgate-cost"), Some("0.00189"));
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.status, "ok");
    assert_eq!(charged(row), ("messages", 600, 300, 200, 50));
    assert_eq!(row.charged_nanos, 1_890_000);
}

#[actix_web::test]
async fn an_anthropic_stream_is_relayed_event_by_event_and_metered_from_its_usage() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut sent = cached_request("claude");
    sent["stream"] = json!(true);

    let reply = messages(&app, &key, &sent).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let seen = events(&reply.raw);
    assert_eq!(
        kinds(&seen).first(),
        Some(&"message_start"),
        "{}",
        reply.raw
    );
    assert_eq!(kinds(&seen).last(), Some(&"message_stop"), "{}", reply.raw);
    assert!(
        kinds(&seen).contains(&"ping"),
        "Anthropic's own events pass on"
    );
    assert!(!reply.raw.contains("[DONE]"), "{}", reply.raw);
    assert_eq!(seen[0].1["message"]["usage"]["input_tokens"], 100);
    assert!(!text_of(&seen).is_empty(), "{}", reply.raw);
    let captured = app.anthropic.state.captured();
    assert_eq!(captured[0].body["stream"], true);
    assert_eq!(captured[0].body["system"], sent["system"]);
    assert_eq!(captured[0].header("anthropic-beta"), Some(BETA));
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(
        (
            rows[0].api.as_str(),
            rows[0].status.as_str(),
            rows[0].usage_kind.as_str()
        ),
        ("messages", "ok", "reported")
    );
    assert_eq!(rows[0].charged_nanos, 1_890_000);
}

#[actix_web::test]
async fn an_anthropic_stream_that_ignores_its_limit_ends_at_the_hold_in_anthropic_s_format() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let sent = json!({"model": "claude-runaway", "max_tokens": 10, "stream": true,
        "messages": [{"role": "user", "content": "go on"}]});

    let reply = messages(&app, &key, &sent).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let seen = events(&reply.raw);
    let tail: Vec<&str> = kinds(&seen).into_iter().rev().take(3).collect();
    assert_eq!(
        tail,
        ["message_stop", "message_delta", "content_block_stop"],
        "{}",
        reply.raw
    );
    let delta = &seen[seen.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
    assert_eq!(delta["usage"]["output_tokens"], 10);
    let words = text_of(&seen).split_whitespace().count();
    assert!(words <= 10, "{words} words passed a hold of 10 tokens");
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(
        (rows[0].api.as_str(), rows[0].completion_tokens),
        ("messages", 10)
    );
    assert!(rows[0].charged_nanos <= rows[0].reserved_nanos);
}

#[actix_web::test]
async fn a_tool_use_round_trip_is_translated_both_ways_for_an_openai_provider() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let sent = json!({
        "model": "gpt-tool", "max_tokens": 200, "temperature": 0.3, "top_p": 0.9,
        "stop_sequences": ["END"], "metadata": {"user_id": "user-7"},
        "system": "Be brief.",
        "tools": [{"name": "lookup", "description": "Looks a word up.",
                   "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": "What is a tollgate?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Looking it up."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"word": "tollgate"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                "content": "a gate where a toll is paid"}, {"type": "text", "text": "And a turnpike?"}]}
        ]
    });

    let reply = messages(&app, &key, &sent).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let upstream = &app.fake.stats.captured()[0].body;
    let chat = upstream["messages"].as_array().unwrap();
    assert_eq!(chat[0], json!({"role": "system", "content": "Be brief."}));
    assert_eq!(chat[2]["tool_calls"][0]["id"], "toolu_1");
    assert_eq!(
        chat[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"word":"tollgate"}"#
    );
    assert_eq!(
        chat[3],
        json!({"role": "tool", "tool_call_id": "toolu_1", "content": "a gate where a toll is paid"})
    );
    assert_eq!(chat[4]["content"][0]["text"], "And a turnpike?");
    assert_eq!(upstream["tools"][0]["function"]["name"], "lookup");
    assert_eq!(
        (
            &upstream["stop"],
            &upstream["user"],
            &upstream["max_tokens"]
        ),
        (&json!(["END"]), &json!("user-7"), &json!(200))
    );
    assert_eq!(reply.body["type"], "message");
    assert_eq!(reply.body["stop_reason"], "tool_use");
    let tool_use = reply.body["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use block: {}", reply.raw));
    assert_eq!(tool_use["name"], "lookup");
    assert_eq!(tool_use["input"], json!({"word": "fake"}));
    assert_eq!(
        reply.body["usage"],
        json!({"input_tokens": 80, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 20, "output_tokens": 30})
    );
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(charged(&rows[0]), ("messages", 100, 20, 0, 30));
}

#[actix_web::test]
async fn an_openai_stream_comes_back_as_anthropic_events_with_the_charged_usage() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let sent = json!({"model": "gpt", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "Tell me a story"}]});

    let reply = messages(&app, &key, &sent).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let seen = events(&reply.raw);
    let kinds = kinds(&seen);
    assert_eq!(
        (
            kinds[0],
            kinds[1],
            kinds[kinds.len() - 2],
            kinds[kinds.len() - 1]
        ),
        (
            "message_start",
            "content_block_start",
            "message_delta",
            "message_stop"
        ),
        "{}",
        reply.raw
    );
    let start_input = seen[0].1["message"]["usage"]["input_tokens"]
        .as_u64()
        .unwrap();
    assert!(start_input > 0, "message_start reports the counted prompt");
    let expected: String = (0..4).map(fake_upstream::chunk_text).collect();
    assert_eq!(text_of(&seen), expected);
    let usage = &seen[seen.len() - 2].1["usage"];
    assert_eq!(
        (
            &usage["input_tokens"],
            &usage["cache_read_input_tokens"],
            &usage["output_tokens"]
        ),
        (&json!(80), &json!(20), &json!(30))
    );
    assert_eq!(seen[seen.len() - 2].1["delta"]["stop_reason"], "end_turn");
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(charged(&rows[0]), ("messages", 100, 20, 0, 30));
}

#[actix_web::test]
async fn a_stream_broken_mid_way_ends_with_an_anthropic_error_event_and_a_partial_row() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let sent = json!({"model": "gpt-broken", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "Tell me a story"}]});

    let reply = messages(&app, &key, &sent).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let seen = events(&reply.raw);
    let (last, data) = seen.last().unwrap();
    assert_eq!(last, "error", "{}", reply.raw);
    assert_eq!(data["type"], "error");
    assert_eq!(data["error"]["type"], "api_error");
    assert!(!kinds(&seen).contains(&"message_stop"), "{}", reply.raw);
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(
        (rows[0].api.as_str(), rows[0].status.as_str()),
        ("messages", "partial")
    );
}

#[actix_web::test]
async fn a_budget_refusal_is_402_in_anthropic_s_envelope_and_nothing_is_sent() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.000001"}))
        .await;
    let mut sent = cached_request("claude");
    sent["max_tokens"] = json!(100_000);

    let reply = messages(&app, &key, &sent).await;

    assert_eq!(reply.status, 402, "{}", reply.raw);
    assert_eq!(reply.body["type"], "error");
    assert_eq!(reply.body["error"]["type"], "billing_error");
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget")
    );
    assert_eq!(reply.header("x-should-retry"), Some("false"));
    assert_eq!(app.anthropic.state.requests(), 0);
}

#[actix_web::test]
async fn max_tokens_is_required_and_bad_json_is_400_in_anthropic_s_envelope() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let mut missing = cached_request("claude");
    missing.as_object_mut().unwrap().remove("max_tokens");
    let reply = messages(&app, &key, &missing).await;
    assert_eq!(reply.status, 400, "{}", reply.raw);
    assert_eq!(reply.body["type"], "error");
    assert_eq!(reply.body["error"]["type"], "invalid_request_error");
    assert!(reply.raw.contains("max_tokens"), "{}", reply.raw);

    let reply = post(&app, "/v1/messages", &key, &[], b"{\"model\": ").await;
    assert_eq!(reply.status, 400, "{}", reply.raw);
    assert_eq!(
        (&reply.body["type"], &reply.body["error"]["type"]),
        (&json!("error"), &json!("invalid_request_error"))
    );
    assert_eq!(app.anthropic.state.requests(), 0);
}

#[actix_web::test]
async fn the_key_is_read_from_x_api_key_or_bearer_and_refusals_are_anthropic_s() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let body = cached_request("claude").to_string();

    let by_header = post(&app, "/v1/messages", &key, &[], body.as_bytes()).await;
    assert_eq!(by_header.status, 200, "{}", by_header.raw);
    let bearer = format!("Bearer {key}");
    let by_bearer = post(
        &app,
        "/v1/messages",
        "",
        &[("authorization", bearer.as_str())],
        body.as_bytes(),
    )
    .await;
    assert_eq!(by_bearer.status, 200, "{}", by_bearer.raw);

    for key in ["", "tg_nope_wrong"] {
        let refused = post(&app, "/v1/messages", key, &[], body.as_bytes()).await;
        assert_eq!(refused.status, 401, "{}", refused.raw);
        assert_eq!(refused.body["type"], "error");
        assert_eq!(refused.body["error"]["type"], "authentication_error");
    }
    let unknown = post(&app, "/v1/messages/batches", &key, &[], b"{}").await;
    assert_eq!(unknown.status, 404, "{}", unknown.raw);
    assert_eq!(unknown.body["error"]["type"], "not_found_error");
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.api == "messages"));
}

#[actix_web::test]
async fn count_tokens_answers_the_estimate_and_spends_nothing() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let count = |text: String| {
        json!({"model": "claude", "system": "Be brief.",
               "messages": [{"role": "user", "content": text}]})
        .to_string()
    };

    let short = post(
        &app,
        "/v1/messages/count_tokens",
        &key,
        &[],
        count("Hello there".into()).as_bytes(),
    )
    .await;
    let long = post(
        &app,
        "/v1/messages/count_tokens",
        &key,
        &[],
        count("Hello there ".repeat(100)).as_bytes(),
    )
    .await;

    assert_eq!(short.status, 200, "{}", short.raw);
    let short = short.body["input_tokens"].as_u64().unwrap();
    let long = long.body["input_tokens"].as_u64().unwrap();
    assert!((4..60).contains(&short), "{short}");
    assert!(long > short + 150, "{long} vs {short}");
    assert_eq!(app.anthropic.state.requests(), 0);
    assert!(app.ledger_rows(&tenant).await.is_empty());
    let unknown = post(
        &app,
        "/v1/messages/count_tokens",
        &key,
        &[],
        br#"{"model":"nope","messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.raw);
    assert_eq!(unknown.body["error"]["type"], "not_found_error");
}

#[actix_web::test]
async fn count_tokens_is_rate_limited_like_any_call() {
    let setup = setup().tier("slow", &["claude"], 1, 100);
    let app = spawn_app(setup).await;
    let (_tenant, key) = app.tenant_with_key("slow", json!({})).await;
    let body =
        json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]}).to_string();

    let first = post(
        &app,
        "/v1/messages/count_tokens",
        &key,
        &[],
        body.as_bytes(),
    )
    .await;
    let second = post(
        &app,
        "/v1/messages/count_tokens",
        &key,
        &[],
        body.as_bytes(),
    )
    .await;

    assert_eq!(first.status, 200, "{}", first.raw);
    assert_eq!(second.status, 429, "{}", second.raw);
    assert_eq!(second.body["error"]["type"], "rate_limit_error");
    assert!(second.header("retry-after").is_some());
}

#[actix_web::test]
async fn models_answer_in_anthropic_s_list_shape_when_anthropic_version_is_sent() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app
        .client
        .get(format!("{}/v1/models", app.base_url))
        .insert_header(("x-api-key", key.as_str()))
        .insert_header(("anthropic-version", VERSION))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();

    assert_eq!(reply["has_more"], false);
    assert_eq!(reply["data"][0]["type"], "model");
    assert_eq!(reply["first_id"], reply["data"][0]["id"]);
    assert!(reply["data"][0]["display_name"].is_string());
    assert!(reply["data"][0]["created_at"].is_string());
    let openai = app.get("/v1/models", &key).await;
    assert_eq!(openai.body["object"], "list");
}

#[actix_web::test]
async fn the_official_anthropic_python_sdk_creates_streams_uses_tools_and_counts() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let seen = run_sdk(
        "python3",
        "anthropic_messages.py",
        vec![app.base_url.clone(), key.clone()],
    )
    .await;

    assert_eq!(seen["create"]["type"], "message", "{seen}");
    assert!(
        seen["create"]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{seen}"
    );
    assert_eq!(seen["tool"]["stop_reason"], "tool_use", "{seen}");
    assert_eq!(seen["tool"]["name"], "lookup");
    assert_eq!(seen["tool_result"]["type"], "message", "{seen}");
    assert!(seen["count"].as_u64().is_some_and(|n| n > 0), "{seen}");
    let expected: String = (0..4).map(fake_upstream::chunk_text).collect();
    assert_eq!(seen["stream"]["text"], expected.as_str(), "{seen}");
    assert_eq!(seen["stream"]["final_text"], expected.as_str(), "{seen}");

    // One row per call, count_tokens none; the stream's final usage is its row's.
    let rows = app.ledger_rows_eventually(&tenant, 4).await;
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(rows.iter().all(|r| r.api == "messages" && r.status == "ok"));
    let streamed = rows.iter().find(|r| r.route == "gpt").unwrap();
    let usage = &seen["stream"]["usage"];
    assert_eq!(
        (
            usage["input_tokens"].as_i64().unwrap()
                + usage["cache_read_input_tokens"].as_i64().unwrap(),
            usage["cache_read_input_tokens"].as_i64().unwrap(),
            usage["output_tokens"].as_i64().unwrap()
        ),
        (
            streamed.prompt_tokens,
            streamed.cached_tokens,
            streamed.completion_tokens
        )
    );
    let created = rows.iter().find(|r| r.route == "claude").unwrap();
    assert_eq!(
        seen["create"]["output_tokens"],
        json!(created.completion_tokens)
    );
}

#[actix_web::test]
async fn a_failover_from_anthropic_to_openai_still_answers_a_message_and_refusals_keep_anthropic_s_body()
 {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let served = messages(&app, &key, &cached_request("mixed")).await;

    assert_eq!(served.status, 200, "{}", served.raw);
    assert_eq!(served.body["type"], "message", "{}", served.raw);
    assert_eq!(served.body["usage"]["output_tokens"], 30);
    let rows = app.ledger_rows(&tenant).await;
    let last = rows.last().unwrap();
    assert_eq!(
        (last.status.as_str(), last.provider.as_str()),
        ("fallback_ok", "primary")
    );
    assert!(rows.iter().all(|r| r.api == "messages"));

    let refused = messages(&app, &key, &cached_request("claude-refuses")).await;
    assert_eq!(refused.status, 400, "{}", refused.raw);
    assert_eq!(refused.body["type"], "error");
    assert_eq!(refused.body["error"]["type"], "invalid_request_error");
    assert!(
        refused.raw.contains("fake upstream scenario"),
        "{}",
        refused.raw
    );
    assert_eq!(app.fake.stats.requests_for_model("never-after-claude"), 0);
}

/// Server tools bill per use and add input the hold never sees: an offer of
/// one leaves the request before it reaches Anthropic (a `tool_choice` that
/// forces it with it), and the answer names what was removed.
#[actix_web::test]
async fn server_tools_are_taken_out_of_the_offer_and_named_in_a_header() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut sent = cached_request("claude");
    sent["tools"] = json!([
        {"name": "lookup", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 50},
        {"type": "web_fetch_20250910", "name": "web_fetch"}
    ]);
    sent["tool_choice"] = json!({"type": "tool", "name": "web_search"});

    let reply = messages(&app, &key, &sent).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(
        reply.header("x-tollgate-removed-tools"),
        Some("web_search_20250305, web_fetch_20250910")
    );
    let captured = app.anthropic.state.captured();
    let upstream = &captured[0].body;
    assert_eq!(
        upstream["tools"],
        json!([{"name": "lookup", "input_schema": {"type": "object"}}])
    );
    assert!(upstream.get("tool_choice").is_none(), "{upstream}");
}

/// What the hold cannot see or price is refused in Anthropic's envelope,
/// the message naming where it is, before anything is held or sent.
#[actix_web::test]
async fn unpriced_fields_and_betas_are_refused_in_anthropic_s_envelope() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let hour = {
        let mut body = cached_request("claude");
        body["system"][1]["cache_control"]["ttl"] = json!("1h");
        body
    };
    let url_document = {
        let mut body = cached_request("claude");
        body["messages"][0]["content"] = json!([{"type": "document",
            "source": {"type": "url", "url": "https://example.com/huge.pdf"}}]);
        body
    };
    let mcp = {
        let mut body = cached_request("claude");
        body["mcp_servers"] =
            json!([{"type": "url", "name": "x", "url": "https://example.com/mcp"}]);
        body
    };
    for (body, named) in [
        (hour, "system[1].cache_control.ttl"),
        (url_document, "messages[0].content[0].source.type"),
        (mcp, "mcp_servers"),
    ] {
        let reply = messages(&app, &key, &body).await;
        assert_eq!(reply.status, 400, "{}", reply.raw);
        assert_eq!(reply.body["type"], "error", "{}", reply.raw);
        assert_eq!(reply.body["error"]["type"], "invalid_request_error");
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{message}");
    }
    let beta = post(
        &app,
        "/v1/messages",
        &key,
        &[
            ("anthropic-version", VERSION),
            ("anthropic-beta", "context-1m-2025-08-07"),
        ],
        cached_request("claude").to_string().as_bytes(),
    )
    .await;
    assert_eq!(beta.status, 400, "{}", beta.raw);
    assert!(beta.raw.contains("anthropic-beta"), "{}", beta.raw);
    assert!(app.anthropic.state.captured().is_empty());
    assert!(app.ledger_rows(&tenant).await.is_empty());
}

/// A route that prices web search: a fee of 0.01 a search, and each use
/// held at 2,000 input tokens, three uses at the most.
fn search_setup() -> TestSetup {
    const SEARCHING: &str = "claude/searches-7";
    setup()
        .route("claude-search", &[SEARCHING])
        .price(SEARCHING, "3", "0.3", "15")
        .price_field(SEARCHING, "web_search", "0.01")
        .set("routes.claude-search.server_tools.web_search.max_uses", 3)
        .set(
            "routes.claude-search.server_tools.web_search.input_tokens_per_use",
            2000,
        )
        .tier("searcher", &["claude-search"], 1000, 100)
}

fn search_request() -> Value {
    json!({
        "model": "claude-search",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "What happened in Paris today?"}],
        "tools": [
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 50},
            {"type": "web_fetch_20250910", "name": "web_fetch"}
        ]
    })
}

/// Where the route prices web search, the tool leaves bounded by the
/// route's `max_uses` (the caller's 50 lowered to 3), every search is
/// charged its fee beside the tokens, and a tool the route does not price
/// (fetch) is still taken out of the offer.
#[actix_web::test]
async fn a_search_the_route_prices_leaves_bounded_and_each_use_is_charged_its_fee() {
    let app = spawn_app(search_setup()).await;
    let (tenant, key) = app.tenant_with_key("searcher", json!({})).await;

    let reply = messages(&app, &key, &search_request()).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(
        reply.header("x-tollgate-removed-tools"),
        Some("web_fetch_20250910")
    );
    let captured = app.anthropic.state.captured();
    let tools = &captured[0].body["tools"];
    assert_eq!(
        tools,
        &json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}])
    );
    assert_eq!(
        reply.body["usage"]["server_tool_use"]["web_search_requests"],
        3
    );
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!((row.web_searches, row.usage_kind.as_str()), (3, "reported"));
    // 3,000 and 15,000 nano-units a token, and three searches at 0.01.
    let tokens = row.prompt_tokens * 3_000 + row.completion_tokens * 15_000;
    assert_eq!(row.charged_nanos, tokens + 30_000_000, "{row:?}");
    assert_eq!(row.cost_nanos, Some(row.charged_nanos));
}

/// The hold covers every allowed use's fee and input before anything is
/// sent: a budget that fits the call with either alone refuses it with
/// both, and the same call without the search offer passes.
#[actix_web::test]
async fn the_hold_covers_each_search_s_fee_and_input_before_anything_is_sent() {
    let app = spawn_app(search_setup()).await;
    // Held: 100 output tokens (0.0015) and the prompt (under 0.0003), six
    // thousand tokens of search results (0.018) and three fees (0.03).
    let (tenant, key) = app
        .tenant_with_key("searcher", json!({"monthly_budget": "0.045"}))
        .await;

    let refused = messages(&app, &key, &search_request()).await;

    assert_eq!(refused.status, 402, "{}", refused.raw);
    assert_eq!(app.anthropic.state.requests(), 0);
    let mut plain = search_request();
    plain.as_object_mut().unwrap().remove("tools");
    let served = messages(&app, &key, &plain).await;
    assert_eq!(served.status, 200, "{}", served.raw);
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.iter().map(|r| r.web_searches).sum::<i64>(), 0);
}

/// What Claude Code sends on every call, to a route of an OpenAI-kind
/// model: a 32,000-token limit with a 31,999-token thinking budget, and a
/// system message mid-conversation. The thinking becomes the model's
/// reasoning effort (not dropped), the system message stays in place, and
/// `HEAD /` (its probe of the base URL) answers 200.
#[actix_web::test]
async fn claude_code_s_thinking_and_mid_conversation_system_reach_an_openai_model() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let probe = app
        .client
        .head(format!("{}/", app.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(probe.status(), 200);
    let body = json!({
        "model": "gpt", "max_tokens": 32000,
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "say hi"}]},
            {"role": "system", "content": "The user prefers short answers."},
        ],
    });

    let reply = messages(&app, &key, &body).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let captured = app.fake.stats.captured();
    let sent = &captured.last().unwrap().body;
    assert_eq!(sent["reasoning_effort"], "high", "{sent}");
    let roles: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["system", "user", "system"], "{sent}");
}

/// Claude Code's thinking is omitted from the answer and billed whole, so a
/// Claude stream with thinking is held whole, unless it asks (with the
/// `thinking-token-count-…` beta, as Claude Code does) for Anthropic's
/// running estimate of the tokens thought: the relay then counts those
/// estimates, grows the hold a step ahead of them, and cuts the stream in
/// its thinking where the budget ends.
#[actix_web::test]
async fn omitted_thinking_grows_the_hold_by_anthropic_s_estimates_and_is_cut_at_the_budget() {
    let model = "thinker/thinks-4000+words-10";
    let app = spawn_app(
        setup()
            // `claude` caps its output at 200 tokens; this provider sends the caller's limit.
            .provider("thinker", "anthropic", Upstream::Anthropic)
            .set("providers.thinker.api_key_env", "TEST_ANTHROPIC_KEY")
            .route("claude-thinks", &[model])
            .price(model, "10", "10", "400")
            .price_field(model, "hidden_output", "reasoning")
            .set("billing.stream_step_tokens", 256)
            .tier("thinkers", &["claude-thinks"], 1000, 100),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key("thinkers", json!({"monthly_budget": "0.5"}))
        .await;
    let body = json!({"model": "claude-thinks", "max_tokens": 32000, "stream": true,
        "thinking": {"type": "adaptive", "display": "omitted"},
        "messages": [{"role": "user", "content": "think hard"}]});
    let send = |beta: &'static str| {
        let headers = [("anthropic-version", VERSION), ("anthropic-beta", beta)];
        let bytes = body.to_string();
        let app = &app;
        let key = key.clone();
        async move { post(app, "/v1/messages", &key, &headers, bytes.as_bytes()).await }
    };
    // Without the estimates the thinking is unseen: 32,000 tokens held, refused.
    let whole = send("interleaved-thinking-2025-05-14").await;
    assert_eq!(whole.status, 402, "{}", whole.raw);

    let reply = send("interleaved-thinking-2025-05-14,thinking-token-count-2026-05-13").await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let seen = events(&reply.raw);
    let delta = &seen[seen.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens", "{}", reply.raw);
    // 0.5 funds the first step and three more: 1,024 held, the estimates
    // passed on stay a step behind, and no text came after the thinking.
    let estimated: u64 = seen
        .iter()
        .filter_map(|(_, data)| data["delta"]["estimated_tokens"].as_u64())
        .sum();
    assert!((512..=768).contains(&estimated), "{estimated}");
    assert_eq!(text_of(&seen), "");
    let rows = app.ledger_rows_eventually(&tenant, 1).await;
    assert_eq!(rows[0].completion_tokens, 1024, "{:?}", rows[0]);
    assert!(rows[0].charged_nanos <= rows[0].reserved_nanos);
    assert!(rows[0].charged_nanos <= 500_000_000);
    assert_eq!(app.budget(&tenant).await["reserved"], "0");
}

/// A compact PDF of `pages` pages: a few dozen bytes a page, as a PDF of
/// mostly text compresses to, sent inline as Anthropic's document block.
fn pdf_document(pages: usize) -> Value {
    use base64::Engine;
    use std::fmt::Write as _;
    let mut pdf = format!("%PDF-1.4\n2 0 obj << /Type /Pages /Count {pages} >> endobj\n");
    for i in 0..pages {
        let _ = writeln!(
            pdf,
            "{} 0 obj << /Type /Page /Parent 2 0 R >> endobj",
            i + 3
        );
    }
    let data = base64::engine::general_purpose::STANDARD.encode(pdf);
    json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}})
}

#[actix_web::test]
async fn an_inline_pdf_is_held_at_its_pages_not_at_its_base64() {
    let app = spawn_app(setup().price_field(CLAUDE, "image_tokens", 1_600)).await;
    // 20 pages hold 20 × (3,000 + 1,600) input tokens at 3 per 1M, 0.276:
    // past 0.1, though their base64 counts a few hundred tokens.
    let (_tenant, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.1"}))
        .await;
    let with_pdf = |pages| {
        json!({"model": "claude", "max_tokens": 100, "messages": [{"role": "user",
            "content": [pdf_document(pages), {"type": "text", "text": "Summarize it."}]}]})
    };

    let large = messages(&app, &key, &with_pdf(20)).await;
    assert_eq!(large.status, 402, "{}", large.raw);
    assert_eq!(app.anthropic.state.requests(), 0);

    let small = messages(&app, &key, &with_pdf(2)).await;
    assert_eq!(small.status, 200, "{}", small.raw);
    assert_eq!(app.anthropic.state.requests(), 1);
}
