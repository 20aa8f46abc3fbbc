//! Reads for cost analysis: the distribution of a call's charge per feature
//! and model, and spend per local month from the running totals. Both keep
//! what they read bounded whatever the ledger holds: the distribution asks
//! the database for one value per percentile and group (it sorts, the
//! gateway never holds the rows), the months read one total per key and month.

use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, FromQueryResult, QueryFilter, QueryOrder,
    QuerySelect, Select,
};

use entity::{usage, usage_total};

use super::event::AttemptStatus;
use super::repo::{SpendFilter, TOTAL_FEATURE, TOTAL_TENANT};
use crate::storage::StorageError;

/// One feature and model's calls in a range.
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
pub struct CallGroup {
    pub feature: String,
    pub model: String,
    pub calls: i64,
    pub total_nanos: Option<i64>,
    pub max_nanos: Option<i64>,
}

/// Calls are the ledger's detail rows but cache hits (answers the gateway
/// served itself, never charged).
fn calls(filter: &SpendFilter) -> Select<usage::Entity> {
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let mut query =
        usage::Entity::find().filter(usage::Column::Status.ne(AttemptStatus::CacheHit.as_str()));
    if let Some(tenant) = &filter.tenant {
        query = query.filter(usage::Column::TenantId.eq(tenant.as_str()));
    }
    if let Some(from) = filter.from_ms {
        query = query.filter(usage::Column::CreatedAtMs.gte(ms(from)));
    }
    if let Some(to) = filter.to_ms {
        query = query.filter(usage::Column::CreatedAtMs.lt(ms(to)));
    }
    query
}

/// The feature and model groups with the most charged first, at most `limit`.
pub async fn call_groups(
    db: &DatabaseConnection,
    filter: &SpendFilter,
    limit: u64,
) -> Result<Vec<CallGroup>, StorageError> {
    let total = Expr::cust("CAST(SUM(charged_nanos) AS BIGINT)");
    Ok(calls(filter)
        .select_only()
        .column(usage::Column::Feature)
        .column(usage::Column::Model)
        .column_as(Expr::cust("COUNT(*)"), "calls")
        .column_as(total.clone(), "total_nanos")
        .column_as(Expr::cust("MAX(charged_nanos)"), "max_nanos")
        .group_by(usage::Column::Feature)
        .group_by(usage::Column::Model)
        .order_by_desc(total)
        .order_by_asc(usage::Column::Feature)
        .order_by_asc(usage::Column::Model)
        .limit(limit)
        .into_model::<CallGroup>()
        .all(db)
        .await?)
}

#[derive(Debug, FromQueryResult)]
struct Charge {
    charged_nanos: i64,
}

/// The `rank`-th smallest charge (1-based) of one group's calls.
pub async fn charge_at_rank(
    db: &DatabaseConnection,
    filter: &SpendFilter,
    feature: &str,
    model: &str,
    rank: u64,
) -> Result<i64, StorageError> {
    let row = calls(filter)
        .select_only()
        .column(usage::Column::ChargedNanos)
        .filter(usage::Column::Feature.eq(feature))
        .filter(usage::Column::Model.eq(model))
        .order_by_asc(usage::Column::ChargedNanos)
        .offset(rank.saturating_sub(1))
        .limit(1)
        .into_model::<Charge>()
        .one(db)
        .await?;
    Ok(row.map_or(0, |r| r.charged_nanos))
}

/// One key's spend in one local month.
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
pub struct MonthSpend {
    pub key: String,
    pub period: String,
    pub charged_nanos: Option<i64>,
}

/// What month-over-month spend is kept by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonthKey {
    Tenant,
    Feature,
}

/// Spend per tenant (or feature) in each of `months` (local month keys of
/// `billing.timezone`), from the running totals budgets are kept by: every
/// row ever written counts, rolled-up or not.
pub async fn month_spend(
    db: &DatabaseConnection,
    tenant: Option<&str>,
    key: MonthKey,
    months: &[String],
) -> Result<Vec<MonthSpend>, StorageError> {
    let (kind, column) = match key {
        MonthKey::Tenant => (TOTAL_TENANT, usage_total::Column::TenantId),
        MonthKey::Feature => (TOTAL_FEATURE, usage_total::Column::Scope),
    };
    let mut query = usage_total::Entity::find()
        .select_only()
        .column_as(column, "key")
        .column(usage_total::Column::Period)
        .column_as(
            Expr::cust("CAST(SUM(charged_nanos) AS BIGINT)"),
            "charged_nanos",
        )
        .filter(usage_total::Column::Kind.eq(kind))
        .filter(usage_total::Column::Period.is_in(months.iter().map(String::as_str)));
    if let Some(tenant) = tenant {
        query = query.filter(usage_total::Column::TenantId.eq(tenant));
    }
    Ok(query
        .group_by(column)
        .group_by(usage_total::Column::Period)
        .into_model::<MonthSpend>()
        .all(db)
        .await?)
}
