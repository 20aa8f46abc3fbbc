//! Invoices: a tenant's month (of the billing time zone) from the ledger, in
//! lines by model and feature whose total is the ledger's sum to the nano-unit.
//! `check` reads that sum again without the grouping and says whether they agree.

use std::fmt::Write as _;

use sea_orm::DatabaseConnection;
use serde::Serialize;

use super::{AdminError, invalid, tenants};
use crate::calendar::Calendar;
use crate::ledger::invoice::{self, InvoiceLine, Span, csv_field as field};
use crate::ledger::periods::{self, Standing};
use crate::money::Nanos;

#[derive(Debug, Serialize)]
pub struct Invoice {
    pub tenant_id: String,
    /// `YYYY-MM` in `timezone`.
    pub month: String,
    pub timezone: String,
    pub currency: String,
    /// The month's first and last instants (ms since the epoch, end exclusive).
    pub from_ms: u64,
    pub to_ms: u64,
    pub lines: Vec<InvoiceLine>,
    pub total: Nanos,
    /// The month is closed: this invoice is the one kept when it closed.
    pub closed: bool,
    /// What `check` reads the ledger's own sum from.
    #[serde(skip)]
    basis: Basis,
}

#[derive(Debug, Clone, Copy)]
enum Basis {
    /// The month's rows (and rolled-up days).
    Live,
    /// The month's rows and the adjustments written after the watermark.
    FirstOpen { after: i64 },
    /// The ledger's sum read apart when the month closed.
    Kept { rows: u64, total: Nanos },
}

/// The ledger's own sum beside the invoice's total.
#[derive(Debug, Serialize)]
pub struct InvoiceCheck {
    pub lines_total: Nanos,
    pub ledger_total: Nanos,
    pub lines_rows: u64,
    pub ledger_rows: u64,
    pub matches: bool,
}

pub async fn build(
    db: &DatabaseConnection,
    calendar: &Calendar,
    currency: &str,
    tenant: &str,
    month: &str,
) -> Result<Invoice, AdminError> {
    let tenant = tenants::get(db, tenant).await?;
    let window = calendar
        .month(month)
        .ok_or_else(|| invalid("month", format!("`{month}` is not a YYYY-MM month")))?;
    let (lines, closed, basis) = month_lines(db, calendar, &tenant.id, &window).await?;
    let total = lines
        .iter()
        .fold(Nanos::ZERO, |sum, line| sum.saturating_add(line.amount));
    Ok(Invoice {
        tenant_id: tenant.id.to_string(),
        month: window.key,
        timezone: calendar.name().to_owned(),
        currency: currency.to_owned(),
        from_ms: window.start_ms,
        to_ms: window.end_ms,
        lines,
        total,
        closed,
        basis,
    })
}

/// A month's lines as it stands: kept if it is closed, with the adjustments
/// booked in it if it is the first open month, else its rows.
async fn month_lines(
    db: &DatabaseConnection,
    calendar: &Calendar,
    tenant: &crate::ids::TenantId,
    window: &crate::calendar::Window,
) -> Result<(Vec<InvoiceLine>, bool, Basis), AdminError> {
    let closes = periods::closes(db).await?;
    let live = Span::created(window.start_ms, window.end_ms);
    match periods::standing(calendar, &closes, &window.key) {
        Standing::Closed => {
            let Some(kept) = periods::kept(db, tenant, &window.key).await? else {
                let empty = Basis::Kept {
                    rows: 0,
                    total: Nanos::ZERO,
                };
                return Ok((Vec::new(), true, empty));
            };
            let lines = serde_json::from_str(&kept.lines).map_err(|e| {
                let what = format!("the kept invoice of {} is unreadable: {e}", kept.month);
                AdminError::Storage(sea_orm::DbErr::Custom(what).into())
            })?;
            let basis = Basis::Kept {
                rows: u64::try_from(kept.ledger_rows).unwrap_or(0),
                total: Nanos::from_db(kept.ledger_nanos),
            };
            Ok((lines, true, basis))
        }
        Standing::FirstOpen { after } => {
            let mut lines = invoice::lines(db, tenant, live).await?;
            let (late, _) = periods::adjustments(db, tenant, window.start_ms, after, None).await?;
            lines.extend(late);
            Ok((lines, false, Basis::FirstOpen { after }))
        }
        Standing::Open => Ok((invoice::lines(db, tenant, live).await?, false, Basis::Live)),
    }
}

pub async fn check(db: &DatabaseConnection, invoice: &Invoice) -> Result<InvoiceCheck, AdminError> {
    let tenant = crate::ids::TenantId::new(invoice.tenant_id.as_str());
    let live = Span::created(invoice.from_ms, invoice.to_ms);
    let (ledger_rows, ledger_total) = match invoice.basis {
        Basis::Live => invoice::ledger_sum(db, &tenant, live).await?,
        Basis::FirstOpen { after } => {
            let (rows, total) = invoice::ledger_sum(db, &tenant, live).await?;
            let (_, (late_rows, late)) =
                periods::adjustments(db, &tenant, invoice.from_ms, after, None).await?;
            (rows + late_rows, total.saturating_add(late))
        }
        Basis::Kept { rows, total } => (rows, total),
    };
    let lines_rows = invoice.lines.iter().map(|line| line.rows).sum();
    Ok(InvoiceCheck {
        lines_total: invoice.total,
        ledger_total,
        lines_rows,
        ledger_rows,
        matches: ledger_total == invoice.total && ledger_rows == lines_rows,
    })
}

/// The invoice as CSV: a header, one line per model and feature, and the total.
pub fn csv(invoice: &Invoice) -> String {
    let mut out = String::from(
        "model,feature,requests,rows,prompt_tokens,cached_tokens,completion_tokens,amount,kind\n",
    );
    for line in &invoice.lines {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{}",
            field(&line.model),
            field(&line.feature),
            line.requests,
            line.rows,
            line.prompt_tokens,
            line.cached_tokens,
            line.completion_tokens,
            line.amount,
            if line.adjustment {
                "adjustment"
            } else {
                "usage"
            }
        );
    }
    let _ = writeln!(out, "total,,,,,,,{},", invoice.total);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_fields_that_need_it_and_ends_with_the_total() {
        let invoice = Invoice {
            tenant_id: "acme".to_owned(),
            month: "2026-11".to_owned(),
            timezone: "UTC".to_owned(),
            currency: "USD".to_owned(),
            from_ms: 0,
            to_ms: 1,
            lines: vec![InvoiceLine {
                model: "org/model, \"large\"".to_owned(),
                feature: "search".to_owned(),
                requests: 2,
                rows: 3,
                prompt_tokens: 10,
                cached_tokens: 0,
                completion_tokens: 5,
                amount: Nanos::new(1_500_000_000),
                adjustment: false,
            }],
            total: Nanos::new(1_500_000_000),
            closed: false,
            basis: Basis::Live,
        };
        assert_eq!(
            csv(&invoice),
            "model,feature,requests,rows,prompt_tokens,cached_tokens,completion_tokens,amount,kind\n\
             \"org/model, \"\"large\"\"\",search,2,3,10,0,5,1.5,usage\n\
             total,,,,,,,1.5,\n"
        );
    }
}
