//! Creating, reading and changing tenants.

use sea_orm::{DatabaseConnection, Set};
use serde::{Deserialize, Deserializer, Serialize};

use super::{AdminError, invalid, route_access};
use crate::calendar::Period;
use crate::config::{Config, StoreErrorPolicy};
use crate::directory::{BudgetMode, RateMode, TenantRecord, repo};
use crate::ids::{FEATURE_RULE, TenantId, is_valid_feature};
use crate::money::Nanos;
use crate::prompts::{Breakpoints, EVERY_ROUTE, MAX_PROMPT_BYTES};
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    pub id: String,
    pub name: Option<String>,
    pub tier: String,
    pub rpm_limit: Option<u32>,
    /// Decimal in the billing currency; absent: no cap.
    pub monthly_budget: Option<String>,
    pub budget_mode: Option<String>,
    pub default_max_tokens: Option<u32>,
    pub allowed_routes: Option<Vec<String>>,
    /// Routes beyond the tier's (a pilot of a route the tier lacks).
    pub granted_routes: Option<Vec<String>>,
    /// A route asked for, answered by another for this tenant alone.
    pub route_pins: Option<BTreeMap<String, String>>,
    pub tpm_limit: Option<u64>,
    pub daily_token_limit: Option<u64>,
    pub monthly_token_limit: Option<u64>,
    /// `fail_closed` or `local`; absent: the tier's.
    pub on_store_error: Option<String>,
    /// Spend a prepaid balance (`POST …/credits`) instead of a monthly budget.
    #[serde(default)]
    pub credits: bool,
    /// What `monthly_budget` runs over: `day`, `week`, `month` (the default) or `lifetime`.
    pub budget_period: Option<String>,
    /// Placed after the route's platform prompt, by route (`*`: every route).
    pub prompts: Option<BTreeMap<String, String>>,
    /// `auto` (the default: as the ledger's review says), `on` or `off`.
    pub prompt_breakpoints: Option<String>,
    /// A `[[plans]]` name; absent or `cost`: billed at cost.
    pub plan: Option<String>,
    /// Keep its calls' request and response bodies (keys redacted) for audit.
    #[serde(default)]
    pub audit_payloads: bool,
    /// An `http`/`https` URL that receives the tenant's alerts as JSON POSTs.
    #[serde(default)]
    pub alert_webhook_url: Option<String>,
    /// Percents of its budget that alert (each once per period); absent:
    /// `[alerts] thresholds_percent`.
    #[serde(default)]
    pub alert_thresholds_percent: Option<Vec<u32>>,
    /// `enforce` or `alert`; absent: the tier's.
    #[serde(default)]
    pub rate_mode: Option<String>,
    /// Calls in flight at once; absent: the tier's `max_in_flight`.
    pub max_in_flight: Option<u32>,
}

/// A partial update; `null` clears an optional limit.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantPatch {
    pub name: Option<String>,
    pub tier: Option<String>,
    #[serde(default, deserialize_with = "double_option")]
    pub rpm_limit: Option<Option<u32>>,
    #[serde(default, deserialize_with = "double_option")]
    pub monthly_budget: Option<Option<String>>,
    pub budget_mode: Option<String>,
    #[serde(default, deserialize_with = "double_option")]
    pub default_max_tokens: Option<Option<u32>>,
    #[serde(default, deserialize_with = "double_option")]
    pub allowed_routes: Option<Option<Vec<String>>>,
    /// Replaces the grants; `null` or `[]` removes them.
    #[serde(default, deserialize_with = "double_option")]
    pub granted_routes: Option<Option<Vec<String>>>,
    /// Replaces the pins; `null` or `{}` removes them.
    #[serde(default, deserialize_with = "double_option")]
    pub route_pins: Option<Option<BTreeMap<String, String>>>,
    #[serde(default, deserialize_with = "double_option")]
    pub tpm_limit: Option<Option<u64>>,
    #[serde(default, deserialize_with = "double_option")]
    pub daily_token_limit: Option<Option<u64>>,
    #[serde(default, deserialize_with = "double_option")]
    pub monthly_token_limit: Option<Option<u64>>,
    #[serde(default, deserialize_with = "double_option")]
    pub on_store_error: Option<Option<String>>,
    pub credits: Option<bool>,
    pub budget_period: Option<String>,
    /// Replaces every prompt of the tenant; `null` or `{}` removes them.
    #[serde(default, deserialize_with = "double_option")]
    pub prompts: Option<Option<BTreeMap<String, String>>>,
    pub prompt_breakpoints: Option<String>,
    /// A `[[plans]]` name; `cost` or `null`: billed at cost from now on.
    #[serde(default, deserialize_with = "double_option")]
    pub plan: Option<Option<String>>,
    pub audit_payloads: Option<bool>,
    /// `null` removes the tenant's own alert target.
    #[serde(default, deserialize_with = "double_option")]
    pub alert_webhook_url: Option<Option<String>>,
    /// `null`: `[alerts] thresholds_percent` again.
    #[serde(default, deserialize_with = "double_option")]
    pub alert_thresholds_percent: Option<Option<Vec<u32>>>,
    /// `null`: the tier's mode.
    #[serde(default, deserialize_with = "double_option")]
    pub rate_mode: Option<Option<String>>,
    /// A cap on calls in flight, or `null`: the tier's.
    #[serde(default, deserialize_with = "double_option")]
    pub max_in_flight: Option<Option<u32>>,
}

#[expect(
    clippy::option_option,
    reason = "absent (keep) differs from null (clear) in a PATCH"
)]
pub(super) fn double_option<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(Some)
}

/// A tenant as the admin API shows it.
#[derive(Debug, Serialize)]
pub struct TenantView {
    pub id: String,
    pub name: String,
    pub tier: String,
    pub rpm_limit: Option<u32>,
    pub monthly_budget: Option<Nanos>,
    pub budget_mode: BudgetMode,
    pub default_max_tokens: Option<u32>,
    pub allowed_routes: Option<Vec<String>>,
    pub granted_routes: Vec<String>,
    pub route_pins: BTreeMap<String, String>,
    pub feature_budgets: std::collections::BTreeMap<String, Nanos>,
    pub tpm_limit: Option<u64>,
    pub daily_token_limit: Option<u64>,
    pub monthly_token_limit: Option<u64>,
    pub on_store_error: Option<StoreErrorPolicy>,
    pub credits: bool,
    pub budget_period: Period,
    pub feature_periods: std::collections::BTreeMap<String, Period>,
    pub prompts: BTreeMap<String, String>,
    pub prompt_breakpoints: Breakpoints,
    /// `cost` when the tenant is on no plan.
    pub plan: String,
    pub audit_payloads: bool,
    pub alert_webhook_url: Option<String>,
    /// The tenant's own thresholds (`None`: `[alerts] thresholds_percent`).
    pub alert_thresholds_percent: Option<Vec<u32>>,
    /// The tenant's override of its tier's rate mode (`None`: the tier's).
    pub rate_mode: Option<RateMode>,
    /// The tenant's own cap on calls in flight (`None`: the tier's).
    pub max_in_flight: Option<u32>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl From<&TenantRecord> for TenantView {
    fn from(t: &TenantRecord) -> TenantView {
        TenantView {
            id: t.id.to_string(),
            name: t.name.clone(),
            tier: t.tier.clone(),
            rpm_limit: t.rpm_limit,
            monthly_budget: t.monthly_budget,
            budget_mode: t.budget_mode,
            default_max_tokens: t.default_max_tokens,
            allowed_routes: t
                .allowed_routes
                .as_ref()
                .map(|routes| routes.iter().map(ToString::to_string).collect()),
            granted_routes: t.granted_routes.iter().map(ToString::to_string).collect(),
            route_pins: t
                .route_pins
                .iter()
                .map(|(from, to)| (from.to_string(), to.to_string()))
                .collect(),
            feature_budgets: t.feature_budgets.clone(),
            tpm_limit: t.tpm_limit,
            daily_token_limit: t.daily_token_limit,
            monthly_token_limit: t.monthly_token_limit,
            on_store_error: t.on_store_error,
            credits: t.on_credits,
            budget_period: t.budget_period,
            feature_periods: t.feature_periods.clone(),
            prompts: t.prompts.clone(),
            prompt_breakpoints: t.prompt_breakpoints,
            plan: t
                .plan
                .clone()
                .unwrap_or_else(|| crate::config::COST.to_owned()),
            audit_payloads: t.audit_payloads,
            alert_webhook_url: t.alert_webhook_url.clone(),
            alert_thresholds_percent: t.alert_thresholds_percent.clone(),
            rate_mode: t.rate_mode,
            max_in_flight: t.max_in_flight,
            created_at_ms: t.created_at_ms,
            updated_at_ms: t.updated_at_ms,
        }
    }
}

fn check_tier(config: &Config, tier: &str) -> Result<(), AdminError> {
    if config.tiers.contains_key(tier) {
        Ok(())
    } else {
        let mut known: Vec<&str> = config.tiers.keys().map(String::as_str).collect();
        known.sort_unstable();
        Err(invalid(
            "tier",
            format!("unknown tier `{tier}` (configured: {})", known.join(", ")),
        ))
    }
}

fn parse_budget(text: &str) -> Result<i64, AdminError> {
    Nanos::parse_decimal(text)
        .map(Nanos::to_db)
        .map_err(|e| invalid("monthly_budget", e.to_string()))
}

fn parse_store_policy(text: &str) -> Result<String, AdminError> {
    text.parse::<StoreErrorPolicy>()
        .map(|p| p.as_str().to_owned())
        .map_err(|e| invalid("on_store_error", e))
}

fn parse_mode(text: &str) -> Result<BudgetMode, AdminError> {
    text.parse().map_err(|e: String| invalid("budget_mode", e))
}

/// A tenant's alert target, thresholds and rate mode, as stored.
type StoredAlerts = (Option<String>, Option<String>, Option<String>);

/// A new tenant's alert target, thresholds and rate mode, as stored.
fn alerts_of_new(new: &NewTenant) -> Result<StoredAlerts, AdminError> {
    Ok((
        new.alert_webhook_url
            .as_deref()
            .map(webhook_url)
            .transpose()?,
        new.alert_thresholds_percent
            .as_deref()
            .map(thresholds)
            .transpose()?,
        new.rate_mode.as_deref().map(parse_rate_mode).transpose()?,
    ))
}

fn parse_rate_mode(text: &str) -> Result<String, AdminError> {
    text.parse::<RateMode>()
        .map(|m| m.as_str().to_owned())
        .map_err(|e| invalid("rate_mode", e))
}

fn webhook_url(text: &str) -> Result<String, AdminError> {
    match crate::config::webhook_url_problem(text) {
        None => Ok(text.to_owned()),
        Some(problem) => Err(invalid("alert_webhook_url", problem)),
    }
}

/// The most thresholds a tenant may have, and the highest percent (alert
/// mode lets spend pass the budget, so above 100 means something).
const MAX_THRESHOLDS: usize = 10;
const MAX_THRESHOLD_PERCENT: u32 = 1000;

/// The stored form of a tenant's thresholds: `80,100` (empty: none).
fn thresholds(percents: &[u32]) -> Result<String, AdminError> {
    let field = "alert_thresholds_percent";
    if percents.len() > MAX_THRESHOLDS {
        return Err(invalid(
            field,
            format!("at most {MAX_THRESHOLDS} thresholds"),
        ));
    }
    if percents
        .iter()
        .any(|p| *p == 0 || *p > MAX_THRESHOLD_PERCENT)
    {
        return Err(invalid(
            field,
            format!("each must be a percent from 1 to {MAX_THRESHOLD_PERCENT}"),
        ));
    }
    Ok(percents
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(","))
}

pub(super) fn positive(field: &str, value: u32) -> Result<i32, AdminError> {
    i32::try_from(value)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| invalid(field, "must be a positive integer"))
}

fn token_limit(value: u64) -> Result<i64, AdminError> {
    i64::try_from(value)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| invalid("token limit", "must be a positive integer"))
}

/// The stored form of a tenant's prompts: each keyed by a route that exists
/// (or `*`), not empty, not too long; `None` for none.
fn prompts_json(
    config: &Config,
    prompts: Option<&BTreeMap<String, String>>,
) -> Result<Option<String>, AdminError> {
    let Some(prompts) = prompts.filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    for (route, text) in prompts {
        let field = || format!("prompts.{route}");
        if route != EVERY_ROUTE && config.route(route).is_none() {
            return Err(invalid(
                &field(),
                format!("unknown route `{route}` (use a route's name, or `*` for every route)"),
            ));
        }
        if text.trim().is_empty() {
            return Err(invalid(&field(), "must not be empty"));
        }
        if text.len() > MAX_PROMPT_BYTES {
            return Err(invalid(
                &field(),
                format!("must be at most {MAX_PROMPT_BYTES} bytes"),
            ));
        }
    }
    // A map of strings always serializes.
    Ok(serde_json::to_string(prompts).ok())
}

/// A configured plan's name; `cost` (the providers' prices) is stored as none.
fn plan_name(config: &Config, name: Option<&str>) -> Result<Option<String>, AdminError> {
    match name {
        None | Some(crate::config::COST) => Ok(None),
        Some(name) if config.plans.contains_key(name) => Ok(Some(name.to_owned())),
        Some(name) => {
            let known: Vec<&str> = config.plans.keys().map(String::as_str).collect();
            Err(invalid(
                "plan",
                format!(
                    "unknown plan `{name}` (configured: {}; `cost` for none)",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            ))
        }
    }
}

fn parse_breakpoints(text: &str) -> Result<String, AdminError> {
    text.parse::<Breakpoints>()
        .map(|b| b.as_str().to_owned())
        .map_err(|e| invalid("prompt_breakpoints", e))
}

pub async fn create(
    db: &DatabaseConnection,
    config: &Config,
    new: NewTenant,
    now_ms: i64,
) -> Result<TenantRecord, AdminError> {
    let id = TenantId::parse(&new.id)
        .ok_or_else(|| invalid("id", "use 1-64 lowercase letters, digits, `-` or `_`"))?;
    check_tier(config, &new.tier)?;
    if repo::tenant_model(db, &id).await?.is_some() {
        return Err(AdminError::Conflict(format!(
            "tenant `{id}` already exists"
        )));
    }
    if new.credits && new.monthly_budget.is_some() {
        return Err(credits_and_budget());
    }
    let (allowed, granted, pins) = route_access::of_new(config, &new)?;
    let alerts = alerts_of_new(&new)?;
    let model = entity::tenant::ActiveModel {
        id: Set(id.to_string()),
        name: Set(new.name.unwrap_or_else(|| id.to_string())),
        tier: Set(new.tier),
        rpm_limit: Set(new
            .rpm_limit
            .map(|v| positive("rpm_limit", v))
            .transpose()?),
        monthly_budget_nanos: Set(new
            .monthly_budget
            .as_deref()
            .map(parse_budget)
            .transpose()?),
        budget_mode: Set(new
            .budget_mode
            .as_deref()
            .map(parse_mode)
            .transpose()?
            .unwrap_or_default()
            .as_str()
            .to_owned()),
        default_max_tokens: Set(new
            .default_max_tokens
            .map(|v| positive("default_max_tokens", v))
            .transpose()?),
        allowed_routes: Set(allowed),
        granted_routes: Set(granted),
        route_pins: Set(pins),
        created_at_ms: Set(now_ms),
        updated_at_ms: Set(now_ms),
        tpm_limit: Set(new.tpm_limit.map(token_limit).transpose()?),
        daily_token_limit: Set(new.daily_token_limit.map(token_limit).transpose()?),
        monthly_token_limit: Set(new.monthly_token_limit.map(token_limit).transpose()?),
        on_store_error: Set(new
            .on_store_error
            .as_deref()
            .map(parse_store_policy)
            .transpose()?),
        on_credits: Set(new.credits),
        budget_period: Set(Some(
            parse_period("budget_period", new.budget_period.as_deref())?
                .as_str()
                .to_owned(),
        )),
        prompts: Set(prompts_json(config, new.prompts.as_ref())?),
        plan: Set(plan_name(config, new.plan.as_deref())?),
        audit_payloads: Set(new.audit_payloads),
        max_in_flight: Set(new
            .max_in_flight
            .map(|v| positive("max_in_flight", v))
            .transpose()?),
        prompt_breakpoints: Set(new
            .prompt_breakpoints
            .as_deref()
            .map(parse_breakpoints)
            .transpose()?),
        alert_webhook_url: Set(alerts.0),
        alert_thresholds_percent: Set(alerts.1),
        rate_mode: Set(alerts.2),
    };
    Ok(repo::insert_tenant(db, model).await?)
}

/// `day`, `week`, `month` or `lifetime`; absent is a month.
pub fn parse_period(field: &str, text: Option<&str>) -> Result<Period, AdminError> {
    let Some(text) = text else {
        return Ok(Period::Month);
    };
    Period::parse(text).ok_or_else(|| {
        invalid(
            field,
            format!("`{text}` is not day, week, month or lifetime"),
        )
    })
}

/// A balance replaces a periodic budget; both at once would leave it unclear which one refused.
fn credits_and_budget() -> AdminError {
    invalid(
        "credits",
        "a tenant on credits has no monthly_budget: clear one of them",
    )
}

pub async fn get(db: &DatabaseConnection, id: &str) -> Result<TenantRecord, AdminError> {
    let id = TenantId::new(id);
    repo::get_tenant(db, &id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no tenant `{id}`")))
}

pub async fn list(db: &DatabaseConnection) -> Result<Vec<TenantRecord>, AdminError> {
    Ok(repo::all_tenants(db).await?)
}

pub async fn update(
    db: &DatabaseConnection,
    config: &Config,
    id: &str,
    patch: TenantPatch,
    now_ms: i64,
) -> Result<TenantRecord, AdminError> {
    let tenant_id = TenantId::new(id);
    let current = repo::tenant_model(db, &tenant_id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no tenant `{id}`")))?;
    // Updates must strictly advance, or a replica polling by time could miss them.
    let updated_at = now_ms.max(current.updated_at_ms + 1);
    let mut model: entity::tenant::ActiveModel = current.into();
    route_access::apply(config, &mut model, &patch)?;
    patch_alerts(&mut model, &patch)?;
    if let Some(name) = patch.name {
        model.name = Set(name);
    }
    if let Some(tier) = patch.tier {
        check_tier(config, &tier)?;
        model.tier = Set(tier);
    }
    if let Some(rpm) = patch.rpm_limit {
        model.rpm_limit = Set(rpm.map(|v| positive("rpm_limit", v)).transpose()?);
    }
    if let Some(budget) = patch.monthly_budget {
        model.monthly_budget_nanos = Set(budget.as_deref().map(parse_budget).transpose()?);
    }
    if let Some(mode) = patch.budget_mode {
        model.budget_mode = Set(parse_mode(&mode)?.as_str().to_owned());
    }
    if let Some(max) = patch.default_max_tokens {
        model.default_max_tokens =
            Set(max.map(|v| positive("default_max_tokens", v)).transpose()?);
    }
    if let Some(limit) = patch.tpm_limit {
        model.tpm_limit = Set(limit.map(token_limit).transpose()?);
    }
    if let Some(limit) = patch.daily_token_limit {
        model.daily_token_limit = Set(limit.map(token_limit).transpose()?);
    }
    if let Some(limit) = patch.monthly_token_limit {
        model.monthly_token_limit = Set(limit.map(token_limit).transpose()?);
    }
    if let Some(policy) = patch.on_store_error {
        model.on_store_error = Set(policy.as_deref().map(parse_store_policy).transpose()?);
    }
    if let Some(credits) = patch.credits {
        model.on_credits = Set(credits);
    }
    if let Some(period) = patch.budget_period {
        let period = parse_period("budget_period", Some(&period))?;
        model.budget_period = Set(Some(period.as_str().to_owned()));
    }
    if let Some(prompts) = patch.prompts {
        model.prompts = Set(prompts_json(config, prompts.as_ref())?);
    }
    if let Some(plan) = patch.plan {
        model.plan = Set(plan_name(config, plan.as_deref())?);
    }
    if let Some(audit) = patch.audit_payloads {
        model.audit_payloads = Set(audit);
    }
    if let Some(cap) = patch.max_in_flight {
        model.max_in_flight = Set(cap.map(|v| positive("max_in_flight", v)).transpose()?);
    }
    if let Some(breakpoints) = patch.prompt_breakpoints {
        model.prompt_breakpoints = Set(Some(parse_breakpoints(&breakpoints)?));
    }
    if *model.on_credits.as_ref() && model.monthly_budget_nanos.as_ref().is_some() {
        return Err(credits_and_budget());
    }
    model.updated_at_ms = Set(updated_at);
    Ok(repo::update_tenant(db, model).await?)
}

/// The tenant's alert target, thresholds and rate mode: absent keeps, `null` clears.
fn patch_alerts(
    model: &mut entity::tenant::ActiveModel,
    patch: &TenantPatch,
) -> Result<(), AdminError> {
    if let Some(url) = &patch.alert_webhook_url {
        model.alert_webhook_url = Set(url.as_deref().map(webhook_url).transpose()?);
    }
    if let Some(percents) = &patch.alert_thresholds_percent {
        model.alert_thresholds_percent = Set(percents.as_deref().map(thresholds).transpose()?);
    }
    if let Some(mode) = &patch.rate_mode {
        model.rate_mode = Set(mode.as_deref().map(parse_rate_mode).transpose()?);
    }
    Ok(())
}

/// Sets (`Some`) or removes (`None`) the monthly budget of one feature of a tenant.
pub async fn set_feature_budget(
    db: &DatabaseConnection,
    id: &str,
    feature: &str,
    budget: Option<(&str, Option<&str>)>,
    now_ms: i64,
) -> Result<TenantRecord, AdminError> {
    let tenant = get(db, id).await?;
    if !is_valid_feature(feature) {
        return Err(invalid("feature", FEATURE_RULE));
    }
    let budget = budget
        .map(|(text, period)| {
            let amount =
                Nanos::parse_decimal(text).map_err(|e| invalid("monthly_budget", e.to_string()))?;
            Ok::<_, AdminError>((amount, parse_period("period", period)?))
        })
        .transpose()?;
    repo::set_feature_budget(db, &tenant.id, feature, budget, now_ms).await?;
    get(db, id).await
}
