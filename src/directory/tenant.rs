//! A tenant as the gateway sees it: its tier, limits and budget.

use crate::calendar::Period;
use crate::config::{EndUserLimits, StoreErrorPolicy};
use std::collections::BTreeMap;
use std::str::FromStr;

use serde::Serialize;

use crate::ids::{RouteName, TenantId};
use crate::money::Nanos;

/// What happens when a reservation does not fit the remaining budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BudgetMode {
    /// Refuse with 402.
    #[default]
    Strict,
    /// Lower `max_tokens` to what the budget affords, down to a floor.
    Clamp,
    /// Let it pass; alerts still fire.
    Alert,
}

impl BudgetMode {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetMode::Strict => "strict",
            BudgetMode::Clamp => "clamp",
            BudgetMode::Alert => "alert",
        }
    }
}

impl FromStr for BudgetMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "strict" => Ok(BudgetMode::Strict),
            "clamp" => Ok(BudgetMode::Clamp),
            "alert" => Ok(BudgetMode::Alert),
            other => Err(format!("`{other}` is not strict, clamp or alert")),
        }
    }
}

/// What a call over the tenant's requests or tokens per minute meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RateMode {
    /// Refuse with 429 and `Retry-After`.
    #[default]
    Enforce,
    /// Let it pass, count it, and alert once per limit and minute.
    Alert,
}

impl RateMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RateMode::Enforce => "enforce",
            RateMode::Alert => "alert",
        }
    }
}

impl FromStr for RateMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "enforce" => Ok(RateMode::Enforce),
            "alert" => Ok(RateMode::Alert),
            other => Err(format!("`{other}` is not enforce or alert")),
        }
    }
}

/// One end user's limits as an admin set them; `None` keeps the tier's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EndUserOverride {
    pub budget: Option<Nanos>,
    pub period: Option<Period>,
    pub rpm: Option<u32>,
    /// Every request of the end user is refused (403).
    pub blocked: bool,
}

impl EndUserOverride {
    pub fn from_model(model: &entity::end_user_limit::Model) -> EndUserOverride {
        EndUserOverride {
            budget: model.budget_nanos.map(Nanos::from_db),
            // A hand-edited period the gateway does not know is the template's.
            period: model.period.as_deref().and_then(Period::parse),
            rpm: model
                .rpm
                .and_then(|v| u32::try_from(v).ok())
                .filter(|v| *v > 0),
            blocked: model.blocked,
        }
    }

    /// The template with this override applied.
    pub fn over(&self, template: Option<&EndUserLimits>) -> EndUserLimits {
        let base = template.cloned().unwrap_or(EndUserLimits {
            budget: None,
            period: Period::Day,
            rpm: None,
            daily_tokens: None,
            tpm: None,
        });
        EndUserLimits {
            budget: self.budget.or(base.budget),
            period: self.period.unwrap_or(base.period),
            rpm: self.rpm.or(base.rpm),
            daily_tokens: base.daily_tokens,
            tpm: base.tpm,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRecord {
    pub id: TenantId,
    pub name: String,
    pub tier: String,
    pub rpm_limit: Option<u32>,
    /// `None`: no cap.
    pub monthly_budget: Option<Nanos>,
    pub budget_mode: BudgetMode,
    pub default_max_tokens: Option<u32>,
    /// Narrows the tier's routes; `None`: all of them.
    pub allowed_routes: Option<Vec<RouteName>>,
    /// Routes granted beyond the tier's (a pilot of a route the tier lacks).
    pub granted_routes: Vec<RouteName>,
    /// A route this tenant asks for, answered by another: a change rolled
    /// out tenant by tenant.
    pub route_pins: BTreeMap<RouteName, RouteName>,
    /// Monthly budgets of single features (`X-Tollgate-Feature`) inside the tenant's.
    pub feature_budgets: BTreeMap<String, Nanos>,
    /// Admins' overrides of the tier's end-user template, by end user.
    pub end_users: BTreeMap<String, EndUserOverride>,
    /// Overrides of the tier's token limits.
    pub tpm_limit: Option<u64>,
    pub daily_token_limit: Option<u64>,
    pub monthly_token_limit: Option<u64>,
    /// Overrides the tier's policy for an unreachable shared quota store.
    pub on_store_error: Option<StoreErrorPolicy>,
    /// Spends a prepaid balance (top-ups less lifetime spend) instead of a monthly budget.
    pub on_credits: bool,
    /// What `monthly_budget` runs over.
    pub budget_period: Period,
    /// What each feature's budget runs over (a month where absent).
    pub feature_periods: BTreeMap<String, Period>,
    /// Placed after the route's platform prompt: by route name, `*` for every route.
    pub prompts: BTreeMap<String, String>,
    pub prompt_breakpoints: crate::prompts::Breakpoints,
    /// The `[[plans]]` entry it is billed under; `None`: at cost.
    pub plan: Option<String>,
    /// Its calls' bodies are kept for audit.
    pub audit_payloads: bool,
    /// Receives the tenant's alerts (budget thresholds, alert-only rates)
    /// beside `[alerts] webhook_url`.
    pub alert_webhook_url: Option<String>,
    /// Percents of its budget that alert, in place of `[alerts] thresholds_percent`.
    pub alert_thresholds_percent: Option<Vec<u32>>,
    /// Overrides the tier's `rate_mode`.
    pub rate_mode: Option<RateMode>,
    /// Overrides the tier's cap on calls in flight.
    pub max_in_flight: Option<u32>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl TenantRecord {
    pub fn from_model(model: entity::tenant::Model) -> TenantRecord {
        TenantRecord {
            id: TenantId::new(model.id),
            name: model.name,
            tier: model.tier,
            rpm_limit: model.rpm_limit.and_then(|v| u32::try_from(v).ok()),
            monthly_budget: model.monthly_budget_nanos.map(Nanos::from_db),
            // A hand-edited mode the gateway does not know is treated as the safest one.
            budget_mode: model.budget_mode.parse().unwrap_or(BudgetMode::Strict),
            default_max_tokens: model.default_max_tokens.and_then(|v| u32::try_from(v).ok()),
            allowed_routes: model.allowed_routes.as_deref().map(route_list),
            granted_routes: model
                .granted_routes
                .as_deref()
                .map(route_list)
                .unwrap_or_default(),
            // A hand-edited value that is not a JSON object of names pins nothing.
            route_pins: model
                .route_pins
                .as_deref()
                .and_then(|json| serde_json::from_str(json).ok())
                .unwrap_or_default(),
            feature_budgets: BTreeMap::new(),
            end_users: BTreeMap::new(),
            tpm_limit: model.tpm_limit.and_then(|v| u64::try_from(v).ok()),
            daily_token_limit: model.daily_token_limit.and_then(|v| u64::try_from(v).ok()),
            monthly_token_limit: model
                .monthly_token_limit
                .and_then(|v| u64::try_from(v).ok()),
            // An unknown hand-edited value falls back to the tier's policy.
            on_store_error: model.on_store_error.and_then(|p| p.parse().ok()),
            on_credits: model.on_credits,
            // A hand-edited period the gateway does not know is a month.
            budget_period: period_of(model.budget_period.as_deref()),
            feature_periods: BTreeMap::new(),
            // A hand-edited value that is not a JSON object of texts places nothing.
            prompts: model
                .prompts
                .as_deref()
                .and_then(|json| serde_json::from_str(json).ok())
                .unwrap_or_default(),
            // An unknown hand-edited value is the default, the ledger's verdict.
            prompt_breakpoints: model
                .prompt_breakpoints
                .as_deref()
                .and_then(|text| text.parse().ok())
                .unwrap_or_default(),
            plan: model.plan,
            audit_payloads: model.audit_payloads,
            alert_webhook_url: model.alert_webhook_url,
            // A hand-edited list with a part that is not a percent falls back to the global one.
            alert_thresholds_percent: model
                .alert_thresholds_percent
                .as_deref()
                .and_then(parse_percents),
            // An unknown hand-edited value falls back to the tier's mode.
            rate_mode: model.rate_mode.and_then(|m| m.parse().ok()),
            max_in_flight: model.max_in_flight.and_then(|v| u32::try_from(v).ok()),
            created_at_ms: model.created_at_ms,
            updated_at_ms: model.updated_at_ms,
        }
    }

    /// Whether the tenant may ask for `route`: its tier's routes narrowed by
    /// its allow-list, and the routes granted to it whatever its tier.
    pub fn may_use(&self, tier_routes: &[RouteName], route: &RouteName) -> bool {
        let in_tier = tier_routes.contains(route)
            && self
                .allowed_routes
                .as_ref()
                .is_none_or(|allowed| allowed.contains(route));
        in_tier || self.granted_routes.contains(route)
    }

    /// Every route the tenant may ask for, the tier's first, in order.
    pub fn usable_routes(&self, tier_routes: &[RouteName]) -> Vec<RouteName> {
        let mut usable: Vec<RouteName> = Vec::new();
        for route in tier_routes.iter().chain(&self.granted_routes) {
            if self.may_use(tier_routes, route) && !usable.contains(route) {
                usable.push(route.clone());
            }
        }
        usable
    }

    /// The route that answers `route` for this tenant, when it is pinned.
    pub fn pin_of(&self, route: &RouteName) -> Option<&RouteName> {
        self.route_pins.get(route)
    }
}

/// A stored comma-separated list of route names.
pub fn route_list(text: &str) -> Vec<RouteName> {
    text.split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(RouteName::new)
        .collect()
}

/// A stored list of percents (`80,100`; empty: none).
pub fn parse_percents(text: &str) -> Option<Vec<u32>> {
    text.split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| part.parse().ok())
        .collect()
}

/// A stored period; `None` (rows written before periods) or unknown text is a month.
pub fn period_of(text: Option<&str>) -> Period {
    text.and_then(Period::parse).unwrap_or(Period::Month)
}
