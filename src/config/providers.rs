//! `[providers.<name>]`: the upstream APIs, how they are called and how a
//! failing one is left alone for a while.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;

use super::env::{EnvSource, Secret};
use super::errors::Problems;
use super::upstream_tls::UpstreamTls;
use crate::ids::ProviderName;

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
pub(super) struct RawProvider {
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
    /// Calls in flight at this provider account across every replica,
    /// through the shared store (per replica without one); default no cap.
    fleet_max_concurrency: Option<u32>,
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
    /// PEM certificates of authorities this provider's TLS may chain to,
    /// beside the built-in web roots (relative to the configuration's folder).
    ca_file: Option<String>,
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
    /// The account's calls in flight across the fleet (`None`: no cap).
    pub fleet_max_concurrency: Option<u32>,
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
    /// `ca_file`'s authorities and the client TLS that trusts them.
    pub tls: Option<UpstreamTls>,
}

impl Provider {
    /// The one line that says a fleet cap bounds each replica alone, where
    /// there is no shared store to count the fleet's calls in.
    pub fn per_replica_fleet_note(&self, shared_store: bool) -> Option<String> {
        let cap = self.fleet_max_concurrency.filter(|_| !shared_store)?;
        Some(format!(
            "providers.{}.fleet_max_concurrency = {cap} applies per replica: there is no shared store (storage.redis_url) to count the fleet's calls",
            self.name
        ))
    }

    /// The env var this provider needs and does not have, if any.
    pub fn missing_key_env(&self) -> Option<&str> {
        match (&self.api_key_env, &self.api_key) {
            (Some(env), None) => Some(env),
            _ => None,
        }
    }
}
/// `[providers]`: each provider checked on its own; one with problems is
/// still built, so routes naming it are not refused for its sake.
pub(super) fn validate_providers(
    raw: &BTreeMap<String, RawProvider>,
    dir: &Path,
    env: &dyn EnvSource,
    problems: &mut Problems,
) -> HashMap<ProviderName, Provider> {
    let mut providers = HashMap::new();
    for (name, p) in raw {
        let entry = format!("providers.{name}");
        p.check(&entry, name, problems);
        let extra_headers = validate_extra_headers(&entry, &p.extra_headers, problems);
        let tls = p.ca_file.as_deref().and_then(|ca_file| {
            UpstreamTls::load(ca_file, dir)
                .map_err(|problem| problems.add(format!("{entry}.ca_file"), problem))
                .ok()
        });
        let mut provider = p.build(name, env, extra_headers);
        provider.tls = tls;
        providers.insert(provider.name.clone(), provider);
    }
    providers
}

impl RawProvider {
    fn check(&self, entry: &str, name: &str, problems: &mut Problems) {
        if name.is_empty() || name.contains('/') {
            problems.add(entry, "provider names may not be empty or contain `/`");
        }
        if self.kind == ProviderKind::Anthropic && self.tenant_id_as == Some(TenantIdField::UserId)
        {
            problems.add(
                format!("{entry}.tenant_id_as"),
                "Anthropic takes the tenant as metadata.user_id: use \"user\"",
            );
        }
        check_responses(entry, self, problems);
        if self.tokenizer_safety_percent.is_some_and(|s| s < 100) {
            problems.add(
                format!("{entry}.tokenizer_safety_percent"),
                "must be at least 100",
            );
        }
        if self.max_tokens_ceiling == Some(0) {
            problems.add(format!("{entry}.max_tokens_ceiling"), "must be positive");
        }
        if self.breaker_error_rate_percent > 100 {
            problems.add(
                format!("{entry}.breaker_error_rate_percent"),
                "must be at most 100",
            );
        }
        for (field, value) in [
            ("timeout_ms", Some(self.timeout_ms)),
            ("connect_timeout_ms", Some(self.connect_timeout_ms)),
            ("first_byte_timeout_ms", self.first_byte_timeout_ms),
            ("max_concurrency", Some(u64::from(self.max_concurrency))),
            (
                "fleet_max_concurrency",
                self.fleet_max_concurrency.map(u64::from),
            ),
        ] {
            if value == Some(0) {
                problems.add(format!("{entry}.{field}"), "must be positive");
            }
        }
    }

    fn build(
        &self,
        name: &str,
        env: &dyn EnvSource,
        extra_headers: Vec<(String, String)>,
    ) -> Provider {
        let p = self;
        let base = p.base_url.trim_end_matches('/');
        Provider {
            name: ProviderName::new(name),
            kind: p.kind,
            base_url: p.base_url.clone(),
            chat_url: chat_url(p.kind, base),
            embeddings_url: format!("{base}/embeddings"),
            responses: p.responses,
            responses_url: format!("{base}/responses"),
            api_key_env: p.api_key_env.clone(),
            api_key: p
                .api_key_env
                .as_deref()
                .and_then(|var| env.get(var))
                .map(Secret::new),
            timeout_ms: p.timeout_ms,
            connect_timeout_ms: p.connect_timeout_ms,
            first_byte_timeout_ms: p.first_byte_timeout_ms.unwrap_or(p.timeout_ms),
            max_concurrency: p.max_concurrency,
            fleet_max_concurrency: p.fleet_max_concurrency,
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
            extra_headers,
            max_tokens_ceiling: p.max_tokens_ceiling,
            tokenizer_safety_percent: p.tokenizer_safety_percent,
            tls: None,
        }
    }
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
fn check_responses(entry: &str, p: &RawProvider, problems: &mut Problems) {
    if !p.responses {
        return;
    }
    if p.kind != ProviderKind::Openai {
        problems.add(
            format!("{entry}.responses"),
            "only a kind = \"openai\" provider speaks OpenAI's Responses API",
        );
    }
    if p.tenant_id_as == Some(TenantIdField::UserId) {
        problems.add(
            format!("{entry}.tenant_id_as"),
            "the Responses API takes the tenant as `user`: use \"user\" with responses = true",
        );
    }
}

/// The headers that pass: a refused one is named and left out.
fn validate_extra_headers(
    entry: &str,
    raw: &BTreeMap<String, String>,
    problems: &mut Problems,
) -> Vec<(String, String)> {
    let mut headers = Vec::with_capacity(raw.len());
    for (name, value) in raw {
        let field = format!("{entry}.extra_headers.{name}");
        let lower = name.to_ascii_lowercase();
        let refused = if RESERVED_HEADERS.contains(&lower.as_str()) {
            Some("is set by the gateway itself")
        } else if actix_web::http::header::HeaderName::from_bytes(lower.as_bytes()).is_err() {
            Some("is not a valid header name")
        } else if actix_web::http::header::HeaderValue::from_str(value).is_err() {
            Some("is not a valid header value")
        } else {
            None
        };
        match refused {
            Some(reason) => problems.add(field, reason),
            None => headers.push((lower, value.clone())),
        }
    }
    headers
}
