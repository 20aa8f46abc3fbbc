//! Prepaid balances: every top-up is a row of `credits`, never changed, so a
//! balance is always the ledger's sum (top-ups less lifetime spend). A
//! top-up carries an idempotency key: a retried POST finds the first row.

use std::collections::HashMap;

use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, Set,
};

use entity::credit;

use crate::ids::{KeyId, TenantId};
use crate::money::Nanos;
use crate::storage::StorageError;

/// A tenant's top-ups, summed: its own and each key's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreditTotals {
    pub tenant: Nanos,
    pub keys: HashMap<KeyId, Nanos>,
    /// The rows summed (id, key, amount), so a store that hears of a top-up
    /// twice (from the ledger and from the admin call) adds it once.
    pub rows: Vec<(i64, Option<KeyId>, Nanos)>,
}

/// One top-up as the admin API asked for it.
#[derive(Debug, Clone)]
pub struct TopUp {
    pub tenant: TenantId,
    /// `None`: the tenant's own balance.
    pub key: Option<KeyId>,
    pub amount: Nanos,
    pub idempotency_key: String,
    pub added_by: String,
    pub reason: String,
    pub at_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum CreditError {
    /// The idempotency key was used before for another top-up.
    #[error(
        "idempotency_key `{0}` was already used for a different top-up (another amount or balance)"
    )]
    Reused(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Writes a top-up once: `(row, true)` when this call wrote it, `(row,
/// false)` when an earlier call with the same idempotency key did.
pub async fn add(
    db: &DatabaseConnection,
    top_up: TopUp,
) -> Result<(credit::Model, bool), CreditError> {
    if let Some(earlier) = find(db, &top_up.tenant, &top_up.idempotency_key).await? {
        return same(earlier, &top_up).map(|row| (row, false));
    }
    let model = credit::ActiveModel {
        tenant_id: Set(top_up.tenant.to_string()),
        key_id: Set(key_column(top_up.key.as_ref())),
        amount_nanos: Set(top_up.amount.to_db()),
        idempotency_key: Set(top_up.idempotency_key.clone()),
        added_by: Set(top_up.added_by.clone()),
        reason: Set(top_up.reason.clone()),
        created_at_ms: Set(top_up.at_ms),
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
        && earlier.key_id == key_column(top_up.key.as_ref());
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

pub async fn totals(
    db: &DatabaseConnection,
    tenant: &TenantId,
) -> Result<CreditTotals, StorageError> {
    let mut totals = CreditTotals::default();
    for row in list(db, tenant, None).await? {
        let amount = Nanos::from_db(row.amount_nanos);
        let key = (!row.key_id.is_empty()).then(|| KeyId::new(row.key_id));
        match &key {
            None => totals.tenant = totals.tenant.saturating_add(amount),
            Some(key) => {
                let sum = totals.keys.entry(key.clone()).or_default();
                *sum = sum.saturating_add(amount);
            }
        }
        totals.rows.push((row.id, key, amount));
    }
    Ok(totals)
}
