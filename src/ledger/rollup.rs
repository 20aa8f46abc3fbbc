//! Detail rows summed into `usage_daily`: one batch of rows at a time, each
//! in its own transaction with the aggregates it adds, so a writer waits at
//! most one batch and a crash between batches loses or doubles nothing.
//! A request counts once, in the group of its last row (its highest id),
//! wherever its other rows fall.

use std::collections::{BTreeMap, HashSet};

use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, FromQueryResult, QueryFilter, QuerySelect,
};

use entity::{usage, usage_daily};

use crate::calendar::{Calendar, Period};
use crate::storage::StorageError;

const DAY_MS: i64 = 86_400_000;

/// Aggregate rows per upsert statement: 23 parameters each.
const ROWS_PER_STATEMENT: usize = 512;

/// What a batch's rows are summed by: every column `usage_daily` keys on.
type GroupKey = (
    String,
    String,
    i64,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
);

#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    rows: i64,
    requests: i64,
    prompt_tokens: i64,
    cached_tokens: i64,
    cache_write_tokens: i64,
    completion_tokens: i64,
    reserved_nanos: i64,
    charged_nanos: i64,
    cost_nanos: i64,
}

impl Sums {
    fn add(&mut self, row: &usage::Model, ends_request: bool) {
        self.rows += 1;
        self.requests += i64::from(ends_request);
        self.prompt_tokens += row.prompt_tokens;
        self.cached_tokens += row.cached_tokens;
        self.cache_write_tokens += row.cache_write_tokens;
        self.completion_tokens += row.completion_tokens;
        self.reserved_nanos += row.reserved_nanos;
        self.charged_nanos += row.charged_nanos;
        // Rows before plans carry no cost: theirs was the charge.
        self.cost_nanos += row.cost_nanos.unwrap_or(row.charged_nanos);
    }
}

/// Where the row's UTC day and its billing-calendar day overlap begins.
fn span_start_ms(calendar: &Calendar, created_at_ms: i64) -> i64 {
    let utc_day = created_at_ms - created_at_ms.rem_euclid(DAY_MS);
    let local = calendar
        .window(Period::Day, u64::try_from(created_at_ms).unwrap_or(0))
        .start_ms;
    utc_day.max(i64::try_from(local).unwrap_or(i64::MAX))
}

fn group_key(calendar: &Calendar, row: &usage::Model) -> GroupKey {
    (
        row.tenant_id.clone(),
        row.day.clone(),
        span_start_ms(calendar, row.created_at_ms),
        row.key_id.clone(),
        row.feature.clone(),
        row.end_user.clone().unwrap_or_default(),
        row.api.clone(),
        row.route.clone(),
        row.provider.clone(),
        row.model.clone(),
        row.status.clone(),
        row.plan.clone().unwrap_or_default(),
    )
}

#[derive(Debug, FromQueryResult)]
struct LastRow {
    last: i64,
}

/// The ids, among `rows`, of the last row of their request in the whole
/// ledger. Read before the batch's transaction, so that one begins with a
/// write (on SQLite a reader turned writer fails rather than waits): rows
/// past retention are long settled, so no later row of theirs can arrive.
pub async fn request_ends<C: ConnectionTrait>(
    db: &C,
    rows: &[usage::Model],
) -> Result<HashSet<i64>, StorageError> {
    let requests: HashSet<&str> = rows.iter().map(|r| r.request_id.as_str()).collect();
    let lasts = usage::Entity::find()
        .select_only()
        .column_as(Expr::cust("MAX(id)"), "last")
        .filter(usage::Column::RequestId.is_in(requests))
        .group_by(usage::Column::RequestId)
        .into_model::<LastRow>()
        .all(db)
        .await?;
    Ok(lasts.into_iter().map(|l| l.last).collect())
}

/// Adds `rows` to `usage_daily` (`pending`: not yet counted by reports);
/// `ends` are the rows that end their request. Returns the charge they carried.
pub async fn add_rows<C: ConnectionTrait>(
    txn: &C,
    rows: &[usage::Model],
    ends: &HashSet<i64>,
    calendar: &Calendar,
    pending: bool,
) -> Result<i64, StorageError> {
    let mut groups: BTreeMap<GroupKey, Sums> = BTreeMap::new();
    for row in rows {
        groups
            .entry(group_key(calendar, row))
            .or_default()
            .add(row, ends.contains(&row.id));
    }
    let charged = groups.values().map(|s| s.charged_nanos).sum();
    let mut models: Vec<usage_daily::ActiveModel> = groups
        .into_iter()
        .map(|(key, sums)| aggregate(key, sums, pending))
        .collect();
    while !models.is_empty() {
        let rest = models.split_off(models.len().min(ROWS_PER_STATEMENT));
        let chunk = std::mem::replace(&mut models, rest);
        usage_daily::Entity::insert_many(chunk)
            .on_conflict(adding())
            .exec_without_returning(txn)
            .await?;
    }
    Ok(charged)
}

fn aggregate(key: GroupKey, sums: Sums, pending: bool) -> usage_daily::ActiveModel {
    let (tenant_id, day, span_start_ms, key_id, feature, end_user, api, route) =
        (key.0, key.1, key.2, key.3, key.4, key.5, key.6, key.7);
    let (provider, model, status, plan) = (key.8, key.9, key.10, key.11);
    usage_daily::Model {
        tenant_id,
        day,
        span_start_ms,
        key_id,
        feature,
        end_user,
        api,
        route,
        provider,
        model,
        status,
        plan,
        rows: sums.rows,
        requests: sums.requests,
        prompt_tokens: sums.prompt_tokens,
        cached_tokens: sums.cached_tokens,
        cache_write_tokens: sums.cache_write_tokens,
        completion_tokens: sums.completion_tokens,
        reserved_nanos: sums.reserved_nanos,
        charged_nanos: sums.charged_nanos,
        cost_nanos: sums.cost_nanos,
        pending,
    }
    .into()
}

/// An aggregate already there gains the new sums.
fn adding() -> OnConflict {
    use usage_daily::Column as C;
    let mut conflict = OnConflict::columns([
        C::TenantId,
        C::Day,
        C::SpanStartMs,
        C::KeyId,
        C::Feature,
        C::EndUser,
        C::Api,
        C::Route,
        C::Provider,
        C::Model,
        C::Status,
        C::Plan,
    ]);
    for (column, name) in [
        (C::Rows, "rows"),
        (C::Requests, "requests"),
        (C::PromptTokens, "prompt_tokens"),
        (C::CachedTokens, "cached_tokens"),
        (C::CacheWriteTokens, "cache_write_tokens"),
        (C::CompletionTokens, "completion_tokens"),
        (C::ReservedNanos, "reserved_nanos"),
        (C::ChargedNanos, "charged_nanos"),
        (C::CostNanos, "cost_nanos"),
    ] {
        conflict.value(
            column,
            Expr::cust(format!("usage_daily.{name} + excluded.{name}")),
        );
    }
    conflict
}

/// Deletes the detail rows just summed.
pub async fn delete_rows<C: ConnectionTrait>(
    txn: &C,
    rows: &[usage::Model],
) -> Result<(), StorageError> {
    usage::Entity::delete_many()
        .filter(usage::Column::Id.is_in(rows.iter().map(|r| r.id)))
        .exec(txn)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_falls_where_its_utc_day_and_local_day_overlap() {
        let shanghai = Calendar::named("Asia/Shanghai").unwrap();
        // 2026-11-10T20:00Z: the UTC day began at 00:00Z, the Shanghai day (11-11) at 16:00Z.
        let at = 1_794_340_800_000;
        assert_eq!(span_start_ms(&shanghai, at), 1_794_326_400_000);
        // 2026-11-10T10:00Z: the Shanghai day began at 11-09T16:00Z, before the UTC day.
        let morning = 1_794_304_800_000;
        assert_eq!(span_start_ms(&shanghai, morning), 1_794_268_800_000);
        assert_eq!(span_start_ms(&Calendar::utc(), at), 1_794_268_800_000);
    }
}
