//! Configuration: one TOML file plus environment variables for secrets.
//! `Config::load` parses the raw file (unknown fields refused), reads env
//! through `EnvSource`, then `validate` turns it into typed, checked values:
//! a route naming an unknown provider, or a target without a price, refuses
//! to start with the exact entry named. Env is read here and nowhere else.

use crate::tokenize::{Counting, Encoding};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::ids::{ProviderName, RouteName};
use crate::money::{MoneyError, Nanos, PricePerMTok};

mod catalog;
mod plans;
pub mod server_tools;

pub use catalog::Catalog;
use catalog::PriceEntry;
pub use plans::{COST, Plan};

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
    reports: ReportsConfig,
    #[serde(default)]
    prompt_cache: crate::prompts::advisor::PromptCacheConfig,
    #[serde(default)]
    audit: crate::audit::AuditConfig,
    #[serde(default)]
    responses: crate::stored::StoreConfig,
    #[serde(default)]
    providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    routes: BTreeMap<String, RawRoute>,
    #[serde(default)]
    tiers: BTreeMap<String, RawTier>,
    /// Price catalogs (`prices/openai.toml`, …), relative to this file's
    /// directory: their `[[prices]]` are added to this file's own.
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    prices: Vec<RawPrice>,
    /// What tenants are billed over the providers' prices.
    #[serde(default)]
    plans: Vec<plans::RawPlan>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// A second listener for operations: when set, `/metrics`, `/readyz` and
    /// `/admin/v1/*` are served only there (and `/healthz` on both), so the
    /// API port can face callers while operations stay on an internal address.
    #[serde(default, deserialize_with = "admin_listen")]
    pub admin_listen: Option<SocketAddr>,
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
    /// Tenant actors are spread over this many arbiters (threads) of their
    /// own; 0 (the default) runs each on the worker that serves its tenant's
    /// first request, so that worker's requests reach it without waking
    /// another thread (a quarter more requests per second at full load).
    #[serde(default = "default_tenant_arbiters")]
    pub tenant_arbiters: usize,
    /// Streams read on after their caller left, at most this many at once (beyond: cancel).
    #[serde(default = "default_max_concurrent_drains")]
    pub max_concurrent_drains: usize,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

/// Parsed here rather than by `SocketAddr`'s own impl, whose error names
/// neither the setting nor the expected form.
fn admin_listen<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    let value = toml::Value::deserialize(deserializer)?;
    value
        .as_str()
        .and_then(|text| text.parse().ok())
        .map(Some)
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "server.admin_listen: {value} is not an IP address and port (e.g. \"127.0.0.1:9091\")"
            ))
        })
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
    0
}
fn default_max_concurrent_drains() -> usize {
    256
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: default_listen(),
            admin_listen: None,
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

/// `[reports]`: yesterday's daily report pushed once a day.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportsConfig {
    /// Receives `{"report": …, "text": …}` as a JSON POST; unset: no push.
    pub daily_webhook_url: Option<String>,
    /// When the day's push goes, `HH:MM` in `billing.timezone`.
    #[serde(default = "default_daily_at")]
    pub daily_at: String,
    #[serde(default = "default_alert_timeout_ms")]
    pub timeout_ms: u64,
    /// Delivery attempts (with backoff between them).
    #[serde(default = "default_report_attempts")]
    pub attempts: u32,
}

fn default_daily_at() -> String {
    "08:00".to_owned()
}
fn default_report_attempts() -> u32 {
    5
}

impl Default for ReportsConfig {
    fn default() -> Self {
        ReportsConfig {
            daily_webhook_url: None,
            daily_at: default_daily_at(),
            timeout_ms: default_alert_timeout_ms(),
            attempts: default_report_attempts(),
        }
    }
}

/// `HH:MM` as minutes after midnight.
pub fn parse_time_of_day(text: &str) -> Option<u32> {
    let (hours, minutes) = text.split_once(':')?;
    let (hours, minutes): (u32, u32) = (hours.parse().ok()?, minutes.parse().ok()?);
    (text.len() == 5 && hours < 24 && minutes < 60).then_some(hours * 60 + minutes)
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
    /// Where the semantic cache keeps its answers (routes switch it on).
    #[serde(default)]
    pub semantic: crate::cache::semantic::SemanticCacheConfig,
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
            semantic: crate::cache::semantic::SemanticCacheConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    #[serde(default = "default_database_url")]
    pub database_url: String,
    /// The database pool; unset: `pool_size()` picks one for the backend.
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// How often each replica polls the database for revoked keys and changed tenants.
    #[serde(default = "default_sync_interval_ms")]
    pub sync_interval_ms: u64,
    /// Shared quota store for replicas (`redis://host:port/db`); without it
    /// every replica keeps its own quotas in memory.
    #[serde(default)]
    pub redis_url: Option<String>,
    /// Every Redis call gives up after this long, so a frozen Redis cannot hold requests.
    #[serde(default = "default_redis_timeout_ms")]
    pub redis_timeout_ms: u64,
    /// Multiplexed connections to Redis for each thread that calls it, used
    /// in turn; each pipelines the concurrent calls on it, so a few carry a
    /// whole replica's decisions.
    #[serde(default = "default_redis_pool_size")]
    pub redis_pool_size: usize,
    /// How many replicas share the limits; a tenant served from the local
    /// store while Redis is down gets this share of its limits on each replica.
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// How often Redis's committed spend is compared with the ledger.
    #[serde(default = "default_reconcile_interval_ms")]
    pub reconcile_interval_ms: u64,
}

fn default_database_url() -> String {
    "sqlite://tollgate.db?mode=rwc".to_owned()
}
/// PostgreSQL serves many connections at once; SQLite takes one writer at a
/// time, so past the ledger, the directory's sync and a reader or two, more
/// connections only add threads and page caches.
const POSTGRES_POOL: u32 = 8;
const SQLITE_POOL: u32 = 4;

impl StorageConfig {
    /// Connections the gateway opens to its database.
    pub fn pool_size(&self) -> u32 {
        self.max_connections
            .unwrap_or(if crate::storage::is_sqlite(&self.database_url) {
                SQLITE_POOL
            } else {
                POSTGRES_POOL
            })
    }
}
fn default_sync_interval_ms() -> u64 {
    1000
}
fn default_redis_timeout_ms() -> u64 {
    100
}
fn default_redis_pool_size() -> usize {
    2
}
fn default_replicas() -> u32 {
    1
}
fn default_reconcile_interval_ms() -> u64 {
    60_000
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            database_url: default_database_url(),
            max_connections: None,
            sync_interval_ms: default_sync_interval_ms(),
            redis_url: None,
            redis_timeout_ms: default_redis_timeout_ms(),
            redis_pool_size: default_redis_pool_size(),
            replicas: default_replicas(),
            reconcile_interval_ms: default_reconcile_interval_ms(),
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
    /// The IANA zone where a budget's day, week and month begin.
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// End users a tenant keeps in memory at most (memory mode): the least
    /// recently seen idle ones are evicted and reloaded from the ledger.
    #[serde(default = "default_end_users_in_memory")]
    pub end_users_in_memory: usize,
    /// A stream is admitted with this much output held, not its whole
    /// `max_tokens`, and its hold grows by this much at a time ahead of what
    /// it has streamed (where its model hides no output); 0 holds it whole.
    #[serde(default = "default_stream_step_tokens")]
    pub stream_step_tokens: u32,
}

fn default_stream_step_tokens() -> u32 {
    1024
}

fn default_timezone() -> String {
    "UTC".to_owned()
}
fn default_end_users_in_memory() -> usize {
    100_000
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
            timezone: default_timezone(),
            end_users_in_memory: default_end_users_in_memory(),
            stream_step_tokens: default_stream_step_tokens(),
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
    /// Detail rows older than this many days are rolled up into daily
    /// aggregates and deleted (PostgreSQL: by whole month); 0 keeps them all.
    #[serde(default = "default_retention_days")]
    pub retention_days: u32,
    /// Rows one roll-up transaction takes at most: what a writer may wait behind.
    #[serde(default = "default_retention_batch_rows")]
    pub retention_batch_rows: u64,
    /// How often the roll-up runs; 0: only when asked (`POST /admin/v1/ledger/rollup`).
    #[serde(default = "default_retention_interval_ms")]
    pub retention_interval_ms: u64,
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
    Batch,
    /// A sync every `fsync_interval_ms`; nobody waits. The default: a request's
    /// tail is then the gateway's, not the disk's.
    #[default]
    Interval,
    /// Never synced by the gateway; the OS writes back on its own schedule.
    Off,
}

fn default_flush_interval_ms() -> u64 {
    200
}
/// Rows per database transaction at most. Each commit rewrites the last
/// pages of the usage table and each of its indexes, so larger transactions
/// cost less per row: at 16,000 calls a second, 4,096 took the gateway's CPU
/// per call from 85 to 79 µs against 256.
fn default_max_batch_rows() -> usize {
    4_096
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
fn default_retention_days() -> u32 {
    90
}
fn default_retention_batch_rows() -> u64 {
    1_000
}
fn default_retention_interval_ms() -> u64 {
    3_600_000
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
            retention_days: default_retention_days(),
            retention_batch_rows: default_retention_batch_rows(),
            retention_interval_ms: default_retention_interval_ms(),
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
    /// An OTLP/HTTP collector (`http://127.0.0.1:4318`): spans go to
    /// `{otlp_endpoint}/v1/traces`. Unset: no traces.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// How long one export may take before its spans are dropped.
    #[serde(default = "default_otlp_timeout_ms")]
    pub otlp_timeout_ms: u64,
}

fn default_otlp_timeout_ms() -> u64 {
    2_000
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
            otlp_endpoint: None,
            otlp_timeout_ms: default_otlp_timeout_ms(),
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
    /// The whole call: connecting, waiting, and reading the answer (a stream's too).
    #[serde(default = "default_provider_timeout_ms")]
    timeout_ms: u64,
    /// Establishing the connection (DNS, TCP, TLS).
    #[serde(default = "default_connect_timeout_ms")]
    connect_timeout_ms: u64,
    /// Until the answer's headers arrive; defaults to `timeout_ms` because a
    /// non-streaming answer's headers come only once it is generated.
    first_byte_timeout_ms: Option<u64>,
    #[serde(default = "default_max_concurrency")]
    max_concurrency: u32,
    /// Moves the concurrency limit between `adaptive_min_concurrency` and
    /// `max_concurrency`: max × baseline latency / current latency.
    #[serde(default)]
    adaptive_concurrency: bool,
    #[serde(default = "default_adaptive_min_concurrency")]
    adaptive_min_concurrency: u32,
    /// How often the adaptive limit is re-sampled from the calls' mean latency.
    #[serde(default = "default_adaptive_window_ms")]
    adaptive_window_ms: u64,
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
    /// Error rate (percent) over `breaker_window_ms` that opens the breaker; 0 turns it off.
    #[serde(default = "default_breaker_error_rate_percent")]
    breaker_error_rate_percent: u32,
    #[serde(default = "default_breaker_window_ms")]
    breaker_window_ms: u64,
    /// The error rate counts only with at least this many results in the window.
    #[serde(default = "default_breaker_min_requests")]
    breaker_min_requests: u32,
    /// Half-open lets 20%, then 50%, then 100% of requests through, each for this long.
    #[serde(default = "default_breaker_ramp_window_ms")]
    breaker_ramp_window_ms: u64,
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
    /// An `openai` provider that also speaks OpenAI's Responses API at
    /// `{base_url}/responses`: the Responses door passes through to it.
    #[serde(default)]
    responses: bool,
    /// Sends the tenant id upstream in this body field.
    tenant_id_as: Option<TenantIdField>,
    /// Headers added to every call to this provider.
    #[serde(default)]
    extra_headers: BTreeMap<String, String>,
    /// `max_tokens` sent to this provider is lowered to this.
    max_tokens_ceiling: Option<u32>,
    /// This provider's own tokenizer may count more than tiktoken: its
    /// estimates get this factor instead of `tokenizer.safety_percent`.
    tokenizer_safety_percent: Option<u32>,
}

/// Where a provider gets the tenant id, for its per-user isolation and abuse tracking.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TenantIdField {
    /// OpenAI's `user` (the caller's own value is replaced); Anthropic's `metadata.user_id`.
    User,
    /// DeepSeek's `user_id`, next to whatever `user` the caller sent.
    UserId,
}

impl TenantIdField {
    pub fn as_str(self) -> &'static str {
        match self {
            TenantIdField::User => "user",
            TenantIdField::UserId => "user_id",
        }
    }
}

/// Headers the gateway itself sets on upstream calls; `extra_headers` may not replace them.
const RESERVED_HEADERS: [&str; 6] = [
    "authorization",
    "x-api-key",
    "anthropic-version",
    "content-type",
    "content-length",
    "host",
];

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
fn default_adaptive_min_concurrency() -> u32 {
    4
}
fn default_adaptive_window_ms() -> u64 {
    10_000
}
fn default_connect_timeout_ms() -> u64 {
    5000
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
fn default_breaker_error_rate_percent() -> u32 {
    50
}
fn default_breaker_window_ms() -> u64 {
    30_000
}
fn default_breaker_min_requests() -> u32 {
    20
}
fn default_breaker_ramp_window_ms() -> u64 {
    5000
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
    #[serde(default)]
    targets: Vec<RawTarget>,
    /// Identical non-streaming requests of one tenant are answered from the
    /// exact response cache for this long; 0 (default) turns caching off.
    #[serde(default)]
    cache_ttl_ms: u64,
    /// Answered (as the assistant's message) when every target failed, instead of 502.
    degraded_answer: Option<String>,
    /// Makes this a complexity route: each class names the route that serves it.
    complexity: Option<RawComplexity>,
    /// Answers a question close enough to one answered before from the cache.
    semantic_cache: Option<crate::cache::semantic::RawSemanticRoute>,
    /// Placed first in every request of the route, before the tenant's prompt.
    platform_prompt: Option<String>,
    /// Forward body fields and `anthropic-beta` values no door's table knows,
    /// uncounted, instead of refusing them: the operator takes the risk
    /// that one of them bills what the hold does not cover.
    #[serde(default)]
    forward_unknown_fields: bool,
    /// Provider-run tools the route lets leave, each bounded and priced.
    #[serde(default)]
    server_tools: server_tools::RawServerTools,
}

/// `"provider/model"`, or a table giving it a rank and a weight.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawTarget {
    Plain(String),
    Weighted(RawWeightedTarget),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWeightedTarget {
    target: String,
    /// Targets are tried by rank; the default is the entry's position.
    rank: Option<u32>,
    /// Among targets of equal rank, the share of requests tried here first.
    #[serde(default = "default_weight")]
    weight: u32,
}

fn default_weight() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawComplexity {
    simple: String,
    moderate: String,
    complex: String,
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
    /// The most completions (`n`) one request may ask for; default 8.
    #[serde(default = "default_max_choices")]
    max_choices: u32,
    /// What the tier's tenants get while the shared quota store is unreachable.
    #[serde(default)]
    on_store_error: StoreErrorPolicy,
    /// Where an end user's id may come from: `header`, `body` (default both).
    end_user_sources: Option<Vec<EndUserSource>>,
    /// A request without an end user is refused (400 `end_user_required`).
    #[serde(default)]
    end_user_required: bool,
    /// Every end user's own limits, with no admin call.
    end_user: Option<RawEndUser>,
    /// What one agent run (a session) may spend.
    session: Option<RawSession>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSession {
    budget: String,
    /// A session unseen this long is forgotten; default a day.
    #[serde(default = "default_session_idle_minutes")]
    idle_minutes: u64,
}

fn default_session_idle_minutes() -> u64 {
    24 * 60
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndUser {
    budget: Option<String>,
    #[serde(default)]
    period: crate::calendar::Period,
    rpm: Option<u32>,
    daily_tokens: Option<u64>,
    tpm: Option<u64>,
}

/// Above 8 choices a request is almost always a mistake or an attempt to multiply spend.
fn default_max_choices() -> u32 {
    8
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrice {
    provider: String,
    model: String,
    input: String,
    cached_input: Option<String>,
    cache_write: Option<String>,
    /// Absent for an embeddings model, which generates nothing: a request
    /// that would generate through it is refused (its output has no price).
    output: Option<String>,
    /// The model's tiktoken encoding; default `tokenizer.encoding`.
    encoding: Option<String>,
    /// The most input tokens the model bills for one image (its largest,
    /// highest-detail one); default the worst known figure
    /// (`tokenize::WORST_IMAGE_TOKENS`), since a smaller guess lets images outspend their hold.
    image_tokens: Option<u64>,
    /// Higher rates for calls whose prompt passes a length.
    long_context: Option<RawLongContext>,
    /// The fee per search of the provider's web search tool, in the
    /// currency (`"0.01"`); a route lets the tool leave only where every
    /// target has one (`routes.<name>.server_tools`).
    web_search: Option<String>,
    /// What output the model may bill without streaming it: `none`, only
    /// `reasoning` a request asks for, or `always` (the default: it may
    /// reason unasked). Streams grow their hold only where none is hidden.
    hidden_output: Option<HiddenOutput>,
    /// `YYYY-MM-DD`: the entry applies from the start of that day in
    /// `billing.timezone`; the model's entry without a date applies before.
    effective_from: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLongContext {
    above_tokens: u64,
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
    /// Rates for every token of a call whose prompt has more than
    /// `above_tokens` tokens (how long-context models are priced).
    pub long_context: Option<LongContext>,
    /// The fee per search of the provider's web search tool, where it is priced.
    pub web_search: Option<Nanos>,
    pub hidden_output: HiddenOutput,
}

/// Output a model may bill that its stream never shows. A stream's hold can
/// grow with what the relay sees only when nothing is hidden: unseen tokens
/// would pass the hold before any step was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HiddenOutput {
    /// Every billed output token is streamed (reasoning too, in full).
    None,
    /// Reasoning, when the request asks for it (a summarized or hidden
    /// thinking); nothing otherwise.
    Reasoning,
    /// The model may reason unasked.
    #[default]
    Always,
}

impl HiddenOutput {
    /// Whether a request that does (or does not) ask for reasoning may be
    /// billed output its stream does not show; `counted`: the stream reports
    /// its hidden reasoning's tokens as it goes.
    pub fn hides(self, asks_reasoning: bool, counted: bool) -> bool {
        match self {
            HiddenOutput::None => false,
            HiddenOutput::Reasoning => asks_reasoning && !counted,
            HiddenOutput::Always => true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongContext {
    pub above_tokens: u64,
    pub input: PricePerMTok,
    pub cached_input: PricePerMTok,
    pub cache_write: PricePerMTok,
    pub output: PricePerMTok,
}

impl Price {
    /// The rates a call with this many prompt tokens is charged at.
    #[must_use]
    pub fn for_prompt(&self, prompt_tokens: u64) -> Price {
        match self.long_context {
            Some(long) if prompt_tokens > long.above_tokens => Price {
                input: long.input,
                cached_input: long.cached_input,
                cache_write: long.cache_write,
                output: long.output,
                long_context: None,
                web_search: self.web_search,
                hidden_output: self.hidden_output,
            },
            _ => Price {
                long_context: None,
                ..*self
            },
        }
    }
}

/// Equality tells a reload whether a provider's actor may carry over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    pub name: ProviderName,
    pub kind: ProviderKind,
    pub base_url: String,
    pub chat_url: String,
    /// OpenAI's `{base_url}/embeddings`; Anthropic has no embeddings API.
    pub embeddings_url: String,
    /// Speaks OpenAI's Responses API (only an `openai` provider may): the
    /// Responses door's requests pass through to `responses_url`.
    pub responses: bool,
    /// `{base_url}/responses`, used only when `responses` is set.
    pub responses_url: String,
    pub api_key_env: Option<String>,
    /// `None` with `api_key_env` set means the variable is unset: the provider is disabled.
    pub api_key: Option<Secret>,
    pub timeout_ms: u64,
    pub connect_timeout_ms: u64,
    pub first_byte_timeout_ms: u64,
    pub max_concurrency: u32,
    pub adaptive_concurrency: bool,
    pub adaptive_min_concurrency: u32,
    pub adaptive_window_ms: u64,
    pub max_queue: usize,
    pub queue_timeout_ms: u64,
    pub max_attempts: u32,
    pub retry_base_delay_ms: u64,
    pub retry_max_delay_ms: u64,
    pub retry_budget_percent: u32,
    pub retry_burst: u32,
    pub breaker_failures: u32,
    pub breaker_cooldown_ms: u64,
    pub breaker_error_rate_percent: u32,
    pub breaker_window_ms: u64,
    pub breaker_min_requests: u32,
    pub breaker_ramp_window_ms: u64,
    pub first_token_timeout_ms: u64,
    pub on_client_disconnect: OnClientDisconnect,
    pub drain_timeout_ms: u64,
    pub anthropic_version: String,
    pub tenant_id_as: Option<TenantIdField>,
    /// Checked at load: valid header names and values, none of `RESERVED_HEADERS`.
    pub extra_headers: Vec<(String, String)>,
    pub max_tokens_ceiling: Option<u32>,
    pub tokenizer_safety_percent: Option<u32>,
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
    /// What the provider charges: the call's cost.
    pub price: Price,
    /// What the tenant is charged: `price`, or its plan's (`Plan::apply`).
    pub charge: Price,
    /// The prices that take over on a date, in order (`Route::as_of`).
    pub changes: Vec<(u64, Price)>,
    /// How prompts sent here are counted for the reservation.
    pub counting: Counting,
    /// Targets are tried by rank, lowest first.
    pub rank: u32,
    /// Among targets of equal rank, the share of requests tried here first.
    pub weight: u32,
}

#[derive(Debug, Clone)]
pub struct Route {
    pub name: RouteName,
    pub targets: Vec<Target>,
    /// Every distinct way the targets count prompts (usually one).
    pub countings: Vec<Counting>,
    pub cache_ttl_ms: u64,
    /// The most output any target accepts (its `max_tokens_ceiling`), when every target has one:
    /// a reservation never needs more.
    pub max_tokens_ceiling: Option<u32>,
    pub degraded_answer: Option<String>,
    /// Set on a complexity route, which has no targets of its own.
    pub complexity: Option<ComplexityRoutes>,
    pub semantic_cache: Option<crate::cache::semantic::SemanticRoute>,
    /// Placed first in every request of the route (`prompts`), as a stable prefix.
    pub platform_prompt: Option<String>,
    /// What the route does with fields no door's table knows.
    pub unknown_fields: crate::fields::Unknown,
    /// Provider-run tools the route lets leave (none by default).
    pub server_tools: server_tools::ServerTools,
}

impl Route {
    /// The route at the prices in force at `at_ms`, when one of its targets
    /// has dated prices (`None`: it is priced as loaded).
    pub fn as_of(&self, at_ms: u64) -> Option<Route> {
        if self.targets.iter().all(|t| t.changes.is_empty()) {
            return None;
        }
        let mut dated = self.clone();
        for target in &mut dated.targets {
            if let Some((_, price)) = target.changes.iter().rev().find(|(from, _)| *from <= at_ms) {
                // A dated entry without a search fee keeps the one before it.
                let web_search = price.web_search.or(target.price.web_search);
                target.price = Price {
                    web_search,
                    ..*price
                };
                target.charge = target.price;
            }
        }
        Some(dated)
    }

    /// A target whose model has no output price (an embeddings model): a
    /// request that generates cannot be served by this route.
    pub fn unpriced_output(&self) -> Option<&Target> {
        self.targets
            .iter()
            .find(|t| t.price.output == UNPRICED_OUTPUT)
    }

    /// The highest input (cache-write where higher) and output rates the
    /// tenant is charged over every target, at the price tier a prompt of
    /// `input_tokens` reaches: what a hold is made at.
    pub fn worst_prices(&self, input_tokens: u64) -> (PricePerMTok, PricePerMTok) {
        worst_of(self.targets.iter().map(|t| &t.charge), input_tokens)
    }

    /// The same rates at the providers' prices: what a hold would be at cost.
    pub fn worst_cost_prices(&self, input_tokens: u64) -> (PricePerMTok, PricePerMTok) {
        worst_of(self.targets.iter().map(|t| &t.price), input_tokens)
    }
}

fn worst_of<'a>(
    prices: impl Iterator<Item = &'a Price>,
    input_tokens: u64,
) -> (PricePerMTok, PricePerMTok) {
    let mut input = PricePerMTok::default();
    let mut output = PricePerMTok::default();
    for price in prices {
        let price = price.for_prompt(input_tokens);
        input = input.max(price.input).max(price.cache_write);
        output = output.max(price.output);
    }
    (input, output)
}

/// The routes a complexity route hands each class of request to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComplexityRoutes {
    pub simple: RouteName,
    pub moderate: RouteName,
    pub complex: RouteName,
}

#[derive(Debug, Clone)]
pub struct Tier {
    pub name: String,
    /// Where an end user's id is read from, in order of trust.
    pub end_user_sources: Vec<EndUserSource>,
    pub end_user_required: bool,
    /// The limits every end user of the tier gets.
    pub end_user: Option<EndUserLimits>,
    /// What one agent run may spend (`[tiers.x.session]`).
    pub session: Option<SessionLimits>,
    pub routes: Vec<RouteName>,
    pub rpm: u32,
    pub tpm: Option<u64>,
    pub daily_tokens: Option<u64>,
    pub monthly_tokens: Option<u64>,
    pub burst: u32,
    pub default_max_tokens: u32,
    /// The most completions (`n`) one request may ask for.
    pub max_choices: u32,
    pub on_store_error: StoreErrorPolicy,
}

/// Where an end user's id comes from: `X-Tollgate-End-User`, or the body's
/// `user` (`metadata.user_id` on the Messages door).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndUserSource {
    Header,
    Body,
}

/// What one agent run may spend: a budget for its whole life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    pub budget: Nanos,
    /// A session unseen this long is forgotten (its spend with it).
    pub idle_ms: u64,
}

/// One end user's limits: a budget per period and a request rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndUserLimits {
    pub budget: Option<Nanos>,
    pub period: crate::calendar::Period,
    pub rpm: Option<u32>,
    /// Tokens (prompt and completion) per local day of `billing.timezone`.
    pub daily_tokens: Option<u64>,
    /// Tokens per minute (held at admission, corrected at settle).
    pub tpm: Option<u64>,
}

/// The longest end-user id accepted, in bytes: ids are stored per row and in
/// store keys, so a caller cannot grow them without bound.
pub const END_USER_MAX_BYTES: usize = 128;

/// What a tenant gets while the shared quota store (Redis) is unreachable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreErrorPolicy {
    /// 503 with `Retry-After`: no decision without the shared counters, so a
    /// strict cap holds across replicas.
    #[default]
    FailClosed,
    /// Keep serving from this replica's memory, with every limit divided by
    /// `storage.replicas`.
    Local,
}

impl StoreErrorPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            StoreErrorPolicy::FailClosed => "fail_closed",
            StoreErrorPolicy::Local => "local",
        }
    }
}

impl std::str::FromStr for StoreErrorPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail_closed" => Ok(StoreErrorPolicy::FailClosed),
            "local" => Ok(StoreErrorPolicy::Local),
            other => Err(format!(
                "unknown on_store_error `{other}` (expected fail_closed or local)"
            )),
        }
    }
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
    pub reports: ReportsConfig,
    /// `[prompt_cache]`: the ledger's review of tenants' cache breakpoints.
    pub prompt_cache: crate::prompts::advisor::PromptCacheConfig,
    /// `[audit]`: how opted-in tenants' payloads are kept.
    pub audit: crate::audit::AuditConfig,
    /// `[responses]`: how the Responses door keeps stored responses.
    pub responses: crate::stored::StoreConfig,
    pub providers: HashMap<ProviderName, Provider>,
    pub routes: HashMap<RouteName, Route>,
    pub tiers: HashMap<String, Tier>,
    /// `billing.timezone`'s calendar: where budget periods begin.
    pub calendar: crate::calendar::Calendar,
    /// Identifies the price table rows were charged under (a hash of the
    /// prices in force, included catalogs' too).
    pub price_version: String,
    /// Every `[[prices]]` entry in force by (provider, model): the file's own
    /// and its catalogs' (those of providers not configured included).
    pub prices: PriceTable,
    /// The prices that take over on a date (`effective_from`).
    pub price_changes: PriceChanges,
    /// `[[plans]]` by name; a tenant on none is charged the cost.
    pub plans: BTreeMap<String, Plan>,
    /// The catalogs `include` named, in order.
    pub catalogs: Vec<Catalog>,
    /// Keys are hashed with it; serving and issuing keys need it, reports do not.
    pub key_pepper: Option<Secret>,
    pub admin_token: Option<Secret>,
}

pub const KEY_PEPPER_ENV: &str = "TOLLGATE_KEY_PEPPER";
pub const ADMIN_TOKEN_ENV: &str = "TOLLGATE_ADMIN_TOKEN";
pub const DATABASE_URL_ENV: &str = "TOLLGATE_DATABASE_URL";
pub const REDIS_URL_ENV: &str = "TOLLGATE_REDIS_URL";

impl Config {
    /// Both layers of billing as this configuration defines them.
    pub fn billing(&self) -> Billing {
        Billing {
            prices: self.prices.clone(),
            changes: self.price_changes.clone(),
            plans: self.plans.clone(),
            version: self.price_version.clone(),
        }
    }

    /// Every model's price in force at `at_ms`, the dated ones included.
    pub fn prices_at(&self, at_ms: u64) -> PriceTable {
        self.prices
            .keys()
            .filter_map(|key| {
                price_at(&self.prices, &self.price_changes, key, at_ms)
                    .map(|price| (key.clone(), price))
            })
            .collect()
    }

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

    /// Reads `path` and the catalogs it includes (relative to its directory).
    pub fn load(path: &Path, env: &dyn EnvSource) -> Result<Arc<Config>, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let raw = parse_raw(&text, &path.display().to_string())?;
        validate(raw, path.parent().unwrap_or(Path::new("")), env).map(Arc::new)
    }

    /// A configuration from text; `include` paths are relative to the working directory.
    pub fn from_toml(text: &str, env: &dyn EnvSource) -> Result<Arc<Config>, ConfigError> {
        Self::from_toml_in(text, Path::new(""), env)
    }

    /// A configuration from text whose `include` paths are relative to `dir`.
    pub fn from_toml_in(
        text: &str,
        dir: &Path,
        env: &dyn EnvSource,
    ) -> Result<Arc<Config>, ConfigError> {
        validate(parse_raw(text, "")?, dir, env).map(Arc::new)
    }

    pub fn route(&self, name: &str) -> Option<&Route> {
        self.routes.get(&RouteName::new(name))
    }
}

fn parse_raw(text: &str, path: &str) -> Result<RawConfig, ConfigError> {
    toml::from_str(text).map_err(|source| ConfigError::Parse {
        path: path.to_owned(),
        source: Box::new(source),
    })
}

/// Only the prices of a file (a full configuration, a prices-only file or a
/// catalog): its `[[prices]]` and those of the catalogs it includes.
#[derive(Debug, Deserialize)]
struct PricesFile {
    #[serde(default)]
    include: Vec<String>,
    /// A catalog read as the price file states its currency here.
    currency: Option<String>,
    #[serde(default)]
    prices: Vec<RawPrice>,
    #[serde(default)]
    plans: Vec<plans::RawPlan>,
}

/// Prices by (provider, model): each model's undated price (or, for one
/// priced only from a date, its first).
pub type PriceTable = HashMap<(String, String), Price>;

/// Each model's dated prices (`effective_from`), in order: (from Unix ms, price).
pub type PriceChanges = HashMap<(String, String), Vec<(u64, Price)>>;

/// The price of a model at `at_ms`: its latest change by then, else its undated price.
pub fn price_at(
    prices: &PriceTable,
    changes: &PriceChanges,
    key: &(String, String),
    at_ms: u64,
) -> Option<Price> {
    let dated = changes
        .get(key)
        .and_then(|list| list.iter().rev().find(|(from, _)| *from <= at_ms));
    dated
        .map(|(_, price)| *price)
        .or_else(|| prices.get(key).copied())
}

/// A price table and its version, read from any TOML file with `[[prices]]`
/// (and `include`), to be billed in `currency`.
pub fn load_price_table(path: &Path, currency: &str) -> Result<(PriceTable, String), ConfigError> {
    load_billing(path, currency, &crate::calendar::Calendar::utc())
        .map(|billing| (billing.prices, billing.version))
}

/// A price file's prices, their dated changes and its plans: both layers of
/// billing, to be billed in `currency`, dates read in `calendar`.
pub struct Billing {
    pub prices: PriceTable,
    pub changes: PriceChanges,
    pub plans: BTreeMap<String, Plan>,
    pub version: String,
}

/// `load_price_table` with the file's dated prices and `[[plans]]`.
pub fn load_billing(
    path: &Path,
    currency: &str,
    calendar: &crate::calendar::Calendar,
) -> Result<Billing, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let file: PricesFile = toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.display().to_string(),
        source: Box::new(source),
    })?;
    catalog::check_currency(path, file.currency.as_deref(), currency)?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let merged = catalog::merge(file.prices, &file.include, dir, currency)?;
    let (prices, changes) = validate_dated_prices(&merged.entries, calendar)?;
    let plans = plans::validate(file.plans, &prices, calendar)?;
    let version = price_version(&merged.entries, &plans);
    Ok(Billing {
        prices,
        changes,
        plans,
        version,
    })
}

fn parse_price(entry: &str, field: &str, text: &str) -> Result<PricePerMTok, ConfigError> {
    PricePerMTok::parse_decimal(text)
        .map_err(|e: MoneyError| invalid(format!("{entry}.{field}"), e.to_string()))
}

/// The output rate of a model priced for input only (an embeddings model):
/// no hold could afford it, and a generating request is refused before that
/// (`Route::unpriced_output`).
pub const UNPRICED_OUTPUT: PricePerMTok = PricePerMTok::from_nanos(Nanos::MAX);

/// A fee per use, in the currency.
fn parse_fee(entry: &str, field: &str, text: &str) -> Result<Nanos, ConfigError> {
    Nanos::parse_decimal(text)
        .map_err(|e: MoneyError| invalid(format!("{entry}.{field}"), e.to_string()))
}

/// `[storage]`, with the URLs the environment overrides.
fn validate_storage(
    raw: &StorageConfig,
    env: &dyn EnvSource,
) -> Result<StorageConfig, ConfigError> {
    let mut database_url = raw.database_url.clone();
    if let Some(url) = env.get(DATABASE_URL_ENV) {
        database_url = url;
    }
    let mut redis_url = raw.redis_url.clone().filter(|u| !u.is_empty());
    if let Some(url) = env.get(REDIS_URL_ENV) {
        redis_url = Some(url).filter(|u| !u.is_empty());
    }
    if raw.replicas == 0 {
        return Err(invalid("storage.replicas", "must be at least 1"));
    }
    if raw.redis_timeout_ms == 0 {
        return Err(invalid("storage.redis_timeout_ms", "must be positive"));
    }
    if raw.max_connections == Some(0) {
        return Err(invalid("storage.max_connections", "must be at least 1"));
    }
    Ok(StorageConfig {
        database_url,
        redis_url,
        ..raw.clone()
    })
}

fn validate(raw: RawConfig, dir: &Path, env: &dyn EnvSource) -> Result<Config, ConfigError> {
    let storage = validate_storage(&raw.storage, env)?;
    if let Some(admin) = raw.server.admin_listen {
        // Port 0 picks a free port for each, so only a fixed port can clash.
        if admin == raw.server.listen && admin.port() != 0 {
            return Err(invalid(
                "server.admin_listen",
                format!("must differ from server.listen ({admin})"),
            ));
        }
    }
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
    if raw.ledger.retention_batch_rows == 0 {
        return Err(invalid("ledger.retention_batch_rows", "must be at least 1"));
    }
    if raw.ledger.journal_segment_bytes < 4096 {
        return Err(invalid(
            "ledger.journal_segment_bytes",
            "must be at least 4096",
        ));
    }

    let providers = validate_providers(&raw.providers, env)?;
    let merged = catalog::merge(raw.prices, &raw.include, dir, &raw.billing.currency)?;
    let calendar = crate::calendar::Calendar::named(&raw.billing.timezone)
        .map_err(|e| invalid("billing.timezone", e))?;
    let (prices, price_changes) = validate_dated_prices(&merged.entries, &calendar)?;
    let plans = plans::validate(raw.plans, &prices, &calendar)?;
    let default_counting = Counting {
        encoding: Encoding::parse(&raw.tokenizer.encoding).unwrap_or(Encoding::O200kBase),
        safety_percent: raw.tokenizer.safety_percent,
        image_tokens: crate::tokenize::WORST_IMAGE_TOKENS,
    };
    let encodings = model_encodings(&merged.entries)?;
    let routes = validate_routes(
        &raw.routes,
        &providers,
        (&prices, &price_changes),
        &encodings,
        default_counting,
    )?;
    let tiers = validate_tiers(&raw.tiers, &routes)?;
    check_semantic_store(&raw.cache, &storage)?;
    if parse_time_of_day(&raw.reports.daily_at).is_none() {
        return Err(invalid(
            "reports.daily_at",
            "must be a time of day HH:MM (24 h, in billing.timezone)",
        ));
    }

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
        reports: raw.reports,
        prompt_cache: raw.prompt_cache,
        audit: raw.audit,
        responses: raw.responses,
        providers,
        routes,
        tiers,
        calendar,
        price_version: price_version(&merged.entries, &plans),
        prices,
        price_changes,
        plans,
        catalogs: merged.catalogs,
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
        if p.kind == ProviderKind::Anthropic && p.tenant_id_as == Some(TenantIdField::UserId) {
            return Err(invalid(
                format!("{entry}.tenant_id_as"),
                "Anthropic takes the tenant as metadata.user_id: use \"user\"",
            ));
        }
        check_responses(&entry, p)?;
        if p.tokenizer_safety_percent.is_some_and(|s| s < 100) {
            return Err(invalid(
                format!("{entry}.tokenizer_safety_percent"),
                "must be at least 100",
            ));
        }
        if p.max_tokens_ceiling == Some(0) {
            return Err(invalid(
                format!("{entry}.max_tokens_ceiling"),
                "must be positive",
            ));
        }
        if p.breaker_error_rate_percent > 100 {
            return Err(invalid(
                format!("{entry}.breaker_error_rate_percent"),
                "must be at most 100",
            ));
        }
        for (field, value) in [
            ("timeout_ms", Some(p.timeout_ms)),
            ("connect_timeout_ms", Some(p.connect_timeout_ms)),
            ("first_byte_timeout_ms", p.first_byte_timeout_ms),
        ] {
            if value == Some(0) {
                return Err(invalid(format!("{entry}.{field}"), "must be positive"));
            }
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
                chat_url: chat_url(p.kind, base),
                embeddings_url: format!("{base}/embeddings"),
                responses: p.responses,
                responses_url: format!("{base}/responses"),
                api_key_env: p.api_key_env.clone(),
                api_key,
                timeout_ms: p.timeout_ms,
                connect_timeout_ms: p.connect_timeout_ms,
                first_byte_timeout_ms: p.first_byte_timeout_ms.unwrap_or(p.timeout_ms),
                max_concurrency: p.max_concurrency,
                adaptive_concurrency: p.adaptive_concurrency,
                adaptive_min_concurrency: p.adaptive_min_concurrency,
                adaptive_window_ms: p.adaptive_window_ms,
                max_queue: p.max_queue,
                queue_timeout_ms: p.queue_timeout_ms,
                max_attempts: p.max_attempts.max(1),
                retry_base_delay_ms: p.retry_base_delay_ms,
                retry_max_delay_ms: p.retry_max_delay_ms,
                retry_budget_percent: p.retry_budget_percent,
                retry_burst: p.retry_burst,
                breaker_failures: p.breaker_failures.max(1),
                breaker_cooldown_ms: p.breaker_cooldown_ms,
                breaker_error_rate_percent: p.breaker_error_rate_percent,
                breaker_window_ms: p.breaker_window_ms,
                breaker_min_requests: p.breaker_min_requests,
                breaker_ramp_window_ms: p.breaker_ramp_window_ms,
                first_token_timeout_ms: p.first_token_timeout_ms.max(1),
                on_client_disconnect: p.on_client_disconnect,
                drain_timeout_ms: p.drain_timeout_ms,
                anthropic_version: p.anthropic_version.clone().unwrap_or_default(),
                tenant_id_as: p.tenant_id_as,
                extra_headers: validate_extra_headers(&entry, &p.extra_headers)?,
                max_tokens_ceiling: p.max_tokens_ceiling,
                tokenizer_safety_percent: p.tokenizer_safety_percent,
            },
        );
    }
    Ok(providers)
}

/// Where a provider's kind takes chat requests (Anthropic: its Messages API).
fn chat_url(kind: ProviderKind, base: &str) -> String {
    match kind {
        ProviderKind::Openai => format!("{base}/chat/completions"),
        ProviderKind::Anthropic if base.ends_with("/v1") => format!("{base}/messages"),
        ProviderKind::Anthropic => format!("{base}/v1/messages"),
    }
}

/// `responses = true` means OpenAI's Responses API, which only an `openai`
/// provider can speak, and which takes the tenant id only as `user`.
fn check_responses(entry: &str, p: &RawProvider) -> Result<(), ConfigError> {
    if !p.responses {
        return Ok(());
    }
    if p.kind != ProviderKind::Openai {
        return Err(invalid(
            format!("{entry}.responses"),
            "only a kind = \"openai\" provider speaks OpenAI's Responses API",
        ));
    }
    if p.tenant_id_as == Some(TenantIdField::UserId) {
        return Err(invalid(
            format!("{entry}.tenant_id_as"),
            "the Responses API takes the tenant as `user`: use \"user\" with responses = true",
        ));
    }
    Ok(())
}

fn validate_extra_headers(
    entry: &str,
    raw: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut headers = Vec::with_capacity(raw.len());
    for (name, value) in raw {
        let field = format!("{entry}.extra_headers.{name}");
        let lower = name.to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&lower.as_str()) {
            return Err(invalid(field, "is set by the gateway itself"));
        }
        if actix_web::http::header::HeaderName::from_bytes(lower.as_bytes()).is_err() {
            return Err(invalid(field, "is not a valid header name"));
        }
        if actix_web::http::header::HeaderValue::from_str(value).is_err() {
            return Err(invalid(field, "is not a valid header value"));
        }
        headers.push((lower, value.clone()));
    }
    Ok(headers)
}

/// The undated price of each model, and its dated changes; `calendar` says
/// where a date begins.
fn validate_dated_prices(
    raw: &[PriceEntry],
    calendar: &crate::calendar::Calendar,
) -> Result<(PriceTable, PriceChanges), ConfigError> {
    let (undated, dated): (Vec<&PriceEntry>, Vec<&PriceEntry>) =
        raw.iter().partition(|e| e.price.effective_from.is_none());
    let mut prices = HashMap::new();
    for entry in undated {
        let (key, price) = validate_price(entry)?;
        if prices.insert(key.clone(), price).is_some() {
            return Err(invalid(
                &entry.entry,
                format!("a second price for {}/{}", key.0, key.1),
            ));
        }
    }
    let mut changes: PriceChanges = HashMap::new();
    for entry in dated {
        let field = format!("{}.effective_from", entry.entry);
        let text = entry.price.effective_from.as_deref().unwrap_or("");
        let from_ms = calendar
            .day(text)
            .ok_or_else(|| invalid(&field, format!("`{text}` is not a YYYY-MM-DD date")))?
            .start_ms;
        let (key, price) = validate_price(entry)?;
        let list = changes.entry(key.clone()).or_default();
        if list.iter().any(|(at, _)| *at == from_ms) {
            return Err(invalid(
                field,
                format!("a second price for {}/{} from {text}", key.0, key.1),
            ));
        }
        list.push((from_ms, price));
    }
    for (key, list) in &mut changes {
        list.sort_by_key(|(at, _)| *at);
        // A model priced only from a date is priced at its first entry before it too.
        if !prices.contains_key(key)
            && let Some((_, first)) = list.first()
        {
            prices.insert(key.clone(), *first);
        }
    }
    Ok((prices, changes))
}

fn validate_price(price_entry: &PriceEntry) -> Result<((String, String), Price), ConfigError> {
    let PriceEntry { entry, price: p } = price_entry;
    let input = parse_price(entry, "input", &p.input)?;
    // Without a listed cached or cache-write price, those tokens are billed as plain input.
    let or_input = |field: &str, text: &Option<String>, input| match text {
        Some(text) => parse_price(entry, field, text),
        None => Ok(input),
    };
    let long_context = match &p.long_context {
        None => None,
        Some(long) => {
            let entry = format!("{entry}.long_context");
            let input = parse_price(&entry, "input", &long.input)?;
            Some(LongContext {
                above_tokens: long.above_tokens,
                input,
                cached_input: match &long.cached_input {
                    Some(text) => parse_price(&entry, "cached_input", text)?,
                    None => input,
                },
                cache_write: match &long.cache_write {
                    Some(text) => parse_price(&entry, "cache_write", text)?,
                    None => input,
                },
                output: parse_price(&entry, "output", &long.output)?,
            })
        }
    };
    let price = Price {
        input,
        cached_input: or_input("cached_input", &p.cached_input, input)?,
        cache_write: or_input("cache_write", &p.cache_write, input)?,
        output: match &p.output {
            Some(text) => parse_price(entry, "output", text)?,
            None => UNPRICED_OUTPUT,
        },
        long_context,
        web_search: p
            .web_search
            .as_deref()
            .map(|text| parse_fee(entry, "web_search", text))
            .transpose()?,
        hidden_output: p.hidden_output.unwrap_or_default(),
    };
    Ok(((p.provider.clone(), p.model.clone()), price))
}

/// How a model's `[[prices]]` entry says its prompts count, where it does.
#[derive(Debug, Clone, Copy, Default)]
struct ModelCounting {
    encoding: Option<Encoding>,
    image_tokens: Option<u64>,
}

fn model_encodings(
    raw: &[PriceEntry],
) -> Result<HashMap<(String, String), ModelCounting>, ConfigError> {
    let mut countings = HashMap::new();
    for PriceEntry { entry, price: p } in raw {
        let encoding = p
            .encoding
            .as_deref()
            .map(|name| {
                Encoding::parse(name).ok_or_else(|| {
                    invalid(
                        format!("{entry}.encoding"),
                        format!("must be {}", Encoding::NAMES),
                    )
                })
            })
            .transpose()?;
        if p.image_tokens == Some(0) {
            return Err(invalid(format!("{entry}.image_tokens"), "must be positive"));
        }
        if encoding.is_some() || p.image_tokens.is_some() {
            let counting = ModelCounting {
                encoding,
                image_tokens: p.image_tokens,
            };
            countings.insert((p.provider.clone(), p.model.clone()), counting);
        }
    }
    Ok(countings)
}

fn validate_routes(
    raw: &BTreeMap<String, RawRoute>,
    providers: &HashMap<ProviderName, Provider>,
    (prices, changes): (&PriceTable, &PriceChanges),
    encodings: &HashMap<(String, String), ModelCounting>,
    default_counting: Counting,
) -> Result<HashMap<RouteName, Route>, ConfigError> {
    let mut routes = HashMap::new();
    for (name, r) in raw {
        if r.complexity.is_some() && !r.targets.is_empty() {
            return Err(invalid(
                format!("routes.{name}.targets"),
                "a complexity route has no targets of its own",
            ));
        }
        if r.targets.is_empty() && r.complexity.is_none() {
            return Err(invalid(
                format!("routes.{name}.targets"),
                "needs at least one target",
            ));
        }
        let mut targets = Vec::with_capacity(r.targets.len());
        let mut ceilings = Vec::with_capacity(r.targets.len());
        for (i, raw_target) in r.targets.iter().enumerate() {
            let entry = format!("routes.{name}.targets[{i}]");
            let position = u32::try_from(i).unwrap_or(u32::MAX);
            let (target, rank, weight) = match raw_target {
                RawTarget::Plain(target) => (target, position, 1),
                RawTarget::Weighted(w) => (&w.target, w.rank.unwrap_or(position), w.weight),
            };
            if weight == 0 {
                return Err(invalid(format!("{entry}.weight"), "must be positive"));
            }
            let Some((provider, model)) = target.split_once('/') else {
                return Err(invalid(
                    entry,
                    format!("`{target}` is not `provider/model`"),
                ));
            };
            let Some(configured) = providers.get(&ProviderName::new(provider)) else {
                return Err(invalid(entry, format!("unknown provider `{provider}`")));
            };
            let Some(price) = prices.get(&(provider.to_owned(), model.to_owned())) else {
                return Err(invalid(entry, format!("no price for {provider}/{model}")));
            };
            ceilings.push(configured.max_tokens_ceiling);
            let own = encodings.get(&(provider.to_owned(), model.to_owned()));
            let counting = target_counting(own, configured, default_counting);
            targets.push(Target {
                provider: ProviderName::new(provider),
                model: model.to_owned(),
                price: *price,
                charge: *price,
                changes: changes
                    .get(&(provider.to_owned(), model.to_owned()))
                    .cloned()
                    .unwrap_or_default(),
                counting,
                rank,
                weight,
            });
        }
        // Stable: entries of equal rank keep their written order.
        targets.sort_by_key(|t| t.rank);
        let mut countings: Vec<Counting> = Vec::new();
        for target in &targets {
            if !countings.contains(&target.counting) {
                countings.push(target.counting);
            }
        }
        let complexity = complexity_routes(name, r, raw)?;
        let server_tools = r.server_tools.validate(name, &targets)?;
        let semantic_cache = r
            .semantic_cache
            .as_ref()
            .map(|c| {
                c.validate(name, |other| {
                    raw.get(other).map(|o| o.semantic_cache.is_some())
                })
            })
            .transpose()
            .map_err(|(entry, reason)| invalid(entry, reason))?;
        routes.insert(
            RouteName::new(name.as_str()),
            Route {
                name: RouteName::new(name.as_str()),
                targets,
                countings,
                cache_ttl_ms: r.cache_ttl_ms,
                // `None` (no ceiling) sorts first, so any uncapped target leaves the route uncapped.
                max_tokens_ceiling: if ceilings.contains(&None) {
                    None
                } else {
                    ceilings.into_iter().max().flatten()
                },
                degraded_answer: r.degraded_answer.clone(),
                complexity,
                semantic_cache,
                platform_prompt: platform_prompt(name, r)?,
                unknown_fields: r.unknown_fields(),
                server_tools,
            },
        );
    }
    Ok(routes)
}

/// How a target counts prompts: its model's price entry, then its
/// provider's safety factor, then `[tokenizer]`.
fn target_counting(
    own: Option<&ModelCounting>,
    provider: &Provider,
    default: Counting,
) -> Counting {
    let own = own.copied().unwrap_or_default();
    Counting {
        encoding: own.encoding.unwrap_or(default.encoding),
        safety_percent: provider
            .tokenizer_safety_percent
            .unwrap_or(default.safety_percent),
        image_tokens: own.image_tokens.unwrap_or(default.image_tokens),
    }
}

impl RawRoute {
    fn unknown_fields(&self) -> crate::fields::Unknown {
        if self.forward_unknown_fields {
            crate::fields::Unknown::Forward
        } else {
            crate::fields::Unknown::Refuse
        }
    }
}

/// A route's platform prompt: not empty, and not on a complexity route (the
/// class it picks places its own).
fn platform_prompt(name: &str, r: &RawRoute) -> Result<Option<String>, ConfigError> {
    let entry = || format!("routes.{name}.platform_prompt");
    match &r.platform_prompt {
        None => Ok(None),
        Some(text) if text.trim().is_empty() => Err(invalid(entry(), "must not be empty")),
        Some(_) if r.complexity.is_some() => Err(invalid(
            entry(),
            "a complexity route forwards to its classes: set it on them",
        )),
        Some(text) if text.len() > crate::prompts::MAX_PROMPT_BYTES => Err(invalid(
            entry(),
            format!("must be at most {} bytes", crate::prompts::MAX_PROMPT_BYTES),
        )),
        Some(text) => Ok(Some(text.clone())),
    }
}

/// A complexity route's classes, each a plain route that exists.
fn complexity_routes(
    name: &str,
    r: &RawRoute,
    raw: &BTreeMap<String, RawRoute>,
) -> Result<Option<ComplexityRoutes>, ConfigError> {
    Ok(match &r.complexity {
        None => None,
        Some(c) => {
            let pick = |class: &str, route: &str| {
                let entry = format!("routes.{name}.complexity.{class}");
                match raw.get(route) {
                    None => Err(invalid(entry, format!("unknown route `{route}`"))),
                    Some(other) if other.complexity.is_some() => Err(invalid(
                        entry,
                        format!("`{route}` is a complexity route itself"),
                    )),
                    Some(_) => Ok(RouteName::new(route)),
                }
            };
            Some(ComplexityRoutes {
                simple: pick("simple", &c.simple)?,
                moderate: pick("moderate", &c.moderate)?,
                complex: pick("complex", &c.complex)?,
            })
        }
    })
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
        check_embedding_routes(name, t, routes)?;
        if t.rpm == 0 {
            return Err(invalid(format!("tiers.{name}.rpm"), "must be positive"));
        }
        if t.default_max_tokens == 0 {
            return Err(invalid(
                format!("tiers.{name}.default_max_tokens"),
                "must be positive",
            ));
        }
        if t.max_choices == 0 {
            return Err(invalid(
                format!("tiers.{name}.max_choices"),
                "must be positive",
            ));
        }
        let end_user = t
            .end_user
            .as_ref()
            .map(|e| validate_end_user(name, e))
            .transpose()?;
        let session = t
            .session
            .as_ref()
            .map(|raw| validate_session(name, raw))
            .transpose()?;
        tiers.insert(
            name.clone(),
            Tier {
                name: name.clone(),
                end_user_sources: t
                    .end_user_sources
                    .clone()
                    .unwrap_or_else(|| vec![EndUserSource::Header, EndUserSource::Body]),
                end_user_required: t.end_user_required,
                end_user,
                session,
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
                max_choices: t.max_choices,
                on_store_error: t.on_store_error,
            },
        );
    }
    Ok(tiers)
}

/// A shared semantic cache needs a PostgreSQL database to live in.
fn check_semantic_store(cache: &CacheConfig, storage: &StorageConfig) -> Result<(), ConfigError> {
    if cache.semantic.store != crate::cache::semantic::SemanticStore::Postgres {
        return Ok(());
    }
    cache
        .semantic
        .store_url(&storage.database_url)
        .map(|_| ())
        .map_err(|reason| invalid("cache.semantic.database_url", reason))
}

/// A tier that may use a route with a semantic cache may use the route its
/// questions are embedded through: that call is the tenant's own.
fn check_embedding_routes(
    name: &str,
    t: &RawTier,
    routes: &HashMap<RouteName, Route>,
) -> Result<(), ConfigError> {
    for (i, route) in t.routes.iter().enumerate() {
        let semantic = routes
            .get(&RouteName::new(route.as_str()))
            .and_then(|r| r.semantic_cache.as_ref());
        if let Some(semantic) = semantic
            && !t.routes.contains(&semantic.embedding_route)
        {
            return Err(invalid(
                format!("tiers.{name}.routes[{i}]"),
                format!(
                    "`{route}` embeds questions through `{}`, which this tier must list too",
                    semantic.embedding_route
                ),
            ));
        }
    }
    Ok(())
}

fn validate_session(tier: &str, raw: &RawSession) -> Result<SessionLimits, ConfigError> {
    let budget = Nanos::parse_decimal(&raw.budget)
        .map_err(|e| invalid(format!("tiers.{tier}.session.budget"), e.to_string()))?;
    if raw.idle_minutes == 0 {
        return Err(invalid(
            format!("tiers.{tier}.session.idle_minutes"),
            "must be positive",
        ));
    }
    Ok(SessionLimits {
        budget,
        idle_ms: raw.idle_minutes.saturating_mul(60_000),
    })
}

fn validate_end_user(tier: &str, raw: &RawEndUser) -> Result<EndUserLimits, ConfigError> {
    let budget = raw
        .budget
        .as_deref()
        .map(|text| {
            Nanos::parse_decimal(text)
                .map_err(|e| invalid(format!("tiers.{tier}.end_user.budget"), e.to_string()))
        })
        .transpose()?;
    if raw.rpm == Some(0) {
        return Err(invalid(
            format!("tiers.{tier}.end_user.rpm"),
            "must be positive",
        ));
    }
    Ok(EndUserLimits {
        budget,
        period: raw.period,
        rpm: raw.rpm,
        daily_tokens: raw.daily_tokens,
        tpm: raw.tpm.filter(|t| *t > 0),
    })
}

/// One hash of what rows are charged under: the providers' prices and, where
/// there are plans, theirs (appended only then, so versions without plans stay).
fn price_version(prices: &[PriceEntry], plans: &BTreeMap<String, Plan>) -> String {
    let mut hasher = Sha256::new();
    for field in plans::version_fields(plans) {
        hasher.update(field.as_bytes());
        hasher.update([2]);
    }
    for PriceEntry { price: p, .. } in prices {
        for field in [
            p.provider.as_str(),
            p.model.as_str(),
            p.input.as_str(),
            p.cached_input.as_deref().unwrap_or(""),
            p.cache_write.as_deref().unwrap_or(""),
            p.output.as_deref().unwrap_or(""),
        ] {
            hasher.update(field.as_bytes());
            hasher.update([0]);
        }
        if let Some(from) = &p.effective_from {
            hasher.update(from.as_bytes());
            hasher.update([3]);
        }
        // Appended only when set, so tables without tiers keep their version.
        if let Some(long) = &p.long_context {
            for field in [
                long.above_tokens.to_string().as_str(),
                long.input.as_str(),
                long.cached_input.as_deref().unwrap_or(""),
                long.cache_write.as_deref().unwrap_or(""),
                long.output.as_str(),
            ] {
                hasher.update(field.as_bytes());
                hasher.update([1]);
            }
        }
        if let Some(fee) = &p.web_search {
            hasher.update(fee.as_bytes());
            hasher.update([4]);
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
    fn the_pool_is_sized_for_its_backend_unless_set() {
        let pool = |storage: &str, extra: &[(&str, &str)]| {
            let mut vars = pepper();
            vars.extend(env(extra));
            Config::from_toml(&format!("[storage]\n{storage}\n{BASE}"), &vars)
                .map(|c| c.storage.pool_size())
        };
        assert_eq!(pool("", &[]).unwrap(), SQLITE_POOL);
        let postgres = "database_url = \"postgres://db/tollgate\"";
        assert_eq!(pool(postgres, &[]).unwrap(), POSTGRES_POOL);
        assert_eq!(
            pool("", &[(DATABASE_URL_ENV, "postgres://db/tollgate")]).unwrap(),
            POSTGRES_POOL,
            "the URL from the environment decides"
        );
        assert_eq!(pool("max_connections = 2", &[]).unwrap(), 2);
        let zero = pool("max_connections = 0", &[]).unwrap_err().to_string();
        assert!(zero.contains("storage.max_connections"), "{zero}");
    }

    #[test]
    fn dated_prices_are_kept_in_order_and_checked() {
        let dated = |from: &str| {
            format!(
                "[[prices]]\nprovider = \"qwen\"\nmodel = \"qwen-flash\"\ninput = \"9\"\noutput = \"9\"\neffective_from = \"{from}\"\n"
            )
        };
        let text = format!("{BASE}\n{}{}", dated("2027-03-01"), dated("2027-01-01"));
        let config = Config::from_toml(&text, &pepper()).unwrap();
        let key = ("qwen".to_owned(), "qwen-flash".to_owned());
        let changes = &config.price_changes[&key];
        assert!(changes[0].0 < changes[1].0, "sorted by date");
        let at = |ms| price_at(&config.prices, &config.price_changes, &key, ms).unwrap();
        assert_eq!(
            at(0).input,
            config.prices[&key].input,
            "undated before the first date"
        );
        assert_eq!(at(changes[0].0).input.nanos_per_mtok().to_string(), "9");
        let twice = format!("{BASE}\n{}{}", dated("2027-01-01"), dated("2027-01-01"));
        let error = Config::from_toml(&twice, &pepper())
            .unwrap_err()
            .to_string();
        assert!(error.contains("from 2027-01-01"), "{error}");
        let bad = format!("{BASE}\n{}", dated("2027-13-01"));
        let error = Config::from_toml(&bad, &pepper()).unwrap_err().to_string();
        assert!(error.contains("effective_from"), "{error}");
    }

    #[test]
    fn plans_price_only_priced_models_and_enter_the_price_version() {
        let plan = "[[plans]]\nname = \"resale\"\nmarkup_percent = 20\n";
        let with_plan = Config::from_toml(&format!("{BASE}\n{plan}"), &pepper()).unwrap();
        let without = Config::from_toml(BASE, &pepper()).unwrap();
        assert_eq!(with_plan.plans["resale"].markup_ppm, 200_000);
        assert_ne!(with_plan.price_version, without.price_version);
        let typo = format!(
            "{BASE}\n{plan}[[plans.prices]]\nprovider = \"deepseek\"\nmodel = \"nowhere\"\ninput = \"1\"\noutput = \"1\"\n"
        );
        let error = Config::from_toml(&typo, &pepper()).unwrap_err().to_string();
        assert!(error.contains("plans[0].prices[0]"), "{error}");
        let cost = format!("{BASE}\n[[plans]]\nname = \"cost\"\n");
        assert!(Config::from_toml(&cost, &pepper()).is_err());
    }

    #[test]
    fn loads_the_contract_shape_and_takes_worst_prices_over_targets() {
        let config = Config::from_toml(BASE, &pepper()).unwrap();
        let route = config.route("fast").unwrap();
        assert_eq!(
            route.worst_prices(1000),
            (
                PricePerMTok::parse_decimal("3").unwrap(),
                PricePerMTok::parse_decimal("8").unwrap()
            )
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
    fn admin_listen_is_optional_and_an_address_that_is_not_one_is_named() {
        let with_server =
            |server: &str| Config::from_toml(&format!("[server]\n{server}\n{BASE}"), &pepper());
        assert_eq!(
            Config::from_toml(BASE, &pepper())
                .unwrap()
                .server
                .admin_listen,
            None
        );
        assert_eq!(
            with_server("admin_listen = \"127.0.0.1:9091\"")
                .unwrap()
                .server
                .admin_listen,
            Some(SocketAddr::from(([127, 0, 0, 1], 9091)))
        );
        for bad in ["\"localhost\"", "\"127.0.0.1\"", "\":9091\"", "9091"] {
            let error = with_server(&format!("admin_listen = {bad}"))
                .unwrap_err()
                .to_string();
            assert!(error.contains("server.admin_listen"), "{bad}: {error}");
        }
        let error = with_server("listen = \"127.0.0.1:9091\"\nadmin_listen = \"127.0.0.1:9091\"")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("server.admin_listen: must differ"),
            "{error}"
        );
        assert!(with_server("listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"").is_ok());
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
    fn a_file_without_include_keeps_the_price_version_its_rows_carry() {
        // The version ledgers already hold for BASE's two prices.
        let config = Config::from_toml(BASE, &pepper()).unwrap();
        assert_eq!(config.price_version, "92dd298202cb");
        assert!(config.catalogs.is_empty());
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
    fn a_route_lets_search_leave_only_where_every_target_has_its_fee() {
        let tools = "[routes.fast.server_tools]\nweb_search = { max_uses = 4, input_tokens_per_use = 5000 }\n[tiers.free]";
        let with_tools = BASE.replace("[tiers.free]", tools);
        let error = Config::from_toml(&with_tools, &pepper()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "routes.fast.server_tools.web_search: target `deepseek/deepseek-flash` has no `web_search` fee in its [[prices]] entry; give it one, or the route cannot hold what a search costs"
        );
        let priced = with_tools
            .replace(
                "output = \"8.0\"",
                "output = \"8.0\"\nweb_search = \"0.01\"",
            )
            .replace("output = \"6\"", "output = \"6\"\nweb_search = \"0.025\"");
        let config = Config::from_toml(&priced, &pepper()).unwrap();
        let route = &config.routes[&RouteName::new("fast")];
        let search = route.server_tools.web_search.unwrap();
        assert_eq!((search.max_uses, search.input_tokens_per_use), (4, 5000));
        assert_eq!(route.server_tools.web_fetch, None);
        let fees: Vec<_> = route.targets.iter().map(|t| t.price.web_search).collect();
        assert_eq!(
            fees,
            [Some(Nanos::new(10_000_000)), Some(Nanos::new(25_000_000))]
        );
        let zero = priced.replace("max_uses = 4", "max_uses = 0");
        let error = Config::from_toml(&zero, &pepper()).unwrap_err().to_string();
        assert!(
            error.starts_with("routes.fast.server_tools.web_search.max_uses:"),
            "{error}"
        );
    }

    #[test]
    fn provider_options_are_checked_and_name_the_entry() {
        let with = |extra: &str| {
            let text = BASE.replace(
                "api_key_env = \"DEEPSEEK_API_KEY\"",
                &format!("api_key_env = \"DEEPSEEK_API_KEY\"\n{extra}"),
            );
            Config::from_toml(&text, &pepper()).map(|c| {
                let p = &c.providers[&ProviderName::new("deepseek")];
                (
                    p.tenant_id_as,
                    p.extra_headers.clone(),
                    p.max_tokens_ceiling,
                )
            })
        };
        let (field, headers, ceiling) = with(
            "tenant_id_as = \"user_id\"\nmax_tokens_ceiling = 8\nextra_headers = { X-Org = \"a\" }",
        )
        .unwrap();
        assert_eq!(field, Some(TenantIdField::UserId));
        assert_eq!(headers, vec![("x-org".to_owned(), "a".to_owned())]);
        assert_eq!(ceiling, Some(8));
        let error = with("extra_headers = { Authorization = \"x\" }").unwrap_err();
        assert_eq!(
            error.to_string(),
            "providers.deepseek.extra_headers.Authorization: is set by the gateway itself"
        );
        let error = with("extra_headers = { \"a b\" = \"x\" }").unwrap_err();
        assert!(
            error.to_string().contains("not a valid header name"),
            "{error}"
        );
        let error = with("max_tokens_ceiling = 0").unwrap_err();
        assert_eq!(
            error.to_string(),
            "providers.deepseek.max_tokens_ceiling: must be positive"
        );
    }

    #[test]
    fn responses_is_for_openai_providers_only_and_takes_the_tenant_as_user() {
        let with = |provider: &str, extra: &str| {
            let text = format!(
                "{BASE}\n[providers.{provider}]\nbase_url = \"https://api.example/v1/\"\n{extra}\n"
            );
            Config::from_toml(&text, &pepper())
                .map(|c| {
                    let p = &c.providers[&ProviderName::new(provider)];
                    (p.responses, p.responses_url.clone())
                })
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            with("direct", "kind = \"openai\"\nresponses = true"),
            Ok((true, "https://api.example/v1/responses".to_owned()))
        );
        assert_eq!(
            with("plain", "kind = \"openai\"").map(|(on, _)| on),
            Ok(false)
        );
        assert_eq!(
            with("claude", "kind = \"anthropic\"\nresponses = true"),
            Err(
                "providers.claude.responses: only a kind = \"openai\" provider speaks OpenAI's Responses API"
                    .to_owned()
            )
        );
        let error = with(
            "direct",
            "kind = \"openai\"\nresponses = true\ntenant_id_as = \"user_id\"",
        )
        .unwrap_err();
        assert!(
            error.starts_with(
                "providers.direct.tenant_id_as: the Responses API takes the tenant as `user`"
            ),
            "{error}"
        );
        assert!(
            with(
                "direct",
                "kind = \"openai\"\nresponses = true\ntenant_id_as = \"user\""
            )
            .is_ok()
        );
    }

    #[test]
    fn the_route_ceiling_is_the_largest_when_every_target_has_one() {
        let text = BASE.replace(
            "api_key_env = \"DEEPSEEK_API_KEY\"",
            "api_key_env = \"DEEPSEEK_API_KEY\"\nmax_tokens_ceiling = 100",
        );
        let config = Config::from_toml(&text, &pepper()).unwrap();
        assert_eq!(config.route("fast").unwrap().max_tokens_ceiling, None);
        let text = text.replace(
            "api_key_env = \"DASHSCOPE_API_KEY\"",
            "api_key_env = \"DASHSCOPE_API_KEY\"\nmax_tokens_ceiling = 300",
        );
        let config = Config::from_toml(&text, &pepper()).unwrap();
        assert_eq!(config.route("fast").unwrap().max_tokens_ceiling, Some(300));
    }

    #[test]
    fn weighted_targets_sort_by_rank_and_complexity_routes_are_checked() {
        let text = BASE.replace(
            "targets = [\"deepseek/deepseek-flash\", \"qwen/qwen-flash\"]",
            "targets = [\"qwen/qwen-flash\", { target = \"deepseek/deepseek-flash\", rank = 0, weight = 3 }]\n[routes.auto]\ncomplexity = { simple = \"fast\", moderate = \"fast\", complex = \"fast\" }",
        );
        let config = Config::from_toml(&text, &pepper()).unwrap();
        let fast = config.route("fast").unwrap();
        let order: Vec<(&str, u32, u32)> = fast
            .targets
            .iter()
            .map(|t| (t.provider.as_str(), t.rank, t.weight))
            .collect();
        assert_eq!(order, [("qwen", 0, 1), ("deepseek", 0, 3)]);
        assert!(config.route("auto").unwrap().complexity.is_some());

        let error = Config::from_toml(&text.replace("weight = 3", "weight = 0"), &pepper())
            .unwrap_err()
            .to_string();
        assert_eq!(error, "routes.fast.targets[1].weight: must be positive");
        let error = Config::from_toml(
            &text.replace("complex = \"fast\"", "complex = \"slow\""),
            &pepper(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            error,
            "routes.auto.complexity.complex: unknown route `slow`"
        );
        let error = Config::from_toml(
            &text.replace("simple = \"fast\"", "simple = \"auto\""),
            &pepper(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            error,
            "routes.auto.complexity.simple: `auto` is a complexity route itself"
        );
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

    #[test]
    fn every_shipped_catalog_loads_and_claude_s_images_are_held_at_their_own_bound() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let files = [
            "anthropic",
            "deepseek",
            "google",
            "mistral",
            "openai",
            "qwen",
        ]
        .map(|name| format!("\"prices/{name}.toml\""))
        .join(", ");
        let claude = "[providers.anthropic]\nkind = \"anthropic\"\nbase_url = \"https://api.anthropic.com\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n[routes.claude]\ntargets = [\"anthropic/claude-sonnet-5-5\", \"anthropic/claude-haiku-4-5\"]\n";
        let text = format!("include = [{files}]\n[billing]\ncurrency = \"USD\"\n{claude}{BASE}");
        let config = Config::from_toml_in(&text, dir, &pepper()).unwrap();
        assert_eq!(config.catalogs.len(), 6);
        let route = &config.routes[&RouteName::new("claude")];
        let images: Vec<u64> = route
            .targets
            .iter()
            .map(|t| t.counting.image_tokens)
            .collect();
        assert_eq!(images, [4_800, 1_600]);
    }

    #[test]
    fn the_example_include_line_loads_once_the_example_bills_in_usd() {
        let text = include_str!("../tollgate.example.toml");
        let line = "# include = [\"prices/deepseek.toml\", \"prices/qwen.toml\"]";
        assert!(text.contains(line));
        let text = text
            .replace(line, &line[2..])
            .replace("currency = \"CNY\"", "currency = \"USD\"");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let config = Config::from_toml_in(&text, dir, &env(&[])).unwrap();
        assert_eq!(config.catalogs.len(), 2);
        // The example's own deepseek-flash price replaces the catalog's.
        assert_eq!(config.catalogs[0].overridden, 1);
        let flash = &config.prices[&("deepseek".to_owned(), "deepseek-flash".to_owned())];
        assert_eq!(flash.input, PricePerMTok::parse_decimal("2.0").unwrap());
    }
}
