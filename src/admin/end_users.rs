//! One end user of a tenant: an admin's override of the tier's template (any
//! of its limits, or a block), and where the end user stands this period.

use sea_orm::DatabaseConnection;
use serde::{Deserialize, Serialize};

use super::{AdminError, invalid, tenants};
use crate::calendar::Period;
use crate::config::{Config, EndUserLimits};
use crate::directory::tenant::EndUserOverride;
use crate::directory::{TenantRecord, repo};
use crate::money::Nanos;
use crate::pipeline::end_user;
use crate::tenant::end_users::EndUserStatus;

/// `PUT …/end-users/{user}`: what is absent keeps the tier's template.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndUserChange {
    /// Decimal in the billing currency.
    pub budget: Option<String>,
    pub period: Option<String>,
    pub rpm: Option<u32>,
    #[serde(default)]
    pub blocked: bool,
}

/// `GET …/end-users/{user}`.
#[derive(Debug, Serialize)]
pub struct EndUserView {
    pub end_user: String,
    pub blocked: bool,
    pub budget: Option<Nanos>,
    pub period: Period,
    pub rpm: Option<u32>,
    /// The current period's key (`2026-12-02`, `2026-W49`, `2026-12`, `lifetime`).
    pub window: String,
    pub committed: Nanos,
    pub reserved: Nanos,
    pub remaining: Option<Nanos>,
    /// The admin's override, if there is one.
    #[serde(rename = "override")]
    pub set: Option<EndUserOverride>,
}

pub fn check_id(end_user: &str) -> Result<(), AdminError> {
    match end_user::problem(end_user) {
        Some(problem) => Err(invalid("end_user", problem)),
        None => Ok(()),
    }
}

/// Sets (`Some`) or removes (`None`) one end user's override.
pub async fn set(
    db: &DatabaseConnection,
    tenant: &str,
    end_user: &str,
    change: Option<EndUserChange>,
    now_ms: i64,
) -> Result<TenantRecord, AdminError> {
    check_id(end_user)?;
    let record = tenants::get(db, tenant).await?;
    let limits = change.as_ref().map(parse).transpose()?;
    repo::set_end_user(db, &record.id, end_user, limits.as_ref(), now_ms).await?;
    tenants::get(db, tenant).await
}

fn parse(change: &EndUserChange) -> Result<EndUserOverride, AdminError> {
    let budget = change
        .budget
        .as_deref()
        .map(|text| Nanos::parse_decimal(text).map_err(|e| invalid("budget", e.to_string())))
        .transpose()?;
    let period = change
        .period
        .as_deref()
        .map(|text| {
            Period::parse(text).ok_or_else(|| {
                invalid(
                    "period",
                    format!("`{text}` is not day, week, month or lifetime"),
                )
            })
        })
        .transpose()?;
    if change.rpm == Some(0) {
        return Err(invalid("rpm", "must be positive"));
    }
    Ok(EndUserOverride {
        budget,
        period,
        rpm: change.rpm,
        blocked: change.blocked,
    })
}

/// The limits an end user of `tenant` gets: the tier's template with the
/// tenant's override applied (`None`: neither sets any).
pub fn limits_of(config: &Config, tenant: &TenantRecord, end_user: &str) -> Option<EndUserLimits> {
    let template = config
        .tiers
        .get(&tenant.tier)
        .and_then(|tier| tier.end_user.as_ref());
    match tenant.end_users.get(end_user) {
        Some(set) => Some(set.over(template)),
        None => template.cloned(),
    }
}

pub fn view(
    tenant: &TenantRecord,
    end_user: &str,
    limits: &EndUserLimits,
    status: EndUserStatus,
) -> EndUserView {
    let set = tenant.end_users.get(end_user).cloned();
    EndUserView {
        end_user: end_user.to_owned(),
        blocked: set.as_ref().is_some_and(|s| s.blocked),
        budget: limits.budget,
        period: limits.period,
        rpm: limits.rpm,
        window: status.period,
        committed: status.committed,
        reserved: status.reserved,
        remaining: limits
            .budget
            .map(|b| b.saturating_sub(status.committed.saturating_add(status.reserved))),
        set,
    }
}
