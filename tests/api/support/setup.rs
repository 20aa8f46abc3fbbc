//! What a test changes about the gateway it gets: the configuration as a TOML
//! document that tests edit field by field, written out once when the gateway
//! starts (the fakes' addresses, the database and the journal directory are
//! filled in then).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use tollgate::clock::ManualClock;
use tollgate::config::Config;
use toml::{Table, Value};

use super::{ADMIN_TOKEN, PRIMARY_KEY_ENV};

/// Where a provider sends its calls: the fakes' addresses are known only
/// once they run.
#[derive(Clone, Debug)]
pub enum Upstream {
    /// The OpenAI-shaped fake.
    Fake,
    /// The OpenAI-shaped fake under `/v1`, as an SDK's base URL reads.
    FakeV1,
    /// The Anthropic-shaped fake.
    Anthropic,
    /// Any other address: a listener the test holds.
    At(String),
}

/// The price of a routed target whose test sets none, per 1M tokens.
const DEFAULT_PRICE: [(&str, &str); 3] =
    [("input", "2"), ("cached_input", "0.04"), ("output", "8")];

/// A gateway's configuration and environment, built field by field:
///
/// ```ignore
/// TestSetup::new()
///     .provider("impatient", "openai", Upstream::Fake)
///     .set("providers.impatient.timeout_ms", 200)
///     .route("fast", &["impatient/delay-1000ms", "primary/ok"])
///     .tier("free", &["fast"], 1000, 100)
///     .set("billing.stream_step_tokens", 256)
/// ```
#[derive(Clone)]
pub struct TestSetup {
    doc: Table,
    upstreams: BTreeMap<String, Upstream>,
    /// Each priced target's `[[prices]]` entry (without provider and model).
    prices: BTreeMap<String, Table>,
    env: HashMap<String, String>,
    clock: Option<Arc<ManualClock>>,
}

impl TestSetup {
    /// Two providers on the OpenAI-shaped fake (`primary`, which needs a key,
    /// and `secondary` under `/v1`), no route, no tier.
    pub fn new() -> TestSetup {
        let mut env = HashMap::new();
        env.insert("TOLLGATE_KEY_PEPPER".to_owned(), "test-pepper".to_owned());
        env.insert("TOLLGATE_ADMIN_TOKEN".to_owned(), ADMIN_TOKEN.to_owned());
        env.insert(PRIMARY_KEY_ENV.to_owned(), "sk-primary".to_owned());
        TestSetup {
            doc: Table::new(),
            upstreams: BTreeMap::new(),
            prices: BTreeMap::new(),
            env,
            clock: None,
        }
        .set("server.listen", "127.0.0.1:0")
        .set("server.workers", 2)
        .set("server.request_timeout_ms", 20_000)
        .set("server.body_limit_bytes", 1024 * 1024)
        .set("storage.sync_interval_ms", 100)
        .set("billing.currency", "CNY")
        .set("ledger.flush_interval_ms", 50)
        .provider("primary", "openai", Upstream::Fake)
        .set("providers.primary.api_key_env", PRIMARY_KEY_ENV)
        .set("providers.primary.timeout_ms", 5000)
        .provider("secondary", "openai", Upstream::FakeV1)
        .set("providers.secondary.timeout_ms", 5000)
    }

    /// Sets the field at a dotted `path` (`"billing.stream_step_tokens"`,
    /// `"tiers.free.end_user.budget"`), making the tables on the way.
    pub fn set(mut self, path: &str, value: impl Into<Value>) -> Self {
        let (tables, field) = path.rsplit_once('.').unwrap_or(("", path));
        table_at(&mut self.doc, tables).insert(field.to_owned(), value.into());
        self
    }

    /// Appends `entry` to the array of tables at `path` (`[[plans]]`, a dated `[[prices]]`).
    pub fn push(mut self, path: &str, entry: Table) -> Self {
        let (tables, field) = path.rsplit_once('.').unwrap_or(("", path));
        let array = table_at(&mut self.doc, tables)
            .entry(field)
            .or_insert_with(|| Value::Array(Vec::new()));
        match array {
            Value::Array(entries) => entries.push(Value::Table(entry)),
            other => panic!("{path} is {other}, not an array"),
        }
        self
    }

    /// Applies a piece of setup several tests share (`.with(breaker)`).
    pub fn with(self, piece: impl FnOnce(Self) -> Self) -> Self {
        piece(self)
    }

    /// The field at a dotted `path`, if set.
    pub fn get(&self, path: &str) -> Option<&Value> {
        let (tables, field) = path.rsplit_once('.').unwrap_or(("", path));
        let mut table = &self.doc;
        for part in tables.split('.').filter(|part| !part.is_empty()) {
            table = table.get(part)?.as_table()?;
        }
        table.get(field)
    }

    /// A `[providers.<name>]` of `kind` (`"openai"`, `"anthropic"`) sending to `upstream`.
    pub fn provider(mut self, name: &str, kind: &str, upstream: Upstream) -> Self {
        self.upstreams.insert(name.to_owned(), upstream);
        self.set(&format!("providers.{name}.kind"), kind)
    }

    /// A route over `targets` (`provider/model`); every target of every
    /// route gets the default price (2 / 0.04 / 8 per 1M) unless set.
    pub fn route(self, name: &str, targets: &[&str]) -> Self {
        self.set(&format!("routes.{name}.targets"), targets.to_vec())
    }

    /// A tier over `routes`, with its rate and default `max_tokens`.
    pub fn tier(self, name: &str, routes: &[&str], rpm: u32, default_max_tokens: u32) -> Self {
        self.set(&format!("tiers.{name}.routes"), routes.to_vec())
            .set(&format!("tiers.{name}.rpm"), rpm)
            .set(
                &format!("tiers.{name}.default_max_tokens"),
                default_max_tokens,
            )
    }

    /// A target's price per 1M tokens: input, cached input and output.
    pub fn price(self, target: &str, input: &str, cached: &str, output: &str) -> Self {
        self.price_field(target, "input", input)
            .price_field(target, "cached_input", cached)
            .price_field(target, "output", output)
    }

    /// A target's price without an output price: an embeddings model's.
    pub fn input_price(mut self, target: &str, input: &str, cached: &str) -> Self {
        self.prices.insert(target.to_owned(), Table::new());
        self.price_field(target, "input", input)
            .price_field(target, "cached_input", cached)
    }

    /// One more field of a target's `[[prices]]` entry (`hidden_output`,
    /// `cache_write`, `web_search`, …), on the default price if none is set.
    pub fn price_field(mut self, target: &str, field: &str, value: impl Into<Value>) -> Self {
        self.prices
            .entry(target.to_owned())
            .or_insert_with(default_price)
            .insert(field.to_owned(), value.into());
        self
    }

    /// Turns the exact response cache on for a route.
    pub fn cached_route(self, route: &str, ttl_ms: u64) -> Self {
        self.set(&format!("routes.{route}.cache_ttl_ms"), int(ttl_ms))
    }

    /// `server.request_timeout_ms`: the deadline of a whole request.
    pub fn request_timeout_ms(self, ms: u64) -> Self {
        self.set("server.request_timeout_ms", int(ms))
    }

    pub fn listen(self, addr: std::net::SocketAddr) -> Self {
        self.set("server.listen", addr.to_string())
    }

    /// `server.admin_listen`: operations on their own listener.
    pub fn admin_listen(self, addr: &str) -> Self {
        self.set("server.admin_listen", addr)
    }

    pub fn body_limit(self, bytes: usize) -> Self {
        self.set("server.body_limit_bytes", int(bytes))
    }

    /// Quotas shared through `redis_url` by `replicas` replicas.
    pub fn redis(self, url: &str, replicas: u32) -> Self {
        self.set("storage.redis_url", url)
            .set("storage.replicas", replicas)
    }

    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.insert(name.to_owned(), value.to_owned());
        self
    }

    pub fn env_vars(&self) -> &HashMap<String, String> {
        &self.env
    }

    pub fn clock(mut self, clock: Arc<ManualClock>) -> Self {
        self.clock = Some(clock);
        self
    }

    pub(super) fn manual_clock(&self) -> Option<&Arc<ManualClock>> {
        self.clock.as_ref()
    }

    /// The configuration a gateway of this setup loads from `path`.
    pub fn load(&self, path: &Path) -> Arc<Config> {
        Config::load(path, &self.env).unwrap()
    }

    /// The configuration text, with what is known only now filled in.
    pub(super) fn toml(
        &self,
        dir: &Path,
        database_url: &str,
        fake_url: &str,
        anthropic_url: &str,
    ) -> String {
        let mut setup = self.clone().set("storage.database_url", database_url).set(
            "ledger.journal_dir",
            dir.join("journal").display().to_string(),
        );
        // Tests share two cores with many gateways: a healthy Redis call can
        // take longer than the production default of 100 ms there.
        if setup.get("storage.redis_url").is_some()
            && setup.get("storage.redis_timeout_ms").is_none()
        {
            setup = setup.set("storage.redis_timeout_ms", 1000);
        }
        for (name, upstream) in &self.upstreams {
            let url = match upstream {
                Upstream::Fake => fake_url.to_owned(),
                Upstream::FakeV1 => format!("{fake_url}/v1"),
                Upstream::Anthropic => anthropic_url.to_owned(),
                Upstream::At(url) => url.clone(),
            };
            setup = setup.set(&format!("providers.{name}.base_url"), url);
        }
        for target in self.routed_targets() {
            let (provider, model) = target.split_once('/').unwrap();
            let mut entry = Table::new();
            entry.insert("provider".to_owned(), provider.into());
            entry.insert("model".to_owned(), model.into());
            entry.extend(
                self.prices
                    .get(&target)
                    .cloned()
                    .unwrap_or_else(default_price),
            );
            setup = setup.push("prices", entry);
        }
        toml::to_string(&setup.doc).unwrap()
    }

    /// Every target named by a route, as a string or as a weighted `{ target = … }`.
    fn routed_targets(&self) -> BTreeSet<String> {
        let routes = self.doc.get("routes").and_then(Value::as_table);
        routes
            .into_iter()
            .flat_map(|routes| routes.values())
            .filter_map(|route| route.get("targets").and_then(Value::as_array))
            .flatten()
            .filter_map(|target| match target {
                Value::String(target) => Some(target.clone()),
                Value::Table(weighted) => weighted
                    .get("target")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                _ => None,
            })
            .collect()
    }
}

/// Edits the configuration file a running gateway was started on, as a
/// reload or a SIGHUP will read it.
pub fn edit_config(path: &Path, edit: impl FnOnce(&mut Table)) {
    let mut doc: Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut doc);
    std::fs::write(path, toml::to_string(&doc).unwrap()).unwrap();
}

/// A table of `fields`, for [`TestSetup::push`] and inline tables.
pub fn entry<const N: usize>(fields: [(&str, Value); N]) -> Table {
    fields
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
}

/// The table at a dotted path (the document itself for `""`), made if missing.
fn table_at<'a>(doc: &'a mut Table, path: &str) -> &'a mut Table {
    path.split('.')
        .filter(|part| !part.is_empty())
        .fold(doc, |table, part| {
            match table
                .entry(part)
                .or_insert_with(|| Value::Table(Table::new()))
            {
                Value::Table(table) => table,
                other => panic!("{path}: {part} is {other}, not a table"),
            }
        })
}

fn default_price() -> Table {
    DEFAULT_PRICE
        .iter()
        .map(|(field, price)| ((*field).to_owned(), Value::from(*price)))
        .collect()
}

/// A count as a TOML integer.
fn int(n: impl TryInto<i64>) -> Value {
    Value::Integer(
        n.try_into()
            .unwrap_or_else(|_| panic!("a count past a TOML integer")),
    )
}
