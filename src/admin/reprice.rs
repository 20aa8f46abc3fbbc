//! Re-pricing: recompute what the ledger's calls would cost under another
//! price table, from the token counts every row keeps. Metering stays apart
//! from billing: the ledger is read, never rewritten; the report says what
//! would change, per provider and model. Told to, a run writes each row's
//! difference as an adjustment of an open month (`reprice_adjustments.rs`);
//! it must, over a closed month, whose invoices are final.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use sea_orm::DatabaseConnection;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::AdminError;
use crate::calendar::{Calendar, Period};
use crate::config::{Billing, price_at};
use crate::ids::TenantId;
use crate::ledger::periods;
use crate::ledger::repo::{self, SpendFilter};
use crate::ledger::reprice_adjustments::{self, Difference};
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
    /// Closed months the span covers (their rows' differences can only be
    /// written as adjustments of an open month).
    pub closed_months: Vec<String>,
    /// What the run wrote, when it wrote adjustments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjustments: Option<Written>,
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

/// What a reprice covers, and whether it writes its differences.
#[derive(Debug, Clone, Copy, Default)]
pub struct RepriceRun<'a> {
    pub tenant: Option<&'a str>,
    /// First and last day (UTC), inclusive.
    pub from: Option<Date>,
    pub to: Option<Date>,
    /// Book each row's difference as an adjustment of an open month
    /// (`reprice_adjustments.rs`); a span over a closed month needs it.
    pub write_adjustments: bool,
    pub now_ms: u64,
}

/// What a reprice wrote, per tenant, key and model.
#[derive(Debug, Serialize, Default)]
pub struct Written {
    /// The run's idempotency key: the price version, the span and its rows.
    pub run_key: String,
    /// Adjustment rows written by this run (0 when an identical run wrote them).
    pub rows_written: u64,
    pub debit: Nanos,
    pub credit: Nanos,
    pub by_key: Vec<KeyDifference>,
}

#[derive(Debug, Serialize, Default, Clone)]
pub struct KeyDifference {
    pub tenant: String,
    pub key: String,
    pub model: String,
    pub rows: u64,
    pub debit: Nanos,
    pub credit: Nanos,
}

/// Recomputes both layers of the rows in range under `billing`: each row's
/// cost at the price in force when it was written, its charge at its plan's.
/// A row's current charge counts the adjustments written for it. A span
/// over a closed month is refused unless the run writes adjustments.
pub async fn reprice(
    db: &DatabaseConnection,
    calendar: &Calendar,
    billing: &Billing,
    run: RepriceRun<'_>,
) -> Result<RepriceReport, AdminError> {
    let filter = SpendFilter {
        tenant: run.tenant.map(TenantId::new),
        from_ms: run.from.map(Date::start_unix_ms),
        to_ms: run.to.map(|d| d.start_unix_ms() + 86_400_000),
    };
    let closed_months = closed_in(db, calendar, &filter).await?;
    if !closed_months.is_empty() && !run.write_adjustments {
        return Err(AdminError::Conflict(format!(
            "the span covers {}, closed: its invoices are final; write the differences as \
             adjustments of the first open month (--write-adjustments, or \
             \"write_adjustments\": true)",
            closed_months.join(", ")
        )));
    }
    let mut tally = Tally::new(billing, calendar, &filter);
    let mut after_id = 0;
    loop {
        let page = repo::rows_page(db, &filter, after_id, PAGE_ROWS).await?;
        let Some(last) = page.last() else { break };
        after_id = last.id;
        let ids: Vec<i64> = page.iter().map(|row| row.id).collect();
        let written = reprice_adjustments::written_for(db, &ids).await?;
        for row in &page {
            let (debit, credit) = written.get(&row.id).copied().unwrap_or_default();
            let billed = Nanos::from_db(row.charged_nanos)
                .saturating_add(debit)
                .saturating_sub(credit);
            tally.add(row, billed);
        }
    }
    let (mut report, differences, run_key) = tally.finish();
    report.closed_months = closed_months;
    if run.write_adjustments {
        let version = (run_key.as_str(), billing.version.as_str());
        let rows_written =
            reprice_adjustments::write(db, calendar, version, &differences, run.now_ms).await?;
        report.adjustments = Some(written(run_key, rows_written, &differences));
    }
    Ok(report)
}

/// The closed months whose days the span covers.
async fn closed_in(
    db: &DatabaseConnection,
    calendar: &Calendar,
    filter: &SpendFilter,
) -> Result<Vec<String>, AdminError> {
    let (from, to) = (
        filter.from_ms.unwrap_or(0),
        filter.to_ms.unwrap_or(u64::MAX),
    );
    Ok(periods::closes(db)
        .await?
        .into_iter()
        .filter(|close| {
            calendar
                .month(&close.month)
                .is_some_and(|w| w.start_ms < to && from < w.end_ms)
        })
        .map(|close| close.month)
        .collect())
}

/// The report, the rows' differences and the run's key, built row by row.
struct Tally<'a> {
    billing: &'a Billing,
    calendar: &'a Calendar,
    report: RepriceReport,
    by_model: BTreeMap<(String, String), RepriceRow>,
    unpriced: BTreeSet<String>,
    unplanned: BTreeSet<String>,
    differences: Vec<Difference>,
    run_key: Sha256,
}

impl<'a> Tally<'a> {
    fn new(billing: &'a Billing, calendar: &'a Calendar, filter: &SpendFilter) -> Tally<'a> {
        let mut run_key = Sha256::new();
        let span = format!(
            "{}\0{:?}\0{:?}\0{:?}\0",
            billing.version,
            filter.tenant.as_ref().map(ToString::to_string),
            filter.from_ms,
            filter.to_ms
        );
        run_key.update(span.as_bytes());
        Tally {
            billing,
            calendar,
            report: RepriceReport {
                price_version: billing.version.clone(),
                ..RepriceReport::default()
            },
            by_model: BTreeMap::new(),
            unpriced: BTreeSet::new(),
            unplanned: BTreeSet::new(),
            differences: Vec::new(),
            run_key,
        }
    }

    fn add(&mut self, row: &entity::usage::Model, billed: Nanos) {
        let priced = price_row(
            row,
            billed,
            self.billing,
            &mut self.unpriced,
            &mut self.unplanned,
        );
        let report = &mut self.report;
        report.rows += 1;
        let key = key_of(row);
        let priced_now = from_usage(row) && self.billing.prices.contains_key(&key);
        report.repriced += u64::from(priced_now);
        let add = |total: &mut Nanos, n: Nanos| *total = total.saturating_add(n);
        add(&mut report.current_cost_total, priced.current.0);
        add(&mut report.current_total, priced.current.1);
        add(&mut report.repriced_cost_total, priced.new.0);
        add(&mut report.repriced_total, priced.new.1);
        let entry = self
            .by_model
            .entry(key.clone())
            .or_insert_with(|| RepriceRow {
                provider: key.0,
                model: key.1,
                ..RepriceRow::default()
            });
        entry.rows += 1;
        add(&mut entry.current_cost, priced.current.0);
        add(&mut entry.current, priced.current.1);
        add(&mut entry.repriced_cost, priced.new.0);
        add(&mut entry.repriced, priced.new.1);
        let line = format!("{}:{}:{}\n", row.id, row.charged_nanos, priced.new.1);
        self.run_key.update(line.as_bytes());
        if priced.new.1 != billed {
            self.differences.push(Difference {
                usage_id: row.id,
                tenant: row.tenant_id.clone(),
                key: row.key_id.clone(),
                provider: row.provider.clone(),
                model: row.model.clone(),
                feature: row.feature.clone(),
                stamped_month: self.stamped_month(row),
                charged: Nanos::from_db(row.charged_nanos),
                billed,
                repriced: priced.new.1,
            });
        }
    }

    fn stamped_month(&self, row: &entity::usage::Model) -> String {
        let at = u64::try_from(row.created_at_ms).unwrap_or(0);
        self.calendar.window(Period::Month, at).key
    }

    fn finish(self) -> (RepriceReport, Vec<Difference>, String) {
        let mut report = self.report;
        report.unpriced = self.unpriced.into_iter().collect();
        report.unplanned = self.unplanned.into_iter().collect();
        report.by_model = self.by_model.into_values().collect();
        let digest = self.run_key.finalize();
        let run_key = digest.iter().fold(String::new(), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        });
        (report, self.differences, run_key)
    }
}

/// The differences summed per tenant, key and model.
fn written(run_key: String, rows_written: u64, differences: &[Difference]) -> Written {
    let mut by_key: BTreeMap<(&str, &str, &str), KeyDifference> = BTreeMap::new();
    let mut out = Written {
        run_key,
        rows_written,
        ..Written::default()
    };
    for d in differences {
        let (debit, credit) = d.sides();
        out.debit = out.debit.saturating_add(debit);
        out.credit = out.credit.saturating_add(credit);
        let entry = by_key
            .entry((&d.tenant, &d.key, &d.model))
            .or_insert_with(|| KeyDifference {
                tenant: d.tenant.clone(),
                key: d.key.clone(),
                model: d.model.clone(),
                ..KeyDifference::default()
            });
        entry.rows += 1;
        entry.debit = entry.debit.saturating_add(debit);
        entry.credit = entry.credit.saturating_add(credit);
    }
    out.by_key = by_key.into_values().collect();
    out
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

/// Prices `row`, billed `billed` so far (its charge and its adjustments).
fn price_row(
    row: &entity::usage::Model,
    billed: Nanos,
    billing: &Billing,
    unpriced: &mut BTreeSet<String>,
    unplanned: &mut BTreeSet<String>,
) -> Priced {
    let charged = Nanos::from_db(row.charged_nanos);
    let current = (row.cost_nanos.map_or(charged, Nanos::from_db), billed);
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
            billed
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
