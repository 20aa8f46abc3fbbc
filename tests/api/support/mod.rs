//! spawn_app: a fake upstream, a fresh database (a temp SQLite file, or with
//! `TOLLGATE_TEST_DATABASE=postgres` a new database on the shared real
//! PostgreSQL of `postgres.rs`), a gateway on 127.0.0.1:0 inside the test's
//! actix System, and typed helpers. Everything is torn down with the `TestApp`
//! (temp dir) and the test's System (servers, actors).

pub mod cluster;
mod logs;
pub mod postgres;
pub mod process;
pub mod receiver;
pub mod redis;
mod setup;
mod wait;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use actix_web::dev::ServerHandle;
use awc::ClientResponse;
use serde_json::{Value, json};
use tempfile::TempDir;

use fake_upstream::{self, FakeConfig, RunningFake};
use tollgate::app::{Application, BuildOptions};
use tollgate::clock::{Clock, SharedClock, SystemClock};
use tollgate::config::Config;
use tollgate::ids::{EventId, KeyId, RequestId, TenantId};
use tollgate::ledger::{AttemptStatus, UsageEvent, UsageKind, repo};
use tollgate::state::{ConfigSource, Gateway};

pub use logs::{LogCapture, process_logs};
pub use setup::{TestSetup, Upstream, edit_config, entry};
pub use wait::{done_if, let_real_time_pass, wait_until};

pub const ADMIN_TOKEN: &str = "test-admin-token";
pub const PRIMARY_KEY_ENV: &str = "TEST_PRIMARY_KEY";

pub struct TestApp {
    pub base_url: String,
    /// Where `/metrics`, `/readyz` and `/admin/v1` answer: the admin
    /// listener when `admin_listen` is set, else `base_url`.
    pub admin_url: String,
    pub gateway: Arc<Gateway>,
    pub fake: RunningFake,
    pub anthropic: fake_upstream::anthropic::RunningAnthropicFake,
    pub config_path: std::path::PathBuf,
    /// The gateway's `storage.database_url` (SQLite or PostgreSQL, see [`Backend`]).
    pub database_url: String,
    pub client: awc::Client,
    /// Holds the config (and the SQLite file) for as long as the app runs.
    pub dir: TempDir,
    server: ServerHandle,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A tenant id no other test uses.
pub fn unique_tenant(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::SeqCst)
    )
}

/// Which database the suite runs against: `TOLLGATE_TEST_DATABASE=postgres`
/// selects PostgreSQL; unset (or `sqlite`) selects SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn selected() -> Backend {
        match std::env::var("TOLLGATE_TEST_DATABASE").as_deref() {
            Err(_) | Ok("" | "sqlite") => Backend::Sqlite,
            Ok("postgres") => Backend::Postgres,
            Ok(other) => panic!("TOLLGATE_TEST_DATABASE={other}: expected sqlite or postgres"),
        }
    }

    /// A new, empty database: a SQLite file in `dir`, or a new database on the shared PostgreSQL.
    pub fn fresh_database_url(self, dir: &Path) -> String {
        match self {
            Backend::Sqlite => format!("sqlite://{}?mode=rwc", dir.join("tollgate.db").display()),
            Backend::Postgres => postgres::fresh_database_url(),
        }
    }
}

/// The `storage.database_url` of a configuration written by [`write_config`].
pub fn configured_database_url(config: &Path) -> String {
    let text = std::fs::read_to_string(config).unwrap();
    let value: toml::Value = toml::from_str(&text).unwrap();
    value["storage"]["database_url"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Writes the configuration a gateway process would read, next to a fresh database.
pub fn write_config(setup: &TestSetup, fake_url: &str) -> (TempDir, std::path::PathBuf) {
    write_config_with(setup, fake_url, "http://127.0.0.1:9")
}

fn write_config_with(
    setup: &TestSetup,
    fake_url: &str,
    anthropic_url: &str,
) -> (TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let database_url = Backend::selected().fresh_database_url(dir.path());
    let mut setup = setup.clone();
    if redis::suite_on_redis() && setup.get("storage.redis_url").is_none() {
        setup = setup.redis(&redis::fresh_database_url(), 1);
    }
    std::fs::write(
        &path,
        setup.toml(dir.path(), &database_url, fake_url, anthropic_url),
    )
    .unwrap();
    (dir, path)
}

pub async fn spawn_app(setup: TestSetup) -> TestApp {
    spawn_app_with_logs(setup, None).await
}

pub async fn spawn_app_with_logs(setup: TestSetup, logs: Option<&LogCapture>) -> TestApp {
    let fake = fake_upstream::start(FakeConfig::default(), ([127, 0, 0, 1], 0).into(), 1).unwrap();
    let anthropic = fake_upstream::anthropic::start(([127, 0, 0, 1], 0).into()).unwrap();
    let (dir, config_path) = write_config_with(&setup, &fake.base_url(), &anthropic.base_url());
    let config = Config::load(&config_path, setup.env_vars()).unwrap();
    let database_url = config.storage.database_url.clone();
    let clock: SharedClock = match setup.manual_clock() {
        Some(clock) => clock.clone(),
        None => Arc::new(SystemClock),
    };
    let options = BuildOptions {
        clock,
        handle_signals: false,
        reload_source: Some(ConfigSource {
            path: config_path.clone(),
            env: Box::new(setup.env_vars().clone()),
        }),
    };
    let app = match logs {
        Some(logs) => {
            let _guard = logs.install();
            Application::build(config, options).await.unwrap()
        }
        None => Application::build(config, options).await.unwrap(),
    };
    let base_url = format!("http://{}", app.addr);
    let admin_url = app
        .admin_addr
        .map_or_else(|| base_url.clone(), |addr| format!("http://{addr}"));
    let gateway = app.gateway.clone();
    let server = app.handle();
    actix_rt::spawn(app.run_until_stopped());
    TestApp {
        base_url,
        admin_url,
        gateway,
        fake,
        anthropic,
        config_path,
        database_url,
        client: awc::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .finish(),
        dir,
        server,
    }
}

/// Another gateway on the same configuration, database and Redis as `first`
/// (a replica); its own fakes are idle, the configuration routes to `first`'s.
pub async fn spawn_replica(first: &TestApp, setup: &TestSetup) -> TestApp {
    let fake = fake_upstream::start(FakeConfig::default(), ([127, 0, 0, 1], 0).into(), 1).unwrap();
    let anthropic = fake_upstream::anthropic::start(([127, 0, 0, 1], 0).into()).unwrap();
    let shared = Config::load(&first.config_path, setup.env_vars()).unwrap();
    // A journal belongs to one process: each replica writes its own.
    let dir = tempfile::tempdir().unwrap();
    let mut config = (*shared).clone();
    config.ledger.journal_dir = Some(dir.path().join("journal"));
    let config = Arc::new(config);
    let clock: SharedClock = match setup.manual_clock() {
        Some(clock) => clock.clone(),
        None => Arc::new(SystemClock),
    };
    let options = BuildOptions {
        clock,
        handle_signals: false,
        reload_source: Some(ConfigSource {
            path: first.config_path.clone(),
            env: Box::new(setup.env_vars().clone()),
        }),
    };
    let app = Application::build(config, options).await.unwrap();
    let base_url = format!("http://{}", app.addr);
    let admin_url = app
        .admin_addr
        .map_or_else(|| base_url.clone(), |addr| format!("http://{addr}"));
    let gateway = app.gateway.clone();
    let server = app.handle();
    actix_rt::spawn(app.run_until_stopped());
    TestApp {
        base_url,
        admin_url,
        gateway,
        fake,
        anthropic,
        config_path: first.config_path.clone(),
        database_url: first.database_url.clone(),
        client: awc::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .finish(),
        dir,
        server,
    }
}

pub struct Reply {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Value,
    pub raw: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    pub fn error_code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    pub fn error_message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }
}

pub async fn reply<S>(mut response: ClientResponse<S>) -> Reply
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, awc::error::PayloadError>> + Unpin,
{
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let bytes = response.body().limit(16 * 1024 * 1024).await.unwrap();
    let raw = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
        raw,
    }
}

pub fn chat_body(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Hello there"}]})
}

impl TestApp {
    /// Stops the gateway as a shutdown does: it takes no new request and,
    /// once the ones in flight have ended, flushes its ledger and ends its
    /// background tasks. Its actors stop once idle.
    pub async fn stop(&self) {
        self.server.stop(true).await;
    }

    pub async fn chat(&self, key: &str, body: &Value) -> Reply {
        self.chat_with(key, body, &[]).await
    }

    pub async fn chat_with(&self, key: &str, body: &Value, headers: &[(&str, &str)]) -> Reply {
        let mut request = self
            .client
            .post(format!("{}/v1/chat/completions", self.base_url))
            .insert_header(("authorization", format!("Bearer {key}")));
        for (name, value) in headers {
            request = request.insert_header((*name, *value));
        }
        reply(request.send_json(body).await.unwrap()).await
    }

    /// A JSON body to any of the gateway's doors.
    pub async fn post_json(&self, path: &str, key: &str, body: &Value) -> Reply {
        let request = self
            .client
            .post(format!("{}{path}", self.base_url))
            .insert_header(("authorization", format!("Bearer {key}")));
        reply(request.send_json(body).await.unwrap()).await
    }

    pub async fn post_raw(&self, path: &str, key: &str, body: &'static [u8]) -> Reply {
        let request = self
            .client
            .post(format!("{}{path}", self.base_url))
            .insert_header(("authorization", format!("Bearer {key}")))
            .insert_header(("content-type", "application/json"));
        reply(request.send_body(body).await.unwrap()).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Reply {
        self.get_from(&self.base_url, path, token).await
    }

    /// A GET on another listener of this gateway (`admin_url`).
    pub async fn get_from(&self, base_url: &str, path: &str, token: &str) -> Reply {
        let request = self
            .client
            .get(format!("{base_url}{path}"))
            .insert_header(("authorization", format!("Bearer {token}")));
        reply(request.send().await.unwrap()).await
    }

    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        let url = format!("{}/admin/v1{path}", self.admin_url);
        let request = match method {
            "POST" => self.client.post(url),
            "PUT" => self.client.put(url),
            "PATCH" => self.client.patch(url),
            "DELETE" => self.client.delete(url),
            _ => self.client.get(url),
        }
        .insert_header(("authorization", format!("Bearer {ADMIN_TOKEN}")));
        let response = match body {
            Some(body) => request.send_json(&body).await.unwrap(),
            None => request.send().await.unwrap(),
        };
        reply(response).await
    }

    /// Creates a tenant (extra fields merged into the body) and issues it a key.
    pub async fn tenant_with_key(&self, tier: &str, extra: Value) -> (String, String) {
        let id = unique_tenant(tier);
        let mut body = json!({"id": id, "name": id, "tier": tier});
        if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
            body.extend(extra);
        }
        let created = self.admin("POST", "/tenants", Some(body)).await;
        assert_eq!(created.status, 201, "{}", created.raw);
        let key = self
            .admin("POST", &format!("/tenants/{id}/keys"), Some(json!({})))
            .await;
        assert_eq!(key.status, 201, "{}", key.raw);
        (id, key.body["key"].as_str().unwrap().to_owned())
    }

    /// Waits until every call answered so far is settled: in Redis mode a
    /// call's settle is committed, its row recorded and its gauges published
    /// just after its answer.
    pub async fn settled(&self) {
        let running = self
            .gateway
            .ledger
            .settled(std::time::Duration::from_secs(10))
            .await;
        assert_eq!(running, 0, "settlements still running after 10 s");
    }

    /// Writes every row of the calls answered so far to the database: in
    /// Redis mode a call's row is recorded once its settle, sent before its
    /// answer, is committed.
    pub async fn flush_ledger(&self) {
        self.settled().await;
        self.gateway.ledger.flush().await.unwrap();
    }

    /// Every ledger row of a tenant, after the ledger wrote what it holds.
    pub async fn ledger_rows(&self, tenant: &str) -> Vec<entity::usage::Model> {
        self.flush_ledger().await;
        repo::tenant_rows(self.gateway.directory.db(), &TenantId::new(tenant))
            .await
            .unwrap()
    }

    /// The tenant's rows once there are `n` of them: a stream's row is written
    /// by its relay task after the caller's body has ended.
    pub async fn ledger_rows_eventually(
        &self,
        tenant: &str,
        n: usize,
    ) -> Vec<entity::usage::Model> {
        wait_until(
            std::time::Duration::from_secs(10),
            &format!("{n} ledger rows of {tenant}"),
            async || {
                let rows = self.ledger_rows(tenant).await;
                done_if(rows.len() >= n, rows)
            },
        )
        .await
    }

    pub async fn budget(&self, tenant: &str) -> Value {
        let reply = self
            .admin("GET", &format!("/tenants/{tenant}/budget"), None)
            .await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        reply.body
    }
}

/// The value of one series in a Prometheus text exposition (0 if absent).
pub fn metric_value(exposition: &str, series: &str) -> u64 {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Real time now, for a manual clock that starts in the present month.
pub fn now_ms() -> u64 {
    SystemClock.now_ms()
}

/// Runs an official SDK's check script (`python3` or `node`, from
/// `tests/sdk/`) against the gateway and returns the JSON it printed.
pub async fn run_sdk(program: &'static str, script: &'static str, args: Vec<String>) -> Value {
    let path = format!("{}/tests/sdk/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = actix_web::rt::task::spawn_blocking(move || {
        std::process::Command::new(program)
            .arg(path)
            .args(args)
            .output()
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| {
        panic!("{program} must be installed (scripts/test.sh installs it and the SDKs): {e}")
    });
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The row of an answered call charged `charged` on a hold of `reserved`,
/// for tests that settle holds through the ledger themselves, as a call does.
pub fn settled_row(
    tenant: &str,
    key: &str,
    reserved: tollgate::money::Nanos,
    charged: tollgate::money::Nanos,
    created_at_ms: u64,
) -> UsageEvent {
    UsageEvent {
        event_id: EventId::generate(),
        request_id: RequestId::new(format!("{tenant}-{}", EventId::generate())),
        client_request_id: None,
        trace_id: None,
        tenant: TenantId::new(tenant),
        key: KeyId::new(key),
        feature: "default".to_owned(),
        end_user: None,
        session: None,
        api: tollgate::ledger::Api::Chat,
        route: "fast".to_owned(),
        provider: "primary".to_owned(),
        model: "m".to_owned(),
        attempt: 1,
        status: AttemptStatus::Ok,
        upstream_status: Some(200),
        usage: tollgate::pricing::Usage::default(),
        usage_kind: UsageKind::Reported,
        reserved,
        charged,
        cost: None,
        plan: None,
        price_version: "v".to_owned(),
        latency_ms: 1,
        ttft_ms: None,
        error: None,
        cache: None,
        created_at_ms,
    }
}
