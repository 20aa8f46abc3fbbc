//! What a reprice writes when told to: per ledger row, the difference between
//! its charge at the new prices and what it was billed so far (its charge and
//! the adjustments already written for it), booked on the invoice of an open
//! month. The ledger rows themselves are never rewritten.
//!
//! Money has no sign, so a difference is a debit or a credit, each a
//! non-negative column. A row's adjustment is booked in its own month if that
//! month is open, else in the first open month (the month after the latest
//! close), like a late row. Each is written with the run's key, unique with
//! the row: the same run written twice, even at once from two processes,
//! writes once; a later run at the same prices finds nothing left to adjust.

use std::collections::HashMap;

use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait,
    FromQueryResult, QueryFilter, QueryOrder, QuerySelect, TransactionTrait,
};
use serde::Serialize;

use entity::reprice_adjustment as adjustment;

use super::invoice::InvoiceLine;
use super::periods;
use crate::calendar::Calendar;
use crate::ids::TenantId;
use crate::money::Nanos;
use crate::storage::StorageError;

/// Rows per insert statement (14 values each, under every backend's limit).
const INSERT_ROWS: usize = 500;

/// One row's difference, as a reprice found it.
#[derive(Debug, Clone)]
pub struct Difference {
    pub usage_id: i64,
    pub tenant: String,
    pub key: String,
    pub provider: String,
    pub model: String,
    pub feature: String,
    /// `YYYY-MM` of the billing time zone the row is stamped in.
    pub stamped_month: String,
    /// The row's charge, what it was billed so far (with its adjustments),
    /// and its charge at the new prices.
    pub charged: Nanos,
    pub billed: Nanos,
    pub repriced: Nanos,
}

impl Difference {
    /// (debit, credit): one of them is zero.
    pub fn sides(&self) -> (Nanos, Nanos) {
        (
            self.repriced.saturating_sub(self.billed),
            self.billed.saturating_sub(self.repriced),
        )
    }
}

/// What the adjustments of a set of rows add up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Sides {
    pub rows: u64,
    pub debit: Nanos,
    pub credit: Nanos,
}

#[derive(Debug, FromQueryResult)]
struct RawSides {
    usage_id: i64,
    debit: Option<i64>,
    credit: Option<i64>,
}

/// The adjustments already written for each of `usage_ids`: (debit, credit).
pub async fn written_for<C: ConnectionTrait>(
    db: &C,
    usage_ids: &[i64],
) -> Result<HashMap<i64, (Nanos, Nanos)>, StorageError> {
    if usage_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = adjustment::Entity::find()
        .select_only()
        .column(adjustment::Column::UsageId)
        .column_as(Expr::cust("CAST(SUM(debit_nanos) AS BIGINT)"), "debit")
        .column_as(Expr::cust("CAST(SUM(credit_nanos) AS BIGINT)"), "credit")
        .filter(adjustment::Column::UsageId.is_in(usage_ids.iter().copied()))
        .group_by(adjustment::Column::UsageId)
        .into_model::<RawSides>()
        .all(db)
        .await?;
    let nanos = |v: Option<i64>| Nanos::from_db(v.unwrap_or(0));
    Ok(rows
        .into_iter()
        .map(|r| (r.usage_id, (nanos(r.debit), nanos(r.credit))))
        .collect())
}

/// Writes `differences` under `run_key`; how many rows it wrote (a row the
/// same run wrote already is not written again, and a row another run has
/// adjusted since it was read is adjusted from what it is billed now).
pub async fn write(
    db: &DatabaseConnection,
    calendar: &Calendar,
    (run_key, price_version): (&str, &str),
    differences: &[Difference],
    now_ms: u64,
) -> Result<u64, StorageError> {
    let txn = db.begin().await?;
    one_writer(&txn).await?;
    let closes = periods::closes(&txn).await?;
    let first_open = closes
        .last()
        .and_then(|latest| periods::next_month(calendar, &latest.month));
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let mut written = 0;
    for chunk in differences.chunks(INSERT_ROWS) {
        let ids: Vec<i64> = chunk.iter().map(|d| d.usage_id).collect();
        let so_far = written_for(&txn, &ids).await?;
        let now_billed = chunk.iter().filter_map(|d| {
            let (debit, credit) = so_far.get(&d.usage_id).copied().unwrap_or_default();
            let billed = d.charged.saturating_add(debit).saturating_sub(credit);
            (billed != d.repriced).then(|| Difference {
                billed,
                ..d.clone()
            })
        });
        let models: Vec<_> = now_billed
            .map(|d| {
                let month = match &first_open {
                    Some(open) if open.as_str() > d.stamped_month.as_str() => open.clone(),
                    _ => d.stamped_month.clone(),
                };
                active(&d, (run_key, price_version), month, now)
            })
            .collect();
        if models.is_empty() {
            continue;
        }
        written += adjustment::Entity::insert_many(models)
            .on_conflict(
                OnConflict::columns([adjustment::Column::RunKey, adjustment::Column::UsageId])
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(&txn)
            .await?;
    }
    txn.commit().await?;
    Ok(written)
}

/// The row that books `d` in `month`.
fn active(
    d: &Difference,
    (run_key, price_version): (&str, &str),
    month: String,
    now_ms: i64,
) -> adjustment::ActiveModel {
    let (debit, credit) = d.sides();
    adjustment::ActiveModel {
        run_key: Set(run_key.to_owned()),
        usage_id: Set(d.usage_id),
        price_version: Set(price_version.to_owned()),
        month: Set(month),
        tenant_id: Set(d.tenant.clone()),
        key_id: Set(d.key.clone()),
        provider: Set(d.provider.clone()),
        model: Set(d.model.clone()),
        feature: Set(d.feature.clone()),
        debit_nanos: Set(debit.to_db()),
        credit_nanos: Set(credit.to_db()),
        created_at_ms: Set(now_ms),
        ..Default::default()
    }
}

/// Makes the transaction the one writer of adjustments until it ends, so
/// each sees what the one before wrote; and orders it with a close: a close
/// running now either sees these rows (on PostgreSQL it waits for this
/// transaction) or has committed before the month is chosen.
async fn one_writer<C: ConnectionTrait>(txn: &C) -> Result<(), StorageError> {
    if txn.get_database_backend() == DbBackend::Postgres {
        // SHARE ROW EXCLUSIVE conflicts with itself, not with readers.
        txn.execute_unprepared("LOCK TABLE reprice_adjustments IN SHARE ROW EXCLUSIVE MODE")
            .await?;
        txn.execute_unprepared("LOCK TABLE period_closes IN SHARE MODE")
            .await?;
    } else {
        // SQLite has one writer; a write as the first statement takes its
        // turn before anything is read.
        txn.execute_unprepared("DELETE FROM reprice_adjustments WHERE 1 = 0")
            .await?;
    }
    Ok(())
}

#[derive(Debug, FromQueryResult)]
struct RawLine {
    model: String,
    feature: String,
    price_version: String,
    rows: i64,
    debit: Option<i64>,
    credit: Option<i64>,
}

/// `tenant`'s reprice adjustments booked in `month`, as invoice lines by
/// model, feature and price version (the reason).
pub async fn lines<C: ConnectionTrait>(
    db: &C,
    tenant: &TenantId,
    month: &str,
) -> Result<Vec<InvoiceLine>, StorageError> {
    let rows = adjustment::Entity::find()
        .select_only()
        .column(adjustment::Column::Model)
        .column(adjustment::Column::Feature)
        .column(adjustment::Column::PriceVersion)
        .column_as(Expr::cust("COUNT(*)"), "rows")
        .column_as(Expr::cust("CAST(SUM(debit_nanos) AS BIGINT)"), "debit")
        .column_as(Expr::cust("CAST(SUM(credit_nanos) AS BIGINT)"), "credit")
        .filter(adjustment::Column::TenantId.eq(tenant.to_string()))
        .filter(adjustment::Column::Month.eq(month))
        .group_by(adjustment::Column::Model)
        .group_by(adjustment::Column::Feature)
        .group_by(adjustment::Column::PriceVersion)
        .order_by_asc(adjustment::Column::Model)
        .order_by_asc(adjustment::Column::Feature)
        .order_by_asc(adjustment::Column::PriceVersion)
        .into_model::<RawLine>()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| InvoiceLine {
            model: r.model,
            feature: r.feature,
            requests: 0,
            rows: u64::try_from(r.rows).unwrap_or(0),
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
            amount: Nanos::from_db(r.debit.unwrap_or(0)),
            credit: Nanos::from_db(r.credit.unwrap_or(0)),
            adjustment: true,
            reason: Some(format!("repriced at price version {}", r.price_version)),
        })
        .collect())
}

#[derive(Debug, FromQueryResult)]
struct RawSum {
    rows: i64,
    debit: Option<i64>,
    credit: Option<i64>,
}

/// The same adjustments' count and sums, read with no grouping.
pub async fn sum<C: ConnectionTrait>(
    db: &C,
    tenant: &TenantId,
    month: &str,
) -> Result<Sides, StorageError> {
    let sum = adjustment::Entity::find()
        .select_only()
        .column_as(Expr::cust("COUNT(*)"), "rows")
        .column_as(Expr::cust("CAST(SUM(debit_nanos) AS BIGINT)"), "debit")
        .column_as(Expr::cust("CAST(SUM(credit_nanos) AS BIGINT)"), "credit")
        .filter(adjustment::Column::TenantId.eq(tenant.to_string()))
        .filter(adjustment::Column::Month.eq(month))
        .into_model::<RawSum>()
        .one(db)
        .await?;
    Ok(sum.map_or_else(Sides::default, |s| Sides {
        rows: u64::try_from(s.rows).unwrap_or(0),
        debit: Nanos::from_db(s.debit.unwrap_or(0)),
        credit: Nanos::from_db(s.credit.unwrap_or(0)),
    }))
}

/// The tenants with adjustments booked in `month`.
pub async fn tenants_in<C: ConnectionTrait>(
    db: &C,
    month: &str,
) -> Result<Vec<String>, StorageError> {
    Ok(adjustment::Entity::find()
        .select_only()
        .column(adjustment::Column::TenantId)
        .distinct()
        .filter(adjustment::Column::Month.eq(month))
        .into_tuple::<String>()
        .all(db)
        .await?)
}
