//! `server.admin_listen`: operations on their own listener, the API port
//! answering 404 for them as for any unknown path.

use serde_json::json;

use crate::support::{ADMIN_TOKEN, TestSetup, chat_body, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 1000, 100)
}

#[actix_web::test]
async fn with_admin_listen_operations_answer_only_there_and_the_api_only_on_the_api_port() {
    let app = spawn_app(setup().admin_listen("127.0.0.1:0")).await;
    assert_ne!(app.admin_url, app.base_url);
    // Issued through the admin listener (the helpers use `admin_url`).
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;
    let api = app.base_url.as_str();
    let admin = app.admin_url.as_str();

    let chat = app.chat(&key, &chat_body("fast")).await;
    assert_eq!(chat.status, 200, "{}", chat.raw);

    for path in ["/metrics", "/readyz", "/admin/v1/tenants"] {
        let hidden = app.get_from(api, path, ADMIN_TOKEN).await;
        assert_eq!(hidden.status, 404, "{path}: {}", hidden.raw);
        assert_eq!(hidden.error_code(), "not_found", "{path}: {}", hidden.raw);
        assert_eq!(hidden.body["error"]["type"], "invalid_request_error");
        let served = app.get_from(admin, path, ADMIN_TOKEN).await;
        assert_eq!(served.status, 200, "{path}: {}", served.raw);
    }
    let tenants = app.get_from(admin, "/admin/v1/tenants", ADMIN_TOKEN).await;
    assert!(tenants.raw.contains(&tenant), "{}", tenants.raw);
    let scrape = app.get_from(admin, "/metrics", "").await;
    assert!(
        scrape.raw.contains("tollgate_requests_total"),
        "{}",
        scrape.raw
    );

    for base in [api, admin] {
        assert_eq!(app.get_from(base, "/healthz", "").await.status, 200);
    }
    // The admin listener serves no model API.
    let models = app.get_from(admin, "/v1/models", &key).await;
    assert_eq!(models.status, 404, "{}", models.raw);
    assert_eq!(app.get_from(api, "/v1/models", &key).await.status, 200);
}

#[actix_web::test]
async fn without_admin_listen_everything_answers_on_the_one_port() {
    let app = spawn_app(setup()).await;
    assert_eq!(app.admin_url, app.base_url);
    for path in ["/metrics", "/readyz", "/healthz", "/admin/v1/tenants"] {
        let reply = app.get(path, ADMIN_TOKEN).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.raw);
    }
}
