//! Issuing, listing and revoking API keys.

use sea_orm::{DatabaseConnection, Set};
use serde::Serialize;

use super::{AdminError, invalid, tenants};
use crate::auth;
use crate::calendar::Period;
use crate::config::Secret;
use crate::directory::tenant::period_of;
use crate::directory::{KeyRecord, repo};
use crate::ids::{KeyId, TenantId};
use crate::money::Nanos;

/// A key as listed (never its secret).
#[derive(Debug, Serialize)]
pub struct KeyView {
    pub id: String,
    pub tenant_id: String,
    pub name: Option<String>,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
    pub monthly_budget: Option<Nanos>,
    pub expires_at_ms: Option<i64>,
    pub credits: bool,
    pub budget_period: Period,
    pub max_in_flight: Option<u32>,
}

impl From<entity::api_key::Model> for KeyView {
    fn from(k: entity::api_key::Model) -> KeyView {
        KeyView {
            id: k.id,
            tenant_id: k.tenant_id,
            name: k.name,
            created_at_ms: k.created_at_ms,
            revoked_at_ms: k.revoked_at_ms,
            monthly_budget: k.monthly_budget_nanos.map(Nanos::from_db),
            expires_at_ms: k.expires_at_ms,
            credits: k.on_credits,
            budget_period: period_of(k.budget_period.as_deref()),
            max_in_flight: k.max_in_flight.and_then(|v| u32::try_from(v).ok()),
        }
    }
}

/// The one time a key's secret is shown.
#[derive(Debug, Serialize)]
pub struct IssuedKeyView {
    pub id: String,
    pub tenant_id: String,
    pub key: String,
}

/// What a new key may carry besides its tenant.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    pub name: Option<String>,
    /// The key's own monthly budget inside its tenant's (decimal in the billing currency).
    pub monthly_budget: Option<String>,
    /// When the key stops working: an RFC 3339 instant or Unix seconds.
    pub expires_at: Option<serde_json::Value>,
    /// The key spends its own prepaid balance (`POST …/keys/{id}/credits`) instead of a monthly budget.
    #[serde(default)]
    pub credits: bool,
    /// What `monthly_budget` runs over: `day`, `week`, `month` (the default) or `lifetime`.
    pub budget_period: Option<String>,
    /// Calls of this key in flight at once; none: only the tenant's cap applies.
    pub max_in_flight: Option<u32>,
}

/// A change to a key (`PATCH`): a field left out stays as it is, `null` clears it.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyChange {
    /// A decimal budget, or `null`: only the tenant's applies.
    #[serde(default, deserialize_with = "tenants::double_option")]
    pub monthly_budget: Option<Option<String>>,
    /// An RFC 3339 instant or Unix seconds, or `null`: the key never expires.
    #[serde(default, deserialize_with = "tenants::double_option")]
    pub expires_at: Option<Option<serde_json::Value>>,
    pub credits: Option<bool>,
    pub budget_period: Option<String>,
    /// A cap on the key's calls in flight, or `null`: only the tenant's applies.
    #[serde(default, deserialize_with = "tenants::double_option")]
    pub max_in_flight: Option<Option<u32>>,
}

fn parse_budget(text: Option<&str>) -> Result<Option<Nanos>, AdminError> {
    text.map(|t| Nanos::parse_decimal(t).map_err(|e| invalid("monthly_budget", e.to_string())))
        .transpose()
}

/// `expires_at` as ms since the epoch.
fn parse_expiry(value: Option<&serde_json::Value>) -> Result<Option<i64>, AdminError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let ms = match value {
        serde_json::Value::Number(n) => n.as_u64().and_then(|s| s.checked_mul(1000)),
        serde_json::Value::String(text) => crate::period::parse_instant(text),
        _ => None,
    };
    let ms = ms.and_then(|ms| i64::try_from(ms).ok()).ok_or_else(|| {
        invalid(
            "expires_at",
            "must be an RFC 3339 instant (`2026-12-31T23:59:59Z`) or Unix seconds",
        )
    })?;
    Ok(Some(ms))
}

pub async fn issue(
    db: &DatabaseConnection,
    pepper: &Secret,
    tenant: &str,
    new: NewKey,
    now_ms: i64,
) -> Result<(KeyRecord, IssuedKeyView), AdminError> {
    let tenant = tenants::get(db, tenant).await?;
    let budget = parse_budget(new.monthly_budget.as_deref())?;
    let expires_at_ms = parse_expiry(new.expires_at.as_ref())?;
    let budget_period = tenants::parse_period("budget_period", new.budget_period.as_deref())?;
    if new.credits && budget.is_some() {
        return Err(credits_and_budget());
    }
    let max_in_flight = new
        .max_in_flight
        .map(|v| tenants::positive("max_in_flight", v))
        .transpose()?;
    let issued = auth::issue_key(pepper);
    let model = entity::api_key::ActiveModel {
        id: Set(issued.key_id.to_string()),
        tenant_id: Set(tenant.id.to_string()),
        name: Set(new.name),
        secret_hash: Set(issued.secret_hash.clone()),
        created_at_ms: Set(now_ms),
        revoked_at_ms: Set(None),
        monthly_budget_nanos: Set(budget.map(Nanos::to_db)),
        expires_at_ms: Set(expires_at_ms),
        on_credits: Set(new.credits),
        budget_period: Set(Some(budget_period.as_str().to_owned())),
        max_in_flight: Set(max_in_flight),
    };
    repo::insert_key(db, model).await?;
    let record = KeyRecord {
        id: issued.key_id.clone(),
        tenant: tenant.id.clone(),
        secret_hash: issued.secret_hash,
        monthly_budget: budget,
        expires_at_ms,
        on_credits: new.credits,
        budget_period,
        max_in_flight: new.max_in_flight,
    };
    let view = IssuedKeyView {
        id: issued.key_id.to_string(),
        tenant_id: tenant.id.to_string(),
        key: issued.token.expose().to_owned(),
    };
    Ok((record, view))
}

/// Changes a key's budget or expiry; replicas pick it up with its tenant.
pub async fn update(
    db: &DatabaseConnection,
    key_id: &str,
    change: KeyChange,
    now_ms: i64,
) -> Result<KeyView, AdminError> {
    let change = repo::KeyChange {
        monthly_budget: change
            .monthly_budget
            .map(|b| parse_budget(b.as_deref()))
            .transpose()?,
        expires_at_ms: change
            .expires_at
            .map(|e| parse_expiry(e.as_ref()))
            .transpose()?,
        on_credits: change.credits,
        budget_period: change
            .budget_period
            .map(|p| tenants::parse_period("budget_period", Some(&p)))
            .transpose()?,
        max_in_flight: change
            .max_in_flight
            .map(|cap| {
                cap.map(|v| tenants::positive("max_in_flight", v))
                    .transpose()
            })
            .transpose()?,
    };
    let id = KeyId::new(key_id);
    let current = repo::key_model(db, &id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no key `{key_id}`")))?;
    let budget = change
        .monthly_budget
        .unwrap_or(current.monthly_budget_nanos.map(Nanos::from_db));
    if change.on_credits.unwrap_or(current.on_credits) && budget.is_some() {
        return Err(credits_and_budget());
    }
    let row = repo::update_key(db, &id, change)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no key `{key_id}`")))?;
    repo::touch_tenant(db, &TenantId::new(row.tenant_id.as_str()), now_ms).await?;
    Ok(KeyView::from(row))
}

/// A balance replaces a periodic budget; both at once would leave it unclear which one refused.
fn credits_and_budget() -> AdminError {
    invalid(
        "credits",
        "a key on credits has no monthly_budget: clear one of them",
    )
}

pub async fn list(db: &DatabaseConnection, tenant: &str) -> Result<Vec<KeyView>, AdminError> {
    let tenant = tenants::get(db, tenant).await?;
    let rows = repo::tenant_keys(db, &TenantId::new(tenant.id.as_str())).await?;
    Ok(rows.into_iter().map(KeyView::from).collect())
}

pub async fn revoke(
    db: &DatabaseConnection,
    key_id: &str,
    now_ms: i64,
) -> Result<KeyId, AdminError> {
    let id = KeyId::new(key_id);
    if repo::revoke_key(db, &id, now_ms).await? {
        Ok(id)
    } else {
        Err(AdminError::NotFound(format!("no key `{key_id}`")))
    }
}
