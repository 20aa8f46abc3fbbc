//! The platform and tenant prompts the gateway places first: where each
//! provider API gets them, that they are held before the call like the
//! caller's own text, that the provider's cache prices land on the rows, and
//! that the ledger's review turns a tenant's breakpoints off where its cache
//! writes cost more than its reads save.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::support::{TestApp, TestSetup, Upstream, metric_value, reply, spawn_app};

/// 4,000 and 2,000 bytes: 1,000 and 500 of the Anthropic fake's tokens (4 bytes each).
fn platform_text() -> String {
    "Platform rules apply. "
        .repeat(200)
        .chars()
        .take(4000)
        .collect()
}

fn tenant_text() -> String {
    "Speak as Acme support. "
        .repeat(100)
        .chars()
        .take(2000)
        .collect()
}

/// An Anthropic provider `name` on the Anthropic fake.
fn anthropic(setup: TestSetup, name: &str) -> TestSetup {
    setup.provider(name, "anthropic", Upstream::Anthropic).set(
        &format!("providers.{name}.api_key_env"),
        "TEST_ANTHROPIC_KEY",
    )
}

/// The platform prompt on `route`.
fn platform_prompt(setup: TestSetup, route: &str) -> TestSetup {
    setup.set(&format!("routes.{route}.platform_prompt"), platform_text())
}

fn ask(route: &str, question: &str) -> Value {
    json!({"model": route, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": question}]})
}

async fn scrape(app: &TestApp) -> String {
    let response = app
        .client
        .get(format!("{}/metrics", app.admin_url))
        .send()
        .await
        .unwrap();
    reply(response).await.raw
}

fn nanos(text: &Value) -> i64 {
    tollgate::money::Nanos::parse_decimal(text.as_str().unwrap_or("x"))
        .unwrap()
        .to_db()
}

#[expect(
    clippy::float_arithmetic,
    clippy::cast_precision_loss,
    reason = "the report's hit rate is a float; token counts are far below 2^52"
)]
fn same_ratio(rate: f64, part: u64, whole: u64) -> bool {
    (rate - part as f64 / whole as f64).abs() < 1e-9
}

#[actix_web::test]
async fn anthropic_gets_the_platform_and_tenant_prompts_first_with_breakpoints_and_the_cache_prices_land_on_the_rows()
 {
    const TARGET: &str = "claude-pp/claude-test";
    let app = spawn_app(
        TestSetup::new()
            .with(|setup| anthropic(setup, "claude-pp"))
            .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
            .route("pp-claude", &[TARGET])
            .with(|setup| platform_prompt(setup, "pp-claude"))
            .price(TARGET, "3", "0.3", "15")
            .price_field(TARGET, "cache_write", "3.75")
            .tier("free", &["pp-claude"], 1000, 100),
    )
    .await;
    let prompts = json!({"prompts": {"*": tenant_text()}});
    let (tenant, key) = app.tenant_with_key("free", prompts).await;
    let tokens = |text: &str, kind: &str| {
        let series = format!(
            "tollgate_provider_prompt_tokens_total{{provider=\"claude-pp\",type=\"{kind}\"}}"
        );
        metric_value(text, &series)
    };
    let before = scrape(&app).await;

    let first = app
        .chat(&key, &ask("pp-claude", "What is a gateway?"))
        .await;
    let second = app.chat(&key, &ask("pp-claude", "And a ledger?")).await;

    assert_eq!(first.status, 200, "{}", first.raw);
    assert_eq!(second.status, 200, "{}", second.raw);
    let captured = app.anthropic.state.captured();
    let breakpoint = json!({"type": "ephemeral"});
    for sent in &captured {
        let system = &sent.body["system"];
        assert_eq!(system[0]["text"], platform_text().as_str());
        assert_eq!(system[0]["cache_control"], breakpoint);
        assert_eq!(system[1]["text"], tenant_text().as_str());
        assert_eq!(system[1]["cache_control"], breakpoint);
        assert_eq!(system[2], json!({"type": "text", "text": "Be brief."}));
    }
    let rows = app.ledger_rows(&tenant).await;
    assert_eq!(rows.len(), 2);
    // The first call writes both prompts (1,500 tokens), the second reads them.
    assert_eq!(
        (rows[0].cache_write_tokens, rows[0].cached_tokens),
        (1500, 0)
    );
    assert_eq!(
        (rows[1].cache_write_tokens, rows[1].cached_tokens),
        (0, 1500)
    );
    for row in &rows {
        let uncached = row.prompt_tokens - row.cached_tokens - row.cache_write_tokens;
        // Per 1M: 3 uncached, 0.3 read, 3.75 written, 15 out; in nanos per token.
        let cost = uncached * 3000
            + row.cached_tokens * 300
            + row.cache_write_tokens * 3750
            + row.completion_tokens * 15_000;
        assert_eq!(row.charged_nanos, cost, "{row:?}");
    }

    let after = scrape(&app).await;
    let sum = |f: fn(&entity::usage::Model) -> i64| -> u64 {
        rows.iter().map(f).sum::<i64>().try_into().unwrap()
    };
    let cached = sum(|r| r.cached_tokens);
    let written = sum(|r| r.cache_write_tokens);
    let prompt = sum(|r| r.prompt_tokens);
    assert_eq!(tokens(&after, "cached") - tokens(&before, "cached"), cached);
    assert_eq!(
        tokens(&after, "cache_write") - tokens(&before, "cache_write"),
        written
    );
    assert_eq!(
        tokens(&after, "prompt") - tokens(&before, "prompt"),
        prompt - cached - written
    );
    let report = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/spend?group_by=provider"),
            None,
        )
        .await;
    assert_eq!(report.status, 200, "{}", report.raw);
    let rate = report.body["rows"][0]["prompt_cache_hit_rate"]
        .as_f64()
        .unwrap();
    assert!(
        same_ratio(rate, cached, prompt),
        "{rate} vs {cached} / {prompt}"
    );
}

#[actix_web::test]
async fn the_messages_door_and_openai_targets_get_the_prompts_before_the_callers_own() {
    const TARGET: &str = "claude-pm/claude-test";
    let app = spawn_app(
        TestSetup::new()
            .with(|setup| anthropic(setup, "claude-pm"))
            .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
            .provider("responder-pp", "openai", Upstream::FakeV1)
            .set("providers.responder-pp.api_key_env", "TEST_PRIMARY_KEY")
            .set("providers.responder-pp.responses", true)
            .route("pm-claude", &[TARGET])
            .with(|setup| platform_prompt(setup, "pm-claude"))
            .route("pm-openai", &["primary/usage-30-0-5"])
            .with(|setup| platform_prompt(setup, "pm-openai"))
            .route("pm-responses", &["responder-pp/usage-30-0-5"])
            .with(|setup| platform_prompt(setup, "pm-responses"))
            .price(TARGET, "3", "0.3", "15")
            .tier(
                "free",
                &["pm-claude", "pm-openai", "pm-responses"],
                1000,
                100,
            ),
    )
    .await;
    let prompts = json!({"prompts": {"*": tenant_text(), "pm-openai": "OpenAI route voice."}});
    let (_, key) = app.tenant_with_key("free", prompts).await;

    let body = json!({"model": "pm-claude", "max_tokens": 50, "system": "Caller system.",
        "messages": [{"role": "user", "content": "Hi"}]});
    let messages = app
        .client
        .post(format!("{}/v1/messages", app.base_url))
        .insert_header(("x-api-key", key.as_str()))
        .insert_header(("anthropic-version", "2023-06-01"))
        .send_json(&body)
        .await
        .unwrap();
    let messages = reply(messages).await;
    assert_eq!(messages.status, 200, "{}", messages.raw);
    let sent = &app.anthropic.state.captured()[0].body;
    assert_eq!(sent["system"][0]["text"], platform_text().as_str());
    assert_eq!(sent["system"][1]["text"], tenant_text().as_str());
    assert_eq!(
        sent["system"][1]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(
        sent["system"][2],
        json!({"type": "text", "text": "Caller system."})
    );
    assert_eq!(messages.body["usage"]["cache_creation_input_tokens"], 1500);

    let chat = app.chat(&key, &ask("pm-openai", "Hi")).await;
    assert_eq!(chat.status, 200, "{}", chat.raw);
    let responses = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "pm-responses", "instructions": "Be brief.", "input": "Hi"}),
        )
        .await;
    assert_eq!(responses.status, 200, "{}", responses.raw);
    let captured = app.fake.stats.captured();
    let chat_sent = captured
        .iter()
        .find(|c| c.path.ends_with("/chat/completions"))
        .unwrap();
    assert_eq!(
        chat_sent.body["messages"],
        json!([
            {"role": "system", "content": platform_text()},
            {"role": "system", "content": "OpenAI route voice."},
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"}
        ]),
        "the route's own tenant prompt, no breakpoints"
    );
    let responses_sent = captured
        .iter()
        .find(|c| c.path.ends_with("/responses"))
        .unwrap();
    assert_eq!(
        responses_sent.body["instructions"],
        format!("{}\n\n{}\n\nBe brief.", platform_text(), tenant_text())
    );
}

#[actix_web::test]
async fn the_placed_prompts_are_held_before_the_call() {
    const TARGET: &str = "claude-ph/claude-test";
    // 60,000 bytes of distinct words: thousands of tokens at 3 per 1M.
    let long = (0..6000).fold(String::new(), |mut text, i| {
        let _ = write!(text, "rule{i} ");
        text
    });
    let app = spawn_app(
        TestSetup::new()
            .with(|setup| anthropic(setup, "claude-ph"))
            .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
            .route("ph-claude", &[TARGET])
            .set("routes.ph-claude.platform_prompt", long)
            .route("ph-bare", &[TARGET])
            .price(TARGET, "3", "0.3", "15")
            .tier("free", &["ph-claude", "ph-bare"], 1000, 100),
    )
    .await;
    // The caller's own request holds about 0.0015 (100 out at 15 per 1M);
    // with the placed prompt counted it holds more than the whole budget.
    let (_, key) = app
        .tenant_with_key("free", json!({"monthly_budget": "0.01"}))
        .await;

    let bare = app.chat(&key, &ask("ph-bare", "Hi")).await;
    let placed = app.chat(&key, &ask("ph-claude", "Hi")).await;

    assert_eq!(bare.status, 200, "{}", bare.raw);
    assert_eq!(placed.status, 402, "{}", placed.raw);
    assert_eq!(placed.error_code(), "budget_exceeded");
    assert_eq!(
        app.anthropic.state.captured().len(),
        1,
        "nothing left for the prompt that did not fit"
    );
}

const WRITES: &str = "claude-pr/writes+usage-10-2048-0-5";
const READS: &str = "claude-pr/reads+usage-10-100-4000-5";

fn review_setup() -> TestSetup {
    TestSetup::new()
        .with(|setup| anthropic(setup, "claude-pr"))
        .env("TEST_ANTHROPIC_KEY", "sk-ant-test")
        .route("pr-writes", &[WRITES])
        .with(|setup| platform_prompt(setup, "pr-writes"))
        .route("pr-reads", &[READS])
        .with(|setup| platform_prompt(setup, "pr-reads"))
        .price(WRITES, "3", "0.3", "15")
        .price_field(WRITES, "cache_write", "3.75")
        .price(READS, "3", "0.3", "15")
        .price_field(READS, "cache_write", "3.75")
        .set("prompt_cache.review_interval_ms", 0)
        .set("prompt_cache.min_writes", 3)
        .tier("free", &["pr-writes", "pr-reads"], 1000, 100)
}

fn marked(app: &TestApp, index: usize) -> bool {
    app.anthropic.state.captured()[index].body["system"][0]
        .get("cache_control")
        .is_some()
}

#[actix_web::test]
async fn breakpoints_stop_where_the_ledger_shows_cache_writes_cost_more_than_reads_save() {
    let app = spawn_app(review_setup()).await;
    let (wastes, wastes_key) = app.tenant_with_key("free", json!({})).await;
    let (pays, pays_key) = app.tenant_with_key("free", json!({})).await;
    let (insists, insists_key) = app
        .tenant_with_key("free", json!({"prompt_breakpoints": "on"}))
        .await;
    for _ in 0..3 {
        for (key, route) in [
            (&wastes_key, "pr-writes"),
            (&pays_key, "pr-reads"),
            (&insists_key, "pr-writes"),
        ] {
            assert_eq!(app.chat(key, &ask(route, "Hi")).await.status, 200);
        }
    }
    assert!(
        (0..9).all(|i| marked(&app, i)),
        "on until a review says otherwise"
    );
    app.flush_ledger().await;

    let review = app.admin("POST", "/prompt-cache/review", None).await;

    assert_eq!(review.status, 200, "{}", review.raw);
    let of = |tenant: &str| -> Value {
        review.body["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["tenant"] == tenant)
            .cloned()
            .unwrap_or_else(|| panic!("no review of {tenant}: {}", review.raw))
    };
    // 3 × 2,048 written at 0.75 per 1M above plain input; nothing read.
    let wasted = of(&wastes);
    assert_eq!(wasted["writing_calls"], 3);
    assert_eq!(nanos(&wasted["write_premium"]), 4_608_000);
    assert_eq!(nanos(&wasted["read_savings"]), 0);
    assert_eq!(wasted["breakpoints"], false);
    // 300 written (225,000 nanos above input), 12,000 read at 2.7 per 1M below it.
    let paid = of(&pays);
    assert_eq!(nanos(&paid["write_premium"]), 225_000);
    assert_eq!(nanos(&paid["read_savings"]), 32_400_000);
    assert_eq!(paid["breakpoints"], true);
    assert_eq!(of(&insists)["breakpoints"], false);
    let metrics = scrape(&app).await;
    assert_eq!(
        metric_value(&metrics, "tollgate_prompt_breakpoints_off_tenants"),
        2
    );
    let last = app.admin("GET", "/prompt-cache", None).await;
    assert_eq!(last.body["tenants"], review.body["tenants"]);

    for (key, route) in [
        (&wastes_key, "pr-writes"),
        (&pays_key, "pr-reads"),
        (&insists_key, "pr-writes"),
    ] {
        assert_eq!(app.chat(key, &ask(route, "Hi")).await.status, 200);
    }
    assert!(!marked(&app, 9), "auto, and the writes did not pay");
    assert!(marked(&app, 10), "auto, and the reads paid");
    assert!(marked(&app, 11), "`on` keeps them whatever the review says");
    assert_eq!(
        app.anthropic.state.captured()[9].body["system"][0]["text"],
        platform_text().as_str(),
        "the prompt is still placed, only unmarked"
    );
}

#[actix_web::test]
async fn tenant_prompts_are_checked_when_set() {
    let app = spawn_app(review_setup()).await;
    let (tenant, _) = app.tenant_with_key("free", json!({})).await;
    let path = format!("/tenants/{tenant}");
    for (patch, field) in [
        (json!({"prompts": {"nowhere": "text"}}), "prompts.nowhere"),
        (json!({"prompts": {"*": "  "}}), "prompts.*"),
        (
            json!({"prompt_breakpoints": "sometimes"}),
            "prompt_breakpoints",
        ),
    ] {
        let refused = app.admin("PATCH", &path, Some(patch)).await;
        assert_eq!(refused.status, 400, "{}", refused.raw);
        assert_eq!(refused.body["error"]["param"], field, "{}", refused.raw);
    }
    let set = app
        .admin(
            "PATCH",
            &path,
            Some(json!({"prompts": {"pr-reads": "Reads voice."}, "prompt_breakpoints": "off"})),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.raw);
    assert_eq!(set.body["prompts"], json!({"pr-reads": "Reads voice."}));
    assert_eq!(set.body["prompt_breakpoints"], "off");
    let cleared = app
        .admin("PATCH", &path, Some(json!({"prompts": null})))
        .await;
    assert_eq!(cleared.body["prompts"], json!({}));
}
