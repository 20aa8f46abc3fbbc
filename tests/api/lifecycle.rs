use std::process::Stdio;
use std::time::Duration;

use fake_upstream::{self, FakeConfig};
use tollgate::ids::TenantId;

use crate::support::process::{GatewayProcess, cli, free_port, tenant_with_key};
use crate::support::redis::RedisServer;
use crate::support::{TestSetup, chat_body, wait_until, write_config};

#[actix_web::test]
async fn logs_never_carry_keys_secrets_or_prompts_unless_a_tenant_opted_in() {
    let fake = fake_upstream::start(FakeConfig::default(), ([127, 0, 0, 1], 0).into(), 1).unwrap();
    let addr = free_port();
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 1000, 100)
        .set("telemetry.log_prompts_for", vec!["optin"])
        .listen(addr)
        .env("TOLLGATE_KEY_PEPPER", "PEPPER-CANARY-7f3a")
        .env("TOLLGATE_ADMIN_TOKEN", "ADMIN-CANARY-91bc")
        .env(crate::support::PRIMARY_KEY_ENV, "sk-PROVIDER-CANARY-55de")
        .env("TOLLGATE_LOG", "debug");
    let env = setup.env_vars().clone();
    let (dir, config) = write_config(&setup, &fake.base_url());
    let mut keys = Vec::new();
    for tenant in ["canary", "optin"] {
        cli(
            &config,
            &env,
            &["tenant", "create", "--id", tenant, "--tier", "free"],
        );
        let issued: serde_json::Value =
            serde_json::from_str(&cli(&config, &env, &["key", "issue", tenant])).unwrap();
        keys.push(issued["key"].as_str().unwrap().to_owned());
    }
    let log_path = dir.path().join("gateway.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut gateway = GatewayProcess::serve(&config, &env, addr, Stdio::from(log)).await;

    let client = awc::Client::default();
    let chat = |key: &str, prompt: &str| {
        client
            .post(format!("http://{addr}/v1/chat/completions"))
            .insert_header(("authorization", format!("Bearer {key}")))
            .send_json(&serde_json::json!({"model": "fast", "messages": [{"role": "user", "content": prompt}]}))
    };
    assert_eq!(
        chat(&keys[0], "PROMPT-CANARY-secret-plan")
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        chat(&keys[1], "PROMPT-OPTIN-visible")
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        chat(
            "tg_aaaaaaaaaaaa_BADKEYCANARYbadkeycanarybadkeycanary12",
            "x"
        )
        .await
        .unwrap()
        .status(),
        401
    );
    let admin = client
        .get(format!("http://{addr}/admin/v1/tenants"))
        .insert_header(("authorization", "Bearer ADMIN-CANARY-91bc"))
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status(), 200);
    gateway.terminate();
    assert_eq!(gateway.exit_status().await.code(), Some(0));

    let logs = std::fs::read_to_string(&log_path).unwrap();
    assert!(logs.contains("Request served."), "{logs}");
    let secrets = [
        keys[0].split('_').next_back().unwrap(),
        keys[1].split('_').next_back().unwrap(),
    ];
    for canary in [
        "PEPPER-CANARY",
        "ADMIN-CANARY",
        "PROVIDER-CANARY",
        "PROMPT-CANARY",
        "BADKEYCANARY",
        secrets[0],
        secrets[1],
    ] {
        assert!(
            !logs.contains(canary),
            "{canary} leaked into the logs:\n{logs}"
        );
    }
    assert!(
        logs.contains("PROMPT-OPTIN-visible"),
        "the opted-in tenant's prompt is logged"
    );
    let served: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["message"] == "Request served.")
        .collect();
    assert_eq!(served.len(), 2);
    for line in &served {
        for field in [
            "request_id",
            "tenant",
            "route",
            "provider",
            "status",
            "latency_ms",
        ] {
            assert!(line.get(field).is_some(), "{field} missing in {line}");
        }
    }
}

#[actix_web::test]
async fn sigterm_lets_in_flight_requests_finish_and_flushes_the_ledger() {
    let fake = fake_upstream::start(FakeConfig::default(), ([127, 0, 0, 1], 0).into(), 1).unwrap();
    let addr = free_port();
    let setup = TestSetup::new()
        .route("slow", &["primary/usage-10-0-10+delay-1500ms"])
        .tier("free", &["slow"], 1000, 100)
        .listen(addr);
    let env = setup.env_vars().clone();
    let (_dir, config) = write_config(&setup, &fake.base_url());

    let key = tenant_with_key(&config, &env, "lifecycle", "free");

    let mut gateway = GatewayProcess::serve(&config, &env, addr, Stdio::null()).await;
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(20))
        .finish();
    let base = format!("http://{addr}");

    let request = client
        .post(format!("{base}/v1/chat/completions"))
        .insert_header(("authorization", format!("Bearer {key}")))
        .send_json(&chat_body("slow"));
    let in_flight = actix_rt::spawn(async move {
        let mut response = request.await.unwrap();
        (response.status().as_u16(), response.body().await.unwrap())
    });
    // Wait until the upstream holds the request, then ask the gateway to stop.
    wait_until(
        Duration::from_secs(5),
        "the upstream to hold the call",
        async || {
            let requests = fake.stats.requests();
            crate::support::done_if(requests == 1, requests)
        },
    )
    .await;
    gateway.terminate();

    let (status, body) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(gateway.exit_status().await.code(), Some(0));

    // The configured database, SQLite or PostgreSQL (TOLLGATE_TEST_DATABASE).
    let db_url = crate::support::configured_database_url(&config);
    let db = tollgate::storage::connect(&db_url, 1).await.unwrap();
    let rows = tollgate::ledger::repo::tenant_rows(&db, &TenantId::new("lifecycle"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].status.as_str(), rows[0].charged_nanos),
        ("ok", 100_000)
    );
}

#[actix_web::test]
async fn sighup_reloads_the_configuration_and_a_bad_file_is_logged_and_ignored() {
    let fake = fake_upstream::start(FakeConfig::default(), ([127, 0, 0, 1], 0).into(), 1).unwrap();
    let addr = free_port();
    let setup = TestSetup::new()
        .route("fast", &["primary/before-hup"])
        .tier("free", &["fast"], 1000, 100)
        .listen(addr);
    let env = setup.env_vars().clone();
    let (dir, config) = write_config(&setup, &fake.base_url());
    cli(
        &config,
        &env,
        &["tenant", "create", "--id", "hup", "--tier", "free"],
    );
    let issued: serde_json::Value =
        serde_json::from_str(&cli(&config, &env, &["key", "issue", "hup"])).unwrap();
    let key = issued["key"].as_str().unwrap().to_owned();
    let log_path = dir.path().join("gateway.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut gateway = GatewayProcess::serve(&config, &env, addr, Stdio::from(log)).await;
    let client = awc::Client::default();
    let model = || async {
        let response = client
            .post(format!("http://{addr}/v1/chat/completions"))
            .insert_header(("authorization", format!("Bearer {key}")))
            .send_json(&chat_body("fast"))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response
            .headers()
            .get("x-tollgate-model")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };

    assert_eq!(model().await, "before-hup");

    crate::support::edit_config(&config, |doc| {
        doc["routes"]["fast"]["targets"] = vec!["secondary/after-hup"].into();
        let prices = doc["prices"].as_array_mut().unwrap();
        for price in prices
            .iter_mut()
            .filter(|p| p["model"].as_str() == Some("before-hup"))
        {
            price["provider"] = "secondary".into();
            price["model"] = "after-hup".into();
        }
    });
    gateway.hangup();
    wait_until(Duration::from_secs(5), "the reloaded route", async || {
        let seen = model().await;
        crate::support::done_if(seen == "after-hup", seen)
    })
    .await;

    std::fs::write(&config, "this is = not [valid").unwrap();
    gateway.hangup();
    wait_until(
        Duration::from_secs(5),
        "the failed reload's log",
        async || {
            let logs = std::fs::read_to_string(&log_path).unwrap();
            crate::support::done_if(logs.contains("Configuration reload failed."), logs)
        },
    )
    .await;
    assert_eq!(
        model().await,
        "after-hup",
        "the running configuration stays"
    );
    gateway.terminate();
    assert_eq!(gateway.exit_status().await.code(), Some(0));
}

/// In Redis mode an answer goes out before its settle reaches Redis: a stop
/// right after the answer must still commit it and write its row before
/// the process exits (not leave it to the next start's replay).
#[actix_web::test]
async fn sigterm_waits_for_a_settle_still_on_its_way_to_redis() {
    let redis = RedisServer::start().await;
    let fake = fake_upstream::start(FakeConfig::default(), ([127, 0, 0, 1], 0).into(), 1).unwrap();
    let addr = free_port();
    let setup = TestSetup::new()
        .route("slow", &["primary/usage-10-0-10+delay-1000ms"])
        .tier("free", &["slow"], 1000, 100)
        .redis(&redis.url(), 1)
        .set("storage.redis_timeout_ms", 30_000)
        .listen(addr);
    let env = setup.env_vars().clone();
    let (_dir, config) = write_config(&setup, &fake.base_url());
    let key = tenant_with_key(&config, &env, "settling", "free");
    let mut gateway = GatewayProcess::serve(&config, &env, addr, Stdio::null()).await;

    let client = awc::Client::builder()
        .timeout(Duration::from_secs(20))
        .finish();
    let request = client
        .post(format!("http://{addr}/v1/chat/completions"))
        .insert_header(("authorization", format!("Bearer {key}")))
        .send_json(&chat_body("slow"));
    let answer = actix_rt::spawn(async move { request.await.unwrap().status().as_u16() });
    // Redis stops answering once the call is admitted: its settle is all that is left.
    wait_until(
        Duration::from_secs(5),
        "the upstream to receive the call",
        async || {
            let requests = fake.stats.requests();
            crate::support::done_if(requests == 1, requests)
        },
    )
    .await;
    redis.freeze();
    assert_eq!(answer.await.unwrap(), 200);

    gateway.terminate();
    // The stop waits on the frozen store; it can end only once Redis answers.
    // A pause on the real clock: the stop is under way while Redis is frozen.
    crate::support::let_real_time_pass(Duration::from_millis(300)).await;
    redis.thaw();
    assert_eq!(gateway.exit_status().await.code(), Some(0));

    let db_url = crate::support::configured_database_url(&config);
    let db = tollgate::storage::connect(&db_url, 1).await.unwrap();
    let rows = tollgate::ledger::repo::tenant_rows(&db, &TenantId::new("settling"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "the row was written before the exit");
    assert_eq!(
        (rows[0].status.as_str(), rows[0].charged_nanos),
        ("ok", 100_000)
    );
    assert_eq!(
        redis.month_spend("settling"),
        (100_000, 0),
        "Redis committed the cost and holds nothing"
    );
}

/// A gateway dropped without a stop (an embedding host, one test after
/// another) leaves nothing running: its ledger's thread let go of the
/// journal, the database and the pool, so the next gateway on the same
/// directory starts. Before, every such gateway kept a thread, three
/// database connections and its journal until the process ended.
#[test]
fn a_gateway_dropped_without_a_stop_lets_go_of_its_journal() {
    use std::sync::Arc;
    use tollgate::app::{Application, BuildOptions};
    use tollgate::clock::SystemClock;

    let setup = TestSetup::new()
        .route("fast", &["primary/usage-100-10-0"])
        .tier("free", &["fast"], 1000, 100);
    let (config_path, dir) = actix_rt::System::new().block_on(async {
        let app = crate::support::spawn_app(setup.clone()).await;
        let (_, key) = app.tenant_with_key("free", serde_json::json!({})).await;
        assert_eq!(app.chat(&key, &chat_body("fast")).await.status, 200);
        (app.config_path.clone(), app.dir)
    });
    actix_rt::System::new().block_on(async {
        let config = setup.load(&config_path);
        let options = BuildOptions {
            clock: Arc::new(SystemClock),
            handle_signals: false,
            reload_source: None,
        };
        let built = Application::build(config, options).await;
        assert!(built.is_ok(), "{:?}", built.err());
    });
    drop(dir);
}

/// A newcomer outside a checkout: `tollgate demo` with no configuration
/// file serves the embedded example, and the `spend` line its banner prints
/// (run at once after a call) finds the same database and shows the call.
/// Before, the banner named a file that did not exist.
#[actix_web::test]
async fn the_demo_s_printed_spend_line_shows_the_call_just_made() {
    use std::io::{BufRead, BufReader};
    use std::sync::{Arc, Mutex};

    let dir = tempfile::tempdir().unwrap();
    let addr = free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["demo", "--listen", &addr.to_string()])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let banner = Arc::new(Mutex::new(String::new()));
    let lines = BufReader::new(child.stdout.take().unwrap());
    let sink = banner.clone();
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            let mut banner = sink.lock().unwrap();
            banner.push_str(&line);
            banner.push('\n');
        }
    });
    let printed = |prefix: &str| {
        let banner = banner.lock().unwrap();
        banner.lines().find_map(|l| {
            l.trim()
                .strip_prefix(prefix)
                .map(|rest| rest.trim().to_owned())
        })
    };
    wait_until(Duration::from_secs(30), "the demo's banner", async || {
        let spend = printed("Spend:");
        crate::support::done_if(spend.is_some(), spend)
    })
    .await;
    let key = printed("API key").unwrap();
    let reply = awc::Client::default()
        .post(format!("http://{addr}/v1/chat/completions"))
        .insert_header(("authorization", format!("Bearer {key}")))
        .send_json(&chat_body("fast"))
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let spend = printed("Spend:").unwrap();
    let args: Vec<&str> = spend
        .strip_prefix("cargo run --release -- ")
        .unwrap_or_else(|| panic!("{spend}"))
        .split_whitespace()
        .collect();
    // The call's row lands once the demo's ledger has written it.
    wait_until(
        Duration::from_secs(5),
        "the call in the spend table",
        async || {
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .args(&args)
                .current_dir(dir.path())
                .env_clear()
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{spend}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let table = String::from_utf8_lossy(&output.stdout).into_owned();
            let total = table
                .lines()
                .find(|l| l.starts_with("total"))
                .unwrap_or_default();
            crate::support::done_if(total.split_whitespace().nth(1) == Some("1"), table)
        },
    )
    .await;
    let _ = child.kill();
    let _ = child.wait();
}
