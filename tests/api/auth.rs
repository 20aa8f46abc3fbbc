use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::clock::{Clock, ManualClock};

use crate::support::{ADMIN_TOKEN, TestSetup, chat_body, now_ms, spawn_app, spawn_replica};

fn setup() -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 1000, 100)
}

#[actix_web::test]
async fn malformed_unknown_and_missing_keys_get_401() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let (key_id, _) = key.strip_prefix("tg_").unwrap().split_once('_').unwrap();
    let wrong_secret = format!("tg_{key_id}_{}", "x".repeat(40));
    let unknown_id = format!("tg_zzzzzzzzzzzz_{}", "y".repeat(40));

    for bad in ["", "sk-not-ours", ADMIN_TOKEN, &wrong_secret, &unknown_id] {
        let reply = app.chat(bad, &chat_body("fast")).await;
        assert_eq!(reply.status, 401, "{bad:?}: {}", reply.raw);
        assert_eq!(reply.error_code(), "invalid_api_key");
    }
    assert_eq!(app.fake.stats.requests(), 0);
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
}

#[actix_web::test]
async fn a_key_revoked_through_the_api_is_refused_at_once() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let key_id = key
        .strip_prefix("tg_")
        .unwrap()
        .split_once('_')
        .unwrap()
        .0
        .to_owned();
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);

    let revoked = app.admin("DELETE", &format!("/keys/{key_id}"), None).await;
    assert_eq!(revoked.status, 200, "{}", revoked.raw);

    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 401);
    assert_eq!(
        app.admin("DELETE", "/keys/nosuchkey123", None).await.status,
        404
    );
}

#[actix_web::test]
async fn a_key_revoked_by_the_cli_is_refused_within_a_second() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;
    let key_id = key
        .strip_prefix("tg_")
        .unwrap()
        .split_once('_')
        .unwrap()
        .0
        .to_owned();
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);

    let config = app.config_path.clone();
    let output = actix_web::rt::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args([
                "--config",
                config.to_str().unwrap(),
                "key",
                "revoke",
                &key_id,
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    crate::support::wait_until(
        Duration::from_secs(2),
        "the revocation to reach the gateway (a 401)",
        async || {
            let status = app.chat(&key, &chat_body("fast")).await.status;
            crate::support::done_if(status == 401, status)
        },
    )
    .await;
}

#[actix_web::test]
async fn admin_endpoints_refuse_tenant_keys_and_missing_tokens() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    for token in [key.as_str(), "", "not-the-admin-token"] {
        let reply = app.get("/admin/v1/tenants", token).await;
        assert_eq!(reply.status, 401, "{token:?}: {}", reply.raw);
        assert_eq!(reply.error_code(), "invalid_admin_token");
        let reply = app
            .get(&format!("/admin/v1/tenants/{tenant}/budget"), token)
            .await;
        assert_eq!(reply.status, 401);
    }
    assert_eq!(app.get("/admin/v1/tenants", ADMIN_TOKEN).await.status, 200);
}

fn key_id(key: &str) -> String {
    let (id, _) = key.strip_prefix("tg_").unwrap().split_once('_').unwrap();
    id.to_owned()
}

#[actix_web::test]
async fn a_key_works_until_its_expires_at_then_gets_401_key_expired() {
    let clock = Arc::new(ManualClock::new(now_ms()));
    let app = spawn_app(setup().clock(clock.clone())).await;
    let (tenant, _) = app.tenant_with_key("free", json!({})).await;
    let expires_at_s = clock.now_ms() / 1000 + 60;
    let issued = app
        .admin(
            "POST",
            &format!("/tenants/{tenant}/keys"),
            Some(json!({ "expires_at": expires_at_s })),
        )
        .await;
    assert_eq!(issued.status, 201, "{}", issued.raw);
    let key = issued.body["key"].as_str().unwrap().to_owned();
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);

    clock.advance_ms(60_000);
    let refused = app.chat(&key, &chat_body("fast")).await;
    assert_eq!(refused.status, 401, "{}", refused.raw);
    assert_eq!(refused.error_code(), "key_expired");
    let listed = app
        .admin("GET", &format!("/tenants/{tenant}/keys"), None)
        .await;
    let view = listed.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == key_id(&key).as_str())
        .unwrap()
        .clone();
    assert_eq!(view["expires_at_ms"], json!(expires_at_s * 1000));

    // Moved later, the key works again; `null` makes it last.
    let id = key_id(&key);
    let later = app
        .admin(
            "PATCH",
            &format!("/keys/{id}"),
            Some(json!({ "expires_at": "2999-01-01T00:00:00+08:00" })),
        )
        .await;
    assert_eq!(later.status, 200, "{}", later.raw);
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    let forever = app
        .admin(
            "PATCH",
            &format!("/keys/{id}"),
            Some(json!({ "expires_at": null })),
        )
        .await;
    assert_eq!(
        forever.body["expires_at_ms"],
        json!(null),
        "{}",
        forever.raw
    );
}

#[actix_web::test]
async fn an_expiry_patched_on_one_replica_refuses_the_key_on_another_within_the_sync_bound() {
    let setup = setup();
    let first = spawn_app(setup.clone()).await;
    let second = spawn_replica(&first, &setup).await;
    let (_tenant, key) = first
        .tenant_with_key("free", json!({"monthly_budget": "5"}))
        .await;
    let budget = first
        .admin(
            "PATCH",
            &format!("/keys/{}", key_id(&key)),
            Some(json!({"monthly_budget": "2"})),
        )
        .await;
    assert_eq!(budget.status, 200, "{}", budget.raw);
    // The second replica knows the key before the change.
    assert_eq!(second.chat(&key, &chat_body("fast")).await.status, 200);

    let past = first
        .admin(
            "PATCH",
            &format!("/keys/{}", key_id(&key)),
            Some(json!({ "expires_at": "2020-01-01T00:00:00Z" })),
        )
        .await;
    assert_eq!(past.status, 200, "{}", past.raw);
    // Only the expiry changed: the key's budget is as it was.
    assert_eq!(past.body["monthly_budget"], json!("2"), "{}", past.raw);
    assert_eq!(
        first.chat(&key, &chat_body("fast")).await.error_code(),
        "key_expired"
    );
    crate::support::wait_until(
        Duration::from_secs(2),
        "the expiry to reach the other replica (a 401 key_expired)",
        async || {
            let reply = second.chat(&key, &chat_body("fast")).await;
            let code = reply.error_code().to_owned();
            crate::support::done_if(reply.status == 401 && code == "key_expired", code)
        },
    )
    .await;
}

#[actix_web::test]
async fn an_expires_at_that_is_not_an_instant_is_a_400_naming_it() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    for bad in [
        json!("tomorrow"),
        json!(-5),
        json!({"at": 1}),
        json!("2026-13-01T00:00:00Z"),
    ] {
        let issued = app
            .admin(
                "POST",
                &format!("/tenants/{tenant}/keys"),
                Some(json!({ "expires_at": bad })),
            )
            .await;
        assert_eq!(issued.status, 400, "{bad}: {}", issued.raw);
        assert_eq!(
            issued.body["error"]["param"], "expires_at",
            "{}",
            issued.raw
        );
        let patched = app
            .admin(
                "PATCH",
                &format!("/keys/{}", key_id(&key)),
                Some(json!({ "expires_at": bad })),
            )
            .await;
        assert_eq!(patched.status, 400, "{bad}: {}", patched.raw);
    }
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
}
