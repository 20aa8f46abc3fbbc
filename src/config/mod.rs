//! Configuration: one TOML file plus environment variables for secrets.
//! `Config::load` parses the raw file (unknown fields refused), reads env
//! through `EnvSource`, then each section checks itself and turns into
//! typed values. A load that finds problems names every one at its TOML
//! path (`routes.chat.targets[1]: unknown provider `kimi``), so one run of
//! `check-config` shows all that stands between a file and a start. Env is
//! read here and nowhere else.
//!
//! Each section's file owns its TOML shape, its defaults and its checks;
//! this one owns the whole and the order sections are checked in.

mod alerts;
mod audit;
mod billing;
mod cache;
mod catalog;
mod env;
mod errors;
mod export;
mod ledger;
mod plans;
mod price_file;
mod prices;
mod prompt_cache;
mod providers;
mod reconcile;
mod responses;
mod routes;
pub mod semantic_cache;
mod server;
pub mod server_tools;
mod storage;
mod telemetry;
mod tiers;
mod tokenizer;
mod upstream_tls;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use crate::ids::{ProviderName, RouteName};

pub use alerts::{AlertsConfig, ReportsConfig, parse_time_of_day, webhook_url_problem};
pub use audit::AuditConfig;
pub use billing::BillingConfig;
pub use cache::CacheConfig;
pub use catalog::Catalog;
pub use env::{
    ADMIN_TOKEN_ENV, DATABASE_URL_ENV, EnvSource, KEY_PEPPER_ENV, ProcessEnv, REDIS_URL_ENV, Secret,
};
pub use errors::{ConfigError, ConfigErrors};
pub use export::{ExportConfig, Sink, SinkKind, StripeValue};
pub use ledger::{FsyncMode, LedgerConfig, OnBacklogFull};
pub use plans::{COST, Plan};
pub use price_file::{Billing, load_billing, load_price_table};
pub use prices::{
    HiddenOutput, LongContext, Price, PriceChanges, PriceTable, UNPRICED_OUTPUT, price_at,
};
pub use prompt_cache::PromptCacheConfig;
pub use providers::{OnClientDisconnect, Provider, ProviderKind, TenantIdField};
pub use reconcile::ReconcileConfig;
pub use responses::StoreConfig;
pub use routes::{ComplexityRoutes, MAX_PROMPT_BYTES, Route, Target, UnknownFields};
pub use server::ServerConfig;
pub use storage::StorageConfig;
pub use telemetry::TelemetryConfig;
pub use tiers::{
    END_USER_MAX_BYTES, EndUserLimits, EndUserSource, SessionLimits, StoreErrorPolicy, Tier,
};
pub use tokenizer::TokenizerConfig;
pub use upstream_tls::UpstreamTls;

use errors::{Problems, invalid};

/// The file as written: each section in its own shape, defaults filled in.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    server: ServerConfig,
    storage: StorageConfig,
    billing: BillingConfig,
    ledger: LedgerConfig,
    tokenizer: TokenizerConfig,
    telemetry: TelemetryConfig,
    cache: CacheConfig,
    alerts: AlertsConfig,
    reports: ReportsConfig,
    prompt_cache: PromptCacheConfig,
    audit: AuditConfig,
    responses: StoreConfig,
    reconcile: ReconcileConfig,
    export: export::RawExport,
    providers: BTreeMap<String, providers::RawProvider>,
    routes: BTreeMap<String, routes::RawRoute>,
    tiers: BTreeMap<String, tiers::RawTier>,
    /// Price catalogs (`prices/openai.toml`, …), relative to this file's
    /// directory: their `[[prices]]` are added to this file's own.
    include: Vec<String>,
    prices: Vec<prices::RawPrice>,
    /// What tenants are billed over the providers' prices.
    plans: Vec<plans::RawPlan>,
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
    pub prompt_cache: PromptCacheConfig,
    /// `[audit]`: how opted-in tenants' payloads are kept.
    pub audit: AuditConfig,
    /// `[responses]`: how the Responses door keeps stored responses.
    pub responses: StoreConfig,
    pub reconcile: ReconcileConfig,
    /// `[export]`: usage delivered to billing systems.
    pub export: ExportConfig,
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

/// What a call needs after its answer: the row journaled, the hold settled,
/// a stream's last events written.
pub const SETTLE_AFTER_CALL_MS: u64 = 5_000;

impl Config {
    /// The longest a call may wait on its upstream: the longest provider
    /// timeout, cut by the request's own deadline.
    pub fn longest_call_ms(&self) -> u64 {
        let longest_provider = self.providers.values().map(|p| p.timeout_ms).max();
        longest_provider.map_or(self.server.request_timeout_ms, |ms| {
            ms.min(self.server.request_timeout_ms)
        })
    }

    /// How long in-flight calls may take to finish after SIGTERM: the
    /// setting, else the longest call and its settle, so a rollout never cuts
    /// a call the provider will bill in full.
    pub fn shutdown_grace_ms(&self) -> u64 {
        self.server
            .shutdown_grace_ms
            .unwrap_or_else(|| self.longest_call_ms() + SETTLE_AFTER_CALL_MS)
    }

    /// A set grace shorter than the longest call: SIGTERM may cut calls.
    pub fn grace_shorter_than_calls(&self) -> Option<(u64, u64)> {
        let set = self.server.shutdown_grace_ms?;
        let longest = self.longest_call_ms();
        (set < longest).then_some((set, longest))
    }

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
    /// Every problem the file has is returned, each at its TOML path; a
    /// file that is not TOML (or not of this shape) is one problem.
    pub fn load(path: &Path, env: &dyn EnvSource) -> Result<Arc<Config>, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let raw = parse_raw(&text, &path.display().to_string())?;
        validate(raw, path.parent().unwrap_or(Path::new("")), env).map(Arc::new)
    }

    /// A configuration from text; `include` paths are relative to the working directory.
    pub fn from_toml(text: &str, env: &dyn EnvSource) -> Result<Arc<Config>, ConfigErrors> {
        Self::from_toml_in(text, Path::new(""), env)
    }

    /// A configuration from text whose `include` paths are relative to `dir`.
    pub fn from_toml_in(
        text: &str,
        dir: &Path,
        env: &dyn EnvSource,
    ) -> Result<Arc<Config>, ConfigErrors> {
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

/// Every section checked, in the file's usual order; those that depend on
/// others (routes on providers and prices, tiers on routes) are checked
/// against what could be built, so one mistake is reported once.
fn validate(raw: RawConfig, dir: &Path, env: &dyn EnvSource) -> Result<Config, ConfigErrors> {
    let mut problems = Problems::default();
    raw.server.check(&mut problems);
    let storage = raw.storage.resolve(env, &mut problems);
    raw.tokenizer.check(&mut problems);
    raw.ledger.check(&mut problems);
    raw.cache.check(&storage, &mut problems);
    raw.reports.check(&mut problems);
    raw.alerts.check(&mut problems);
    let calendar = raw.billing.calendar(&mut problems);
    let providers = providers::validate_providers(&raw.providers, dir, env, &mut problems);
    raw.reconcile.check(&providers, &mut problems);
    let export = raw.export.resolve(env, &mut problems);
    // Without its catalogs the price table is incomplete: every route would
    // be refused for prices that are only missing because of this one error.
    let merged = match catalog::merge(raw.prices, &raw.include, dir, &raw.billing.currency) {
        Ok(merged) => merged,
        Err(error) => return Err(problems.stop(error)),
    };
    let (prices, price_changes) =
        prices::validate_dated_prices(&merged.entries, &calendar, &mut problems);
    let plans = plans::validate(raw.plans, &prices, &calendar, &mut problems);
    let countings = prices::model_encodings(&merged.entries, &mut problems);
    let pricing = routes::Pricing {
        prices: &prices,
        changes: &price_changes,
        countings: &countings,
        default_counting: raw.tokenizer.counting(),
    };
    let routes = routes::validate_routes(&raw.routes, &providers, &pricing, &mut problems);
    let tiers = tiers::validate_tiers(&raw.tiers, &routes, &mut problems);
    problems.finish(Config {
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
        reconcile: raw.reconcile,
        export,
        providers,
        routes,
        tiers,
        calendar,
        price_version: price_file::price_version(&merged.entries, &plans),
        prices,
        price_changes,
        plans,
        catalogs: merged.catalogs,
        key_pepper: env::secret(env, KEY_PEPPER_ENV),
        admin_token: env::secret(env, ADMIN_TOKEN_ENV),
    })
}

#[cfg(test)]
mod tests;
