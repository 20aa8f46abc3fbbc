//! Re-pricing: recompute what the ledger's calls would cost under another
//! price table, from the token counts every row keeps. Metering stays apart
//! from billing: the ledger is read, never rewritten; the report says what
//! would change, per provider and model.

use std::collections::{BTreeMap, HashMap};

use sea_orm::DatabaseConnection;
use serde::Serialize;

use super::AdminError;
use crate::config::Price;
use crate::ids::TenantId;
use crate::ledger::repo::{self, SpendFilter};
use crate::money::Nanos;
use crate::period::Date;
use crate::pricing::{self, Usage};

const PAGE_ROWS: u64 = 5_000;
/// Rows whose charge came from usage at a price (others: orphaned reservations,
/// cache hits and failed attempts keep what they were charged).
const PRICED_STATUSES: [&str; 4] = ["ok", "fallback_ok", "partial", "client_cancelled"];
/// A late settle whose reservation had expired: its `orphaned` row holds the charge.
use crate::ledger::settle::SETTLED_AFTER_EXPIRY;

#[derive(Debug, Serialize, Default)]
pub struct RepriceReport {
    pub price_version: String,
    pub rows: u64,
    pub repriced: u64,
    pub current_total: Nanos,
    pub repriced_total: Nanos,
    /// Rows of a provider/model the new table has no price for (left as charged).
    pub unpriced: Vec<String>,
    pub by_model: Vec<RepriceRow>,
}

#[derive(Debug, Serialize, Default, Clone)]
pub struct RepriceRow {
    pub provider: String,
    pub model: String,
    pub rows: u64,
    pub current: Nanos,
    pub repriced: Nanos,
}

pub async fn reprice<S: std::hash::BuildHasher>(
    db: &DatabaseConnection,
    table: &HashMap<(String, String), Price, S>,
    price_version: &str,
    tenant: Option<&str>,
    from: Option<Date>,
    to: Option<Date>,
) -> Result<RepriceReport, AdminError> {
    let filter = SpendFilter {
        tenant: tenant.map(TenantId::new),
        from_ms: from.map(Date::start_unix_ms),
        to_ms: to.map(|d| d.start_unix_ms() + 86_400_000),
    };
    let mut report = RepriceReport {
        price_version: price_version.to_owned(),
        ..RepriceReport::default()
    };
    let mut by_model: BTreeMap<(String, String), RepriceRow> = BTreeMap::new();
    let mut unpriced = std::collections::BTreeSet::new();
    let mut after_id = 0;
    loop {
        let page = repo::rows_page(db, &filter, after_id, PAGE_ROWS).await?;
        let Some(last) = page.last() else { break };
        after_id = last.id;
        for row in page {
            report.rows += 1;
            let current = Nanos::from_db(row.charged_nanos);
            report.current_total = report.current_total.saturating_add(current);
            let key = (row.provider.clone(), row.model.clone());
            let from_usage = PRICED_STATUSES.contains(&row.status.as_str())
                && row.error.as_deref() != Some(SETTLED_AFTER_EXPIRY);
            let new = match (from_usage, table.get(&key)) {
                (false, _) => current,
                (true, Some(price)) => {
                    report.repriced += 1;
                    pricing::charge(price, &usage_of(&row))
                }
                (true, None) => {
                    unpriced.insert(format!("{}/{}", row.provider, row.model));
                    current
                }
            };
            report.repriced_total = report.repriced_total.saturating_add(new);
            let entry = by_model.entry(key.clone()).or_insert_with(|| RepriceRow {
                provider: key.0,
                model: key.1,
                ..RepriceRow::default()
            });
            entry.rows += 1;
            entry.current = entry.current.saturating_add(current);
            entry.repriced = entry.repriced.saturating_add(new);
        }
    }
    report.unpriced = unpriced.into_iter().collect();
    report.by_model = by_model.into_values().collect();
    Ok(report)
}

fn usage_of(row: &entity::usage::Model) -> Usage {
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    Usage {
        prompt_tokens: count(row.prompt_tokens),
        cached_tokens: count(row.cached_tokens),
        cache_write_tokens: count(row.cache_write_tokens),
        completion_tokens: count(row.completion_tokens),
    }
}
