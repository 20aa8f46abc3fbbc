//! Retention: detail rows older than `ledger.retention_days` become daily
//! aggregates (`usage_daily`) and leave the ledger; every report, invoice
//! and check reads both, so their totals are the same before and after to
//! the nano-unit. Budgets never read either: they start from `usage_totals`.
//!
//! SQLite deletes the rows it summed, batch by batch, each batch one short
//! transaction. PostgreSQL keeps `usage` partitioned by month and drops a
//! month once all of it is past retention (`partitions`): its aggregates
//! stay pending, uncounted, until the transaction that drops the partition.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, TransactionTrait,
};
use serde::Serialize;

use entity::usage;

use super::{partitions, rollup};
use crate::calendar::Calendar;
use crate::money::Nanos;
use crate::storage::StorageError;

const DAY_MS: u64 = 86_400_000;

/// A pause between batches: a writer waiting on the database lock gets it.
const BETWEEN_BATCHES: Duration = Duration::from_millis(2);

/// What one roll-up did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct RolledUp {
    /// Rows created before this instant (Unix ms) were due.
    pub cutoff_ms: u64,
    /// Detail rows summed into aggregates.
    pub rows: u64,
    /// Transactions it took.
    pub batches: u64,
    /// The charge those rows carried (now carried by their aggregates).
    pub charged: Nanos,
    /// PostgreSQL: the months whose partitions were dropped.
    pub months_dropped: Vec<String>,
    /// Audit payloads past `audit.retention_days`, deleted.
    pub audit_payloads_deleted: u64,
}

/// How a roll-up runs: the settings of `[ledger]` it reads.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub retention_days: u32,
    pub batch_rows: u64,
    /// `audit.retention_days`: audit payloads have their own.
    pub audit_days: u32,
}

/// One roll-up at a time per process: the timer's and an operator's.
#[derive(Debug, Default)]
pub struct Retention {
    running: AtomicBool,
}

#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error("a roll-up is already running")]
    Busy,
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl Retention {
    /// Rolls up every row past retention at `now_ms`; refused while another runs.
    pub async fn run(
        &self,
        db: &DatabaseConnection,
        calendar: &Calendar,
        policy: Policy,
        now_ms: u64,
    ) -> Result<RolledUp, RetentionError> {
        if self.running.swap(true, Ordering::AcqRel) {
            return Err(RetentionError::Busy);
        }
        let mut result = roll_up(db, calendar, policy, now_ms).await;
        if let Ok(done) = &mut result {
            match delete_audit_payloads(db, policy, now_ms).await {
                Ok(deleted) => done.audit_payloads_deleted = deleted,
                Err(e) => result = Err(e),
            }
        }
        self.running.store(false, Ordering::Release);
        Ok(result?)
    }
}

/// PostgreSQL: this month's and next month's partitions, before rows arrive.
pub async fn prepare(db: &DatabaseConnection, now_ms: u64) -> Result<(), StorageError> {
    if db.get_database_backend() == DbBackend::Postgres {
        partitions::ensure_ahead(db, now_ms).await?;
    }
    Ok(())
}

async fn roll_up(
    db: &DatabaseConnection,
    calendar: &Calendar,
    policy: Policy,
    now_ms: u64,
) -> Result<RolledUp, StorageError> {
    prepare(db, now_ms).await?;
    let backend = db.get_database_backend();
    if policy.retention_days == 0 {
        return Ok(RolledUp::default());
    }
    let cutoff_ms = now_ms.saturating_sub(u64::from(policy.retention_days) * DAY_MS);
    // A row booked after its month closed keeps its id until its invoice is kept.
    let cutoff_ms = match super::periods::late_rows_from(db, calendar).await? {
        Some(late) => cutoff_ms.min(late),
        None => cutoff_ms,
    };
    let mut done = RolledUp {
        cutoff_ms,
        ..RolledUp::default()
    };
    if backend == DbBackend::Postgres {
        partitions::roll_up_months(db, calendar, cutoff_ms, policy.batch_rows, &mut done).await?;
    } else {
        roll_up_rows(db, calendar, cutoff_ms, policy.batch_rows, &mut done).await?;
    }
    Ok(done)
}

/// Sums and deletes the rows created before `cutoff_ms`, oldest first.
async fn roll_up_rows(
    db: &DatabaseConnection,
    calendar: &Calendar,
    cutoff_ms: u64,
    batch_rows: u64,
    done: &mut RolledUp,
) -> Result<(), StorageError> {
    let cutoff = i64::try_from(cutoff_ms).unwrap_or(i64::MAX);
    loop {
        let rows = usage::Entity::find()
            .filter(usage::Column::CreatedAtMs.lt(cutoff))
            .order_by_asc(usage::Column::Id)
            .limit(batch_rows)
            .all(db)
            .await?;
        if rows.is_empty() {
            return Ok(());
        }
        let ends = rollup::request_ends(db, &rows).await?;
        let txn = db.begin().await?;
        let charged = rollup::add_rows(&txn, &rows, &ends, calendar, false).await?;
        rollup::delete_rows(&txn, &rows).await?;
        txn.commit().await?;
        done.add(&rows, charged);
        actix_rt::time::sleep(BETWEEN_BATCHES).await;
    }
}

/// Deletes audit payloads older than `audit_days`, a batch per statement.
async fn delete_audit_payloads(
    db: &DatabaseConnection,
    policy: Policy,
    now_ms: u64,
) -> Result<u64, StorageError> {
    use entity::audit_payload;
    if policy.audit_days == 0 {
        return Ok(0);
    }
    let cutoff = now_ms.saturating_sub(u64::from(policy.audit_days) * DAY_MS);
    let cutoff = i64::try_from(cutoff).unwrap_or(i64::MAX);
    let mut deleted = 0;
    loop {
        let ids: Vec<i64> = audit_payload::Entity::find()
            .select_only()
            .column(audit_payload::Column::Id)
            .filter(audit_payload::Column::CreatedAtMs.lt(cutoff))
            .order_by_asc(audit_payload::Column::Id)
            .limit(policy.batch_rows)
            .into_tuple()
            .all(db)
            .await?;
        if ids.is_empty() {
            return Ok(deleted);
        }
        let gone = audit_payload::Entity::delete_many()
            .filter(audit_payload::Column::Id.is_in(ids))
            .exec(db)
            .await?;
        deleted += gone.rows_affected;
        actix_rt::time::sleep(BETWEEN_BATCHES).await;
    }
}

impl RolledUp {
    pub(super) fn add(&mut self, rows: &[usage::Model], charged: i64) {
        self.rows += rows.len() as u64;
        self.batches += 1;
        self.charged = self.charged.saturating_add(Nanos::from_db(charged));
    }
}

/// Runs the roll-up every `interval`, for as long as the process lives.
pub fn spawn(
    gateway: std::sync::Arc<crate::state::Gateway>,
) -> Option<actix_rt::task::JoinHandle<()>> {
    let interval = gateway.config.ledger.retention_interval_ms;
    if interval == 0 {
        return None;
    }
    Some(actix_rt::spawn(async move {
        loop {
            actix_rt::time::sleep(Duration::from_millis(interval)).await;
            match gateway.roll_up_now().await {
                Ok(done) if done.rows > 0 => tracing::info!(
                    rows = done.rows,
                    batches = done.batches,
                    months_dropped = ?done.months_dropped,
                    "Rolled up ledger rows past retention into daily aggregates."
                ),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(error = %error, "Cannot roll up the ledger now; the next run tries again.");
                }
            }
        }
    }))
}
