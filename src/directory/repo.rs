//! Database reads and writes of tenants and keys (admin API, CLI, sync loop).

use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
};

use entity::{api_key, tenant};

use super::{KeyRecord, TenantRecord};
use crate::ids::{KeyId, TenantId};
use crate::storage::StorageError;

/// Replicas' clocks differ a little; looking back this far catches a change
/// stamped slightly before our watermark. Re-applying a change is harmless.
const SYNC_LOOKBACK_MS: i64 = 5_000;

pub async fn all_tenants(db: &DatabaseConnection) -> Result<Vec<TenantRecord>, StorageError> {
    let rows = tenant::Entity::find()
        .order_by_asc(tenant::Column::Id)
        .all(db)
        .await?;
    Ok(rows.into_iter().map(TenantRecord::from_model).collect())
}

pub async fn get_tenant(
    db: &DatabaseConnection,
    id: &TenantId,
) -> Result<Option<TenantRecord>, StorageError> {
    let row = tenant::Entity::find_by_id(id.as_str().to_owned())
        .one(db)
        .await?;
    Ok(row.map(TenantRecord::from_model))
}

pub async fn insert_tenant(
    db: &DatabaseConnection,
    model: tenant::ActiveModel,
) -> Result<TenantRecord, StorageError> {
    let row = model.insert(db).await?;
    Ok(TenantRecord::from_model(row))
}

pub async fn update_tenant(
    db: &DatabaseConnection,
    model: tenant::ActiveModel,
) -> Result<TenantRecord, StorageError> {
    let row = model.update(db).await?;
    Ok(TenantRecord::from_model(row))
}

pub async fn tenant_model(
    db: &DatabaseConnection,
    id: &TenantId,
) -> Result<Option<tenant::Model>, StorageError> {
    Ok(tenant::Entity::find_by_id(id.as_str().to_owned())
        .one(db)
        .await?)
}

pub async fn tenants_updated_after(
    db: &DatabaseConnection,
    after_ms: i64,
) -> Result<Vec<TenantRecord>, StorageError> {
    let rows = tenant::Entity::find()
        .filter(tenant::Column::UpdatedAtMs.gte(after_ms.saturating_sub(SYNC_LOOKBACK_MS)))
        .all(db)
        .await?;
    Ok(rows.into_iter().map(TenantRecord::from_model).collect())
}

fn key_record(row: api_key::Model) -> KeyRecord {
    KeyRecord {
        id: KeyId::new(row.id),
        tenant: TenantId::new(row.tenant_id),
        secret_hash: row.secret_hash,
    }
}

pub async fn active_keys(db: &DatabaseConnection) -> Result<Vec<KeyRecord>, StorageError> {
    let rows = api_key::Entity::find()
        .filter(api_key::Column::RevokedAtMs.is_null())
        .all(db)
        .await?;
    Ok(rows.into_iter().map(key_record).collect())
}

pub async fn active_key(
    db: &DatabaseConnection,
    id: &KeyId,
) -> Result<Option<KeyRecord>, StorageError> {
    let row = api_key::Entity::find_by_id(id.as_str().to_owned())
        .filter(api_key::Column::RevokedAtMs.is_null())
        .one(db)
        .await?;
    Ok(row.map(key_record))
}

pub async fn insert_key(
    db: &DatabaseConnection,
    model: api_key::ActiveModel,
) -> Result<api_key::Model, StorageError> {
    Ok(model.insert(db).await?)
}

pub async fn tenant_keys(
    db: &DatabaseConnection,
    tenant: &TenantId,
) -> Result<Vec<api_key::Model>, StorageError> {
    Ok(api_key::Entity::find()
        .filter(api_key::Column::TenantId.eq(tenant.as_str()))
        .order_by_asc(api_key::Column::CreatedAtMs)
        .all(db)
        .await?)
}

/// Marks a key revoked; `Ok(false)` when no such key exists.
pub async fn revoke_key(
    db: &DatabaseConnection,
    id: &KeyId,
    now_ms: i64,
) -> Result<bool, StorageError> {
    let exists = api_key::Entity::find_by_id(id.as_str().to_owned())
        .one(db)
        .await?
        .is_some();
    if !exists {
        return Ok(false);
    }
    api_key::Entity::update_many()
        .col_expr(api_key::Column::RevokedAtMs, Expr::value(now_ms))
        .filter(api_key::Column::Id.eq(id.as_str()))
        .filter(api_key::Column::RevokedAtMs.is_null())
        .exec(db)
        .await?;
    Ok(true)
}

pub async fn keys_revoked_after(
    db: &DatabaseConnection,
    after_ms: i64,
) -> Result<Vec<(KeyId, i64)>, StorageError> {
    let rows = api_key::Entity::find()
        .filter(api_key::Column::RevokedAtMs.gte(after_ms.saturating_sub(SYNC_LOOKBACK_MS)))
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| row.revoked_at_ms.map(|at| (KeyId::new(row.id), at)))
        .collect())
}
