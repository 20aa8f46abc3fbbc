//! Stored responses are written by one task, a batch per transaction: a
//! transaction per response would contend with the ledger's writer for
//! SQLite's one write lock at the end of every call. A save waits for its
//! batch to commit, so the next turn finds it. The task also keeps each
//! tenant's bytes in mind (read once from the database, then added to), so
//! making room costs nothing until a tenant is over its allowance, and
//! forgets expired responses once a minute.

use std::collections::HashMap;

use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    TransactionTrait,
};
use tokio::sync::{mpsc, oneshot};

use super::forget;

/// Responses written in one transaction at most.
const MAX_BATCH: usize = 256;
/// How often expired responses are deleted (reads never return them).
const PURGE_EVERY_MS: u64 = 60_000;
/// Expired responses deleted per purge at most; the rest wait for the next.
const PURGE_LIMIT: u64 = 1_000;

/// One response to write, and who waits for it.
pub(super) struct Job {
    pub tenant: String,
    pub bytes: u64,
    pub now_ms: u64,
    pub row: entity::stored_response::ActiveModel,
    pub items: Vec<entity::stored_response_item::ActiveModel>,
    pub done: oneshot::Sender<()>,
}

/// Starts the writer; its queue holds a few batches before a save waits.
pub(super) fn start(db: DatabaseConnection, max_bytes_per_tenant: u64) -> mpsc::Sender<Job> {
    let (tx, rx) = mpsc::channel(4 * MAX_BATCH);
    let writer = Writer {
        db,
        max_bytes_per_tenant,
        used: HashMap::new(),
        purged_ms: 0,
    };
    actix_rt::spawn(writer.run(rx));
    tx
}

struct Writer {
    db: DatabaseConnection,
    max_bytes_per_tenant: u64,
    /// Each tenant's stored bytes as last known.
    used: HashMap<String, u64>,
    purged_ms: u64,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            if let Err(error) = self.write(&mut batch).await {
                tracing::warn!(error = %error, responses = batch.len(), "Responses could not be stored; a later request naming one will not find it.");
            }
            let now_ms = batch.iter().map(|job| job.now_ms).max().unwrap_or(0);
            for job in batch {
                let _ = job.done.send(());
            }
            if let Err(error) = self.upkeep(now_ms).await {
                tracing::warn!(error = %error, "Stored responses could not be trimmed.");
            }
        }
    }

    /// The batch in one transaction of writes only (a read first would make
    /// SQLite's transaction fail, not wait, when the ledger wrote meanwhile).
    async fn write(&mut self, batch: &mut [Job]) -> Result<(), sea_orm::DbErr> {
        use entity::{stored_response, stored_response_item};
        for job in batch.iter() {
            if !self.used.contains_key(&job.tenant) {
                let stored = self.stored_bytes(&job.tenant).await?;
                self.used.insert(job.tenant.clone(), stored);
            }
        }
        let txn = self.db.begin().await?;
        for job in batch.iter_mut() {
            stored_response::Entity::insert(job.row.clone())
                .on_conflict(
                    OnConflict::columns([
                        stored_response::Column::TenantId,
                        stored_response::Column::Id,
                    ])
                    .do_nothing()
                    .to_owned(),
                )
                .exec_without_returning(&txn)
                .await?;
            // An item seen again (an input replayed) stays with its first response.
            for item in std::mem::take(&mut job.items) {
                stored_response_item::Entity::insert(item)
                    .on_conflict(
                        OnConflict::columns([
                            stored_response_item::Column::TenantId,
                            stored_response_item::Column::Id,
                        ])
                        .do_nothing()
                        .to_owned(),
                    )
                    .exec_without_returning(&txn)
                    .await?;
            }
        }
        txn.commit().await?;
        for job in batch.iter() {
            let used = self.used.entry(job.tenant.clone()).or_default();
            *used = used.saturating_add(job.bytes);
        }
        Ok(())
    }

    /// Brings every tenant over its allowance back under it (oldest first),
    /// and now and then forgets what expired.
    async fn upkeep(&mut self, now_ms: u64) -> Result<(), sea_orm::DbErr> {
        let over: Vec<String> = self
            .used
            .iter()
            .filter(|(_, used)| **used > self.max_bytes_per_tenant)
            .map(|(tenant, _)| tenant.clone())
            .collect();
        for tenant in over {
            self.make_room(&tenant).await?;
        }
        if now_ms.saturating_sub(self.purged_ms) >= PURGE_EVERY_MS {
            self.purged_ms = now_ms;
            self.purge(now_ms).await?;
        }
        Ok(())
    }

    async fn make_room(&mut self, tenant: &str) -> Result<(), sea_orm::DbErr> {
        use entity::stored_response::{Column, Entity};
        let oldest_first: Vec<(String, i64)> = Entity::find()
            .select_only()
            .column(Column::Id)
            .column(Column::Bytes)
            .filter(Column::TenantId.eq(tenant))
            .order_by_asc(Column::CreatedAtMs)
            .into_tuple()
            .all(&self.db)
            .await?;
        let size = |bytes: i64| u64::try_from(bytes).unwrap_or(0);
        let mut used: u64 = oldest_first.iter().map(|(_, bytes)| size(*bytes)).sum();
        for (id, bytes) in oldest_first {
            if used <= self.max_bytes_per_tenant {
                break;
            }
            forget(&self.db, tenant, &id).await?;
            used = used.saturating_sub(size(bytes));
        }
        self.used.insert(tenant.to_owned(), used);
        Ok(())
    }

    async fn purge(&mut self, now_ms: u64) -> Result<(), sea_orm::DbErr> {
        use entity::stored_response::{Column, Entity};
        let expired: Vec<(String, String, i64)> = Entity::find()
            .select_only()
            .column(Column::TenantId)
            .column(Column::Id)
            .column(Column::Bytes)
            .filter(Column::ExpiresAtMs.lte(super::db_ms(now_ms)))
            .limit(PURGE_LIMIT)
            .into_tuple()
            .all(&self.db)
            .await?;
        for (tenant, id, bytes) in expired {
            forget(&self.db, &tenant, &id).await?;
            if let Some(used) = self.used.get_mut(&tenant) {
                *used = used.saturating_sub(u64::try_from(bytes).unwrap_or(0));
            }
        }
        Ok(())
    }

    async fn stored_bytes(&self, tenant: &str) -> Result<u64, sea_orm::DbErr> {
        use entity::stored_response::{Column, Entity};
        let sizes: Vec<i64> = Entity::find()
            .select_only()
            .column(Column::Bytes)
            .filter(Column::TenantId.eq(tenant))
            .into_tuple()
            .all(&self.db)
            .await?;
        Ok(sizes
            .into_iter()
            .map(|bytes| u64::try_from(bytes).unwrap_or(0))
            .sum())
    }
}
