//! The expiry sweep of shared reservations. A reservation still held past
//! its request's deadline (plus a margin) belongs to a call whose replica
//! died or lost Redis. Before closing it the sweeping replica asks the
//! ledger how the request ended: rows there (the replica wrote them but died
//! before its Redis settle) are what it is charged, with no new row; with no
//! row it is committed at its reserved amount with an `orphaned` row, since
//! the upstream may have billed the call. While the ledger cannot be asked,
//! the reservations stay held: they still count against the budget.

use entity::usage;
use sea_orm::DatabaseConnection;

use super::{SharedQuota, StoreFailure};
use crate::ids::TenantId;
use crate::ledger::{AttemptStatus, repo};
use crate::money::Nanos;
use crate::tenant::messages::ReservationMeta;

/// At most this many expired reservations are closed per sweep.
const BATCH: usize = 100;

/// A reservation the sweep committed at its reserved amount: its orphan row is due.
pub struct Orphaned {
    pub meta: ReservationMeta,
    pub amount: Nanos,
}

/// How the ledger says a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its rows charged this much (and used these tokens): it settled.
    Settled { charged: Nanos, tokens: u64 },
    /// It has an `orphaned` row: committed at its reserved amount.
    Orphaned,
    /// No row at all.
    NoRow,
}

impl Outcome {
    /// What `close_request` commits: the rows' charge, or (`None`) the reserved amount.
    pub fn close_with(self) -> (Option<Nanos>, Option<u64>) {
        match self {
            Outcome::Settled { charged, tokens } => (Some(charged), Some(tokens)),
            Outcome::Orphaned | Outcome::NoRow => (None, None),
        }
    }
}

pub fn ledger_outcome(rows: &[usage::Model], request: &str) -> Outcome {
    let mine: Vec<&usage::Model> = rows.iter().filter(|r| r.request_id == request).collect();
    if mine.is_empty() {
        return Outcome::NoRow;
    }
    if mine
        .iter()
        .any(|r| r.status == AttemptStatus::Orphaned.as_str())
    {
        return Outcome::Orphaned;
    }
    Outcome::Settled {
        charged: mine
            .iter()
            .map(|r| Nanos::from_db(r.charged_nanos))
            .fold(Nanos::ZERO, Nanos::saturating_add),
        tokens: mine
            .iter()
            .map(|r| u64::try_from(r.prompt_tokens + r.completion_tokens).unwrap_or(0))
            .sum(),
    }
}

pub async fn sweep(
    quota: &SharedQuota,
    db: &DatabaseConnection,
    tenant: &TenantId,
    now_ms: u64,
) -> Result<Vec<Orphaned>, StoreFailure> {
    let expired = quota.expired(now_ms, BATCH).await?;
    if expired.is_empty() {
        return Ok(Vec::new());
    }
    let held: Vec<(ReservationMeta, Nanos)> = expired
        .into_iter()
        .filter_map(|e| {
            serde_json::from_str::<ReservationMeta>(&e.meta)
                .ok()
                .map(|meta| (meta, e.amount))
        })
        .collect();
    let requests: Vec<String> = held.iter().map(|(m, _)| m.request_id.to_string()).collect();
    let Ok(rows) = repo::rows_of_requests(db, tenant, &requests).await else {
        return Ok(Vec::new());
    };
    let mut orphaned = Vec::new();
    for (meta, amount) in held {
        let request = meta.request_id.to_string();
        let outcome = ledger_outcome(&rows, &request);
        let (charged, tokens) = outcome.close_with();
        let closed = quota
            .close_request(&request, charged, tokens, now_ms)
            .await?;
        if closed && outcome == Outcome::NoRow {
            orphaned.push(Orphaned { meta, amount });
        }
    }
    Ok(orphaned)
}
