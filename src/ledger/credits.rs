//! Prepaid balances: every grant (top-up) is a row of `credits`, never
//! changed, and what an expired grant left is a row of `credit_breakage`,
//! booked once. A grant carries an idempotency key: a retried POST finds
//! the first row. `tenant/grants.rs` states how grants are drawn.

use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, Set,
};

use entity::{credit, credit_breakage};

use crate::ids::{KeyId, TenantId};
use crate::money::Nanos;
use crate::storage::StorageError;
use crate::tenant::grants::{Grant, GrantKind, GrantState};

/// A tenant's grants, its own (`None`) and its keys', with what the ledger
/// says was drawn from each: what a store starts from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreditTotals {
    pub grants: Vec<(Option<KeyId>, GrantState)>,
}

/// One top-up as the admin API asked for it.
#[derive(Debug, Clone)]
pub struct TopUp {
    pub tenant: TenantId,
    /// `None`: the tenant's own balance.
    pub key: Option<KeyId>,
    pub amount: Nanos,
    pub kind: GrantKind,
    pub priority: i32,
    /// `None`: from when it is written.
    pub starts_at_ms: Option<i64>,
    pub expires_at_ms: Option<i64>,
    /// `expires_at_ms` plus the longest a call lives.
    pub closes_at_ms: Option<i64>,
    pub idempotency_key: String,
    pub added_by: String,
    pub reason: String,
    pub at_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum CreditError {
    /// The idempotency key was used before for another top-up.
    #[error(
        "idempotency_key `{0}` was already used for a different grant (another amount, balance, kind, priority, start or expiry)"
    )]
    Reused(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The grant an earlier call wrote under this top-up's idempotency key, if
/// any; a different grant under it is `Reused`.
pub async fn replayed(
    db: &DatabaseConnection,
    top_up: &TopUp,
) -> Result<Option<credit::Model>, CreditError> {
    match find(db, &top_up.tenant, &top_up.idempotency_key).await? {
        Some(earlier) => same(earlier, top_up).map(Some),
        None => Ok(None),
    }
}

/// Writes a top-up no earlier call wrote (`replayed` says so): `(row, true)`,
/// or `(row, false)` when a concurrent call with its key got in first.
pub async fn insert(
    db: &DatabaseConnection,
    top_up: TopUp,
) -> Result<(credit::Model, bool), CreditError> {
    let model = credit::ActiveModel {
        tenant_id: Set(top_up.tenant.to_string()),
        key_id: Set(key_column(top_up.key.as_ref())),
        amount_nanos: Set(top_up.amount.to_db()),
        idempotency_key: Set(top_up.idempotency_key.clone()),
        added_by: Set(top_up.added_by.clone()),
        reason: Set(top_up.reason.clone()),
        created_at_ms: Set(top_up.at_ms),
        kind: Set(top_up.kind.as_str().to_owned()),
        priority: Set(top_up.priority),
        starts_at_ms: Set(top_up.starts_at_ms),
        expires_at_ms: Set(top_up.expires_at_ms),
        closes_at_ms: Set(top_up.closes_at_ms),
        ..Default::default()
    };
    match model.insert(db).await {
        Ok(row) => Ok((row, true)),
        // Two concurrent calls with one idempotency key: the unique index let one in.
        Err(error) => match find(db, &top_up.tenant, &top_up.idempotency_key).await? {
            Some(earlier) => same(earlier, &top_up).map(|row| (row, false)),
            None => Err(StorageError::from(error).into()),
        },
    }
}

fn key_column(key: Option<&KeyId>) -> String {
    key.map(ToString::to_string).unwrap_or_default()
}

fn same(earlier: credit::Model, top_up: &TopUp) -> Result<credit::Model, CreditError> {
    let matches = earlier.amount_nanos == top_up.amount.to_db()
        && earlier.key_id == key_column(top_up.key.as_ref())
        && earlier.kind == top_up.kind.as_str()
        && earlier.priority == top_up.priority
        && earlier.starts_at_ms == top_up.starts_at_ms
        && earlier.expires_at_ms == top_up.expires_at_ms;
    if matches {
        Ok(earlier)
    } else {
        Err(CreditError::Reused(top_up.idempotency_key.clone()))
    }
}

async fn find(
    db: &DatabaseConnection,
    tenant: &TenantId,
    idempotency_key: &str,
) -> Result<Option<credit::Model>, StorageError> {
    Ok(credit::Entity::find()
        .filter(credit::Column::TenantId.eq(tenant.as_str()))
        .filter(credit::Column::IdempotencyKey.eq(idempotency_key))
        .one(db)
        .await?)
}

/// A tenant's top-ups, oldest first; `key`: only that key's (`None`: all).
pub async fn list(
    db: &DatabaseConnection,
    tenant: &TenantId,
    key: Option<&KeyId>,
) -> Result<Vec<credit::Model>, StorageError> {
    let mut query = credit::Entity::find().filter(credit::Column::TenantId.eq(tenant.as_str()));
    if let Some(key) = key {
        query = query.filter(credit::Column::KeyId.eq(key.as_str()));
    }
    Ok(query.order_by_asc(credit::Column::Id).all(db).await?)
}

/// A grant as the stores take it: from its row.
pub fn grant_of(row: &credit::Model) -> (Option<KeyId>, Grant) {
    let key = (!row.key_id.is_empty()).then(|| KeyId::new(row.key_id.clone()));
    let ms = |at: i64| u64::try_from(at).unwrap_or(0);
    let grant = Grant {
        id: row.id,
        kind: GrantKind::parse(&row.kind).unwrap_or(GrantKind::Paid),
        priority: row.priority,
        starts_ms: ms(row.starts_at_ms.unwrap_or(row.created_at_ms)),
        expires_ms: row.expires_at_ms.map(ms),
        closes_ms: row.closes_at_ms.or(row.expires_at_ms).map(ms),
        amount: Nanos::from_db(row.amount_nanos),
    };
    (key, grant)
}

/// Every grant of the tenant with what was drawn from it. A closed grant's
/// draw is its amount less its booked breakage; the others' is replayed
/// from the ledger by `draws.rs`.
pub async fn totals(
    db: &DatabaseConnection,
    tenant: &TenantId,
) -> Result<CreditTotals, StorageError> {
    let rows = list(db, tenant, None).await?;
    let booked = breakage(db, tenant).await?;
    let grants = rows.iter().map(grant_of).collect();
    let grants = super::draws::replay(db, tenant, grants, &booked).await?;
    Ok(CreditTotals { grants })
}

/// The breakage booked for the tenant's grants: (grant row, amount).
pub async fn breakage(
    db: &DatabaseConnection,
    tenant: &TenantId,
) -> Result<Vec<(i64, Nanos)>, StorageError> {
    Ok(credit_breakage::Entity::find()
        .filter(credit_breakage::Column::TenantId.eq(tenant.as_str()))
        .all(db)
        .await?
        .into_iter()
        .map(|row| (row.credit_id, Nanos::from_db(row.amount_nanos)))
        .collect())
}

/// Books an expired grant's breakage once; a second booking keeps the first.
pub async fn book_breakage(
    db: &DatabaseConnection,
    tenant: &TenantId,
    key: Option<&KeyId>,
    grant: i64,
    amount: Nanos,
    at_ms: i64,
) -> Result<(), StorageError> {
    let row = credit_breakage::ActiveModel {
        credit_id: Set(grant),
        tenant_id: Set(tenant.to_string()),
        key_id: Set(key_column(key)),
        amount_nanos: Set(amount.to_db()),
        booked_at_ms: Set(at_ms),
        ..Default::default()
    };
    credit_breakage::Entity::insert(row)
        .on_conflict(
            OnConflict::column(credit_breakage::Column::CreditId)
                .do_nothing()
                .to_owned(),
        )
        .do_nothing()
        .exec(db)
        .await?;
    Ok(())
}
