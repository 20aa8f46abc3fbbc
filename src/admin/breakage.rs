//! Breakage of tenants no call wakes. A grant's breakage is booked by its
//! tenant's actor (`tenant/actor/breakage.rs`), which runs while the tenant
//! is active; expired promotional credit is most often left by a customer
//! who stopped calling. Every replica looks now and then for grants closed
//! without a breakage row and wakes their tenants' actors, which book it
//! within a sweep. Two replicas waking one tenant book it once (the ledger
//! keeps one row per grant).

use std::sync::Arc;
use std::time::Duration;

use sea_orm::sea_query::Query;
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QuerySelect};

use entity::{credit, credit_breakage};

use crate::state::Gateway;
use crate::storage::StorageError;

/// How often a replica looks for unbooked breakage.
const CHECK_INTERVAL: Duration = Duration::from_secs(10);

pub fn spawn(gateway: Arc<Gateway>) -> Option<actix_rt::task::JoinHandle<()>> {
    Some(actix_rt::spawn(async move {
        loop {
            actix_rt::time::sleep(CHECK_INTERVAL).await;
            let now = i64::try_from(gateway.clock.now_ms()).unwrap_or(i64::MAX);
            let db = gateway.directory.db();
            match tenants_due(db, now).await {
                Ok(tenants) => {
                    for tenant in tenants {
                        wake(&gateway, &tenant).await;
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %error, "Cannot look for grants' breakage; trying again.");
                }
            }
        }
    }))
}

/// Tenants with a grant closed by `now_ms` and no breakage booked for it.
async fn tenants_due(db: &DatabaseConnection, now_ms: i64) -> Result<Vec<String>, StorageError> {
    let booked = Query::select()
        .column(credit_breakage::Column::CreditId)
        .from(credit_breakage::Entity)
        .to_owned();
    Ok(credit::Entity::find()
        .select_only()
        .column(credit::Column::TenantId)
        .distinct()
        .filter(credit::Column::ClosesAtMs.lte(now_ms))
        .filter(credit::Column::Id.not_in_subquery(booked))
        .into_tuple()
        .all(db)
        .await?)
}

/// Starts the tenant's actor (a balance read is the lightest message).
async fn wake(gateway: &Gateway, tenant: &str) {
    let Ok(record) = super::tenants::get(gateway.directory.db(), tenant).await else {
        return;
    };
    let record = gateway.directory.put_tenant(record);
    if let Ok(handle) = gateway.tenants.handle(&record) {
        let _ = handle.balance(None).await;
    }
}
