//! Reads of `usage_daily`, the rolled-up days, beside the detail rows'
//! reads in `repo` and `invoice`: the same sums by the same keys. A rolled-up
//! day counts in a range where the piece of it its rows fell in begins
//! (`span_start_ms`), exact for ranges cut at UTC or billing-calendar days.
//! Pending aggregates (a PostgreSQL month not yet dropped) are not counted:
//! their rows still are.

use sea_orm::sea_query::{Expr, SimpleExpr};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, FromQueryResult, QueryFilter,
    QuerySelect, Select,
};

use entity::usage_daily;

use super::invoice::InvoiceLine;
use super::repo::{CACHE_HITS, FAILED, FALLBACKS, GroupBy, RawSpendRow, SpendFilter, sum_status};
use crate::ids::TenantId;
use crate::money::Nanos;
use crate::storage::StorageError;

fn sum(column: &str) -> SimpleExpr {
    Expr::cust(format!("CAST(SUM({column}) AS BIGINT)"))
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Counted aggregates of a tenant (or all) whose span begins in `[from, to)`.
fn counted(
    tenant: Option<&TenantId>,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
) -> Select<usage_daily::Entity> {
    let mut query = usage_daily::Entity::find().filter(usage_daily::Column::Pending.eq(false));
    if let Some(tenant) = tenant {
        query = query.filter(usage_daily::Column::TenantId.eq(tenant.as_str()));
    }
    if let Some(from) = from_ms {
        query = query.filter(usage_daily::Column::SpanStartMs.gte(ms(from)));
    }
    if let Some(to) = to_ms {
        query = query.filter(usage_daily::Column::SpanStartMs.lt(ms(to)));
    }
    query
}

/// The rolled-up days' spend by `group_by`, in `repo::spend`'s shape.
pub(super) async fn spend(
    db: &DatabaseConnection,
    filter: &SpendFilter,
    group_by: GroupBy,
) -> Result<Vec<RawSpendRow>, StorageError> {
    let key = group_by.daily_key();
    Ok(
        counted(filter.tenant.as_ref(), filter.from_ms, filter.to_ms)
            .select_only()
            .column_as(key.clone(), "key")
            .column_as(sum("requests"), "requests")
            .column_as(sum("rows"), "attempts")
            .column_as(sum("prompt_tokens"), "prompt_tokens")
            .column_as(sum("cached_tokens"), "cached_tokens")
            .column_as(sum("completion_tokens"), "completion_tokens")
            .column_as(sum("charged_nanos"), "charged_nanos")
            .column_as(sum("cost_nanos"), "cost_nanos")
            .column_as(sum_status(FALLBACKS, "rows"), "fallbacks")
            .column_as(sum_status(FAILED, "rows"), "failed_attempts")
            .column_as(sum_status(CACHE_HITS, "rows"), "cache_hits")
            .group_by(key)
            .into_model::<RawSpendRow>()
            .all(db)
            .await?,
    )
}

#[derive(Debug, FromQueryResult)]
struct RawLine {
    model: String,
    feature: String,
    requests: Option<i64>,
    rows: Option<i64>,
    prompt_tokens: Option<i64>,
    cached_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    charged_nanos: Option<i64>,
}

fn count(v: Option<i64>) -> u64 {
    u64::try_from(v.unwrap_or(0)).unwrap_or(0)
}

/// The rolled-up days' invoice lines, by model and feature.
pub(super) async fn invoice_lines<C: ConnectionTrait>(
    db: &C,
    tenant: &TenantId,
    from_ms: u64,
    to_ms: u64,
) -> Result<Vec<InvoiceLine>, StorageError> {
    let rows = counted(Some(tenant), Some(from_ms), Some(to_ms))
        .select_only()
        .column(usage_daily::Column::Model)
        .column(usage_daily::Column::Feature)
        .column_as(sum("requests"), "requests")
        .column_as(sum("rows"), "rows")
        .column_as(sum("prompt_tokens"), "prompt_tokens")
        .column_as(sum("cached_tokens"), "cached_tokens")
        .column_as(sum("completion_tokens"), "completion_tokens")
        .column_as(sum("charged_nanos"), "charged_nanos")
        .group_by(usage_daily::Column::Model)
        .group_by(usage_daily::Column::Feature)
        .into_model::<RawLine>()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| InvoiceLine {
            model: r.model,
            feature: r.feature,
            requests: count(r.requests),
            rows: count(r.rows),
            prompt_tokens: count(r.prompt_tokens),
            cached_tokens: count(r.cached_tokens),
            completion_tokens: count(r.completion_tokens),
            amount: Nanos::from_db(r.charged_nanos.unwrap_or(0)),
            credit: Nanos::ZERO,
            adjustment: false,
            reason: None,
        })
        .collect())
}

#[derive(Debug, FromQueryResult)]
struct RawSum {
    rows: Option<i64>,
    charged_nanos: Option<i64>,
}

/// The rolled-up rows and their charge in a span, read with no grouping.
pub(super) async fn sum_in_span<C: ConnectionTrait>(
    db: &C,
    tenant: &TenantId,
    from_ms: u64,
    to_ms: u64,
) -> Result<(u64, Nanos), StorageError> {
    rows_and_charge(db, counted(Some(tenant), Some(from_ms), Some(to_ms))).await
}

/// The rows and charge of the aggregates `query` selects, summed.
async fn rows_and_charge<C: ConnectionTrait>(
    db: &C,
    query: Select<usage_daily::Entity>,
) -> Result<(u64, Nanos), StorageError> {
    let sum_row = query
        .select_only()
        .column_as(sum("rows"), "rows")
        .column_as(sum("charged_nanos"), "charged_nanos")
        .into_model::<RawSum>()
        .one(db)
        .await?;
    Ok(sum_row.map_or((0, Nanos::ZERO), |s| {
        (count(s.rows), Nanos::from_db(s.charged_nanos.unwrap_or(0)))
    }))
}

/// The rolled-up charge of a tenant in a UTC month.
pub(super) async fn charged_in_period(
    db: &DatabaseConnection,
    tenant: &TenantId,
    period: &str,
) -> Result<Nanos, StorageError> {
    let month = counted(Some(tenant), None, None)
        .filter(usage_daily::Column::Day.starts_with(format!("{period}-")));
    Ok(rows_and_charge(db, month).await?.1)
}
