use std::time::Duration;

use serde_json::json;

use crate::support::{ADMIN_TOKEN, TestSetup, chat_body, spawn_app};

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

    let mut status = 200;
    for _ in 0..20 {
        actix_rt::time::sleep(Duration::from_millis(100)).await;
        status = app.chat(&key, &chat_body("fast")).await.status;
        if status == 401 {
            break;
        }
    }
    assert_eq!(
        status, 401,
        "the revocation did not reach the gateway within 2 s"
    );
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
