//! Months that close. Rows keep arriving for a month after it ends (a
//! journal replayed late, a stream settled after midnight); finance needs a
//! point after which a month's totals never change. Closing a month (and
//! every earlier one still open: "closed through") records the largest
//! ledger row id at that instant, the watermark, and keeps each tenant's
//! invoice of each month it closes as it was: those invoices are final.
//!
//! A row written after a close but stamped in a closed month is an
//! adjustment of the first month open when it was written: of the month
//! after the latest close, whose invoice shows it on lines of its own, and
//! keeps it when that month closes in turn. Every row is thus on exactly one
//! invoice. The retention roll-up leaves such rows alone until then
//! (`late_rows_from`), since a rolled-up row has no id to book it by. A
//! reprice's adjustments booked in a month are kept with its invoice.
//!
//! The watermark is exact because nothing is written while it is read: on
//! PostgreSQL the close locks `usage` against writers (it waits for those
//! in flight, whose ids are then below it; later ones get larger ids); on
//! SQLite the close's first statement is the write that reads it, and
//! SQLite has one writer at a time.

use sea_orm::{
    ActiveValue::Set, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, QueryOrder,
    Statement, TransactionTrait,
};

use entity::{closed_invoice, period_close};

use super::invoice::{self, InvoiceLine, Span};
use super::reprice_adjustments::{self, Sides};
use crate::calendar::{Calendar, Period};
use crate::ids::TenantId;
use crate::money::Nanos;
use crate::storage::StorageError;

/// Why a month cannot close.
#[derive(Debug, thiserror::Error)]
pub enum CloseError {
    #[error("`{0}` is not a YYYY-MM month")]
    NotAMonth(String),
    #[error("{0} has not ended yet in the billing time zone")]
    NotEnded(String),
    #[error("months are closed through {0} already; a month closes once")]
    Closed(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<sea_orm::DbErr> for CloseError {
    fn from(error: sea_orm::DbErr) -> Self {
        CloseError::Storage(error.into())
    }
}

/// Where a month stands for its invoice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Closed: its invoices are the ones kept when it closed.
    Closed,
    /// The month after the latest close: its invoices add the rows written
    /// after that close (whose id is above `after`) stamped before it began.
    FirstOpen { after: i64 },
    /// No close yet, or a month later than the first open one.
    Open,
}

/// What a close did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Closing {
    /// Every month it closed, oldest first: the one asked for and the earlier
    /// ones still open.
    pub months: Vec<String>,
    pub watermark: i64,
    /// Invoices kept.
    pub invoices: usize,
}

/// The closed months, oldest first.
pub async fn closes<C: ConnectionTrait>(db: &C) -> Result<Vec<period_close::Model>, StorageError> {
    Ok(period_close::Entity::find()
        .order_by_asc(period_close::Column::Month)
        .all(db)
        .await?)
}

/// The month after `month` (`YYYY-MM`) in `calendar`.
pub fn next_month(calendar: &Calendar, month: &str) -> Option<String> {
    let window = calendar.month(month)?;
    Some(calendar.window(Period::Month, window.end_ms).key)
}

/// Where `month` stands, given the closes.
pub fn standing(calendar: &Calendar, closes: &[period_close::Model], month: &str) -> Standing {
    let Some(latest) = closes.last() else {
        return Standing::Open;
    };
    if month <= latest.month.as_str() {
        Standing::Closed
    } else if next_month(calendar, &latest.month).as_deref() == Some(month) {
        Standing::FirstOpen {
            after: latest.watermark,
        }
    } else {
        Standing::Open
    }
}

/// A closed month's kept invoice of `tenant` (`None`: it had no rows).
pub async fn kept<C: ConnectionTrait>(
    db: &C,
    tenant: &TenantId,
    month: &str,
) -> Result<Option<closed_invoice::Model>, StorageError> {
    Ok(
        closed_invoice::Entity::find_by_id((tenant.to_string(), month.to_owned()))
            .one(db)
            .await?,
    )
}

/// The adjustments of the first open month: `tenant`'s rows stamped before
/// `before_ms` and written after the close whose watermark is `after`, up to
/// `through` (a close in progress), as lines marked adjustments.
pub async fn adjustments<C: ConnectionTrait>(
    db: &C,
    tenant: &TenantId,
    before_ms: u64,
    after: i64,
    through: Option<i64>,
) -> Result<(Vec<InvoiceLine>, (u64, Nanos)), StorageError> {
    let span = Span {
        from_ms: 0,
        to_ms: before_ms,
        after_id: Some(after),
        through_id: through,
        rows_only: true,
    };
    let mut lines = invoice::lines(db, tenant, span).await?;
    for line in &mut lines {
        line.adjustment = true;
    }
    Ok((lines, invoice::ledger_sum(db, tenant, span).await?))
}

/// The earliest instant the ledger has a row or rolled-up day of.
async fn earliest_ms<C: ConnectionTrait>(db: &C) -> Result<Option<u64>, StorageError> {
    let row = db
        .query_one(Statement::from_string(
            db.get_database_backend(),
            "SELECT MIN(at) AS at FROM (SELECT MIN(created_at_ms) AS at FROM usage \
             UNION ALL SELECT MIN(span_start_ms) AS at FROM usage_daily) AS firsts",
        ))
        .await?;
    let at: Option<i64> = match row {
        Some(row) => row.try_get("", "at")?,
        None => None,
    };
    Ok(at.and_then(|at| u64::try_from(at).ok()))
}

/// The months a close of `month` closes, oldest first: those after the
/// latest close (from the ledger's first month on a first close) through it.
async fn months_to_close(
    db: &DatabaseConnection,
    calendar: &Calendar,
    month: &str,
    latest: Option<&period_close::Model>,
) -> Result<Vec<String>, CloseError> {
    let first = match latest {
        Some(latest) => next_month(calendar, &latest.month),
        None => earliest_ms(db)
            .await?
            .map(|at| calendar.window(Period::Month, at).key),
    };
    let mut months = Vec::new();
    let mut next = first.filter(|first| first.as_str() <= month);
    while let Some(current) = next {
        next = next_month(calendar, &current).filter(|n| n.as_str() <= month);
        months.push(current);
    }
    if months.last().map(String::as_str) != Some(month) {
        months = vec![month.to_owned()];
    }
    Ok(months)
}

/// Closes `month` and every earlier month still open.
pub async fn close(
    db: &DatabaseConnection,
    calendar: &Calendar,
    month: &str,
    now_ms: u64,
    by: Option<&str>,
) -> Result<Closing, CloseError> {
    let window = calendar
        .month(month)
        .ok_or_else(|| CloseError::NotAMonth(month.to_owned()))?;
    if window.end_ms > now_ms {
        return Err(CloseError::NotEnded(window.key));
    }
    let closed = closes(db).await?;
    let latest = closed.last();
    if let Some(latest) = latest.filter(|l| l.month.as_str() >= window.key.as_str()) {
        return Err(CloseError::Closed(latest.month.clone()));
    }
    let months = months_to_close(db, calendar, &window.key, latest).await?;
    let txn = db.begin().await?;
    let watermark = mark(&txn, &months, now_ms, by).await?;
    let mut invoices = 0;
    for (i, month) in months.iter().enumerate() {
        let after = latest.filter(|_| i == 0).map(|l| l.watermark);
        invoices += keep_month(&txn, calendar, month, watermark, after).await?;
    }
    txn.commit().await?;
    Ok(Closing {
        months,
        watermark,
        invoices,
    })
}

/// Records the months closed under one watermark read while nothing writes.
async fn mark<C: ConnectionTrait>(
    txn: &C,
    months: &[String],
    now_ms: u64,
    by: Option<&str>,
) -> Result<i64, CloseError> {
    let backend = txn.get_database_backend();
    if backend == DbBackend::Postgres {
        txn.execute_unprepared("LOCK TABLE usage IN SHARE MODE")
            .await?;
    }
    let first = months.first().cloned().unwrap_or_default();
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let sql = match backend {
        DbBackend::Postgres => {
            "INSERT INTO period_closes (month, watermark, closed_at_ms, closed_by) \
             SELECT $1, COALESCE(MAX(id), 0), $2, $3 FROM usage"
        }
        _ => {
            "INSERT INTO period_closes (month, watermark, closed_at_ms, closed_by) \
             SELECT ?, COALESCE(MAX(id), 0), ?, ? FROM usage"
        }
    };
    txn.execute(Statement::from_sql_and_values(
        backend,
        sql,
        [
            first.clone().into(),
            now.into(),
            by.map(str::to_owned).into(),
        ],
    ))
    .await?;
    let watermark = period_close::Entity::find_by_id(first)
        .one(txn)
        .await?
        .map_or(0, |close| close.watermark);
    for month in months.iter().skip(1) {
        period_close::Entity::insert(period_close::ActiveModel {
            month: Set(month.clone()),
            watermark: Set(watermark),
            closed_at_ms: Set(now),
            closed_by: Set(by.map(str::to_owned)),
        })
        .exec(txn)
        .await?;
    }
    Ok(watermark)
}

/// Keeps every tenant's invoice of `month`: its rows up to the watermark,
/// and the adjustments written after the close before (`after`), if any.
async fn keep_month<C: ConnectionTrait>(
    txn: &C,
    calendar: &Calendar,
    month: &str,
    watermark: i64,
    after: Option<i64>,
) -> Result<usize, CloseError> {
    let window = calendar
        .month(month)
        .ok_or_else(|| CloseError::NotAMonth(month.to_owned()))?;
    let mut kept = 0;
    for tenant in tenants_before(txn, window.end_ms).await? {
        let span = Span {
            through_id: Some(watermark),
            ..Span::created(window.start_ms, window.end_ms)
        };
        let mut lines = invoice::lines(txn, &tenant, span).await?;
        let (mut rows, mut charged) = invoice::ledger_sum(txn, &tenant, span).await?;
        if let Some(after) = after {
            let (late, (late_rows, late_charged)) =
                adjustments(txn, &tenant, window.start_ms, after, Some(watermark)).await?;
            lines.extend(late);
            rows += late_rows;
            charged = charged.saturating_add(late_charged);
        }
        lines.extend(reprice_adjustments::lines(txn, &tenant, month).await?);
        let repriced = reprice_adjustments::sum(txn, &tenant, month).await?;
        if lines.is_empty() {
            continue;
        }
        let ledger = Sides {
            rows: rows + repriced.rows,
            debit: charged.saturating_add(repriced.debit),
            credit: repriced.credit,
        };
        keep_invoice(txn, &tenant, month, &lines, ledger).await?;
        kept += 1;
    }
    Ok(kept)
}

async fn keep_invoice<C: ConnectionTrait>(
    txn: &C,
    tenant: &TenantId,
    month: &str,
    lines: &[InvoiceLine],
    ledger: Sides,
) -> Result<(), CloseError> {
    let total = lines
        .iter()
        .fold(Nanos::ZERO, |sum, line| sum.saturating_add(line.amount));
    let rows: u64 = lines.iter().map(|line| line.rows).sum();
    let db_count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    closed_invoice::Entity::insert(closed_invoice::ActiveModel {
        tenant_id: Set(tenant.to_string()),
        month: Set(month.to_owned()),
        // Lines of strings and numbers always serialize.
        lines: Set(serde_json::to_string(lines).unwrap_or_default()),
        total_nanos: Set(total.to_db()),
        rows: Set(db_count(rows)),
        ledger_nanos: Set(ledger.debit.to_db()),
        ledger_rows: Set(db_count(ledger.rows)),
        ledger_credit_nanos: Set(ledger.credit.to_db()),
    })
    .exec(txn)
    .await?;
    Ok(())
}

/// Every tenant with a row or rolled-up day before `end_ms`.
pub async fn tenants_before<C: ConnectionTrait>(
    txn: &C,
    end_ms: u64,
) -> Result<Vec<TenantId>, StorageError> {
    let backend = txn.get_database_backend();
    let end = i64::try_from(end_ms).unwrap_or(i64::MAX);
    let sql = match backend {
        DbBackend::Postgres => {
            "SELECT DISTINCT tenant_id FROM usage WHERE created_at_ms < $1 \
             UNION SELECT DISTINCT tenant_id FROM usage_daily WHERE span_start_ms < $2"
        }
        _ => {
            "SELECT DISTINCT tenant_id FROM usage WHERE created_at_ms < ? \
             UNION SELECT DISTINCT tenant_id FROM usage_daily WHERE span_start_ms < ?"
        }
    };
    let rows = txn
        .query_all(Statement::from_sql_and_values(
            backend,
            sql,
            [end.into(), end.into()],
        ))
        .await?;
    let mut tenants = Vec::with_capacity(rows.len());
    for row in rows {
        tenants.push(TenantId::new(row.try_get::<String>("", "tenant_id")?));
    }
    Ok(tenants)
}

/// Where the retention roll-up must stop: the earliest row stamped in a
/// closed month and written after the latest close, not yet on a kept
/// invoice (`None`: no such row).
pub async fn late_rows_from(
    db: &DatabaseConnection,
    calendar: &Calendar,
) -> Result<Option<u64>, StorageError> {
    let closed = closes(db).await?;
    let Some(latest) = closed.last() else {
        return Ok(None);
    };
    let Some(window) = calendar.month(&latest.month) else {
        return Ok(None);
    };
    let backend = db.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => {
            "SELECT MIN(created_at_ms) AS at FROM usage WHERE id > $1 AND created_at_ms < $2"
        }
        _ => "SELECT MIN(created_at_ms) AS at FROM usage WHERE id > ? AND created_at_ms < ?",
    };
    let end = i64::try_from(window.end_ms).unwrap_or(i64::MAX);
    let row = db
        .query_one(Statement::from_sql_and_values(
            backend,
            sql,
            [latest.watermark.into(), end.into()],
        ))
        .await?;
    let at: Option<i64> = match row {
        Some(row) => row.try_get("", "at")?,
        None => None,
    };
    Ok(at.and_then(|at| u64::try_from(at).ok()))
}
