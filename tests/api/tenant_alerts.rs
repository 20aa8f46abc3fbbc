//! Alerts to whom they concern: a tenant's own webhook beside the global
//! one, one idempotency id per alert across retries and targets, and the
//! tenant field as the admin API stores it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    TestApp, TestSetup, chat_body, done_if, let_real_time_pass, spawn_app, wait_until,
};

/// A local webhook receiver: every POST's `Idempotency-Key` and body, in
/// order; it answers the scripted statuses first, then 200.
#[derive(Clone, Default)]
pub struct Receiver {
    pub received: Arc<Mutex<Vec<(String, Value)>>>,
    statuses: Arc<Mutex<Vec<u16>>>,
}

impl Receiver {
    /// Starts one on a free loopback port; its URL is returned beside it.
    pub fn start(statuses: &[u16]) -> (Receiver, String) {
        let receiver = Receiver::default();
        receiver
            .statuses
            .lock()
            .unwrap()
            .extend(statuses.iter().rev());
        let sink = receiver.clone();
        let server = actix_web::HttpServer::new(move || {
            let sink = sink.clone();
            actix_web::App::new().route(
                "/hook",
                actix_web::web::post().to(
                    move |request: actix_web::HttpRequest, body: actix_web::web::Json<Value>| {
                        let sink = sink.clone();
                        async move {
                            let key = request
                                .headers()
                                .get("idempotency-key")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_owned();
                            sink.received.lock().unwrap().push((key, body.into_inner()));
                            let status = sink.statuses.lock().unwrap().pop().unwrap_or(200);
                            actix_web::HttpResponse::build(
                                actix_web::http::StatusCode::from_u16(status).unwrap(),
                            )
                            .finish()
                        }
                    },
                ),
            )
        })
        .workers(1)
        .disable_signals()
        .bind("127.0.0.1:0")
        .unwrap();
        let url = format!("http://{}/hook", server.addrs()[0]);
        actix_rt::spawn(server.run());
        (receiver, url)
    }

    pub fn all(&self) -> Vec<(String, Value)> {
        self.received.lock().unwrap().clone()
    }

    /// Waits until `n` posts have arrived, then a moment more for any extra one.
    pub async fn wait_for(&self, n: usize) -> Vec<(String, Value)> {
        wait_until(Duration::from_secs(10), "alert posts", async || {
            let seen = self.received.lock().unwrap().len();
            done_if(seen >= n, seen)
        })
        .await;
        let_real_time_pass(Duration::from_millis(300)).await;
        self.all()
    }
}

/// A tier whose calls each cost exactly 1 (125000 completion tokens at 8 per 1M).
fn costing_one() -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/usage-0-0-125000"])
        .tier("free", &["fast"], 1000, 100)
}

#[actix_web::test]
async fn a_tenants_alert_reaches_its_own_webhook_and_the_global_one_under_one_id() {
    let (global, global_url) = Receiver::start(&[]);
    let (own, own_url) = Receiver::start(&[]);
    let app = spawn_app(
        costing_one()
            .set("alerts.webhook_url", global_url)
            .set("alerts.thresholds_percent", vec![80]),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key(
            "free",
            json!({"monthly_budget": "5", "budget_mode": "alert", "alert_webhook_url": own_url}),
        )
        .await;

    // The fourth call's 4 of 5 crosses 80%.
    for _ in 0..4 {
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    }

    let to_tenant = own.wait_for(1).await;
    let to_global = global.wait_for(1).await;
    assert_eq!(to_tenant.len(), 1, "{to_tenant:?}");
    assert_eq!(to_global.len(), 1, "{to_global:?}");
    let (key_header, notice) = &to_tenant[0];
    assert_eq!(notice["kind"], "budget");
    assert_eq!(notice["tenant"], tenant.as_str());
    assert_eq!(notice["scope"], "tenant");
    assert_eq!(notice["threshold"], 80);
    assert_eq!(notice["committed"], "4");
    assert_eq!(notice["budget"], "5");
    assert!(notice["period"].as_str().is_some_and(|p| !p.is_empty()));
    let id = notice["id"].as_str().unwrap();
    assert!(!id.is_empty());
    assert_eq!(key_header, id, "the header carries the body's id");
    assert_eq!(
        to_global[0], to_tenant[0],
        "both targets get the same alert"
    );

    let metrics = app.get("/metrics", "").await.raw;
    for target in ["global", "tenant"] {
        let series =
            format!("tollgate_alert_deliveries_total{{target=\"{target}\",outcome=\"delivered\"}}");
        assert!(
            crate::support::metric_value(&metrics, &series) >= 1,
            "{series}"
        );
    }
}

#[actix_web::test]
async fn a_tenants_own_thresholds_replace_the_global_ones() {
    let (own, own_url) = Receiver::start(&[]);
    let app = spawn_app(costing_one().set("alerts.thresholds_percent", vec![80])).await;
    let (_tenant, key) = app
        .tenant_with_key(
            "free",
            json!({
                "monthly_budget": "5",
                "budget_mode": "alert",
                "alert_webhook_url": own_url,
                "alert_thresholds_percent": [50]
            }),
        )
        .await;
    // 3 of 5 passes 50%; 4 of 5 would pass the global 80%, which is not the tenant's.
    for _ in 0..4 {
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
    }
    let posts = own.wait_for(1).await;
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(posts[0].1["threshold"], 50);
    assert_eq!(posts[0].1["committed"], "3");
}

#[actix_web::test]
async fn a_webhook_that_answers_500_then_200_sees_the_same_id_twice() {
    let (own, own_url) = Receiver::start(&[500]);
    let app = spawn_app(
        costing_one()
            .set("alerts.thresholds_percent", vec![100])
            .set("alerts.attempts", 3),
    )
    .await;
    let (tenant, key) = app
        .tenant_with_key(
            "free",
            json!({"monthly_budget": "1", "budget_mode": "alert"}),
        )
        .await;
    // Set after creation: the running gateway takes a PATCH at once.
    let patched = app
        .admin(
            "PATCH",
            &format!("/tenants/{tenant}"),
            Some(json!({"alert_webhook_url": own_url})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.raw);

    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);

    let posts = own.wait_for(2).await;
    assert_eq!(posts.len(), 2, "one refused, one retried: {posts:?}");
    assert_eq!(posts[0], posts[1], "the retry is the same alert");
    assert_eq!(posts[0].0, posts[0].1["id"].as_str().unwrap());
    assert_eq!(posts[0].1["threshold"], 100);
}

#[actix_web::test]
async fn an_alert_webhook_that_is_not_an_http_url_is_a_400_naming_the_field() {
    let app = spawn_app(costing_one()).await;
    let (tenant, _key) = app.tenant_with_key("free", json!({})).await;
    for bad in ["ftp://example.test/hook", "not a url", "http://", "/hook"] {
        let reply = app
            .admin(
                "PATCH",
                &format!("/tenants/{tenant}"),
                Some(json!({"alert_webhook_url": bad})),
            )
            .await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.raw);
        assert_eq!(
            reply.body["error"]["param"], "alert_webhook_url",
            "{}",
            reply.raw
        );
        assert!(
            reply.error_message().contains("alert_webhook_url"),
            "{}",
            reply.raw
        );
    }
    let created = app
        .admin(
            "POST",
            "/tenants",
            Some(json!({"id": "bad-hook", "tier": "free", "alert_webhook_url": "mailto:ops@example.test"})),
        )
        .await;
    assert_eq!(created.status, 400, "{}", created.raw);
    assert_eq!(created.body["error"]["param"], "alert_webhook_url");
}

/// The tenant's alert fields as stored (SQLite, or PostgreSQL with
/// `TOLLGATE_TEST_DATABASE=postgres`), read back through a fresh GET.
#[actix_web::test]
async fn the_tenants_alert_target_and_rate_mode_round_trip_through_the_database() {
    let app = spawn_app(costing_one()).await;
    let (tenant, _key) = app
        .tenant_with_key(
            "free",
            json!({
                "alert_webhook_url": "https://alerts.example.test/t1",
                "alert_thresholds_percent": [90, 50],
                "rate_mode": "alert"
            }),
        )
        .await;
    let shown = get_tenant(&app, &tenant).await;
    assert_eq!(shown["alert_webhook_url"], "https://alerts.example.test/t1");
    assert_eq!(shown["rate_mode"], "alert");
    assert_eq!(shown["alert_thresholds_percent"], json!([90, 50]));

    let patched = app
        .admin(
            "PATCH",
            &format!("/tenants/{tenant}"),
            Some(json!({"alert_webhook_url": "http://127.0.0.1:9/other", "rate_mode": "enforce"})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.raw);
    let shown = get_tenant(&app, &tenant).await;
    assert_eq!(shown["alert_webhook_url"], "http://127.0.0.1:9/other");
    assert_eq!(shown["rate_mode"], "enforce");

    // Absent keeps, null clears.
    let kept = app
        .admin(
            "PATCH",
            &format!("/tenants/{tenant}"),
            Some(json!({"name": "renamed"})),
        )
        .await;
    assert_eq!(kept.body["alert_webhook_url"], "http://127.0.0.1:9/other");
    let cleared = app
        .admin(
            "PATCH",
            &format!("/tenants/{tenant}"),
            Some(json!({"alert_webhook_url": null, "alert_thresholds_percent": null, "rate_mode": null})),
        )
        .await;
    assert_eq!(cleared.status, 200, "{}", cleared.raw);
    let shown = get_tenant(&app, &tenant).await;
    assert_eq!(shown["alert_webhook_url"], Value::Null);
    assert_eq!(shown["rate_mode"], Value::Null);
    assert_eq!(shown["alert_thresholds_percent"], Value::Null);

    let bad_mode = app
        .admin(
            "PATCH",
            &format!("/tenants/{tenant}"),
            Some(json!({"rate_mode": "loose"})),
        )
        .await;
    assert_eq!(bad_mode.status, 400);
    assert_eq!(bad_mode.body["error"]["param"], "rate_mode");
    let bad_threshold = app
        .admin(
            "PATCH",
            &format!("/tenants/{tenant}"),
            Some(json!({"alert_thresholds_percent": [80, 0]})),
        )
        .await;
    assert_eq!(bad_threshold.status, 400);
    assert_eq!(
        bad_threshold.body["error"]["param"],
        "alert_thresholds_percent"
    );
}

async fn get_tenant(app: &TestApp, tenant: &str) -> Value {
    let shown = app.admin("GET", &format!("/tenants/{tenant}"), None).await;
    assert_eq!(shown.status, 200, "{}", shown.raw);
    shown.body
}

#[actix_web::test]
async fn the_cli_sets_and_clears_a_tenants_alert_fields() {
    let setup = costing_one();
    let env = setup.env_vars().clone();
    let (_dir, config) = crate::support::write_config(&setup, "http://127.0.0.1:9");
    let run = |args: &[&str]| -> Value {
        serde_json::from_str(&crate::support::process::cli(&config, &env, args)).unwrap()
    };
    let created = run(&[
        "tenant",
        "create",
        "--id",
        "cli-alerts",
        "--tier",
        "free",
        "--alert-webhook-url",
        "https://alerts.example.test/cli",
        "--alert-thresholds-percent",
        "50,90",
        "--rate-mode",
        "alert",
    ]);
    assert_eq!(
        created["alert_webhook_url"],
        "https://alerts.example.test/cli"
    );
    assert_eq!(created["alert_thresholds_percent"], json!([50, 90]));
    assert_eq!(created["rate_mode"], "alert");
    let updated = run(&[
        "tenant",
        "update",
        "cli-alerts",
        "--alert-webhook-url",
        "none",
        "--alert-thresholds-percent",
        "global",
        "--rate-mode",
        "tier",
    ]);
    assert_eq!(updated["alert_webhook_url"], Value::Null);
    assert_eq!(updated["alert_thresholds_percent"], Value::Null);
    assert_eq!(updated["rate_mode"], Value::Null);
    let shown = run(&["tenant", "show", "cli-alerts"]);
    assert_eq!(shown["rate_mode"], Value::Null);
}
