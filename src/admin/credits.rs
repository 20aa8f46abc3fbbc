//! Prepaid balances: grants (top-ups) as the admin API and the CLI take
//! them, and how a balance is shown, grant by grant. The ledger row is
//! written first; the deciding store hears of it after, once by its row, so
//! a retry is always safe.

use sea_orm::DatabaseConnection;
use serde::{Deserialize, Serialize};

use super::{AdminError, invalid, tenants};
use crate::directory::repo;
use crate::ids::{KeyId, TenantId};
use crate::ledger::credits::{self, CreditError, TopUp};
use crate::money::Nanos;
use crate::tenant::book::{Balance, BalanceStatus};
use crate::tenant::grants::{GrantKind, GrantState};

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
    /// `paid` (default) or `promotional` (drawn first at one priority).
    pub kind: Option<String>,
    /// Lower is drawn first; default 0.
    pub priority: Option<i32>,
    /// Unix ms it may be drawn from; default: now.
    pub starts_at_ms: Option<i64>,
    /// Unix ms it is drawn until; what is left then is breakage. Default: never.
    pub expires_at_ms: Option<i64>,
}

/// A grant's terms, checked.
struct Terms {
    kind: GrantKind,
    priority: i32,
    starts_at_ms: Option<i64>,
    expires_at_ms: Option<i64>,
}

fn terms(new: &NewCredit) -> Result<Terms, AdminError> {
    let kind = match new.kind.as_deref() {
        None => GrantKind::Paid,
        Some(text) => GrantKind::parse(text)
            .ok_or_else(|| invalid("kind", "must be `paid` or `promotional`"))?,
    };
    let priority = new.priority.unwrap_or(0);
    if !(-1_000_000..=1_000_000).contains(&priority) {
        return Err(invalid("priority", "must be within ±1,000,000"));
    }
    if new.starts_at_ms.is_some_and(|at| at < 0) {
        return Err(invalid("starts_at_ms", "must be a Unix time in ms"));
    }
    Ok(Terms {
        kind,
        priority,
        starts_at_ms: new.starts_at_ms,
        expires_at_ms: new.expires_at_ms,
    })
}

/// A new grant's expiry is after its start and in the future. A retried one
/// was checked when it was written (the clock has moved since).
fn check_times(terms: &Terms, now_ms: i64) -> Result<(), AdminError> {
    let Some(expires) = terms.expires_at_ms else {
        return Ok(());
    };
    if expires <= terms.starts_at_ms.unwrap_or(now_ms) {
        return Err(invalid("expires_at_ms", "must be after the grant starts"));
    }
    if expires <= now_ms {
        return Err(invalid("expires_at_ms", "must be in the future"));
    }
    Ok(())
}

/// A grant as shown.
#[derive(Debug, Serialize)]
pub struct CreditView {
    pub id: i64,
    pub tenant_id: String,
    pub key_id: Option<String>,
    pub amount: Nanos,
    pub kind: String,
    pub priority: i32,
    pub starts_at_ms: i64,
    pub expires_at_ms: Option<i64>,
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
            kind: row.kind,
            priority: row.priority,
            starts_at_ms: row.starts_at_ms.unwrap_or(row.created_at_ms),
            expires_at_ms: row.expires_at_ms,
            idempotency_key: row.idempotency_key,
            added_by: row.added_by,
            reason: row.reason,
            created_at_ms: row.created_at_ms,
        }
    }
}

/// A balance and the grants it is made of, each with what it has left.
#[derive(Debug, Serialize)]
pub struct BalanceView {
    pub tenant_id: String,
    pub key_id: Option<String>,
    /// Whether requests draw on it (the tenant's or key's `credits`).
    pub on_credits: bool,
    #[serde(flatten)]
    pub balance: BalanceStatus,
    /// In drawing order.
    pub grants: Vec<GrantView>,
}

/// One grant of a balance, now.
#[derive(Debug, Serialize)]
pub struct GrantView {
    #[serde(flatten)]
    pub credit: CreditView,
    pub drawn: Nanos,
    /// What it can still give: 0 once expired.
    pub remaining: Nanos,
    /// `scheduled`, `active`, `used_up`, `expired` (breakage not booked yet) or `closed`.
    pub state: &'static str,
    /// What it left when it expired, once booked.
    pub breakage: Option<Nanos>,
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
/// `call_lifetime_ms`: the longest a call lives, which closes an expired grant that long after.
pub async fn add(
    db: &DatabaseConnection,
    holder: &Holder,
    new: NewCredit,
    now_ms: i64,
    call_lifetime_ms: u64,
) -> Result<(entity::credit::Model, bool), AdminError> {
    let amount = Nanos::parse_decimal(&new.amount).map_err(|e| invalid("amount", e.to_string()))?;
    if amount == Nanos::ZERO {
        return Err(invalid("amount", "must be above zero"));
    }
    let terms = terms(&new)?;
    let top_up = TopUp {
        tenant: holder.tenant.clone(),
        key: holder.key.clone(),
        amount,
        kind: terms.kind,
        priority: terms.priority,
        starts_at_ms: terms.starts_at_ms,
        expires_at_ms: terms.expires_at_ms,
        closes_at_ms: terms
            .expires_at_ms
            .map(|at| at.saturating_add(i64::try_from(call_lifetime_ms).unwrap_or(i64::MAX))),
        idempotency_key: text("idempotency_key", new.idempotency_key, true)?,
        added_by: text(
            "added_by",
            new.added_by.unwrap_or_else(|| "admin".to_owned()),
            true,
        )?,
        reason: text("reason", new.reason, false)?,
        at_ms: now_ms,
    };
    let refused = |error: CreditError| match error {
        CreditError::Reused(_) => AdminError::Conflict(error.to_string()),
        CreditError::Storage(error) => AdminError::Storage(error),
    };
    if let Some(earlier) = credits::replayed(db, &top_up).await.map_err(refused)? {
        return Ok((earlier, false));
    }
    check_times(&terms, now_ms)?;
    credits::insert(db, top_up).await.map_err(refused)
}

/// The balance with its grants: the deciding store's draws where it keeps
/// them (in memory), else the ledger's replay of them.
pub async fn view(
    db: &DatabaseConnection,
    holder: &Holder,
    balance: Balance,
    now_ms: u64,
) -> Result<BalanceView, AdminError> {
    let rows = credits::list(db, &holder.tenant, holder.key.as_ref()).await?;
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|row| holder.key.is_some() || row.key_id.is_empty())
        .collect();
    let mut states = balance.grants;
    if states.len() < rows.len() {
        let totals = credits::totals(db, &holder.tenant).await?;
        states = totals
            .grants
            .into_iter()
            .filter(|(key, _)| *key == holder.key)
            .map(|(_, state)| state)
            .collect();
    }
    let booked = credits::breakage(db, &holder.tenant).await?;
    let mut grants = Vec::with_capacity(rows.len());
    for state in states {
        let Some(row) = rows.iter().find(|row| row.id == state.grant.id) else {
            continue;
        };
        let breakage = booked.iter().find(|(id, _)| *id == row.id).map(|b| b.1);
        grants.push(GrantView {
            credit: CreditView::from(row.clone()),
            drawn: state.drawn,
            remaining: if state.grant.expired(now_ms) {
                Nanos::ZERO
            } else {
                state.left()
            },
            state: grant_state(&state, breakage.is_some(), now_ms),
            breakage,
        });
    }
    Ok(BalanceView {
        tenant_id: holder.tenant.to_string(),
        key_id: holder.key.as_ref().map(ToString::to_string),
        on_credits: holder.on_credits,
        balance: balance.status,
        grants,
    })
}

fn grant_state(state: &GrantState, booked: bool, now_ms: u64) -> &'static str {
    if booked || state.booked {
        "closed"
    } else if state.grant.expired(now_ms) {
        "expired"
    } else if !state.grant.started(now_ms) {
        "scheduled"
    } else if state.left() == Nanos::ZERO {
        "used_up"
    } else {
        "active"
    }
}
