//! `[tiers.<name>]`: the routes and limits a tenant's tier grants, with its
//! end users' and sessions' own limits.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::errors::Problems;
use super::routes::Route;
use crate::ids::RouteName;
use crate::money::Nanos;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTier {
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
    /// Calls of one tenant in flight at once, across replicas; default no cap.
    max_in_flight: Option<u32>,
    /// What the tier's tenants get while the shared quota store is unreachable.
    #[serde(default)]
    on_store_error: StoreErrorPolicy,
    /// `enforce` (429 over `rpm` or `tpm`, the default) or `alert` (the call
    /// passes, is counted, and an alert goes out once per limit and minute).
    #[serde(default)]
    rate_mode: crate::directory::RateMode,
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
    /// Calls of one tenant in flight at once (`None`: no cap).
    pub max_in_flight: Option<u32>,
    pub on_store_error: StoreErrorPolicy,
    pub rate_mode: crate::directory::RateMode,
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
/// `[tiers]`: each tier checked on its own.
pub(super) fn validate_tiers(
    raw: &BTreeMap<String, RawTier>,
    routes: &HashMap<RouteName, Route>,
    problems: &mut Problems,
) -> HashMap<String, Tier> {
    raw.iter()
        .map(|(name, t)| (name.clone(), t.validate(name, routes, problems)))
        .collect()
}

impl RawTier {
    fn validate(
        &self,
        name: &str,
        routes: &HashMap<RouteName, Route>,
        problems: &mut Problems,
    ) -> Tier {
        self.check_routes(name, routes, problems);
        for (field, value) in [
            ("rpm", self.rpm),
            ("default_max_tokens", self.default_max_tokens),
            ("max_choices", self.max_choices),
            ("max_in_flight", self.max_in_flight.unwrap_or(1)),
        ] {
            if value == 0 {
                problems.add(format!("tiers.{name}.{field}"), "must be positive");
            }
        }
        Tier {
            name: name.to_owned(),
            end_user_sources: self
                .end_user_sources
                .clone()
                .unwrap_or_else(|| vec![EndUserSource::Header, EndUserSource::Body]),
            end_user_required: self.end_user_required,
            end_user: self
                .end_user
                .as_ref()
                .map(|e| validate_end_user(name, e, problems)),
            session: self
                .session
                .as_ref()
                .map(|raw| validate_session(name, raw, problems)),
            routes: self
                .routes
                .iter()
                .map(|r| RouteName::new(r.as_str()))
                .collect(),
            rpm: self.rpm,
            tpm: self.tpm.filter(|v| *v > 0),
            daily_tokens: self.daily_tokens,
            monthly_tokens: self.monthly_tokens,
            burst: self.burst.unwrap_or(self.rpm).max(1),
            default_max_tokens: self.default_max_tokens,
            max_choices: self.max_choices,
            max_in_flight: self.max_in_flight,
            on_store_error: self.on_store_error,
            rate_mode: self.rate_mode,
        }
    }

    /// Every route the tier names exists, and a route with a semantic cache
    /// comes with the route its questions are embedded through: that call
    /// is the tenant's own.
    fn check_routes(
        &self,
        name: &str,
        routes: &HashMap<RouteName, Route>,
        problems: &mut Problems,
    ) {
        for (i, route) in self.routes.iter().enumerate() {
            let entry = || format!("tiers.{name}.routes[{i}]");
            let Some(configured) = routes.get(&RouteName::new(route.as_str())) else {
                problems.add(entry(), format!("unknown route `{route}`"));
                continue;
            };
            if let Some(semantic) = &configured.semantic_cache
                && !self.routes.contains(&semantic.embedding_route)
            {
                problems.add(
                    entry(),
                    format!(
                        "`{route}` embeds questions through `{}`, which this tier must list too",
                        semantic.embedding_route
                    ),
                );
            }
        }
    }
}

fn validate_session(tier: &str, raw: &RawSession, problems: &mut Problems) -> SessionLimits {
    let budget = Nanos::parse_decimal(&raw.budget).unwrap_or_else(|e| {
        problems.add(format!("tiers.{tier}.session.budget"), e.to_string());
        Nanos::ZERO
    });
    if raw.idle_minutes == 0 {
        problems.add(
            format!("tiers.{tier}.session.idle_minutes"),
            "must be positive",
        );
    }
    SessionLimits {
        budget,
        idle_ms: raw.idle_minutes.saturating_mul(60_000),
    }
}

fn validate_end_user(tier: &str, raw: &RawEndUser, problems: &mut Problems) -> EndUserLimits {
    let budget = raw.budget.as_deref().map(|text| {
        Nanos::parse_decimal(text).unwrap_or_else(|e| {
            problems.add(format!("tiers.{tier}.end_user.budget"), e.to_string());
            Nanos::ZERO
        })
    });
    if raw.rpm == Some(0) {
        problems.add(format!("tiers.{tier}.end_user.rpm"), "must be positive");
    }
    EndUserLimits {
        budget,
        period: raw.period,
        rpm: raw.rpm,
        daily_tokens: raw.daily_tokens,
        tpm: raw.tpm.filter(|t| *t > 0),
    }
}
