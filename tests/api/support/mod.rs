//! spawn_app: a fake upstream, a fresh database (a temp SQLite file, or with
//! `TOLLGATE_TEST_DATABASE=postgres` a new database on the shared real
//! PostgreSQL of `postgres.rs`), a gateway on 127.0.0.1:0 inside the test's
//! actix System, and typed helpers. Everything is torn down with the `TestApp`
//! (temp dir) and the test's System (servers, actors).

pub mod cluster;
mod logs;
pub mod postgres;
pub mod process;
pub mod redis;
mod wait;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use actix_web::dev::ServerHandle;
use awc::ClientResponse;
use serde_json::{Value, json};
use tempfile::TempDir;

use tollgate::app::{Application, BuildOptions};
use tollgate::clock::{Clock, ManualClock, SharedClock, SystemClock};
use tollgate::config::Config;
use tollgate::fake_upstream::{self, FakeConfig, RunningFake};
use tollgate::ids::{EventId, KeyId, RequestId, TenantId};
use tollgate::ledger::{AttemptStatus, UsageEvent, UsageKind, repo};
use tollgate::state::{ConfigSource, Gateway};

pub use logs::{LogCapture, process_logs};
pub use wait::{done_if, let_real_time_pass, wait_until};

pub const ADMIN_TOKEN: &str = "test-admin-token";
pub const PRIMARY_KEY_ENV: &str = "TEST_PRIMARY_KEY";

/// What a test changes about the gateway it gets.
#[derive(Clone)]
pub struct TestSetup {
    routes: BTreeMap<String, Vec<String>>,
    tiers: Vec<String>,
    prices: BTreeMap<String, (String, String, String)>,
    cache_write_prices: BTreeMap<String, String>,
    price_extras: BTreeMap<String, String>,
    extra_providers: Vec<String>,
    env: HashMap<String, String>,
    clock: Option<Arc<ManualClock>>,
    body_limit_bytes: usize,
    listen: String,
    admin_listen: Option<String>,
    raw: Vec<String>,
    cache_ttl_ms: BTreeMap<String, u64>,
    route_lines: BTreeMap<String, Vec<String>>,
    storage: Vec<String>,
    ledger: Vec<String>,
    billing: Vec<String>,
    server: Vec<String>,
    request_timeout_ms: u64,
}

impl TestSetup {
    /// The configuration a gateway of this setup loads from `path`.
    pub fn load(&self, path: &std::path::Path) -> std::sync::Arc<Config> {
        Config::load(path, &self.env).unwrap()
    }

    pub fn new() -> TestSetup {
        let mut env = HashMap::new();
        env.insert("TOLLGATE_KEY_PEPPER".to_owned(), "test-pepper".to_owned());
        env.insert("TOLLGATE_ADMIN_TOKEN".to_owned(), ADMIN_TOKEN.to_owned());
        env.insert(PRIMARY_KEY_ENV.to_owned(), "sk-primary".to_owned());
        TestSetup {
            routes: BTreeMap::new(),
            tiers: Vec::new(),
            prices: BTreeMap::new(),
            cache_write_prices: BTreeMap::new(),
            price_extras: BTreeMap::new(),
            extra_providers: Vec::new(),
            env,
            clock: None,
            body_limit_bytes: 1024 * 1024,
            listen: "127.0.0.1:0".to_owned(),
            admin_listen: None,
            raw: Vec::new(),
            cache_ttl_ms: BTreeMap::new(),
            route_lines: BTreeMap::new(),
            storage: Vec::new(),
            ledger: Vec::new(),
            billing: Vec::new(),
            server: Vec::new(),
            request_timeout_ms: 20_000,
        }
    }

    /// A route; every target gets the default price (2 / 0.04 / 8 per 1M) unless set.
    pub fn route(mut self, name: &str, targets: &[&str]) -> Self {
        self.routes.insert(
            name.to_owned(),
            targets.iter().map(|t| (*t).to_owned()).collect(),
        );
        self
    }

    pub fn tier(mut self, name: &str, routes: &[&str], rpm: u32, default_max_tokens: u32) -> Self {
        let list = routes
            .iter()
            .map(|r| format!("\"{r}\""))
            .collect::<Vec<_>>()
            .join(", ");
        self.tiers.push(format!(
            "[tiers.{name}]\nroutes = [{list}]\nrpm = {rpm}\ndefault_max_tokens = {default_max_tokens}\n"
        ));
        self
    }

    /// A line for the tier added last (`end_user_required = true`, …).
    pub fn tier_line(mut self, line: &str) -> Self {
        if let Some(tier) = self.tiers.last_mut() {
            tier.push_str(line);
            tier.push('\n');
        }
        self
    }

    /// A line of `[billing]` (`timezone = "Asia/Shanghai"`, …).
    pub fn billing(mut self, line: &str) -> Self {
        self.billing.push(line.to_owned());
        self
    }

    pub fn price(mut self, target: &str, input: &str, cached: &str, output: &str) -> Self {
        self.prices.insert(
            target.to_owned(),
            (input.into(), cached.into(), output.into()),
        );
        self
    }

    /// More lines of a target's `[[prices]]` entry (`encoding = …`, `long_context = {…}`).
    pub fn price_extra(mut self, target: &str, toml: &str) -> Self {
        self.price_extras.insert(target.to_owned(), toml.to_owned());
        self
    }

    pub fn cache_write_price(mut self, target: &str, price: &str) -> Self {
        self.cache_write_prices
            .insert(target.to_owned(), price.to_owned());
        self
    }

    /// Raw TOML for one more `[providers.x]` table.
    pub fn provider(mut self, toml: &str) -> Self {
        self.extra_providers.push(toml.to_owned());
        self
    }

    /// One more line of a route's table (`semantic_cache = {…}`, …).
    pub fn route_line(mut self, route: &str, line: &str) -> Self {
        self.route_lines
            .entry(route.to_owned())
            .or_default()
            .push(line.to_owned());
        self
    }

    /// Turns the exact response cache on for a route.
    pub fn cached_route(mut self, route: &str, ttl_ms: u64) -> Self {
        self.cache_ttl_ms.insert(route.to_owned(), ttl_ms);
        self
    }

    /// Raw TOML tables appended to the configuration (e.g. `[telemetry]`).
    pub fn raw(mut self, toml: &str) -> Self {
        self.raw.push(toml.to_owned());
        self
    }

    /// `server.request_timeout_ms`: the deadline of a whole request.
    pub fn request_timeout_ms(mut self, ms: u64) -> Self {
        self.request_timeout_ms = ms;
        self
    }

    /// One more `key = value` line of the `[server]` table.
    pub fn server(mut self, line: &str) -> Self {
        self.server.push(line.to_owned());
        self
    }

    /// One more `key = value` line of the `[ledger]` table.
    pub fn ledger(mut self, line: &str) -> Self {
        self.ledger.push(line.to_owned());
        self
    }

    pub fn listen(mut self, addr: std::net::SocketAddr) -> Self {
        self.listen = addr.to_string();
        self
    }

    /// `server.admin_listen`: operations on their own listener.
    pub fn admin_listen(mut self, addr: &str) -> Self {
        self.admin_listen = Some(addr.to_owned());
        self
    }

    pub fn env_vars(&self) -> &HashMap<String, String> {
        &self.env
    }

    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit_bytes = bytes;
        self
    }

    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.insert(name.to_owned(), value.to_owned());
        self
    }

    /// A line of the `[storage]` section (e.g. `redis_url = "…"`).
    pub fn storage(mut self, line: &str) -> Self {
        self.storage.push(line.to_owned());
        self
    }

    /// The `[storage]` lines. Tests share two cores with many gateways: a
    /// healthy Redis call can take longer than the production default of
    /// 100 ms there, so tests that do not set `redis_timeout_ms` get 1 s.
    fn storage_lines(&self) -> Vec<String> {
        let mut lines = self.storage.clone();
        let has = |key: &str| lines.iter().any(|l| l.starts_with(key));
        if has("redis_url") && !has("redis_timeout_ms") {
            lines.push("redis_timeout_ms = 1000".to_owned());
        }
        lines
    }

    /// Quotas shared through `redis_url` by `replicas` replicas.
    pub fn redis(self, url: &str, replicas: u32) -> Self {
        self.storage(&format!("redis_url = \"{url}\""))
            .storage(&format!("replicas = {replicas}"))
    }

    pub fn clock(mut self, clock: Arc<ManualClock>) -> Self {
        self.clock = Some(clock);
        self
    }

    fn toml(&self, dir: &Path, database_url: &str, fake_url: &str, anthropic_url: &str) -> String {
        let mut text = format!(
            r#"
[server]
listen = "{listen}"
{admin_listen}
workers = 2
request_timeout_ms = {request_timeout_ms}
body_limit_bytes = {body_limit}
[storage]
database_url = "{database_url}"
sync_interval_ms = 100
{storage}
[billing]
currency = "CNY"
[ledger]
flush_interval_ms = 50
journal_dir = "{journal_dir}"
[providers.primary]
kind = "openai"
base_url = "{fake_url}"
api_key_env = "{PRIMARY_KEY_ENV}"
timeout_ms = 5000
[providers.secondary]
kind = "openai"
base_url = "{fake_url}/v1"
timeout_ms = 5000
"#,
            body_limit = self.body_limit_bytes,
            request_timeout_ms = self.request_timeout_ms,
            listen = self.listen,
            admin_listen = self
                .admin_listen
                .as_ref()
                .map(|addr| format!("admin_listen = \"{addr}\""))
                .unwrap_or_default(),
            storage = self.storage_lines().join("\n"),
            journal_dir = dir.join("journal").display(),
        );
        for line in &self.billing {
            text = text.replacen("[billing]\n", &format!("[billing]\n{line}\n"), 1);
        }
        for line in &self.ledger {
            text = text.replacen("[ledger]\n", &format!("[ledger]\n{line}\n"), 1);
        }
        for line in &self.server {
            text = text.replacen("[server]\n", &format!("[server]\n{line}\n"), 1);
        }
        for provider in &self.extra_providers {
            text.push_str(
                &provider
                    .replace("@ANTHROPIC@", anthropic_url)
                    .replace("FAKE", fake_url),
            );
            text.push('\n');
        }
        let mut priced = BTreeMap::new();
        for (name, targets) in &self.routes {
            let list = targets
                .iter()
                .map(|t| format!("\"{t}\""))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(text, "[routes.{name}]\ntargets = [{list}]");
            if let Some(ttl) = self.cache_ttl_ms.get(name) {
                let _ = writeln!(text, "cache_ttl_ms = {ttl}");
            }
            for line in self.route_lines.get(name).into_iter().flatten() {
                let _ = writeln!(text, "{line}");
            }
            for target in targets {
                let price = self
                    .prices
                    .get(target)
                    .cloned()
                    .unwrap_or_else(|| ("2".to_owned(), "0.04".to_owned(), "8".to_owned()));
                priced.insert(target.clone(), price);
            }
        }
        for tier in &self.tiers {
            text.push_str(tier);
        }
        for raw in &self.raw {
            text.push_str(raw);
            text.push('\n');
        }
        self.write_prices(&mut text, priced);
        text
    }

    /// One `[[prices]]` entry per priced target, with its extra lines.
    fn write_prices(&self, text: &mut String, priced: BTreeMap<String, (String, String, String)>) {
        for (target, (input, cached, output)) in priced {
            let (provider, model) = target.split_once('/').unwrap();
            let _ = writeln!(
                *text,
                "[[prices]]\nprovider = \"{provider}\"\nmodel = \"{model}\"\ninput = \"{input}\"\ncached_input = \"{cached}\""
            );
            // An empty output price: an embeddings model's entry, which has none.
            if !output.is_empty() {
                let _ = writeln!(*text, "output = \"{output}\"");
            }
            if let Some(write) = self.cache_write_prices.get(&target) {
                let _ = writeln!(*text, "cache_write = \"{write}\"");
            }
            if let Some(extra) = self.price_extras.get(&target) {
                let _ = writeln!(*text, "{extra}");
            }
        }
    }
}

pub struct TestApp {
    pub base_url: String,
    /// Where `/metrics`, `/readyz` and `/admin/v1` answer: the admin
    /// listener when `admin_listen` is set, else `base_url`.
    pub admin_url: String,
    pub gateway: Arc<Gateway>,
    pub fake: RunningFake,
    pub anthropic: tollgate::fake_upstream::anthropic::RunningAnthropicFake,
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
    if redis::suite_on_redis() && !setup.storage.iter().any(|l| l.starts_with("redis_url")) {
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
    let anthropic = tollgate::fake_upstream::anthropic::start(([127, 0, 0, 1], 0).into()).unwrap();
    let (dir, config_path) = write_config_with(&setup, &fake.base_url(), &anthropic.base_url());
    let config = Config::load(&config_path, &setup.env).unwrap();
    let database_url = config.storage.database_url.clone();
    let clock: SharedClock = match &setup.clock {
        Some(clock) => clock.clone(),
        None => Arc::new(SystemClock),
    };
    let options = BuildOptions {
        clock,
        handle_signals: false,
        reload_source: Some(ConfigSource {
            path: config_path.clone(),
            env: Box::new(setup.env.clone()),
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
    let anthropic = tollgate::fake_upstream::anthropic::start(([127, 0, 0, 1], 0).into()).unwrap();
    let shared = Config::load(&first.config_path, &setup.env).unwrap();
    // A journal belongs to one process: each replica writes its own.
    let dir = tempfile::tempdir().unwrap();
    let mut config = (*shared).clone();
    config.ledger.journal_dir = Some(dir.path().join("journal"));
    let config = Arc::new(config);
    let clock: SharedClock = match &setup.clock {
        Some(clock) => clock.clone(),
        None => Arc::new(SystemClock),
    };
    let options = BuildOptions {
        clock,
        handle_signals: false,
        reload_source: Some(ConfigSource {
            path: first.config_path.clone(),
            env: Box::new(setup.env.clone()),
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
