use serde_json::json;

use crate::support::{ADMIN_TOKEN, TestSetup, chat_body, reply, spawn_app, unique_tenant};

fn setup() -> TestSetup {
    TestSetup::new()
        .route("fast", &["primary/usage-100-0-10"])
        .route("smart", &["secondary/usage-1000-0-100"])
        .tier("free", &["fast"], 1000, 100)
        .tier("standard", &["fast", "smart"], 1000, 100)
}

#[actix_web::test]
async fn tenants_are_created_read_updated_and_listed() {
    let app = spawn_app(setup()).await;
    let id = unique_tenant("acme");

    let created = app
        .admin("POST", "/tenants", Some(json!({"id": id, "name": "Acme", "tier": "free", "rpm_limit": 30, "monthly_budget": "12.5"})))
        .await;
    assert_eq!(created.status, 201, "{}", created.raw);
    assert_eq!(created.body["monthly_budget"], "12.5");
    assert_eq!(created.body["budget_mode"], "strict");

    let duplicate = app
        .admin("POST", "/tenants", Some(json!({"id": id, "tier": "free"})))
        .await;
    assert_eq!(duplicate.status, 409);
    let bad_tier = app
        .admin(
            "POST",
            "/tenants",
            Some(json!({"id": unique_tenant("x"), "tier": "gold"})),
        )
        .await;
    assert_eq!(bad_tier.status, 400);
    assert_eq!(bad_tier.body["error"]["param"], "tier");
    let bad_budget = app
        .admin(
            "POST",
            "/tenants",
            Some(json!({"id": unique_tenant("x"), "tier": "free", "monthly_budget": "-1"})),
        )
        .await;
    assert_eq!(bad_budget.status, 400);
    assert_eq!(bad_budget.body["error"]["param"], "monthly_budget");
    let bad_id = app
        .admin(
            "POST",
            "/tenants",
            Some(json!({"id": "Not Valid", "tier": "free"})),
        )
        .await;
    assert_eq!(bad_id.status, 400);

    let patched = app
        .admin(
            "PATCH",
            &format!("/tenants/{id}"),
            Some(json!({"tier": "standard", "monthly_budget": null, "budget_mode": "alert"})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.raw);
    assert_eq!(patched.body["tier"], "standard");
    assert_eq!(patched.body["monthly_budget"], serde_json::Value::Null);
    assert_eq!(patched.body["rpm_limit"], 30, "untouched fields stay");

    let fetched = app.admin("GET", &format!("/tenants/{id}"), None).await;
    assert_eq!(fetched.body["budget_mode"], "alert");
    let listed = app.admin("GET", "/tenants", None).await;
    assert!(
        listed.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == id.as_str())
    );
    assert_eq!(app.admin("GET", "/tenants/nobody", None).await.status, 404);
}

/// `curl -d` sends a form content type: the admin API reads the body as
/// JSON whatever the header says, as README's examples do.
#[actix_web::test]
async fn a_json_body_without_a_json_content_type_is_read_as_json() {
    let app = spawn_app(setup()).await;
    let id = unique_tenant("curl");
    let body = json!({"id": id, "name": id, "tier": "free"}).to_string();
    for content_type in [None, Some("application/x-www-form-urlencoded")] {
        let mut request = app
            .client
            .post(format!("{}/admin/v1/tenants", app.admin_url))
            .insert_header(("authorization", format!("Bearer {ADMIN_TOKEN}")));
        if let Some(content_type) = content_type {
            request = request.insert_header(("content-type", content_type));
        }
        let reply = reply(request.send_body(body.clone()).await.unwrap()).await;
        let expected = if content_type.is_none() { 201 } else { 409 };
        assert_eq!(reply.status, expected, "{content_type:?}: {}", reply.raw);
    }
}

#[actix_web::test]
async fn keys_are_listed_without_their_secret() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("free", json!({})).await;

    let listed = app
        .admin("GET", &format!("/tenants/{tenant}/keys"), None)
        .await;

    assert_eq!(listed.status, 200);
    let keys = listed.body["data"].as_array().unwrap();
    assert_eq!(keys.len(), 1);
    assert!(key.contains(keys[0]["id"].as_str().unwrap()));
    assert!(
        !listed.raw.contains(&key[17..]),
        "the secret must never be listed"
    );
    assert!(!listed.raw.contains("secret_hash"));
}

#[actix_web::test]
async fn a_free_tenant_asking_for_a_standard_route_gets_403() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app.tenant_with_key("free", json!({})).await;

    let reply = app.chat(&key, &chat_body("smart")).await;

    assert_eq!(reply.status, 403, "{}", reply.raw);
    assert_eq!(reply.error_code(), "model_not_allowed");
    assert_eq!(app.fake.stats.requests(), 0);
}

#[actix_web::test]
async fn a_tenant_allow_list_narrows_its_tier() {
    let app = spawn_app(setup()).await;
    let (_tenant, key) = app
        .tenant_with_key("standard", json!({"allowed_routes": ["smart"]}))
        .await;

    assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 403);
    assert_eq!(app.chat(&key, &chat_body("smart")).await.status, 200);
}

#[actix_web::test]
async fn spend_reports_equal_the_ledger_grouped_each_way() {
    let app = spawn_app(setup()).await;
    let (tenant, key) = app.tenant_with_key("standard", json!({})).await;
    for (model, feature) in [("fast", "search"), ("fast", "chat"), ("smart", "chat")] {
        let reply = app
            .chat_with(&key, &chat_body(model), &[("x-tollgate-feature", feature)])
            .await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }
    let rows = app.ledger_rows(&tenant).await;
    let ledger_total: i64 = rows.iter().map(|r| r.charged_nanos).sum();
    // fast: 100 in at 2/M + 10 out at 8/M = 0.00028; smart: 1000 at 2/M + 100 at 8/M = 0.0028
    assert_eq!(ledger_total, 2 * 280_000 + 2_800_000);

    for group_by in ["feature", "model", "provider", "day", "route", "status"] {
        let report = app
            .admin(
                "GET",
                &format!("/tenants/{tenant}/spend?group_by={group_by}"),
                None,
            )
            .await;
        assert_eq!(report.status, 200, "{}", report.raw);
        let total =
            tollgate::money::Nanos::parse_decimal(report.body["total"]["cost"].as_str().unwrap())
                .unwrap();
        assert_eq!(total.to_db(), ledger_total, "{group_by}");
        let rows_sum: i64 = report.body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                tollgate::money::Nanos::parse_decimal(r["cost"].as_str().unwrap())
                    .unwrap()
                    .to_db()
            })
            .sum();
        assert_eq!(rows_sum, ledger_total, "{group_by}");
        assert_eq!(report.body["total"]["requests"], 3);
    }
    let by_feature = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/spend?group_by=feature"),
            None,
        )
        .await;
    let features: Vec<(&str, &str)> = by_feature.body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["key"].as_str().unwrap(), r["cost"].as_str().unwrap()))
        .collect();
    assert_eq!(features, vec![("chat", "0.00308"), ("search", "0.00028")]);

    let tomorrow =
        tollgate::period::Date::from_unix_ms(crate::support::now_ms() + 86_400_000).day_key();
    let empty = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/spend?group_by=day&from={tomorrow}"),
            None,
        )
        .await;
    assert_eq!(empty.body["rows"], json!([]));
    let bad = app
        .admin(
            "GET",
            &format!("/tenants/{tenant}/spend?group_by=colour"),
            None,
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.body["error"]["param"], "group_by");
}

#[actix_web::test]
async fn the_daily_report_totals_the_day_ranks_spenders_and_projects_budgets() {
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/usage-0-0-125000"])
            .route(
                "shaky",
                &["primary/status-503", "secondary/usage-0-0-125000"],
            )
            .tier("free", &["fast", "shaky"], 1000, 100),
    )
    .await;
    // Each call costs 125000 × 8 / 1M = 1.
    let (big, big_key) = app
        .tenant_with_key("free", json!({"monthly_budget": "100"}))
        .await;
    let (small, small_key) = app.tenant_with_key("free", json!({})).await;
    for _ in 0..3 {
        assert_eq!(
            app.chat_with(
                &big_key,
                &chat_body("fast"),
                &[("x-tollgate-feature", "agent")]
            )
            .await
            .status,
            200
        );
    }
    assert_eq!(app.chat(&small_key, &chat_body("shaky")).await.status, 200);
    app.flush_ledger().await;
    let today = tollgate::period::Date::from_unix_ms(crate::support::now_ms());

    let reply = app
        .admin(
            "GET",
            &format!("/reports/daily?date={}", today.day_key()),
            None,
        )
        .await;

    assert_eq!(reply.status, 200, "{}", reply.raw);
    let report = &reply.body;
    assert!(
        tollgate::money::Nanos::parse_decimal(report["total"].as_str().unwrap())
            .unwrap()
            .get()
            >= 4_000_000_000
    );
    let tenants: Vec<(&str, &str)> = report["top_tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["key"].as_str().unwrap(), r["cost"].as_str().unwrap()))
        .collect();
    let big_row = tenants.iter().position(|(k, _)| *k == big).unwrap();
    let small_row = tenants.iter().position(|(k, _)| *k == small);
    assert_eq!(tenants[big_row].1, "3");
    assert!(
        small_row.is_none_or(|s| s > big_row),
        "ranked by cost: {tenants:?}"
    );
    let progress = report["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["tenant"] == big.as_str())
        .unwrap();
    assert_eq!(progress["month_to_date"], "3");
    assert!(progress["projected_exhaustion"].as_str().is_some());

    let by_route = app
        .admin(
            "GET",
            &format!("/tenants/{small}/spend?group_by=route"),
            None,
        )
        .await;
    let shaky = &by_route.body["rows"][0];
    assert_eq!(shaky["key"], "shaky");
    assert_eq!(
        (
            shaky["fallbacks"].as_u64(),
            shaky["failed_attempts"].as_u64()
        ),
        (Some(1), Some(2)),
        "the primary was tried twice (default max_attempts)"
    );
    assert_eq!(shaky["fallback_rate"], 1.0);
    assert_eq!(shaky["attempts"], 3);
    let error_rate = shaky["error_rate"]
        .as_f64()
        .map(|rate| format!("{rate:.4}"));
    assert_eq!(error_rate.as_deref(), Some("0.6667"));
    let bad = app
        .admin("GET", "/reports/daily?date=yesterday", None)
        .await;
    assert_eq!(bad.status, 400);
}

#[actix_web::test]
async fn the_daily_report_is_pushed_once_across_replicas_with_retries_and_a_text_rendering() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let calls = Arc::new(AtomicUsize::new(0));
    let received: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let (sink, counter) = (received.clone(), calls.clone());
    let receiver = actix_web::HttpServer::new(move || {
        let (sink, counter) = (sink.clone(), counter.clone());
        actix_web::App::new().route(
            "/daily",
            actix_web::web::post().to(move |body: actix_web::web::Json<serde_json::Value>| {
                let (sink, counter) = (sink.clone(), counter.clone());
                async move {
                    // The first delivery fails: the sender must try again.
                    if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                        return actix_web::HttpResponse::ServiceUnavailable().finish();
                    }
                    sink.lock().unwrap().push(body.into_inner());
                    actix_web::HttpResponse::Ok().finish()
                }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .bind("127.0.0.1:0")
    .unwrap();
    let hook = format!("http://{}/daily", receiver.addrs()[0]);
    actix_rt::spawn(receiver.run());
    // 09:30 in Shanghai on 2 December: the push of 1 December is due at 09:00.
    let clock = Arc::new(tollgate::clock::ManualClock::new(
        tollgate::period::parse_instant("2026-12-02T01:30:00Z").unwrap(),
    ));
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 1000, 100)
        .set("billing.timezone", "Asia/Shanghai")
        .clock(clock)
        .set("reports.daily_webhook_url", hook)
        .set("reports.daily_at", "09:00");
    let first = spawn_app(setup.clone()).await;
    let _second = crate::support::spawn_replica(&first, &setup).await;
    crate::support::wait_until(
        std::time::Duration::from_secs(10),
        "the report's delivery",
        async || {
            let received = received.lock().unwrap().len();
            crate::support::done_if(received > 0, received)
        },
    )
    .await;
    // A pause on the real clock: the second replica's push, had it claimed
    // the day too, would arrive within it.
    crate::support::let_real_time_pass(std::time::Duration::from_secs(3)).await;
    let delivered = received.lock().unwrap().clone();
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "one refused attempt, one delivery"
    );
    assert_eq!(delivered[0]["report"]["date"], "2026-12-01");
    let text = delivered[0]["text"].as_str().unwrap();
    assert!(text.starts_with("Daily report 2026-12-01"), "{text}");
}
