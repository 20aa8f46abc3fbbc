//! Stored responses of the Responses door: a conversation carried by
//! `previous_response_id` or by `item_reference` items is expanded before it
//! is held, so the hold covers every earlier turn; stored responses are
//! read, listed and deleted by their tenant only.

use serde_json::{Value, json};

use crate::support::{TestApp, TestSetup, Upstream, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .provider("keeper", "openai", Upstream::FakeV1)
        .set("providers.keeper.api_key_env", "TEST_PRIMARY_KEY")
        .set("providers.keeper.responses", true)
        .route("chatty", &["primary/usage-100-0-20"])
        .route("talker", &["primary/usage-100-0-20+tool"])
        .route("native", &["keeper/usage-100-0-0-20"])
        .tier("free", &["chatty", "talker", "native"], 1000, 50)
}

async fn turn(app: &TestApp, key: &str, body: &Value) -> Value {
    let reply = app.post_json("/v1/responses", key, body).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    reply.body
}

/// Forty turns, each naming the one before: the chat model gets every
/// earlier turn, the hold grows with them, and each turn is stored.
#[actix_web::test]
async fn forty_turns_by_previous_response_id_are_held_and_sent_whole() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let mut previous = Value::Null;
    for i in 0..40 {
        let body = json!({"model": "chatty", "input": format!("turn {i}: tell me more"),
                          "previous_response_id": previous});
        previous = turn(&app, &key, &body).await["id"].clone();
    }
    let captured = app.fake.stats.captured();
    let last = &captured.last().unwrap().body["messages"];
    let users = last
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    let answers = last
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    assert_eq!((users, answers), (40, 39));
    assert!(last[0]["content"].as_str().unwrap().starts_with("turn 0"));

    let rows = app.ledger_rows_eventually(&tenant, 40).await;
    let first = rows.iter().map(|r| r.reserved_nanos).min().unwrap();
    let held = rows.iter().map(|r| r.reserved_nanos).max().unwrap();
    let prompt = rows.iter().map(|r| r.prompt_tokens).max().unwrap();
    assert!(
        held > first,
        "the hold grows with the conversation: {first} .. {held}"
    );
    assert!(prompt >= 100, "{prompt}");

    let stored = app
        .get(
            &format!("/v1/responses/{}", previous.as_str().unwrap()),
            &key,
        )
        .await;
    assert_eq!(stored.status, 200, "{}", stored.raw);
    assert_eq!(stored.body["id"], previous);
    let path = format!("/v1/responses/{}/input_items", previous.as_str().unwrap());
    let items = app.get(&path, &key).await;
    assert_eq!(
        items.body["data"].as_array().map(Vec::len),
        Some(79),
        "{}",
        items.raw
    );
}

/// One tenant's stored responses are not another's: neither a reference
/// nor a read finds them, and a deleted one is gone; `store: false` keeps nothing.
#[actix_web::test]
async fn stored_responses_are_the_tenant_s_own_and_store_false_keeps_none() {
    let app = spawn_app(setup()).await;
    let (_a, key_a) = app.tenant_with_key("free", json!({})).await;
    let (_b, key_b) = app.tenant_with_key("free", json!({})).await;
    let first = turn(&app, &key_a, &json!({"model": "chatty", "input": "hi"})).await;
    let id = first["id"].as_str().unwrap();

    let other = app
        .post_json(
            "/v1/responses",
            &key_b,
            &json!({"model": "chatty", "input": "and?", "previous_response_id": id}),
        )
        .await;
    assert_eq!(other.status, 400, "{}", other.raw);
    assert_eq!(other.body["error"]["param"], "previous_response_id");
    assert_eq!(
        app.get(&format!("/v1/responses/{id}"), &key_b).await.status,
        404
    );

    let unstored = turn(
        &app,
        &key_a,
        &json!({"model": "chatty", "input": "x", "store": false}),
    )
    .await;
    let unstored = unstored["id"].as_str().unwrap();
    assert_eq!(
        app.get(&format!("/v1/responses/{unstored}"), &key_a)
            .await
            .status,
        404
    );

    let deleted = app
        .client
        .delete(format!("{}/v1/responses/{id}", app.base_url))
        .insert_header(("authorization", format!("Bearer {key_a}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    assert_eq!(
        app.get(&format!("/v1/responses/{id}"), &key_a).await.status,
        404
    );
}

/// What the AI SDK sends on a tool loop's second step (its default, `store`
/// left on): the model's function call by `item_reference`, then its output.
/// The reference is expanded into the call; a passthrough provider is still
/// told `store: false` and never sees the reference.
#[actix_web::test]
async fn an_item_reference_is_expanded_into_the_stored_item() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let tools = json!([{"type": "function", "name": "weather",
                        "parameters": {"type": "object", "properties": {}}}]);
    let step1 = turn(
        &app,
        &key,
        &json!({"model": "talker", "input": "weather?", "tools": tools}),
    )
    .await;
    let call = step1["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "function_call")
        .unwrap()
        .clone();
    let step2 = json!({"model": "native", "tools": tools, "input": [
        {"role": "user", "content": "weather?"},
        {"type": "item_reference", "id": call["id"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    ]});
    turn(&app, &key, &step2).await;
    let captured = app.fake.stats.captured();
    let sent = &captured.last().unwrap().body;
    assert_eq!(sent["input"][1]["type"], "function_call", "{sent}");
    assert_eq!(sent["input"][1]["call_id"], call["call_id"]);
    assert_eq!(sent["store"], false);

    let missing = app
        .post_json(
            "/v1/responses",
            &key,
            &json!({"model": "chatty", "input": [
            {"type": "item_reference", "id": "fc_nothing"}]}),
        )
        .await;
    assert_eq!(missing.status, 400, "{}", missing.raw);
    assert_eq!(missing.body["error"]["param"], "input[0]");
}
