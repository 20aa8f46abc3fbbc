//! Prepaid balances: top-ups as the admin API and the CLI take them, and
//! how a balance is shown. The ledger row is written first; the deciding
//! store hears of it after, once by its row, so a retry is always safe.

use sea_orm::DatabaseConnection;
use serde::{Deserialize, Serialize};

use super::{AdminError, invalid, tenants};
use crate::directory::repo;
use crate::ids::{KeyId, TenantId};
use crate::ledger::credits::{self, CreditError, TopUp};
use crate::money::Nanos;
use crate::tenant::book::BalanceStatus;

/// Longest idempotency key, reason and author kept.
const MAX_TEXT: usize = 256;

/// `POST …/credits`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewCredit {
    /// Decimal in the billing currency, above zero.
    pub amount: String,
    /// Unique per tenant: the same key again finds the first top-up.
    pub idempotency_key: String,
    #[serde(default)]
    pub reason: String,
    /// Who adds it (a person, a payment system); default `admin`.
    pub added_by: Option<String>,
}

/// A top-up as shown.
#[derive(Debug, Serialize)]
pub struct CreditView {
    pub id: i64,
    pub tenant_id: String,
    pub key_id: Option<String>,
    pub amount: Nanos,
    pub idempotency_key: String,
    pub added_by: String,
    pub reason: String,
    pub created_at_ms: i64,
}

impl From<entity::credit::Model> for CreditView {
    fn from(row: entity::credit::Model) -> CreditView {
        CreditView {
            id: row.id,
            tenant_id: row.tenant_id,
            key_id: (!row.key_id.is_empty()).then_some(row.key_id),
            amount: Nanos::from_db(row.amount_nanos),
            idempotency_key: row.idempotency_key,
            added_by: row.added_by,
            reason: row.reason,
            created_at_ms: row.created_at_ms,
        }
    }
}

/// A balance and the top-ups it is made of.
#[derive(Debug, Serialize)]
pub struct BalanceView {
    pub tenant_id: String,
    pub key_id: Option<String>,
    /// Whether requests draw on it (the tenant's or key's `credits`).
    pub on_credits: bool,
    #[serde(flatten)]
    pub balance: BalanceStatus,
    pub top_ups: Vec<CreditView>,
}

/// Whose balance a call is about: the tenant's own, or one of its keys'.
#[derive(Debug, Clone)]
pub struct Holder {
    pub tenant: TenantId,
    pub key: Option<KeyId>,
    pub on_credits: bool,
}

pub async fn tenant_holder(db: &DatabaseConnection, id: &str) -> Result<Holder, AdminError> {
    let tenant = tenants::get(db, id).await?;
    Ok(Holder {
        tenant: tenant.id.clone(),
        key: None,
        on_credits: tenant.on_credits,
    })
}

pub async fn key_holder(db: &DatabaseConnection, id: &str) -> Result<Holder, AdminError> {
    let key = repo::key_model(db, &KeyId::new(id))
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no key `{id}`")))?;
    Ok(Holder {
        tenant: TenantId::new(key.tenant_id),
        key: Some(KeyId::new(key.id)),
        on_credits: key.on_credits,
    })
}

fn text(field: &str, value: String, required: bool) -> Result<String, AdminError> {
    if required && value.trim().is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if value.len() > MAX_TEXT || value.chars().any(char::is_control) {
        return Err(invalid(
            field,
            format!("at most {MAX_TEXT} bytes, without control characters"),
        ));
    }
    Ok(value)
}

/// Writes the top-up once; `(row, true)` when this call wrote it.
pub async fn add(
    db: &DatabaseConnection,
    holder: &Holder,
    new: NewCredit,
    now_ms: i64,
) -> Result<(entity::credit::Model, bool), AdminError> {
    let amount = Nanos::parse_decimal(&new.amount).map_err(|e| invalid("amount", e.to_string()))?;
    if amount == Nanos::ZERO {
        return Err(invalid("amount", "must be above zero"));
    }
    let top_up = TopUp {
        tenant: holder.tenant.clone(),
        key: holder.key.clone(),
        amount,
        idempotency_key: text("idempotency_key", new.idempotency_key, true)?,
        added_by: text(
            "added_by",
            new.added_by.unwrap_or_else(|| "admin".to_owned()),
            true,
        )?,
        reason: text("reason", new.reason, false)?,
        at_ms: now_ms,
    };
    credits::add(db, top_up).await.map_err(|error| match error {
        CreditError::Reused(_) => AdminError::Conflict(error.to_string()),
        CreditError::Storage(error) => AdminError::Storage(error),
    })
}

pub async fn view(
    db: &DatabaseConnection,
    holder: &Holder,
    balance: BalanceStatus,
) -> Result<BalanceView, AdminError> {
    let rows = credits::list(db, &holder.tenant, holder.key.as_ref()).await?;
    let rows = rows
        .into_iter()
        .filter(|row| holder.key.is_some() || row.key_id.is_empty());
    Ok(BalanceView {
        tenant_id: holder.tenant.to_string(),
        key_id: holder.key.as_ref().map(ToString::to_string),
        on_credits: holder.on_credits,
        balance,
        top_ups: rows.map(CreditView::from).collect(),
    })
}
