//! Re-pricing: recompute what the ledger's calls would cost under another
//! price table, from the token counts every row keeps. Metering stays apart
//! from billing: the ledger is read, never rewritten; the report says what
//! would change, per provider and model.

use std::collections::{BTreeMap, BTreeSet};

use sea_orm::DatabaseConnection;
use serde::Serialize;

use super::AdminError;
use crate::config::{Billing, price_at};
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
    /// What the rows charged, and would charge under the table's plans.
    pub current_total: Nanos,
    pub repriced_total: Nanos,
    /// What the rows cost, and would cost at the table's prices.
    pub current_cost_total: Nanos,
    pub repriced_cost_total: Nanos,
    /// Rows of a provider/model the new table has no price for (left as charged).
    pub unpriced: Vec<String>,
    /// Plans rows were charged under that the table does not define (their
    /// charge is left as it was; their cost is repriced).
    pub unplanned: Vec<String>,
    pub by_model: Vec<RepriceRow>,
}

#[derive(Debug, Serialize, Default, Clone)]
pub struct RepriceRow {
    pub provider: String,
    pub model: String,
    pub rows: u64,
    pub current: Nanos,
    pub repriced: Nanos,
    pub current_cost: Nanos,
    pub repriced_cost: Nanos,
}

/// A row's (cost, charge) now and under the table.
struct Priced {
    current: (Nanos, Nanos),
    new: (Nanos, Nanos),
}

/// Recomputes both layers of the rows in range under `billing`: each row's
/// cost at the price in force when it was written, its charge at its plan's.
pub async fn reprice(
    db: &DatabaseConnection,
    billing: &Billing,
    tenant: Option<&str>,
    from: Option<Date>,
    to: Option<Date>,
) -> Result<RepriceReport, AdminError> {
    let price_version = billing.version.as_str();
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
    let mut unpriced = BTreeSet::new();
    let mut unplanned = BTreeSet::new();
    let mut after_id = 0;
    loop {
        let page = repo::rows_page(db, &filter, after_id, PAGE_ROWS).await?;
        let Some(last) = page.last() else { break };
        after_id = last.id;
        for row in page {
            let priced = price_row(&row, billing, &mut unpriced, &mut unplanned);
            report.rows += 1;
            let key = key_of(&row);
            let priced_now = from_usage(&row) && billing.prices.contains_key(&key);
            report.repriced += u64::from(priced_now);
            let add = |total: &mut Nanos, n: Nanos| *total = total.saturating_add(n);
            add(&mut report.current_cost_total, priced.current.0);
            add(&mut report.current_total, priced.current.1);
            add(&mut report.repriced_cost_total, priced.new.0);
            add(&mut report.repriced_total, priced.new.1);
            let entry = by_model.entry(key.clone()).or_insert_with(|| RepriceRow {
                provider: key.0,
                model: key.1,
                ..RepriceRow::default()
            });
            entry.rows += 1;
            add(&mut entry.current_cost, priced.current.0);
            add(&mut entry.current, priced.current.1);
            add(&mut entry.repriced_cost, priced.new.0);
            add(&mut entry.repriced, priced.new.1);
        }
    }
    report.unpriced = unpriced.into_iter().collect();
    report.unplanned = unplanned.into_iter().collect();
    report.by_model = by_model.into_values().collect();
    Ok(report)
}

/// Whether the row was charged from usage at a price (others keep what they
/// were charged: orphaned reservations, cache hits, failed attempts).
fn from_usage(row: &entity::usage::Model) -> bool {
    PRICED_STATUSES.contains(&row.status.as_str())
        && row.error.as_deref() != Some(SETTLED_AFTER_EXPIRY)
}

fn key_of(row: &entity::usage::Model) -> (String, String) {
    (row.provider.clone(), row.model.clone())
}

fn price_row(
    row: &entity::usage::Model,
    billing: &Billing,
    unpriced: &mut BTreeSet<String>,
    unplanned: &mut BTreeSet<String>,
) -> Priced {
    let charged = Nanos::from_db(row.charged_nanos);
    let current = (row.cost_nanos.map_or(charged, Nanos::from_db), charged);
    if !from_usage(row) {
        return Priced {
            current,
            new: current,
        };
    }
    let written = u64::try_from(row.created_at_ms).unwrap_or(0);
    let Some(price) = price_at(&billing.prices, &billing.changes, &key_of(row), written) else {
        unpriced.insert(format!("{}/{}", row.provider, row.model));
        return Priced {
            current,
            new: current,
        };
    };
    let usage = usage_of(row);
    let cost = pricing::charge(&price, &usage);
    let charge = match row
        .plan
        .as_deref()
        .map(|name| (name, billing.plans.get(name)))
    {
        None => cost,
        Some((_, Some(plan))) => {
            let charged_at = plan.price_for(&row.provider, &row.model, &price, written);
            pricing::charge(&charged_at, &usage)
        }
        Some((name, None)) => {
            unplanned.insert(name.to_owned());
            charged
        }
    };
    Priced {
        current,
        new: (cost, charge),
    }
}

fn usage_of(row: &entity::usage::Model) -> Usage {
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    Usage {
        prompt_tokens: count(row.prompt_tokens),
        cached_tokens: count(row.cached_tokens),
        cache_write_tokens: count(row.cache_write_tokens),
        completion_tokens: count(row.completion_tokens),
        web_searches: count(row.web_searches),
    }
}
