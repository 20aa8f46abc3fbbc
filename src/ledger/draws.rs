//! What was drawn from each grant, replayed from the ledger when a store
//! starts (a replica's book, or a Redis that lost its balances). Between two
//! of a pool's grant boundaries (a start or an expiry) the grants valid are
//! the same, so the replay draws each stretch's spend in one step, in the
//! order `tenant/grants.rs` states: the ledger's rows by when they were
//! written, a rolled-up day's rows at its start. A store deciding live draws
//! at each settle instead; the two differ only where a row and a grant
//! starting as it is written fall in the same millisecond (the replay draws
//! the row from the grant, wherever it came first). A grant whose breakage was booked keeps the draw
//! that booking fixed.

use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, FromQueryResult, QueryFilter, QuerySelect,
};

use entity::{usage, usage_daily};

use crate::ids::{KeyId, TenantId};
use crate::money::Nanos;
use crate::storage::StorageError;
use crate::tenant::grants::{Grant, GrantState, Pool};

/// Each grant with its draw, pool by pool as `grants` lists them.
pub async fn replay(
    db: &DatabaseConnection,
    tenant: &TenantId,
    grants: Vec<(Option<KeyId>, Grant)>,
    booked: &[(i64, Nanos)],
) -> Result<Vec<(Option<KeyId>, GrantState)>, StorageError> {
    let mut pools: Vec<(Option<KeyId>, Pool)> = Vec::new();
    for (key, grant) in grants {
        let booked = booked.iter().find(|(id, _)| *id == grant.id).map(|b| b.1);
        // A closed grant could give, while the calls drew, what it did not break.
        let mut capacity = grant.clone();
        if let Some(left) = booked {
            capacity.amount = grant.amount.saturating_sub(left);
        }
        let state = GrantState {
            grant: capacity,
            drawn: Nanos::ZERO,
            booked: false,
        };
        if let Some((_, pool)) = pools.iter_mut().find(|(k, _)| *k == key) {
            pool.add(state);
        } else {
            let mut pool = Pool::default();
            pool.add(state);
            pools.push((key, pool));
        }
    }
    let mut out = Vec::new();
    for (key, mut pool) in pools {
        draw_stretches(db, tenant, key.as_ref(), &mut pool).await?;
        for state in pool.grants() {
            let mut state = state.clone();
            if let Some((_, left)) = booked.iter().find(|(id, _)| *id == state.grant.id) {
                state.grant.amount = state.grant.amount.saturating_add(*left);
                state.drawn = state.grant.amount.saturating_sub(*left);
                state.booked = true;
            }
            out.push((key.clone(), state));
        }
    }
    Ok(out)
}

/// Draws the pool's spend stretch by stretch, from its first grant's start.
async fn draw_stretches(
    db: &DatabaseConnection,
    tenant: &TenantId,
    key: Option<&KeyId>,
    pool: &mut Pool,
) -> Result<(), StorageError> {
    let mut bounds: Vec<u64> = pool
        .grants()
        .iter()
        .flat_map(|g| {
            [
                Some(g.grant.starts_ms),
                g.grant.expires_ms,
                g.grant.closes_ms,
            ]
        })
        .flatten()
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    for (i, from) in bounds.iter().enumerate() {
        let until = bounds.get(i + 1).copied();
        let spent = spent_between(db, tenant, key, *from, until).await?;
        if spent > Nanos::ZERO {
            pool.draw(spent, *from);
        }
    }
    Ok(())
}

#[derive(Debug, FromQueryResult)]
struct Sum {
    total: Option<i64>,
}

/// The pool's spend written in `[from, until)`, rows and rolled-up days.
async fn spent_between(
    db: &DatabaseConnection,
    tenant: &TenantId,
    key: Option<&KeyId>,
    from: u64,
    until: Option<u64>,
) -> Result<Nanos, StorageError> {
    let ms = |at: u64| i64::try_from(at).unwrap_or(i64::MAX);
    let total = Expr::cust("CAST(SUM(charged_nanos) AS BIGINT)");
    let mut rows = usage::Entity::find()
        .select_only()
        .column_as(total.clone(), "total")
        .filter(usage::Column::TenantId.eq(tenant.as_str()))
        .filter(usage::Column::CreatedAtMs.gte(ms(from)));
    let mut days = usage_daily::Entity::find()
        .select_only()
        .column_as(total, "total")
        .filter(usage_daily::Column::TenantId.eq(tenant.as_str()))
        // A month being rolled up is still in `usage` until it is done.
        .filter(usage_daily::Column::Pending.eq(false))
        .filter(usage_daily::Column::SpanStartMs.gte(ms(from)));
    if let Some(until) = until {
        rows = rows.filter(usage::Column::CreatedAtMs.lt(ms(until)));
        days = days.filter(usage_daily::Column::SpanStartMs.lt(ms(until)));
    }
    if let Some(key) = key {
        rows = rows.filter(usage::Column::KeyId.eq(key.as_str()));
        days = days.filter(usage_daily::Column::KeyId.eq(key.as_str()));
    }
    let rows = rows.into_model::<Sum>().one(db).await?;
    let days = days.into_model::<Sum>().one(db).await?;
    let sum = |s: Option<Sum>| Nanos::from_db(s.and_then(|s| s.total).unwrap_or(0));
    Ok(sum(rows).saturating_add(sum(days)))
}
