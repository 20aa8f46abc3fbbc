//! Database reads and writes of tenants and keys (admin API, CLI, sync loop).

use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, Set,
};

use entity::{api_key, end_user_limit, feature_budget, tenant};

use super::tenant::{EndUserOverride, period_of};
use super::{KeyRecord, TenantRecord};
use crate::calendar::Period;
use crate::ids::{KeyId, TenantId};
use crate::money::Nanos;
use crate::storage::StorageError;

/// Replicas' clocks differ a little; looking back this far catches a change
/// stamped slightly before our watermark. Re-applying a change is harmless.
const SYNC_LOOKBACK_MS: i64 = 5_000;

pub async fn all_tenants(db: &DatabaseConnection) -> Result<Vec<TenantRecord>, StorageError> {
    let rows = tenant::Entity::find()
        .order_by_asc(tenant::Column::Id)
        .all(db)
        .await?;
    with_feature_budgets(db, rows).await
}

/// Tenant records with their feature budgets and end-user overrides.
async fn with_feature_budgets(
    db: &DatabaseConnection,
    rows: Vec<tenant::Model>,
) -> Result<Vec<TenantRecord>, StorageError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<String> = rows.iter().map(|t| t.id.clone()).collect();
    let budgets = feature_budget::Entity::find()
        .filter(feature_budget::Column::TenantId.is_in(ids.clone()))
        .all(db)
        .await?;
    let overrides = end_user_limit::Entity::find()
        .filter(end_user_limit::Column::TenantId.is_in(ids))
        .all(db)
        .await?;
    let mut records: Vec<TenantRecord> = rows.into_iter().map(TenantRecord::from_model).collect();
    for budget in budgets {
        if let Some(record) = records
            .iter_mut()
            .find(|r| r.id.as_str() == budget.tenant_id)
        {
            let period = period_of(budget.period.as_deref());
            record
                .feature_periods
                .insert(budget.feature.clone(), period);
            record
                .feature_budgets
                .insert(budget.feature, Nanos::from_db(budget.monthly_budget_nanos));
        }
    }
    for row in overrides {
        if let Some(record) = records.iter_mut().find(|r| r.id.as_str() == row.tenant_id) {
            let limits = EndUserOverride::from_model(&row);
            record.end_users.insert(row.end_user, limits);
        }
    }
    Ok(records)
}

async fn record_with_budgets(
    db: &DatabaseConnection,
    row: tenant::Model,
) -> Result<TenantRecord, StorageError> {
    let plain = TenantRecord::from_model(row.clone());
    Ok(with_feature_budgets(db, vec![row])
        .await?
        .pop()
        .unwrap_or(plain))
}

async fn one_with_feature_budgets(
    db: &DatabaseConnection,
    row: Option<tenant::Model>,
) -> Result<Option<TenantRecord>, StorageError> {
    match row {
        Some(row) => Ok(Some(record_with_budgets(db, row).await?)),
        None => Ok(None),
    }
}

/// Sets (`Some`) or removes (`None`) a feature's budget, and marks the tenant changed.
pub async fn set_feature_budget(
    db: &DatabaseConnection,
    tenant_id: &TenantId,
    feature: &str,
    budget: Option<(Nanos, Period)>,
    now_ms: i64,
) -> Result<(), StorageError> {
    feature_budget::Entity::delete_many()
        .filter(feature_budget::Column::TenantId.eq(tenant_id.as_str()))
        .filter(feature_budget::Column::Feature.eq(feature))
        .exec(db)
        .await?;
    if let Some((budget, period)) = budget {
        feature_budget::ActiveModel {
            tenant_id: Set(tenant_id.to_string()),
            feature: Set(feature.to_owned()),
            monthly_budget_nanos: Set(budget.to_db()),
            period: Set(Some(period.as_str().to_owned())),
            updated_at_ms: Set(now_ms),
        }
        .insert(db)
        .await?;
    }
    touch_tenant(db, tenant_id, now_ms).await
}

/// Sets (`Some`) or removes (`None`) one end user's override, and marks the tenant changed.
pub async fn set_end_user(
    db: &DatabaseConnection,
    tenant_id: &TenantId,
    end_user: &str,
    limits: Option<&EndUserOverride>,
    now_ms: i64,
) -> Result<(), StorageError> {
    end_user_limit::Entity::delete_many()
        .filter(end_user_limit::Column::TenantId.eq(tenant_id.as_str()))
        .filter(end_user_limit::Column::EndUser.eq(end_user))
        .exec(db)
        .await?;
    if let Some(limits) = limits {
        end_user_limit::ActiveModel {
            tenant_id: Set(tenant_id.to_string()),
            end_user: Set(end_user.to_owned()),
            budget_nanos: Set(limits.budget.map(Nanos::to_db)),
            period: Set(limits.period.map(|p| p.as_str().to_owned())),
            rpm: Set(limits.rpm.map(|r| i32::try_from(r).unwrap_or(i32::MAX))),
            blocked: Set(limits.blocked),
            updated_at_ms: Set(now_ms),
        }
        .insert(db)
        .await?;
    }
    touch_tenant(db, tenant_id, now_ms).await
}

/// Advances a tenant's `updated_at_ms` so replicas polling for changes pick it up.
pub async fn touch_tenant(
    db: &DatabaseConnection,
    tenant_id: &TenantId,
    now_ms: i64,
) -> Result<(), StorageError> {
    let Some(current) = tenant::Entity::find_by_id(tenant_id.as_str().to_owned())
        .one(db)
        .await?
    else {
        return Ok(());
    };
    let updated_at = now_ms.max(current.updated_at_ms + 1);
    tenant::Entity::update_many()
        .col_expr(tenant::Column::UpdatedAtMs, Expr::value(updated_at))
        .filter(tenant::Column::Id.eq(tenant_id.as_str()))
        .exec(db)
        .await?;
    Ok(())
}

/// Sets or clears a key's own monthly budget; `None` when there is no such key.
/// What a key update sets; `None` leaves a field as it is.
#[derive(Debug, Default)]
pub struct KeyChange {
    pub monthly_budget: Option<Option<Nanos>>,
    pub expires_at_ms: Option<Option<i64>>,
    pub on_credits: Option<bool>,
    pub budget_period: Option<Period>,
    pub max_in_flight: Option<Option<i32>>,
}

pub async fn update_key(
    db: &DatabaseConnection,
    key_id: &KeyId,
    change: KeyChange,
) -> Result<Option<api_key::Model>, StorageError> {
    let Some(row) = api_key::Entity::find_by_id(key_id.as_str().to_owned())
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let mut model: api_key::ActiveModel = row.into();
    if let Some(budget) = change.monthly_budget {
        model.monthly_budget_nanos = Set(budget.map(Nanos::to_db));
    }
    if let Some(expires_at_ms) = change.expires_at_ms {
        model.expires_at_ms = Set(expires_at_ms);
    }
    if let Some(on_credits) = change.on_credits {
        model.on_credits = Set(on_credits);
    }
    if let Some(period) = change.budget_period {
        model.budget_period = Set(Some(period.as_str().to_owned()));
    }
    if let Some(cap) = change.max_in_flight {
        model.max_in_flight = Set(cap);
    }
    Ok(Some(model.update(db).await?))
}

pub async fn get_tenant(
    db: &DatabaseConnection,
    id: &TenantId,
) -> Result<Option<TenantRecord>, StorageError> {
    let row = tenant::Entity::find_by_id(id.as_str().to_owned())
        .one(db)
        .await?;
    one_with_feature_budgets(db, row).await
}

pub async fn insert_tenant(
    db: &DatabaseConnection,
    model: tenant::ActiveModel,
) -> Result<TenantRecord, StorageError> {
    let row = model.insert(db).await?;
    record_with_budgets(db, row).await
}

pub async fn update_tenant(
    db: &DatabaseConnection,
    model: tenant::ActiveModel,
) -> Result<TenantRecord, StorageError> {
    let row = model.update(db).await?;
    record_with_budgets(db, row).await
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
    with_feature_budgets(db, rows).await
}

fn key_record(row: api_key::Model) -> KeyRecord {
    KeyRecord {
        id: KeyId::new(row.id),
        tenant: TenantId::new(row.tenant_id),
        secret_hash: row.secret_hash,
        monthly_budget: row.monthly_budget_nanos.map(Nanos::from_db),
        expires_at_ms: row.expires_at_ms,
        on_credits: row.on_credits,
        budget_period: period_of(row.budget_period.as_deref()),
        max_in_flight: row.max_in_flight.and_then(|v| u32::try_from(v).ok()),
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

/// Active keys created since `after_ms` (less the look-back), with their creation time.
pub async fn keys_created_after(
    db: &DatabaseConnection,
    after_ms: i64,
) -> Result<Vec<(KeyRecord, i64)>, StorageError> {
    let rows = api_key::Entity::find()
        .filter(api_key::Column::CreatedAtMs.gte(after_ms.saturating_sub(SYNC_LOOKBACK_MS)))
        .filter(api_key::Column::RevokedAtMs.is_null())
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let created = row.created_at_ms;
            (key_record(row), created)
        })
        .collect())
}

/// The active keys of some tenants.
pub async fn active_keys_of(
    db: &DatabaseConnection,
    tenants: &[&TenantId],
) -> Result<Vec<KeyRecord>, StorageError> {
    let rows = api_key::Entity::find()
        .filter(api_key::Column::TenantId.is_in(tenants.iter().map(|t| t.as_str())))
        .filter(api_key::Column::RevokedAtMs.is_null())
        .all(db)
        .await?;
    Ok(rows.into_iter().map(key_record).collect())
}

pub async fn insert_key(
    db: &DatabaseConnection,
    model: api_key::ActiveModel,
) -> Result<api_key::Model, StorageError> {
    Ok(model.insert(db).await?)
}

pub async fn key_model(
    db: &DatabaseConnection,
    id: &KeyId,
) -> Result<Option<api_key::Model>, StorageError> {
    Ok(api_key::Entity::find_by_id(id.as_str().to_owned())
        .one(db)
        .await?)
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
