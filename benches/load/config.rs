//! The configuration files the harness writes: the gateway's (every governance feature on)
//! and the reference nginx's.

use std::fmt::Write as _;
use std::path::Path;

use crate::scenarios::MAX_TOKENS;

pub const TIER: &str = "bench";
pub const TENANT: &str = "bench";
pub const UPSTREAM_MODEL: &str = "bench-model";
/// Far more than any run sends, so strict budget reservation runs on every call without ever
/// refusing one.
pub const BUDGET: &str = "1000000000";
/// Requests per minute, so the limiter runs on every call without ever refusing one.
pub const RPM: u32 = 10_000_000;
/// Tokens per minute, per day and per month: the token quotas run on every call too, and the
/// whole run sends well under a billion tokens.
const TPM: u64 = 10_000_000_000;
const DAILY_TOKENS: u64 = 1_000_000_000_000;
const MONTHLY_TOKENS: u64 = 10_000_000_000_000;
/// Each end user's budget per period: a run sends an end user a few requests that each hold
/// well under a thousandth, so it never refuses; in nanos it stays far below the 2^53 a Redis
/// Lua number holds exactly.
pub const END_USER_BUDGET: &str = "1000";
/// A month, like the tenant's budget: a run crosses a period's end only on the month's last night.
pub const END_USER_PERIOD: &str = "month";

/// One upstream the gateway routes to: a fake upstream with a fixed delay.
pub struct Upstream {
    pub provider: String,
    pub route: String,
    pub port: u16,
}

/// A further route to one of the fakes under a scripted model string: the fake reads its
/// behaviour (a delay, stream pacing) from the model it is asked for.
#[derive(Debug, Clone)]
pub struct ModelRoute {
    pub route: String,
    pub provider: String,
    pub model: String,
    /// Further lines of the route's table (a semantic cache).
    pub settings: Option<String>,
    /// Further lines of its model's `[[prices]]` entry.
    pub price_lines: Option<String>,
    /// A second target (`provider/model`) the route fails over to.
    pub fallback: Option<String>,
}

/// The growing-hold cell's step: a stream of 20 chunks grows its hold once.
pub const STREAM_STEP_TOKENS: u32 = 64;

/// The gateway's TOML: key auth, request and token rate limits and token quotas, strict
/// budgets with the real tokenizer, the ledger on the default SQLite and metrics all stay on;
/// only the limits are set high. With `redis_url`, limits, quotas and budgets live in Redis
/// (the mode replicas share them in). With `fsync`, the ledger journal's `ledger.fsync`
/// (the default, `batch`, otherwise). The tier's `end_user` template is in every gateway's
/// file but applies only to requests that name an end user: the end-user cells' alone.
pub fn gateway_toml(
    listen_port: u16,
    dir: &Path,
    upstreams: &[Upstream],
    extra: &[ModelRoute],
    redis_url: Option<&str>,
    fsync: Option<&str>,
) -> String {
    let redis = redis_url.map_or_else(String::new, |url| format!("redis_url = \"{url}\"\n"));
    let ledger = fsync.map_or_else(String::new, |mode| {
        format!("\n[ledger]\nfsync = \"{mode}\"\n")
    });
    let mut toml = format!(
        r#"# Written by benches/load (cargo bench --bench load).
[server]
listen = "127.0.0.1:{listen_port}"
shutdown_grace_ms = 5000

[storage]
database_url = "sqlite://{db}?mode=rwc"
{redis}
[billing]
currency = "USD"
# Below the tier's 256-token default, so the growing-hold cell's streams grow
# (only its model hides no output; every other stream is held whole).
stream_step_tokens = {STREAM_STEP_TOKENS}

[tokenizer]
encoding = "o200k_base"
{ledger}"#,
        db = dir.join("tollgate.db").display(),
    );
    let routes: Vec<String> = upstreams
        .iter()
        .map(|u| &u.route)
        .chain(extra.iter().map(|r| &r.route))
        .map(|route| format!("{route:?}"))
        .collect();
    for upstream in upstreams {
        let _ = write!(
            toml,
            r#"
[providers.{provider}]
kind = "openai"
base_url = "http://127.0.0.1:{port}"

[routes.{route}]
targets = ["{provider}/{UPSTREAM_MODEL}"]

[[prices]]
provider = "{provider}"
model = "{UPSTREAM_MODEL}"
input = "0.5"
cached_input = "0.05"
output = "1.5"
"#,
            provider = upstream.provider,
            port = upstream.port,
            route = upstream.route,
        );
    }
    for extra in extra {
        let _ = write!(
            toml,
            r#"
[routes.{route:?}]
targets = ["{provider}/{model}"{fallback}]
{settings}
"#,
            route = extra.route,
            provider = extra.provider,
            model = extra.model,
            fallback = extra
                .fallback
                .as_ref()
                .map_or_else(String::new, |target| format!(", {target:?}")),
            settings = extra.settings.as_deref().unwrap_or(""),
        );
        // One price per model: the semantic route shares the plain route's.
        if extra.model != UPSTREAM_MODEL {
            let _ = write!(
                toml,
                r#"
[[prices]]
provider = "{provider}"
model = "{model}"
input = "0.5"
cached_input = "0.05"
output = "1.5"
{lines}
"#,
                provider = extra.provider,
                model = extra.model,
                lines = extra.price_lines.as_deref().unwrap_or(""),
            );
        }
    }
    let _ = write!(
        toml,
        r#"
[tiers.{TIER}]
routes = [{routes}]
rpm = {RPM}
tpm = {TPM}
daily_tokens = {DAILY_TOKENS}
monthly_tokens = {MONTHLY_TOKENS}
default_max_tokens = {MAX_TOKENS}

[tiers.{TIER}.end_user]
budget = "{END_USER_BUDGET}"
period = "{END_USER_PERIOD}"
rpm = {RPM}
"#,
        routes = routes.join(", "),
    );
    toml
}

/// A plain reverse proxy with upstream keep-alive, as one would deploy it: no access log,
/// bodies buffered in memory.
pub fn nginx_conf(listen_port: u16, upstream_port: u16, workers: u32, dir: &Path) -> String {
    let dir = dir.display();
    format!(
        r#"# Written by benches/load (cargo bench --bench load).
daemon off;
master_process on;
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    client_body_temp_path {dir}/nginx-client-body;
    proxy_temp_path {dir}/nginx-proxy;
    fastcgi_temp_path {dir}/nginx-fastcgi;
    uwsgi_temp_path {dir}/nginx-uwsgi;
    scgi_temp_path {dir}/nginx-scgi;
    client_max_body_size 16m;
    client_body_buffer_size 1m;
    keepalive_requests 100000000;
    keepalive_timeout 120s;

    upstream fake {{
        server 127.0.0.1:{upstream_port};
        keepalive 256;
        keepalive_requests 100000000;
    }}

    server {{
        listen 127.0.0.1:{listen_port};
        location / {{
            proxy_pass http://fake;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"#
    )
}
