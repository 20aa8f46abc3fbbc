//! The ledger's side of a drift report: what the gateway computed each call
//! cost at the providers' prices (`cost_nanos`, or the charge for rows before
//! plans), and its tokens, by provider, model and billing day, from the
//! detail rows and the rolled-up days alike.

use std::collections::BTreeMap;

use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, FromQueryResult, QueryFilter, QuerySelect,
};

use entity::{usage, usage_daily};

use crate::calendar::Calendar;
use crate::storage::StorageError;

/// Every zone's offset is a whole number of quarter hours: rows are summed
/// per quarter hour in the database, and each quarter hour falls in one
/// local day.
const QUARTER_HOUR_MS: i64 = 900_000;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerSums {
    pub attempts: u64,
    pub input_tokens: u64,
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
    pub cost_nanos: i64,
}

/// (local day, provider, model).
pub type LedgerKey = (String, String, String);

#[derive(Debug, FromQueryResult)]
struct Raw {
    provider: String,
    model: String,
    slot: i64,
    attempts: Option<i64>,
    prompt_tokens: Option<i64>,
    cached_tokens: Option<i64>,
    cache_write_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    cost_nanos: Option<i64>,
}

fn sum(column: &str) -> sea_orm::sea_query::SimpleExpr {
    Expr::cust(format!("CAST(SUM({column}) AS BIGINT)"))
}

/// The ledger's sums in `[from_ms, to_ms)` of one provider (or all), by
/// local day of `calendar`. The database returns one row per provider,
/// model and quarter hour (rolled-up days: per span), whatever the rows.
pub async fn sums(
    db: &DatabaseConnection,
    calendar: &Calendar,
    provider: Option<&str>,
    from_ms: u64,
    to_ms: u64,
) -> Result<BTreeMap<LedgerKey, LedgerSums>, StorageError> {
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let slot = Expr::cust(format!("created_at_ms / {QUARTER_HOUR_MS}"));
    let mut detail = usage::Entity::find()
        .select_only()
        .column(usage::Column::Provider)
        .column(usage::Column::Model)
        .column_as(slot.clone(), "slot")
        .column_as(Expr::cust("COUNT(*)"), "attempts")
        .column_as(sum("prompt_tokens"), "prompt_tokens")
        .column_as(sum("cached_tokens"), "cached_tokens")
        .column_as(sum("cache_write_tokens"), "cache_write_tokens")
        .column_as(sum("completion_tokens"), "completion_tokens")
        .column_as(sum("COALESCE(cost_nanos, charged_nanos)"), "cost_nanos")
        .filter(usage::Column::CreatedAtMs.gte(ms(from_ms)))
        .filter(usage::Column::CreatedAtMs.lt(ms(to_ms)));
    let mut rolled = usage_daily::Entity::find()
        .select_only()
        .column(usage_daily::Column::Provider)
        .column(usage_daily::Column::Model)
        .column_as(
            Expr::cust(format!("span_start_ms / {QUARTER_HOUR_MS}")),
            "slot",
        )
        .column_as(sum("rows"), "attempts")
        .column_as(sum("prompt_tokens"), "prompt_tokens")
        .column_as(sum("cached_tokens"), "cached_tokens")
        .column_as(sum("cache_write_tokens"), "cache_write_tokens")
        .column_as(sum("completion_tokens"), "completion_tokens")
        .column_as(sum("cost_nanos"), "cost_nanos")
        .filter(usage_daily::Column::Pending.eq(false))
        .filter(usage_daily::Column::SpanStartMs.gte(ms(from_ms)))
        .filter(usage_daily::Column::SpanStartMs.lt(ms(to_ms)));
    if let Some(provider) = provider {
        detail = detail.filter(usage::Column::Provider.eq(provider));
        rolled = rolled.filter(usage_daily::Column::Provider.eq(provider));
    }
    let detail = detail
        .group_by(usage::Column::Provider)
        .group_by(usage::Column::Model)
        .group_by(slot)
        .into_model::<Raw>()
        .all(db)
        .await?;
    let rolled = rolled
        .group_by(usage_daily::Column::Provider)
        .group_by(usage_daily::Column::Model)
        .group_by(Expr::cust(format!("span_start_ms / {QUARTER_HOUR_MS}")))
        .into_model::<Raw>()
        .all(db)
        .await?;
    let mut sums: BTreeMap<LedgerKey, LedgerSums> = BTreeMap::new();
    for raw in detail.into_iter().chain(rolled) {
        let start = u64::try_from(raw.slot.saturating_mul(QUARTER_HOUR_MS)).unwrap_or(0);
        let count = |v: Option<i64>| u64::try_from(v.unwrap_or(0)).unwrap_or(0);
        let entry = sums
            .entry((calendar.day_key(start), raw.provider, raw.model))
            .or_default();
        entry.attempts += count(raw.attempts);
        entry.input_tokens += count(raw.prompt_tokens);
        entry.cached_tokens += count(raw.cached_tokens);
        entry.cache_write_tokens += count(raw.cache_write_tokens);
        entry.output_tokens += count(raw.completion_tokens);
        entry.cost_nanos = entry.cost_nanos.saturating_add(raw.cost_nanos.unwrap_or(0));
    }
    Ok(sums)
}
