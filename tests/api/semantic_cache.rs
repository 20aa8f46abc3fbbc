//! The semantic cache: a close question is answered from the cache, its
//! embedding charged like any call; what must not be cached is not; the
//! shared store serves replicas and its loss is a miss.

use std::time::Duration;

use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use serde_json::{Value, json};

use crate::support::postgres::PrivateServer;
use crate::support::{TestApp, TestSetup, metric_value, spawn_app, spawn_replica};

const ANSWERS: &str = "usage-100-20-30";
const EMBEDS: &str = "usage-50-0-0";
/// 50 prompt tokens at 2 per 1M.
const EMBEDDING_COST: i64 = 100_000;

/// The semantic cache on `route`: answers kept a minute, questions embedded by `embed`.
fn semantic_cache(setup: TestSetup, route: &str) -> TestSetup {
    let field = |name: &str| format!("routes.{route}.semantic_cache.{name}");
    setup
        .set(&field("threshold"), 0.92)
        .set(&field("ttl_ms"), 60_000)
        .set(&field("embedding_route"), "embed")
}

/// Each test its own route: metrics are the process's, shared by the tests.
fn setup(route: &str) -> TestSetup {
    TestSetup::new()
        .route(route, &["primary/usage-100-20-30"])
        .with(|setup| semantic_cache(setup, route))
        .set(
            &format!("routes.{route}.semantic_cache.bypass_when"),
            vec!["today"],
        )
        .route("embed", &["primary/usage-50-0-0"])
        .tier("free", &[route, "embed"], 1000, 100)
}

fn ask(route: &str, text: &str) -> Value {
    json!({"model": route, "temperature": 0, "messages": [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": text}]})
}

const FRANCE: &str = "What is the capital of France? vec:[1,0,0]";
/// cos = 0.99 / |(0.99, 0.14, 0)| = 0.990148: above 0.92.
const PARAPHRASE: &str = "Which city is France's capital? vec:[0.99,0.14,0]";
/// cos = 0.8: below.
const SPAIN: &str = "What is the capital of Spain? vec:[0.8,0.6,0]";

fn semantic_count(metrics: &str, route: &str, result: &str) -> u64 {
    metric_value(
        metrics,
        &format!("tollgate_semantic_cache_requests_total{{route=\"{route}\",result=\"{result}\"}}"),
    )
}

#[actix_web::test]
async fn a_close_question_is_answered_from_the_cache_and_only_its_embedding_is_charged() {
    const R: &str = "sem-hit";
    let app = spawn_app(setup(R)).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let (other, other_key) = app.tenant_with_key("free", json!({})).await;

    let first = app.chat(&key, &ask(R, FRANCE)).await;
    let close = app.chat(&key, &ask(R, PARAPHRASE)).await;
    let far = app.chat(&key, &ask(R, SPAIN)).await;
    let elsewhere = app.chat(&other_key, &ask(R, FRANCE)).await;

    assert_eq!(first.status, 200, "{}", first.raw);
    assert_eq!(first.header("x-tollgate-cache"), Some("miss"));
    assert_eq!(close.status, 200, "{}", close.raw);
    assert_eq!(close.header("x-tollgate-cache"), Some("semantic"));
    assert_eq!(close.body, first.body, "the first answer, id and all");
    assert_eq!(
        close.header("x-tollgate-cost"),
        Some("0.0001"),
        "a hit costs its embedding"
    );
    assert_eq!(far.header("x-tollgate-cache"), Some("miss"));
    assert_ne!(far.body["id"], first.body["id"]);
    assert_eq!(
        elsewhere.header("x-tollgate-cache"),
        Some("miss"),
        "never shared across tenants"
    );
    assert_eq!(app.fake.stats.requests_for_model(ANSWERS), 3);
    assert_eq!(app.fake.stats.requests_for_model(EMBEDS), 4);

    let rows = app.ledger_rows(&tenant).await;
    let shape: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.api.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(
        shape,
        [
            ("embeddings", "ok"),
            ("chat", "ok"),
            ("embeddings", "ok"),
            ("chat", "cache_hit"),
            ("embeddings", "ok"),
            ("chat", "ok"),
        ]
    );
    for pair in rows.chunks(2) {
        assert_eq!(pair[0].charged_nanos, EMBEDDING_COST, "{:?}", pair[0]);
        assert_eq!(
            pair[0].request_id, pair[1].request_id,
            "the embedding is the request's own call"
        );
    }
    let hit = &rows[3];
    assert_eq!((hit.charged_nanos, hit.reserved_nanos), (0, 0));
    assert_eq!(
        hit.cache_source.as_deref(),
        Some(rows[1].event_id.as_str()),
        "the hit names the row whose answer it served"
    );
    let similarity = hit.cache_similarity.unwrap();
    assert!((989_500..=990_800).contains(&similarity), "{similarity}");
    assert_eq!((hit.prompt_tokens, hit.completion_tokens), (100, 30));
    assert_eq!(app.ledger_rows(&other).await.len(), 2);

    let metrics = app.get("/metrics", "").await.raw;
    assert_eq!(semantic_count(&metrics, R, "hit"), 1);
    assert_eq!(semantic_count(&metrics, R, "miss"), 3);
    let saved = metric_value(
        &metrics,
        &format!("tollgate_semantic_cache_saved_nanos_total{{route=\"{R}\"}}"),
    );
    assert_eq!(saved, u64::try_from(rows[1].charged_nanos).unwrap());
    assert!(
        metrics.contains(&format!(
            "tollgate_semantic_cache_lookup_seconds_bucket{{route=\"{R}\",store=\"memory\""
        )),
        "{metrics}"
    );
}

/// One end user cannot plant an answer for another: an identified end user's
/// answers are theirs, unless the route shares them across end users.
#[actix_web::test]
async fn an_end_users_answers_are_theirs_unless_the_route_shares_them() {
    const R: &str = "sem-users";
    const SHARED: &str = "sem-users-shared";
    let app = spawn_app(
        TestSetup::new()
            .route(R, &["primary/usage-100-20-30"])
            .with(|setup| semantic_cache(setup, R))
            .route("embed", &["primary/usage-50-0-0"])
            .route(SHARED, &["primary/usage-100-20-30"])
            .with(|setup| semantic_cache(setup, SHARED))
            .set(
                &format!("routes.{SHARED}.semantic_cache.share_across_end_users"),
                true,
            )
            .tier("free", &[R, SHARED, "embed"], 1000, 100),
    )
    .await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let as_user = |route: &'static str, user: &'static str, text: &'static str| {
        let app = &app;
        let key = key.clone();
        async move {
            app.chat_with(&key, &ask(route, text), &[("x-tollgate-end-user", user)])
                .await
        }
    };

    let planted = as_user(R, "mallory", FRANCE).await;
    let victim = as_user(R, "alice", PARAPHRASE).await;
    let again = as_user(R, "mallory", PARAPHRASE).await;

    assert_eq!(
        planted.header("x-tollgate-cache"),
        Some("miss"),
        "{}",
        planted.raw
    );
    assert_eq!(
        victim.header("x-tollgate-cache"),
        Some("miss"),
        "not mallory's answer"
    );
    assert_eq!(
        again.header("x-tollgate-cache"),
        Some("semantic"),
        "mallory's own"
    );

    let first = as_user(SHARED, "mallory", FRANCE).await;
    let shared = as_user(SHARED, "alice", PARAPHRASE).await;
    assert_eq!(first.header("x-tollgate-cache"), Some("miss"));
    assert_eq!(
        shared.header("x-tollgate-cache"),
        Some("semantic"),
        "the route shares"
    );
}

#[actix_web::test]
async fn questions_about_live_data_tools_and_sampled_answers_are_never_looked_up() {
    const R: &str = "sem-bypass";
    let app = spawn_app(setup(R)).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    assert_eq!(app.chat(&key, &ask(R, FRANCE)).await.status, 200);
    let embeds_before = app.fake.stats.requests_for_model(EMBEDS);

    let bypass = app
        .chat_with(&key, &ask(R, PARAPHRASE), &[("x-tollgate-cache", "bypass")])
        .await;
    let mut with_tools = ask(R, PARAPHRASE);
    with_tools["tools"] =
        json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]);
    let tools = app.chat(&key, &with_tools).await;
    let mut sampled = ask(R, PARAPHRASE);
    sampled.as_object_mut().unwrap().remove("temperature");
    let default_temperature = app.chat(&key, &sampled).await;
    let live = app
        .chat(&key, &ask(R, "Capital of France today? vec:[1,0,0]"))
        .await;
    let bad = app
        .chat_with(&key, &ask(R, FRANCE), &[("x-tollgate-cache", "please")])
        .await;

    for (reply, what) in [
        (&bypass, "header"),
        (&tools, "tools"),
        (&default_temperature, "temperature"),
        (&live, "rule"),
    ] {
        assert_eq!(reply.status, 200, "{what}: {}", reply.raw);
        assert_eq!(reply.header("x-tollgate-cache"), Some("bypass"), "{what}");
    }
    assert_eq!(bad.status, 400);
    assert_eq!(bad.body["error"]["param"], "X-Tollgate-Cache");
    assert_eq!(
        app.fake.stats.requests_for_model(EMBEDS),
        embeds_before,
        "nothing was embedded"
    );
    let metrics = app.get("/metrics", "").await.raw;
    for reason in ["header", "tools", "temperature", "rule"] {
        let series =
            format!("tollgate_semantic_cache_bypasses_total{{route=\"{R}\",reason=\"{reason}\"}}");
        assert_eq!(metric_value(&metrics, &series), 1, "{reason}");
    }
    assert_eq!(semantic_count(&metrics, R, "hit"), 0);
}

#[actix_web::test]
async fn a_streamed_question_is_answered_from_the_cache_as_a_stream() {
    const R: &str = "sem-stream";
    let app = spawn_app(setup(R)).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let first = app.chat(&key, &ask(R, FRANCE)).await;
    let mut streamed = ask(R, PARAPHRASE);
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});

    let reply = app.chat(&key, &streamed).await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.header("x-tollgate-cache"), Some("semantic"));
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let events: Vec<Value> = reply
        .raw
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let text: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, first.body["choices"][0]["message"]["content"]);
    assert_eq!(events.last().unwrap()["usage"]["completion_tokens"], 30);
    assert!(
        reply.raw.trim_end().ends_with("data: [DONE]"),
        "{}",
        reply.raw
    );
    assert_eq!(app.fake.stats.requests_for_model(ANSWERS), 1);
}

const SHARED: &str = "sem-shared";

fn shared_store(setup: TestSetup, url: &str) -> TestSetup {
    setup
        .set("cache.semantic.store", "postgres")
        .set("cache.semantic.database_url", url)
        .set("cache.semantic.timeout_ms", 2000)
}

async fn kept_answers(url: &str) -> i64 {
    let Ok(db) = Database::connect(url).await else {
        return -1;
    };
    let count = "SELECT count(*) AS n FROM tollgate_semantic_cache";
    let row = db
        .query_one(Statement::from_string(DbBackend::Postgres, count))
        .await;
    let n = match row {
        Ok(Some(row)) => row.try_get::<i64>("", "n").unwrap_or(-1),
        _ => -1,
    };
    let _ = db.close().await;
    n
}

/// Asks until the shared store answers (it connects in the background).
async fn ask_until_cached(
    app: &TestApp,
    key: &str,
    text: &str,
    header: &str,
) -> crate::support::Reply {
    crate::support::wait_until(
        Duration::from_secs(15),
        &format!("`{header}` for {text}"),
        async || {
            let reply = app.chat(key, &ask(SHARED, text)).await;
            assert_eq!(reply.status, 200, "{}", reply.raw);
            if reply.header("x-tollgate-cache") == Some(header) {
                Ok(reply)
            } else {
                Err(reply.raw)
            }
        },
    )
    .await
}

#[actix_web::test]
async fn replicas_share_answers_through_postgres_and_a_store_that_is_down_is_a_miss() {
    let mut store = PrivateServer::start_with_pgvector();
    let url = store.url();
    let setup = shared_store(setup(SHARED), &url);
    let first = spawn_app(setup.clone()).await;
    let second = spawn_replica(&first, &setup).await;
    let (tenant, key) = first.tenant_with_key("free", json!({})).await;

    // The store connects in the background: until then questions are misses, not errors.
    let mut bought = Vec::new();
    crate::support::wait_until(
        Duration::from_secs(15),
        "the store to keep an answer",
        async || {
            let kept = kept_answers(&url).await;
            if kept >= 1 {
                return Ok(());
            }
            let reply = first.chat(&key, &ask(SHARED, FRANCE)).await;
            assert_eq!(reply.status, 200, "{}", reply.raw);
            bought.push(reply.body);
            Err(kept)
        },
    )
    .await;
    let hit = ask_until_cached(&second, &key, PARAPHRASE, "semantic").await;
    assert!(
        bought.contains(&hit.body),
        "the other replica served an answer the first bought: {}",
        hit.raw
    );

    let rows =
        crate::support::wait_until(Duration::from_secs(5), "the cache hit's row", async || {
            let rows = first.ledger_rows(&tenant).await;
            crate::support::done_if(rows.iter().any(|r| r.status == "cache_hit"), rows)
        })
        .await;
    let hit_row = rows.iter().find(|r| r.status == "cache_hit").unwrap();
    let source = rows
        .iter()
        .find(|r| Some(r.event_id.as_str()) == hit_row.cache_source.as_deref())
        .expect("the hit's source row is in the ledger");
    assert_eq!(
        (source.api.as_str(), source.status.as_str()),
        ("chat", "ok")
    );
    assert!((920_000..=1_000_000).contains(&hit_row.cache_similarity.unwrap()));

    let far = second.chat(&key, &ask(SHARED, SPAIN)).await;
    assert_eq!(
        far.header("x-tollgate-cache"),
        Some("miss"),
        "the shared store keeps the threshold too"
    );

    store.stop();
    let down = second.chat(&key, &ask(SHARED, PARAPHRASE)).await;
    assert_eq!(down.status, 200, "{}", down.raw);
    assert_eq!(down.header("x-tollgate-cache"), Some("miss"));
    let metrics = second.get("/metrics", "").await.raw;
    assert!(semantic_count(&metrics, SHARED, "error") >= 1, "{metrics}");

    store.restart();
    ask_until_cached(&second, &key, PARAPHRASE, "semantic").await;
}
