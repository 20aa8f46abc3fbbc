//! Routes beyond a tenant's tier: a grant adds a route its tier lacks, a pin
//! answers a route with another for one tenant (a rollout tenant by tenant).

use serde_json::{Value, json};

use crate::support::{TestApp, TestSetup, chat_body, spawn_app};

fn setup() -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/usage-100-0-10"])
        .route("smart", &["secondary/usage-1000-0-100"])
        .route("smart-next", &["primary/usage-500-0-50"])
        .tier("free", &["fast"], 1000, 100)
        .tier("standard", &["fast", "smart"], 1000, 100)
}

async fn listed_models(app: &TestApp, key: &str) -> Vec<String> {
    let models = app.get("/v1/models", key).await;
    assert_eq!(models.status, 200, "{}", models.raw);
    models.body["data"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|m| m["id"].as_str().expect("an id").to_owned())
        .collect()
}

#[actix_web::test]
async fn a_route_granted_beyond_the_tier_is_usable_and_listed_for_that_tenant_alone() {
    let app = spawn_app(setup()).await;
    let (_pilot, pilot_key) = app
        .tenant_with_key("free", json!({"granted_routes": ["smart"]}))
        .await;
    let (_other, other_key) = app.tenant_with_key("free", json!({})).await;

    let piloted = app.chat(&pilot_key, &chat_body("smart")).await;
    assert_eq!(piloted.status, 200, "{}", piloted.raw);
    assert_eq!(listed_models(&app, &pilot_key).await, ["fast", "smart"]);

    let refused = app.chat(&other_key, &chat_body("smart")).await;
    assert_eq!(refused.status, 403, "{}", refused.raw);
    assert_eq!(listed_models(&app, &other_key).await, ["fast"]);
}

#[actix_web::test]
async fn a_grant_is_patched_in_and_out_and_an_allow_list_does_not_remove_it() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app
        .tenant_with_key("free", json!({"allowed_routes": ["fast"]}))
        .await;
    assert_eq!(app.chat(&key, &chat_body("smart")).await.status, 403);

    let path = format!("/tenants/{tenant}");
    let granted = app
        .admin("PATCH", &path, Some(json!({"granted_routes": ["smart"]})))
        .await;
    assert_eq!(granted.status, 200, "{}", granted.raw);
    assert_eq!(granted.body["granted_routes"], json!(["smart"]));
    assert_eq!(app.chat(&key, &chat_body("smart")).await.status, 200);
    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);

    let revoked = app
        .admin("PATCH", &path, Some(json!({"granted_routes": null})))
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.raw);
    assert_eq!(revoked.body["granted_routes"], json!([]));
    assert_eq!(app.chat(&key, &chat_body("smart")).await.status, 403);
}

#[actix_web::test]
async fn a_pinned_route_is_answered_by_its_pin_for_that_tenant_alone() {
    let app = spawn_app(setup()).await;
    let pins = json!({"route_pins": {"smart": "smart-next"}});
    let (pinned, pinned_key) = app.tenant_with_key("standard", pins).await;
    let (other, other_key) = app.tenant_with_key("standard", json!({})).await;

    let moved = app.chat(&pinned_key, &chat_body("smart")).await;
    assert_eq!(moved.status, 200, "{}", moved.raw);
    assert_eq!(moved.header("x-tollgate-provider"), Some("primary"));
    let stayed = app.chat(&other_key, &chat_body("smart")).await;
    assert_eq!(stayed.status, 200, "{}", stayed.raw);
    assert_eq!(stayed.header("x-tollgate-provider"), Some("secondary"));

    app.settled().await;
    let routes = |rows: Vec<entity::usage::Model>| -> Vec<String> {
        rows.iter().map(|r| r.route.clone()).collect()
    };
    assert_eq!(routes(app.ledger_rows(&pinned).await), ["smart-next"]);
    assert_eq!(routes(app.ledger_rows(&other).await), ["smart"]);
    // The pin answers; it grants nothing: smart-next itself stays outside the tier.
    assert_eq!(
        app.chat(&pinned_key, &chat_body("smart-next")).await.status,
        403
    );
}

async fn refused_param(app: &TestApp, body: Value) -> String {
    let reply = app.admin("POST", "/tenants", Some(body)).await;
    assert_eq!(reply.status, 400, "{}", reply.raw);
    reply.body["error"]["param"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[actix_web::test]
async fn route_fields_naming_unknown_routes_self_pins_or_chains_are_refused() {
    let app = spawn_app(setup()).await;
    let tenant = |extra: Value| {
        let mut body = json!({"id": crate::support::unique_tenant("r"), "tier": "free"});
        body.as_object_mut()
            .expect("an object")
            .extend(extra.as_object().expect("an object").clone());
        body
    };
    let cases = [
        (json!({"granted_routes": ["gold"]}), "granted_routes"),
        (json!({"route_pins": {"gold": "smart"}}), "route_pins.gold"),
        (json!({"route_pins": {"smart": "gold"}}), "route_pins.smart"),
        (
            json!({"route_pins": {"smart": "smart"}}),
            "route_pins.smart",
        ),
        (
            json!({"route_pins": {"fast": "smart", "smart": "smart-next"}}),
            "route_pins.fast",
        ),
    ];
    for (extra, param) in cases {
        assert_eq!(
            refused_param(&app, tenant(extra.clone())).await,
            param,
            "{extra}"
        );
    }
}
