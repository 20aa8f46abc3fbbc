//! Configuration: one TOML file plus environment variables for secrets.
//! `Config::load` parses the raw file (unknown fields refused), reads env
//! through `EnvSource`, then `validate` turns it into typed, checked values:
//! a route naming an unknown provider, or a target without a price, refuses
//! to start with the exact entry named. Env is read here and nowhere else.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::ids::{ProviderName, RouteName};
use crate::money::{MoneyError, PricePerMTok};

// === env ===

/// Where secrets come from; tests pass a map instead of touching the process env.
pub trait EnvSource {
    fn get(&self, name: &str) -> Option<String>;
}

pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl<S: std::hash::BuildHasher> EnvSource for HashMap<String, String, S> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).cloned()
    }
}

/// A secret that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("*****")
    }
}

// === raw file ===

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: ServerConfig,
    #[serde(default)]
    storage: StorageConfig,
    #[serde(default)]
    billing: BillingConfig,
    #[serde(default)]
    ledger: LedgerConfig,
    #[serde(default)]
    tokenizer: TokenizerConfig,
    #[serde(default)]
    telemetry: TelemetryConfig,
    #[serde(default)]
    cache: CacheConfig,
    #[serde(default)]
    alerts: AlertsConfig,
    #[serde(default)]
    providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    routes: BTreeMap<String, RawRoute>,
    #[serde(default)]
    tiers: BTreeMap<String, RawTier>,
    #[serde(default)]
    prices: Vec<RawPrice>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Worker threads; 0 means one per core.
    #[serde(default)]
    pub workers: usize,
    #[serde(default = "default_body_limit_bytes")]
    pub body_limit_bytes: usize,
    /// How long in-flight requests may take to finish after SIGTERM.
    #[serde(default = "default_shutdown_grace_ms")]
    pub shutdown_grace_ms: u64,
    /// The whole request's deadline; reservations expire this long (plus a margin) after admission.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Tenant actors are spread over this many arbiters (threads).
    #[serde(default = "default_tenant_arbiters")]
    pub tenant_arbiters: usize,
    /// Streams read on after their caller left, at most this many at once (beyond: cancel).
    #[serde(default = "default_max_concurrent_drains")]
    pub max_concurrent_drains: usize,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
fn default_body_limit_bytes() -> usize {
    4 * 1024 * 1024
}
fn default_shutdown_grace_ms() -> u64 {
    30_000
}
fn default_request_timeout_ms() -> u64 {
    120_000
}
fn default_tenant_arbiters() -> usize {
    2
}
fn default_max_concurrent_drains() -> usize {
    256
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: default_listen(),
            workers: 0,
            body_limit_bytes: default_body_limit_bytes(),
            shutdown_grace_ms: default_shutdown_grace_ms(),
            request_timeout_ms: default_request_timeout_ms(),
            tenant_arbiters: default_tenant_arbiters(),
            max_concurrent_drains: default_max_concurrent_drains(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// Receives `{"tenant", "period", "committed", "budget", "threshold"}` as a JSON POST.
    pub webhook_url: Option<String>,
    /// Percentages of a tenant's monthly budget; each fires once per period.
    #[serde(default = "default_alert_thresholds")]
    pub thresholds_percent: Vec<u32>,
    #[serde(default = "default_alert_timeout_ms")]
    pub timeout_ms: u64,
    /// Delivery attempts per alert (with backoff between them).
    #[serde(default = "default_alert_attempts")]
    pub attempts: u32,
}

fn default_alert_thresholds() -> Vec<u32> {
    vec![80, 100]
}
fn default_alert_timeout_ms() -> u64 {
    2000
}
fn default_alert_attempts() -> u32 {
    3
}

impl Default for AlertsConfig {
    fn default() -> Self {
        AlertsConfig {
            webhook_url: None,
            thresholds_percent: default_alert_thresholds(),
            timeout_ms: default_alert_timeout_ms(),
            attempts: default_alert_attempts(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Cached responses kept at most (oldest evicted first).
    #[serde(default = "default_cache_max_entries")]
    pub max_entries: usize,
    /// Total bytes of cached bodies kept at most.
    #[serde(default = "default_cache_max_bytes")]
    pub max_bytes: usize,
}

fn default_cache_max_entries() -> usize {
    10_000
}
fn default_cache_max_bytes() -> usize {
    64 * 1024 * 1024
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_entries: default_cache_max_entries(),
            max_bytes: default_cache_max_bytes(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    #[serde(default = "default_database_url")]
    pub database_url: String,
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// How often each replica polls the database for revoked keys and changed tenants.
    #[serde(default = "default_sync_interval_ms")]
    pub sync_interval_ms: u64,
}

fn default_database_url() -> String {
    "sqlite://tollgate.db?mode=rwc".to_owned()
}
fn default_max_connections() -> u32 {
    8
}
fn default_sync_interval_ms() -> u64 {
    1000
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            database_url: default_database_url(),
            max_connections: default_max_connections(),
            sync_interval_ms: default_sync_interval_ms(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BillingConfig {
    #[serde(default = "default_currency")]
    pub currency: String,
    /// `clamp` mode never lowers `max_tokens` below this.
    #[serde(default = "default_clamp_floor_tokens")]
    pub clamp_floor_tokens: u32,
}

fn default_currency() -> String {
    "USD".to_owned()
}
fn default_clamp_floor_tokens() -> u32 {
    64
}

impl Default for BillingConfig {
    fn default() -> Self {
        BillingConfig {
            currency: default_currency(),
            clamp_floor_tokens: default_clamp_floor_tokens(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerConfig {
    #[serde(default = "default_flush_interval_ms")]
    pub flush_interval_ms: u64,
    #[serde(default = "default_max_batch_rows")]
    pub max_batch_rows: usize,
    /// Events waiting for the database past this bound trigger `on_backlog_full`.
    #[serde(default = "default_max_backlog_events")]
    pub max_backlog_events: usize,
    #[serde(default)]
    pub on_backlog_full: OnBacklogFull,
    /// Where the journal's segments live. Default: `journal/` next to a SQLite
    /// file, else `tollgate-journal/` in the working directory.
    #[serde(default)]
    pub journal_dir: Option<std::path::PathBuf>,
    #[serde(default)]
    pub fsync: FsyncMode,
    /// `batch`: how long one sync waits to gather the writers that share it.
    /// 0: none; writers arriving during a sync share the next one.
    #[serde(default = "default_group_commit_ms")]
    pub group_commit_ms: u64,
    /// `interval`: how often the journal is synced.
    #[serde(default = "default_fsync_interval_ms")]
    pub fsync_interval_ms: u64,
    /// A segment past this size is closed and a new one begun.
    #[serde(default = "default_journal_segment_bytes")]
    pub journal_segment_bytes: u64,
}

/// What happens once `max_backlog_events` events wait for the database.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnBacklogFull {
    /// New paid requests get 503 with `Retry-After` until the backlog drains.
    #[default]
    Refuse,
    /// Keep serving; the journal holds the rows; a log line and a metric alert.
    Continue,
}

/// When the journal's writes are forced to disk (they reach the OS at once in every mode).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FsyncMode {
    /// Group commit: a reserve waits for one sync shared by every writer of the last few ms.
    #[default]
    Batch,
    /// A sync every `fsync_interval_ms`; nobody waits.
    Interval,
    /// Never synced by the gateway; the OS writes back on its own schedule.
    Off,
}

fn default_flush_interval_ms() -> u64 {
    200
}
fn default_max_batch_rows() -> usize {
    256
}
fn default_max_backlog_events() -> usize {
    100_000
}
fn default_group_commit_ms() -> u64 {
    0
}
fn default_fsync_interval_ms() -> u64 {
    100
}
fn default_journal_segment_bytes() -> u64 {
    64 * 1024 * 1024
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            flush_interval_ms: default_flush_interval_ms(),
            max_batch_rows: default_max_batch_rows(),
            max_backlog_events: default_max_backlog_events(),
            on_backlog_full: OnBacklogFull::default(),
            journal_dir: None,
            fsync: FsyncMode::default(),
            group_commit_ms: default_group_commit_ms(),
            fsync_interval_ms: default_fsync_interval_ms(),
            journal_segment_bytes: default_journal_segment_bytes(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerConfig {
    /// `o200k_base` or `cl100k_base`.
    #[serde(default = "default_encoding")]
    pub encoding: String,
    /// Estimates are multiplied by this percentage (≥ 100) for providers whose tokenizer differs.
    #[serde(default = "default_safety_percent")]
    pub safety_percent: u32,
}

fn default_encoding() -> String {
    "o200k_base".to_owned()
}
fn default_safety_percent() -> u32 {
    110
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        TokenizerConfig {
            encoding: default_encoding(),
            safety_percent: default_safety_percent(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Tenants that always get their own metric label.
    #[serde(default)]
    pub tenant_labels: Vec<String>,
    /// Beyond those, the first this many tenants seen get one; the rest share `other`.
    #[serde(default = "default_tenant_label_limit")]
    pub tenant_label_limit: usize,
    /// Adds a `feature` label to the cost counter (one series per tenant × feature).
    #[serde(default)]
    pub feature_labels: bool,
    /// Tenants whose prompts may be logged (at debug level); everyone else's never are.
    #[serde(default)]
    pub log_prompts_for: Vec<String>,
    /// JSON log lines (default) or human-readable ones.
    #[serde(default = "default_json_logs")]
    pub json_logs: bool,
}

fn default_tenant_label_limit() -> usize {
    100
}
fn default_json_logs() -> bool {
    true
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            tenant_labels: Vec::new(),
            tenant_label_limit: default_tenant_label_limit(),
            feature_labels: false,
            log_prompts_for: Vec::new(),
            json_logs: default_json_logs(),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Any OpenAI-compatible API: DeepSeek, DashScope, vLLM, OpenAI.
    Openai,
    /// Anthropic's Messages API (`{base_url}/v1/messages`).
    Anthropic,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    kind: ProviderKind,
    base_url: String,
    api_key_env: Option<String>,
    #[serde(default = "default_provider_timeout_ms")]
    timeout_ms: u64,
    #[serde(default = "default_max_concurrency")]
    max_concurrency: u32,
    /// Calls waiting for a slot beyond `max_concurrency`; past it the next target is tried.
    #[serde(default = "default_max_queue")]
    max_queue: usize,
    #[serde(default = "default_queue_timeout_ms")]
    queue_timeout_ms: u64,
    /// Attempts on this provider before failing over (1 = no retry).
    #[serde(default = "default_max_attempts")]
    max_attempts: u32,
    #[serde(default = "default_retry_base_delay_ms")]
    retry_base_delay_ms: u64,
    #[serde(default = "default_retry_max_delay_ms")]
    retry_max_delay_ms: u64,
    /// Retries may be at most this share of requests (plus `retry_burst` up front).
    #[serde(default = "default_retry_budget_percent")]
    retry_budget_percent: u32,
    #[serde(default = "default_retry_burst")]
    retry_burst: u32,
    #[serde(default = "default_breaker_failures")]
    breaker_failures: u32,
    #[serde(default = "default_breaker_cooldown_ms")]
    breaker_cooldown_ms: u64,
    /// A stream whose first chunk takes longer fails over; later chunks may be this far apart.
    #[serde(default = "default_first_token_timeout_ms")]
    first_token_timeout_ms: u64,
    #[serde(default)]
    on_client_disconnect: OnClientDisconnect,
    /// How long a stream whose caller left may still be read for the provider's usage.
    #[serde(default = "default_drain_timeout_ms")]
    drain_timeout_ms: u64,
    /// `anthropic-version` header for `kind = "anthropic"`.
    anthropic_version: Option<String>,
}

/// What a stream does when its caller disconnects.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnClientDisconnect {
    /// Keep reading the upstream (bounded) to bill its own reported usage.
    #[default]
    Drain,
    /// Stop the upstream at once; usage is estimated from what was streamed.
    Cancel,
}

fn default_provider_timeout_ms() -> u64 {
    60_000
}
fn default_max_concurrency() -> u32 {
    1024
}
fn default_max_attempts() -> u32 {
    2
}
fn default_retry_base_delay_ms() -> u64 {
    100
}
fn default_retry_max_delay_ms() -> u64 {
    2000
}
fn default_retry_budget_percent() -> u32 {
    20
}
fn default_retry_burst() -> u32 {
    10
}
fn default_max_queue() -> usize {
    256
}
fn default_queue_timeout_ms() -> u64 {
    2000
}
fn default_breaker_failures() -> u32 {
    5
}
fn default_breaker_cooldown_ms() -> u64 {
    10_000
}
fn default_first_token_timeout_ms() -> u64 {
    20_000
}
fn default_drain_timeout_ms() -> u64 {
    60_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    targets: Vec<String>,
    /// Identical non-streaming requests of one tenant are answered from the
    /// exact response cache for this long; 0 (default) turns caching off.
    #[serde(default)]
    cache_ttl_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    routes: Vec<String>,
    rpm: u32,
    /// Tokens per minute (input estimate + max_tokens at admission, corrected after).
    tpm: Option<u64>,
    daily_tokens: Option<u64>,
    monthly_tokens: Option<u64>,
    /// Requests that may arrive at once on a full bucket; defaults to `rpm`.
    burst: Option<u32>,
    default_max_tokens: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrice {
    provider: String,
    model: String,
    input: String,
    cached_input: Option<String>,
    cache_write: Option<String>,
    output: String,
}

// === validated ===

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("{entry}: {reason}")]
    Invalid { entry: String, reason: String },
}

fn invalid(entry: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        entry: entry.into(),
        reason: reason.into(),
    }
}

/// Prices of one model at one provider, per 1M tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input: PricePerMTok,
    pub cached_input: PricePerMTok,
    pub cache_write: PricePerMTok,
    pub output: PricePerMTok,
}

#[derive(Debug, Clone)]
pub struct Provider {
    pub name: ProviderName,
    pub kind: ProviderKind,
    pub base_url: String,
    pub chat_url: String,
    pub api_key_env: Option<String>,
    /// `None` with `api_key_env` set means the variable is unset: the provider is disabled.
    pub api_key: Option<Secret>,
    pub timeout_ms: u64,
    pub max_concurrency: u32,
    pub max_queue: usize,
    pub queue_timeout_ms: u64,
    pub max_attempts: u32,
    pub retry_base_delay_ms: u64,
    pub retry_max_delay_ms: u64,
    pub retry_budget_percent: u32,
    pub retry_burst: u32,
    pub breaker_failures: u32,
    pub breaker_cooldown_ms: u64,
    pub first_token_timeout_ms: u64,
    pub on_client_disconnect: OnClientDisconnect,
    pub drain_timeout_ms: u64,
    pub anthropic_version: String,
}

impl Provider {
    /// The env var this provider needs and does not have, if any.
    pub fn missing_key_env(&self) -> Option<&str> {
        match (&self.api_key_env, &self.api_key) {
            (Some(env), None) => Some(env),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Target {
    pub provider: ProviderName,
    /// The model name sent upstream.
    pub model: String,
    pub price: Price,
}

#[derive(Debug, Clone)]
pub struct Route {
    pub name: RouteName,
    pub targets: Vec<Target>,
    /// The highest per-token input price over every target (cache-write where higher).
    pub worst_input_price: PricePerMTok,
    pub worst_output_price: PricePerMTok,
    pub cache_ttl_ms: u64,
}

#[derive(Debug, Clone)]
pub struct Tier {
    pub name: String,
    pub routes: Vec<RouteName>,
    pub rpm: u32,
    pub tpm: Option<u64>,
    pub daily_tokens: Option<u64>,
    pub monthly_tokens: Option<u64>,
    pub burst: u32,
    pub default_max_tokens: u32,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub billing: BillingConfig,
    pub ledger: LedgerConfig,
    pub tokenizer: TokenizerConfig,
    pub telemetry: TelemetryConfig,
    pub cache: CacheConfig,
    pub alerts: AlertsConfig,
    pub providers: HashMap<ProviderName, Provider>,
    pub routes: HashMap<RouteName, Route>,
    pub tiers: HashMap<String, Tier>,
    /// Identifies the price table rows were charged under (a hash of the prices).
    pub price_version: String,
    /// Every `[[prices]]` entry by (provider, model).
    pub prices: PriceTable,
    /// Keys are hashed with it; serving and issuing keys need it, reports do not.
    pub key_pepper: Option<Secret>,
    pub admin_token: Option<Secret>,
}

pub const KEY_PEPPER_ENV: &str = "TOLLGATE_KEY_PEPPER";
pub const ADMIN_TOKEN_ENV: &str = "TOLLGATE_ADMIN_TOKEN";
pub const DATABASE_URL_ENV: &str = "TOLLGATE_DATABASE_URL";

impl Config {
    /// The journal's directory; `None` for an in-memory database, which
    /// nothing outlives anyway.
    pub fn journal_dir(&self) -> Option<std::path::PathBuf> {
        if let Some(dir) = &self.ledger.journal_dir {
            return Some(dir.clone());
        }
        let url = self.storage.database_url.as_str();
        if url.contains(":memory:") {
            return None;
        }
        let Some(rest) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        else {
            return Some(std::path::PathBuf::from("tollgate-journal"));
        };
        let file = Path::new(rest.split('?').next().unwrap_or(rest));
        let parent = file.parent().unwrap_or(Path::new(""));
        Some(parent.join("journal"))
    }

    /// The pepper, or an error naming its env var.
    pub fn require_pepper(&self) -> Result<&Secret, ConfigError> {
        self.key_pepper.as_ref().ok_or_else(|| {
            invalid(
                KEY_PEPPER_ENV,
                "is not set: API keys are hashed with this pepper (any long random string)",
            )
        })
    }

    pub fn load(path: &Path, env: &dyn EnvSource) -> Result<Arc<Config>, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text, env).map_err(|error| match error {
            ConfigError::Parse { source, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                source,
            },
            other => other,
        })
    }

    pub fn from_toml(text: &str, env: &dyn EnvSource) -> Result<Arc<Config>, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: String::new(),
            source: Box::new(source),
        })?;
        validate(raw, env).map(Arc::new)
    }

    pub fn route(&self, name: &str) -> Option<&Route> {
        self.routes.get(&RouteName::new(name))
    }
}

/// Only the `[[prices]]` of a file (a full configuration or a prices-only file).
#[derive(Debug, Deserialize)]
struct PricesFile {
    #[serde(default)]
    prices: Vec<RawPrice>,
}

/// Prices by (provider, model).
pub type PriceTable = HashMap<(String, String), Price>;

/// A price table and its version, read from any TOML file with `[[prices]]`.
pub fn load_price_table(path: &Path) -> Result<(PriceTable, String), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let file: PricesFile = toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.display().to_string(),
        source: Box::new(source),
    })?;
    Ok((validate_prices(&file.prices)?, price_version(&file.prices)))
}

fn parse_price(entry: &str, field: &str, text: &str) -> Result<PricePerMTok, ConfigError> {
    PricePerMTok::parse_decimal(text)
        .map_err(|e: MoneyError| invalid(format!("{entry}.{field}"), e.to_string()))
}

fn validate(raw: RawConfig, env: &dyn EnvSource) -> Result<Config, ConfigError> {
    let mut database_url = raw.storage.database_url.clone();
    if let Some(url) = env.get(DATABASE_URL_ENV) {
        database_url = url;
    }
    let storage = StorageConfig {
        database_url,
        ..raw.storage
    };
    if raw.tokenizer.safety_percent < 100 {
        return Err(invalid("tokenizer.safety_percent", "must be at least 100"));
    }
    if !matches!(
        raw.tokenizer.encoding.as_str(),
        "o200k_base" | "cl100k_base"
    ) {
        return Err(invalid(
            "tokenizer.encoding",
            "must be o200k_base or cl100k_base",
        ));
    }
    if raw.ledger.max_batch_rows == 0 {
        return Err(invalid("ledger.max_batch_rows", "must be at least 1"));
    }
    if raw.ledger.journal_segment_bytes < 4096 {
        return Err(invalid(
            "ledger.journal_segment_bytes",
            "must be at least 4096",
        ));
    }

    let providers = validate_providers(&raw.providers, env)?;
    let prices = validate_prices(&raw.prices)?;
    let routes = validate_routes(&raw.routes, &providers, &prices)?;
    let tiers = validate_tiers(&raw.tiers, &routes)?;

    let key_pepper = env
        .get(KEY_PEPPER_ENV)
        .filter(|p| !p.is_empty())
        .map(Secret::new);
    let admin_token = env
        .get(ADMIN_TOKEN_ENV)
        .filter(|t| !t.is_empty())
        .map(Secret::new);

    Ok(Config {
        server: raw.server,
        storage,
        billing: raw.billing,
        ledger: raw.ledger,
        tokenizer: raw.tokenizer,
        telemetry: raw.telemetry,
        cache: raw.cache,
        alerts: raw.alerts,
        providers,
        routes,
        tiers,
        price_version: price_version(&raw.prices),
        prices,
        key_pepper,
        admin_token,
    })
}

fn validate_providers(
    raw: &BTreeMap<String, RawProvider>,
    env: &dyn EnvSource,
) -> Result<HashMap<ProviderName, Provider>, ConfigError> {
    let mut providers = HashMap::new();
    for (name, p) in raw {
        let entry = format!("providers.{name}");
        if name.is_empty() || name.contains('/') {
            return Err(invalid(
                entry,
                "provider names may not be empty or contain `/`",
            ));
        }
        if p.timeout_ms == 0 {
            return Err(invalid(format!("{entry}.timeout_ms"), "must be positive"));
        }
        if p.max_concurrency == 0 {
            return Err(invalid(
                format!("{entry}.max_concurrency"),
                "must be positive",
            ));
        }
        let api_key = p
            .api_key_env
            .as_deref()
            .and_then(|var| env.get(var))
            .map(Secret::new);
        let base = p.base_url.trim_end_matches('/');
        providers.insert(
            ProviderName::new(name.as_str()),
            Provider {
                name: ProviderName::new(name.as_str()),
                kind: p.kind,
                base_url: p.base_url.clone(),
                chat_url: match p.kind {
                    ProviderKind::Openai => format!("{base}/chat/completions"),
                    ProviderKind::Anthropic if base.ends_with("/v1") => format!("{base}/messages"),
                    ProviderKind::Anthropic => format!("{base}/v1/messages"),
                },
                api_key_env: p.api_key_env.clone(),
                api_key,
                timeout_ms: p.timeout_ms,
                max_concurrency: p.max_concurrency,
                max_queue: p.max_queue,
                queue_timeout_ms: p.queue_timeout_ms,
                max_attempts: p.max_attempts.max(1),
                retry_base_delay_ms: p.retry_base_delay_ms,
                retry_max_delay_ms: p.retry_max_delay_ms,
                retry_budget_percent: p.retry_budget_percent,
                retry_burst: p.retry_burst,
                breaker_failures: p.breaker_failures.max(1),
                breaker_cooldown_ms: p.breaker_cooldown_ms,
                first_token_timeout_ms: p.first_token_timeout_ms.max(1),
                on_client_disconnect: p.on_client_disconnect,
                drain_timeout_ms: p.drain_timeout_ms,
                anthropic_version: p.anthropic_version.clone().unwrap_or_default(),
            },
        );
    }
    Ok(providers)
}

fn validate_prices(raw: &[RawPrice]) -> Result<HashMap<(String, String), Price>, ConfigError> {
    let mut prices = HashMap::new();
    for (i, p) in raw.iter().enumerate() {
        let entry = format!("prices[{i}]");
        let input = parse_price(&entry, "input", &p.input)?;
        let price = Price {
            input,
            // Without a listed cached price, cached tokens are billed as plain input.
            cached_input: match &p.cached_input {
                Some(text) => parse_price(&entry, "cached_input", text)?,
                None => input,
            },
            cache_write: match &p.cache_write {
                Some(text) => parse_price(&entry, "cache_write", text)?,
                None => input,
            },
            output: parse_price(&entry, "output", &p.output)?,
        };
        let key = (p.provider.clone(), p.model.clone());
        if prices.insert(key, price).is_some() {
            return Err(invalid(
                entry,
                format!("a second price for {}/{}", p.provider, p.model),
            ));
        }
    }
    Ok(prices)
}

fn validate_routes(
    raw: &BTreeMap<String, RawRoute>,
    providers: &HashMap<ProviderName, Provider>,
    prices: &HashMap<(String, String), Price>,
) -> Result<HashMap<RouteName, Route>, ConfigError> {
    let mut routes = HashMap::new();
    for (name, r) in raw {
        if r.targets.is_empty() {
            return Err(invalid(
                format!("routes.{name}.targets"),
                "needs at least one target",
            ));
        }
        let mut targets = Vec::with_capacity(r.targets.len());
        for (i, target) in r.targets.iter().enumerate() {
            let entry = format!("routes.{name}.targets[{i}]");
            let Some((provider, model)) = target.split_once('/') else {
                return Err(invalid(
                    entry,
                    format!("`{target}` is not `provider/model`"),
                ));
            };
            if !providers.contains_key(&ProviderName::new(provider)) {
                return Err(invalid(entry, format!("unknown provider `{provider}`")));
            }
            let Some(price) = prices.get(&(provider.to_owned(), model.to_owned())) else {
                return Err(invalid(entry, format!("no price for {provider}/{model}")));
            };
            targets.push(Target {
                provider: ProviderName::new(provider),
                model: model.to_owned(),
                price: *price,
            });
        }
        let worst_input_price = targets
            .iter()
            .map(|t| t.price.input.max(t.price.cache_write))
            .max()
            .unwrap_or_default();
        let worst_output_price = targets
            .iter()
            .map(|t| t.price.output)
            .max()
            .unwrap_or_default();
        routes.insert(
            RouteName::new(name.as_str()),
            Route {
                name: RouteName::new(name.as_str()),
                targets,
                worst_input_price,
                worst_output_price,
                cache_ttl_ms: r.cache_ttl_ms,
            },
        );
    }
    Ok(routes)
}

fn validate_tiers(
    raw: &BTreeMap<String, RawTier>,
    routes: &HashMap<RouteName, Route>,
) -> Result<HashMap<String, Tier>, ConfigError> {
    let mut tiers = HashMap::new();
    for (name, t) in raw {
        for (i, route) in t.routes.iter().enumerate() {
            if !routes.contains_key(&RouteName::new(route.as_str())) {
                return Err(invalid(
                    format!("tiers.{name}.routes[{i}]"),
                    format!("unknown route `{route}`"),
                ));
            }
        }
        if t.rpm == 0 {
            return Err(invalid(format!("tiers.{name}.rpm"), "must be positive"));
        }
        if t.default_max_tokens == 0 {
            return Err(invalid(
                format!("tiers.{name}.default_max_tokens"),
                "must be positive",
            ));
        }
        tiers.insert(
            name.clone(),
            Tier {
                name: name.clone(),
                routes: t
                    .routes
                    .iter()
                    .map(|r| RouteName::new(r.as_str()))
                    .collect(),
                rpm: t.rpm,
                tpm: t.tpm.filter(|v| *v > 0),
                daily_tokens: t.daily_tokens,
                monthly_tokens: t.monthly_tokens,
                burst: t.burst.unwrap_or(t.rpm).max(1),
                default_max_tokens: t.default_max_tokens,
            },
        );
    }
    Ok(tiers)
}

fn price_version(prices: &[RawPrice]) -> String {
    let mut hasher = Sha256::new();
    for p in prices {
        for field in [
            p.provider.as_str(),
            p.model.as_str(),
            p.input.as_str(),
            p.cached_input.as_deref().unwrap_or(""),
            p.cache_write.as_deref().unwrap_or(""),
            p.output.as_str(),
        ] {
            hasher.update(field.as_bytes());
            hasher.update([0]);
        }
    }
    let digest = hasher.finalize();
    digest.iter().take(6).fold(String::new(), |mut out, b| {
        use std::fmt::Write;
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
        [providers.deepseek]
        kind = "openai"
        base_url = "https://api.deepseek.com"
        api_key_env = "DEEPSEEK_API_KEY"
        [providers.qwen]
        kind = "openai"
        base_url = "https://dashscope.example/compatible-mode/v1/"
        api_key_env = "DASHSCOPE_API_KEY"
        [routes.fast]
        targets = ["deepseek/deepseek-flash", "qwen/qwen-flash"]
        [tiers.free]
        routes = ["fast"]
        rpm = 60
        default_max_tokens = 1024
        [[prices]]
        provider = "deepseek"
        model = "deepseek-flash"
        input = "2.0"
        cached_input = "0.04"
        output = "8.0"
        [[prices]]
        provider = "qwen"
        model = "qwen-flash"
        input = "3"
        output = "6"
    "#;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn pepper() -> HashMap<String, String> {
        env(&[(KEY_PEPPER_ENV, "pepper"), ("DEEPSEEK_API_KEY", "sk-1")])
    }

    #[test]
    fn loads_the_contract_shape_and_takes_worst_prices_over_targets() {
        let config = Config::from_toml(BASE, &pepper()).unwrap();
        let route = config.route("fast").unwrap();
        assert_eq!(
            route.worst_input_price,
            PricePerMTok::parse_decimal("3").unwrap()
        );
        assert_eq!(
            route.worst_output_price,
            PricePerMTok::parse_decimal("8").unwrap()
        );
        let qwen = &config.providers[&ProviderName::new("qwen")];
        assert_eq!(
            qwen.chat_url,
            "https://dashscope.example/compatible-mode/v1/chat/completions"
        );
        assert_eq!(qwen.missing_key_env(), Some("DASHSCOPE_API_KEY"));
        let deepseek = &config.providers[&ProviderName::new("deepseek")];
        assert_eq!(deepseek.missing_key_env(), None);
        assert_eq!(format!("{:?}", deepseek.api_key), "Some(*****)");
    }

    #[test]
    fn the_journal_lives_next_to_a_sqlite_file_unless_configured() {
        let with_db = |url: &str| {
            let env = env(&[(KEY_PEPPER_ENV, "pepper"), (DATABASE_URL_ENV, url)]);
            Config::from_toml(BASE, &env).unwrap().journal_dir()
        };
        assert_eq!(
            with_db("sqlite:///var/lib/tollgate/t.db?mode=rwc"),
            Some(std::path::PathBuf::from("/var/lib/tollgate/journal"))
        );
        assert_eq!(
            with_db("sqlite://t.db?mode=rwc"),
            Some(std::path::PathBuf::from("journal"))
        );
        assert_eq!(with_db("sqlite::memory:"), None);
        assert_eq!(
            with_db("postgres://u@db/tollgate"),
            Some(std::path::PathBuf::from("tollgate-journal"))
        );
        let text = format!("{BASE}\n[ledger]\njournal_dir = \"/srv/j\"\nfsync = \"interval\"\n");
        let config = Config::from_toml(&text, &pepper()).unwrap();
        assert_eq!(
            config.journal_dir(),
            Some(std::path::PathBuf::from("/srv/j"))
        );
        assert_eq!(config.ledger.fsync, FsyncMode::Interval);
        let text = format!("{BASE}\n[ledger]\nfsync = \"sometimes\"\n");
        assert!(Config::from_toml(&text, &pepper()).is_err());
    }

    #[test]
    fn a_target_without_a_price_names_the_entry() {
        let text = BASE.replace("qwen-flash\"\n        input", "qwen-other\"\n        input");
        let error = Config::from_toml(&text, &pepper()).unwrap_err().to_string();
        assert_eq!(
            error,
            "routes.fast.targets[1]: no price for qwen/qwen-flash"
        );
    }

    #[test]
    fn an_unknown_provider_names_the_entry() {
        let text = BASE.replace("\"qwen/qwen-flash\"", "\"kimi/k2\"");
        let error = Config::from_toml(&text, &pepper()).unwrap_err().to_string();
        assert_eq!(error, "routes.fast.targets[1]: unknown provider `kimi`");
    }

    #[test]
    fn unknown_fields_and_bad_prices_are_refused() {
        let text = BASE.replace("rpm = 60", "rpm = 60\nrmp = 3");
        assert!(Config::from_toml(&text, &pepper()).is_err());
        let text = BASE.replace("\"8.0\"", "\"8,0\"");
        let error = Config::from_toml(&text, &pepper()).unwrap_err().to_string();
        assert!(error.starts_with("prices[0].output:"), "{error}");
    }

    #[test]
    fn the_pepper_comes_from_env_only() {
        assert!(
            Config::from_toml(BASE, &env(&[]))
                .unwrap()
                .key_pepper
                .is_none()
        );
        assert!(
            Config::from_toml(BASE, &pepper())
                .unwrap()
                .key_pepper
                .is_some()
        );
    }

    #[test]
    fn the_example_config_is_valid() {
        let text = include_str!("../tollgate.example.toml");
        let config = Config::from_toml(text, &env(&[])).unwrap();
        for tier in ["free", "standard", "enterprise"] {
            assert!(config.tiers.contains_key(tier), "{tier}");
        }
        assert_eq!(config.tiers["free"].routes, vec![RouteName::new("fast")]);
    }
}
