//! Invoices: a tenant's month (of the billing time zone) from the ledger, in
//! lines by model and feature whose total is the ledger's sum to the nano-unit,
//! with the adjustments booked in the month (late rows, a reprice's debits and
//! credits). `check` reads that sum again without the grouping and says
//! whether they agree.

use std::fmt::Write as _;

use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde::Serialize;

use super::{AdminError, invalid, tenants};
use crate::calendar::Calendar;
use crate::ledger::invoice::{self, InvoiceLine, Span, csv_field as field};
use crate::ledger::periods::{self, Standing};
use crate::ledger::reprice_adjustments::{self, Sides};
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
    /// The lines' amounts: what is charged.
    pub total: Nanos,
    /// The lines' credits (a reprice's): the amount due is `total` less these.
    pub credits: Nanos,
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
    Kept { ledger: Sides },
}

/// The ledger's own sum beside the invoice's total.
#[derive(Debug, Serialize)]
pub struct InvoiceCheck {
    pub lines_total: Nanos,
    pub ledger_total: Nanos,
    pub lines_credits: Nanos,
    pub ledger_credits: Nanos,
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
    let sides = lines_sides(&lines);
    Ok(Invoice {
        tenant_id: tenant.id.to_string(),
        month: window.key,
        timezone: calendar.name().to_owned(),
        currency: currency.to_owned(),
        from_ms: window.start_ms,
        to_ms: window.end_ms,
        lines,
        total: sides.debit,
        credits: sides.credit,
        closed,
        basis,
    })
}

/// The lines' rows, amounts and credits.
pub(crate) fn lines_sides(lines: &[InvoiceLine]) -> Sides {
    lines.iter().fold(Sides::default(), |sum, line| Sides {
        rows: sum.rows + line.rows,
        debit: sum.debit.saturating_add(line.amount),
        credit: sum.credit.saturating_add(line.credit),
    })
}

/// `tenant`'s lines of the month `window` as its invoice shows them.
pub(crate) async fn lines_of<C: ConnectionTrait>(
    db: &C,
    calendar: &Calendar,
    tenant: &crate::ids::TenantId,
    window: &crate::calendar::Window,
) -> Result<Vec<InvoiceLine>, AdminError> {
    Ok(month_lines(db, calendar, tenant, window).await?.0)
}

/// A month's lines as it stands: kept if it is closed, with the late rows
/// booked in it if it is the first open month, else its rows; an open
/// month's with the reprice adjustments booked in it.
async fn month_lines<C: ConnectionTrait>(
    db: &C,
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
                    ledger: Sides::default(),
                };
                return Ok((Vec::new(), true, empty));
            };
            let lines = serde_json::from_str(&kept.lines).map_err(|e| {
                let what = format!("the kept invoice of {} is unreadable: {e}", kept.month);
                AdminError::Storage(sea_orm::DbErr::Custom(what).into())
            })?;
            let basis = Basis::Kept {
                ledger: Sides {
                    rows: u64::try_from(kept.ledger_rows).unwrap_or(0),
                    debit: Nanos::from_db(kept.ledger_nanos),
                    credit: Nanos::from_db(kept.ledger_credit_nanos),
                },
            };
            Ok((lines, true, basis))
        }
        Standing::FirstOpen { after } => {
            let mut lines = invoice::lines(db, tenant, live).await?;
            let (late, _) = periods::adjustments(db, tenant, window.start_ms, after, None).await?;
            lines.extend(late);
            lines.extend(reprice_adjustments::lines(db, tenant, &window.key).await?);
            Ok((lines, false, Basis::FirstOpen { after }))
        }
        Standing::Open => {
            let mut lines = invoice::lines(db, tenant, live).await?;
            lines.extend(reprice_adjustments::lines(db, tenant, &window.key).await?);
            Ok((lines, false, Basis::Live))
        }
    }
}

pub async fn check(db: &DatabaseConnection, invoice: &Invoice) -> Result<InvoiceCheck, AdminError> {
    let ledger = match invoice.basis {
        Basis::Kept { ledger } => ledger,
        Basis::Live => live_sum(db, invoice, None).await?,
        Basis::FirstOpen { after } => live_sum(db, invoice, Some(after)).await?,
    };
    let lines = lines_sides(&invoice.lines);
    Ok(InvoiceCheck {
        lines_total: lines.debit,
        ledger_total: ledger.debit,
        lines_credits: lines.credit,
        ledger_credits: ledger.credit,
        lines_rows: lines.rows,
        ledger_rows: ledger.rows,
        matches: lines == ledger,
    })
}

/// An open month's ledger sum: its rows, the late rows written after the
/// close whose watermark is `after` (the first open month), and the reprice
/// adjustments booked in it.
async fn live_sum(
    db: &DatabaseConnection,
    invoice: &Invoice,
    after: Option<i64>,
) -> Result<Sides, AdminError> {
    let tenant = crate::ids::TenantId::new(invoice.tenant_id.as_str());
    let live = Span::created(invoice.from_ms, invoice.to_ms);
    let (mut rows, mut total) = invoice::ledger_sum(db, &tenant, live).await?;
    if let Some(after) = after {
        let (_, (late_rows, late)) =
            periods::adjustments(db, &tenant, invoice.from_ms, after, None).await?;
        rows += late_rows;
        total = total.saturating_add(late);
    }
    let repriced = reprice_adjustments::sum(db, &tenant, &invoice.month).await?;
    Ok(Sides {
        rows: rows + repriced.rows,
        debit: total.saturating_add(repriced.debit),
        credit: repriced.credit,
    })
}

/// The invoice as CSV: a header, one line per model and feature, and the
/// amount due. A line's amount is its charge less its credits, with a minus
/// sign where the credits are more; an adjustment's kind names its reason.
pub fn csv(invoice: &Invoice) -> String {
    let mut out = String::from(
        "model,feature,requests,rows,prompt_tokens,cached_tokens,completion_tokens,amount,kind\n",
    );
    for line in &invoice.lines {
        let kind = match (&line.reason, line.adjustment) {
            (Some(reason), _) => format!("adjustment: {reason}"),
            (None, true) => "adjustment".to_owned(),
            (None, false) => "usage".to_owned(),
        };
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
            signed(line.amount, line.credit),
            field(&kind),
        );
    }
    let _ = writeln!(
        out,
        "total,,,,,,,{},",
        signed(invoice.total, invoice.credits)
    );
    out
}

/// `debit` less `credit` as decimal text, negative with a leading minus.
pub fn signed(debit: Nanos, credit: Nanos) -> String {
    if credit > debit {
        format!("-{}", credit.saturating_sub(debit))
    } else {
        debit.saturating_sub(credit).to_string()
    }
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
                credit: Nanos::ZERO,
                adjustment: false,
                reason: None,
            }],
            total: Nanos::new(1_500_000_000),
            credits: Nanos::ZERO,
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

    #[test]
    fn a_reprice_credit_shows_net_with_a_minus_sign_and_its_reason() {
        let line = InvoiceLine {
            model: "m".to_owned(),
            feature: "chat".to_owned(),
            requests: 0,
            rows: 2,
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
            amount: Nanos::new(250_000_000),
            credit: Nanos::new(750_000_000),
            adjustment: true,
            reason: Some("repriced at price version v2".to_owned()),
        };
        let invoice = Invoice {
            tenant_id: "acme".to_owned(),
            month: "2026-11".to_owned(),
            timezone: "UTC".to_owned(),
            currency: "USD".to_owned(),
            from_ms: 0,
            to_ms: 1,
            lines: vec![line],
            total: Nanos::new(250_000_000),
            credits: Nanos::new(750_000_000),
            closed: false,
            basis: Basis::Live,
        };
        let text = csv(&invoice);
        assert!(
            text.ends_with(
                "m,chat,0,2,0,0,0,-0.5,adjustment: repriced at price version v2\n\
                 total,,,,,,,-0.5,\n"
            ),
            "{text}"
        );
        assert_eq!(signed(Nanos::new(3), Nanos::new(1)), "0.000000002");
    }
}
