//! Spend reports from the ledger, grouped one way, for a period.

use sea_orm::DatabaseConnection;
use serde::Serialize;

use super::{AdminError, invalid};
use crate::ids::TenantId;
use crate::ledger::repo::{self, GroupBy, SpendFilter, SpendRow};
use crate::money::Nanos;
use crate::period::Date;

#[derive(Debug, Default)]
pub struct SpendQuery {
    pub tenant: Option<String>,
    pub group_by: Option<String>,
    /// `YYYY-MM-DD`, inclusive.
    pub from: Option<String>,
    /// `YYYY-MM-DD`, inclusive.
    pub to: Option<String>,
    /// `key` (default: the groups' keys in order) or `cost` (the most charged first).
    pub sort: Option<String>,
    /// Groups listed at most; the total still covers them all.
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct SpendReport {
    pub tenant: Option<String>,
    pub group_by: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub currency: String,
    pub rows: Vec<SpendRow>,
    /// Groups left off by `limit`.
    pub groups_left_off: usize,
    pub total: SpendTotal,
}

#[derive(Debug, Serialize, Default)]
pub struct SpendTotal {
    pub requests: u64,
    pub attempts: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    /// Charged to the tenants.
    pub cost: Nanos,
    /// At the providers' prices.
    pub provider_cost: Nanos,
    pub margin: repo::Margin,
}

fn parse_date(field: &str, text: &str) -> Result<Date, AdminError> {
    Date::parse(text).ok_or_else(|| invalid(field, format!("`{text}` is not a YYYY-MM-DD date")))
}

/// The rows of a tenant (or all) from the start of `from` to the end of `to`.
pub fn day_filter_from(
    tenant: Option<&str>,
    from: Option<&str>,
    to: Option<&str>,
) -> Result<SpendFilter, AdminError> {
    let from = from.map(|t| parse_date("from", t)).transpose()?;
    let to = to.map(|t| parse_date("to", t)).transpose()?;
    Ok(SpendFilter {
        tenant: tenant.map(TenantId::new),
        from_ms: from.map(Date::start_unix_ms),
        // `to` is inclusive: everything before the next day's start.
        to_ms: to.map(|d| d.start_unix_ms() + 86_400_000),
    })
}

pub async fn report(
    db: &DatabaseConnection,
    currency: &str,
    query: SpendQuery,
) -> Result<SpendReport, AdminError> {
    let group_text = query.group_by.unwrap_or_else(|| "model".to_owned());
    let group_by = GroupBy::parse(&group_text).ok_or_else(|| {
        invalid(
            "group_by",
            "use tenant, feature, model, provider, route, day, status, key, api, end_user or session",
        )
    })?;
    let filter = day_filter_from(
        query.tenant.as_deref(),
        query.from.as_deref(),
        query.to.as_deref(),
    )?;
    let by_cost = match query.sort.as_deref() {
        None | Some("key") => false,
        Some("cost") => true,
        Some(other) => return Err(invalid("sort", format!("`{other}`: use key or cost"))),
    };
    if query.limit == Some(0) {
        return Err(invalid("limit", "must be at least 1"));
    }
    let mut rows = repo::spend(db, &filter, group_by).await?;
    let mut total = SpendTotal::default();
    for row in &rows {
        total.attempts += row.attempts;
        total.prompt_tokens += row.prompt_tokens;
        total.cached_tokens += row.cached_tokens;
        total.completion_tokens += row.completion_tokens;
        total.cost = total.cost.saturating_add(row.cost);
        total.provider_cost = total.provider_cost.saturating_add(row.provider_cost);
    }
    total.margin = repo::Margin::between(total.cost, total.provider_cost);
    // Requests are distinct per group; across groups of one request (e.g. by
    // provider after a fallback) they would be counted twice, so count once.
    total.requests = repo::spend(db, &filter, GroupBy::Tenant)
        .await?
        .iter()
        .map(|r| r.requests)
        .sum();
    if by_cost {
        // Ties keep the keys' order: the sort is stable.
        rows.sort_by_key(|row| std::cmp::Reverse(row.cost));
    }
    let groups_left_off = query
        .limit
        .map_or(0, |limit| rows.len().saturating_sub(limit));
    rows.truncate(rows.len() - groups_left_off);
    Ok(SpendReport {
        tenant: query.tenant,
        group_by: group_text,
        from: query.from,
        to: query.to,
        currency: currency.to_owned(),
        rows,
        groups_left_off,
        total,
    })
}
