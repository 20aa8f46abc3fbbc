//! The reconciliation report: every row charged without the provider's
//! usage, which only the provider's own bill can settle. An `orphaned` row
//! was in flight when its reservation expired or the gateway stopped; an
//! `unknown` one reached the provider and ended without a usage report (a
//! timeout after sending, a reset mid-response). Both are charged their
//! whole hold, so the ledger never charges less than may have been spent;
//! this report says what to ask each provider about.

use sea_orm::DatabaseConnection;
use serde::Serialize;

use super::AdminError;
use super::spend::day_filter_from;
use crate::ledger::repo;
use crate::money::Nanos;

/// Rows listed at most; the totals always cover the whole range.
const MAX_LISTED_ROWS: u64 = 1_000;

#[derive(Debug, Default)]
pub struct ReconcileQuery {
    pub tenant: Option<String>,
    /// `YYYY-MM-DD`, inclusive.
    pub from: Option<String>,
    /// `YYYY-MM-DD`, inclusive.
    pub to: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ReconcileReport {
    pub tenant: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub currency: String,
    /// Per provider: what to compare with its bill.
    pub by_provider: Vec<ProviderTotal>,
    pub rows: Vec<ReconcileRow>,
    /// More rows matched than are listed.
    pub truncated: bool,
    pub charged: Nanos,
}

#[derive(Debug, Serialize, Default, Clone)]
pub struct ProviderTotal {
    pub provider: String,
    pub rows: u64,
    pub charged: Nanos,
}

#[derive(Debug, Serialize)]
pub struct ReconcileRow {
    pub event_id: String,
    pub request_id: String,
    pub client_request_id: Option<String>,
    pub tenant: String,
    pub provider: String,
    pub model: String,
    pub attempt: i32,
    /// `orphaned`, or the attempt's status when its outcome is unknown.
    pub status: String,
    pub usage_kind: String,
    pub charged: Nanos,
    pub created_at_ms: i64,
    pub error: Option<String>,
}

pub async fn report(
    db: &DatabaseConnection,
    currency: &str,
    query: ReconcileQuery,
) -> Result<ReconcileReport, AdminError> {
    let filter = day_filter_from(
        query.tenant.as_deref(),
        query.from.as_deref(),
        query.to.as_deref(),
    )?;
    // One more than listed tells whether the list is cut.
    let found = repo::unreconciled_rows(db, &filter, MAX_LISTED_ROWS + 1).await?;
    let truncated = found.len() > usize::try_from(MAX_LISTED_ROWS).unwrap_or(usize::MAX);
    let mut by_provider: Vec<ProviderTotal> = Vec::new();
    let mut charged = Nanos::ZERO;
    let mut rows = Vec::with_capacity(found.len());
    for row in found
        .into_iter()
        .take(usize::try_from(MAX_LISTED_ROWS).unwrap_or(usize::MAX))
    {
        let amount = Nanos::from_db(row.charged_nanos);
        charged = charged.saturating_add(amount);
        match by_provider.iter_mut().find(|t| t.provider == row.provider) {
            Some(total) => {
                total.rows += 1;
                total.charged = total.charged.saturating_add(amount);
            }
            None => by_provider.push(ProviderTotal {
                provider: row.provider.clone(),
                rows: 1,
                charged: amount,
            }),
        }
        rows.push(ReconcileRow {
            event_id: row.event_id,
            request_id: row.request_id,
            client_request_id: row.client_request_id,
            tenant: row.tenant_id,
            provider: row.provider,
            model: row.model,
            attempt: row.attempt,
            status: row.status,
            usage_kind: row.usage_kind,
            charged: amount,
            created_at_ms: row.created_at_ms,
            error: row.error,
        });
    }
    by_provider.sort_by(|a, b| a.provider.cmp(&b.provider));
    Ok(ReconcileReport {
        tenant: query.tenant,
        from: query.from,
        to: query.to,
        currency: currency.to_owned(),
        by_provider,
        rows,
        truncated,
        charged,
    })
}
