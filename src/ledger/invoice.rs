//! The ledger read an invoice is made of: one tenant's rows in a span of
//! time, summed by model and feature, and the same rows' sum read on its own,
//! so an invoice can prove its total. Rolled-up days count beside the rows.

use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, FromQueryResult, QueryFilter, QueryOrder,
    QuerySelect,
};
use serde::{Deserialize, Serialize};

use entity::usage;

use crate::ids::TenantId;
use crate::money::Nanos;
use crate::storage::StorageError;

/// One line of an invoice: every row of one model and feature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceLine {
    pub model: String,
    pub feature: String,
    /// Requests (a request with a fallback is one).
    pub requests: u64,
    /// Ledger rows: upstream attempts, cache hits and orphans.
    pub rows: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    pub amount: Nanos,
    /// What the line takes off the invoice: a reprice's credits (money has
    /// no sign, so a line's debits and credits are apart).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub credit: Nanos,
    /// Rows stamped in a month closed before they were written, booked in
    /// this one (see `periods.rs`), or a reprice's differences
    /// (`reprice_adjustments.rs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adjustment: bool,
    /// Why an adjustment that is not a late row is on the invoice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(amount: &Nanos) -> bool {
    *amount == Nanos::ZERO
}

/// The rows a read takes: those created in `[from_ms, to_ms)` with an id in
/// `(after_id, through_id]` where those are set, and the span's rolled-up
/// days unless `rows_only`.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub from_ms: u64,
    pub to_ms: u64,
    pub after_id: Option<i64>,
    pub through_id: Option<i64>,
    pub rows_only: bool,
}

impl Span {
    /// Every row and rolled-up day created in `[from_ms, to_ms)`.
    pub fn created(from_ms: u64, to_ms: u64) -> Span {
        Span {
            from_ms,
            to_ms,
            after_id: None,
            through_id: None,
            rows_only: false,
        }
    }
}

#[derive(Debug, FromQueryResult)]
struct RawLine {
    model: String,
    feature: String,
    requests: i64,
    rows: i64,
    prompt_tokens: Option<i64>,
    cached_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    charged_nanos: Option<i64>,
}

#[derive(Debug, FromQueryResult)]
struct RawSum {
    rows: i64,
    charged_nanos: Option<i64>,
}

fn in_span(
    tenant: &TenantId,
    span: Span,
) -> impl Fn(sea_orm::Select<usage::Entity>) -> sea_orm::Select<usage::Entity> {
    let tenant = tenant.to_string();
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let (from, to) = (ms(span.from_ms), ms(span.to_ms));
    move |query| {
        let mut query = query
            .filter(usage::Column::TenantId.eq(tenant.as_str()))
            .filter(usage::Column::CreatedAtMs.gte(from))
            .filter(usage::Column::CreatedAtMs.lt(to));
        if let Some(after) = span.after_id {
            query = query.filter(usage::Column::Id.gt(after));
        }
        if let Some(through) = span.through_id {
            query = query.filter(usage::Column::Id.lte(through));
        }
        query
    }
}

/// The tenant's rows in `span`, by model and feature.
pub async fn lines<C: ConnectionTrait>(
    db: &C,
    tenant: &TenantId,
    span: Span,
) -> Result<Vec<InvoiceLine>, StorageError> {
    let sum = |column: &str| Expr::cust(format!("CAST(SUM({column}) AS BIGINT)"));
    let query = usage::Entity::find()
        .select_only()
        .column(usage::Column::Model)
        .column(usage::Column::Feature)
        .column_as(Expr::cust("COUNT(DISTINCT request_id)"), "requests")
        .column_as(Expr::cust("COUNT(*)"), "rows")
        .column_as(sum("prompt_tokens"), "prompt_tokens")
        .column_as(sum("cached_tokens"), "cached_tokens")
        .column_as(sum("completion_tokens"), "completion_tokens")
        .column_as(sum("charged_nanos"), "charged_nanos");
    let rows = in_span(tenant, span)(query)
        .group_by(usage::Column::Model)
        .group_by(usage::Column::Feature)
        .order_by_asc(usage::Column::Model)
        .order_by_asc(usage::Column::Feature)
        .into_model::<RawLine>()
        .all(db)
        .await?;
    let count = |v: Option<i64>| u64::try_from(v.unwrap_or(0)).unwrap_or(0);
    let detail = rows
        .into_iter()
        .map(|r| InvoiceLine {
            model: r.model,
            feature: r.feature,
            requests: count(Some(r.requests)),
            rows: count(Some(r.rows)),
            prompt_tokens: count(r.prompt_tokens),
            cached_tokens: count(r.cached_tokens),
            completion_tokens: count(r.completion_tokens),
            amount: Nanos::from_db(r.charged_nanos.unwrap_or(0)),
            credit: Nanos::ZERO,
            adjustment: false,
            reason: None,
        })
        .collect();
    if span.rows_only {
        return Ok(detail);
    }
    let rolled = super::daily::invoice_lines(db, tenant, span.from_ms, span.to_ms).await?;
    Ok(merge_lines(detail, rolled))
}

/// Lines of the detail rows with the rolled-up days' lines added, by model
/// and feature, in their byte order on every backend.
fn merge_lines(mut lines: Vec<InvoiceLine>, rolled: Vec<InvoiceLine>) -> Vec<InvoiceLine> {
    for line in rolled {
        match lines
            .iter_mut()
            .find(|l| l.model == line.model && l.feature == line.feature)
        {
            Some(l) => {
                l.requests += line.requests;
                l.rows += line.rows;
                l.prompt_tokens += line.prompt_tokens;
                l.cached_tokens += line.cached_tokens;
                l.completion_tokens += line.completion_tokens;
                l.amount = l.amount.saturating_add(line.amount);
            }
            None => lines.push(line),
        }
    }
    lines.sort_by(|a, b| (&a.model, &a.feature).cmp(&(&b.model, &b.feature)));
    lines
}

/// The same rows' count and charged sum, read with no grouping.
pub async fn ledger_sum<C: ConnectionTrait>(
    db: &C,
    tenant: &TenantId,
    span: Span,
) -> Result<(u64, Nanos), StorageError> {
    let query = usage::Entity::find()
        .select_only()
        .column_as(Expr::cust("COUNT(*)"), "rows")
        .column_as(
            Expr::cust("CAST(SUM(charged_nanos) AS BIGINT)"),
            "charged_nanos",
        );
    let sum = in_span(tenant, span)(query)
        .into_model::<RawSum>()
        .one(db)
        .await?;
    let (rows, charged) = sum.map_or((0, Nanos::ZERO), |s| {
        (
            u64::try_from(s.rows).unwrap_or(0),
            Nanos::from_db(s.charged_nanos.unwrap_or(0)),
        )
    });
    if span.rows_only {
        return Ok((rows, charged));
    }
    let (rolled_rows, rolled) =
        super::daily::sum_in_span(db, tenant, span.from_ms, span.to_ms).await?;
    Ok((rows + rolled_rows, charged.saturating_add(rolled)))
}

/// A CSV field, quoted when it holds a separator, a quote or a line break.
pub fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}
