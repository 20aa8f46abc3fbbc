//! The audit writer: payloads are handed over without waiting, then
//! redacted and written in batches by one task, so no request waits for the
//! database or spends its time on redaction. The queue is bounded in payloads
//! and in bytes; a full one drops the payload, counted
//! (`tollgate_audit_payloads_dropped_total`) and never logged with its text.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sea_orm::{DatabaseConnection, EntityTrait};
use tokio::sync::mpsc;

use entity::audit_payload;

use super::Payload;

use crate::telemetry::metrics::{Metric, counter_add};

/// Payloads waiting for the database at most.
const QUEUE: usize = 10_000;

/// Bytes of payloads waiting for the database at most: an audited tenant's
/// large requests (refused ones too) cannot fill memory, which 10,000 bodies
/// of 4 MiB would.
const QUEUE_BYTES: usize = 64 * 1024 * 1024;

/// Payloads per INSERT at most: 10 parameters each.
const BATCH: usize = 200;

pub struct AuditLog {
    sender: mpsc::Sender<Payload>,
    queued: Arc<QueuedBytes>,
    max_body_bytes: usize,
}

/// The bytes a queue holds, against its bound.
#[derive(Debug)]
struct QueuedBytes {
    bytes: AtomicUsize,
    limit: usize,
}

impl QueuedBytes {
    fn new(limit: usize) -> QueuedBytes {
        QueuedBytes {
            bytes: AtomicUsize::new(0),
            limit,
        }
    }

    /// Takes `n` bytes of room, if the bound leaves it.
    fn admit(&self, n: usize) -> bool {
        let before = self.bytes.fetch_add(n, Ordering::Relaxed);
        if before.saturating_add(n) > self.limit {
            self.bytes.fetch_sub(n, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn done(&self, n: usize) {
        self.bytes.fetch_sub(n, Ordering::Relaxed);
    }
}

impl AuditLog {
    /// Starts the writer on the current runtime.
    pub fn start(db: DatabaseConnection, max_body_bytes: usize) -> AuditLog {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let queued = Arc::new(QueuedBytes::new(QUEUE_BYTES));
        actix_rt::spawn(write(db, receiver, queued.clone(), max_body_bytes));
        AuditLog {
            sender,
            queued,
            max_body_bytes,
        }
    }

    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    pub(super) fn record(&self, payload: Payload) {
        let size = payload.size();
        if !self.queued.admit(size) {
            counter_add(Metric::AuditPayloadsDroppedTotal, &[], 1);
            return;
        }
        if self.sender.try_send(payload).is_err() {
            self.queued.done(size);
            counter_add(Metric::AuditPayloadsDroppedTotal, &[], 1);
        }
    }
}

async fn write(
    db: DatabaseConnection,
    mut receiver: mpsc::Receiver<Payload>,
    queued: Arc<QueuedBytes>,
    limit: usize,
) {
    let mut batch = Vec::with_capacity(BATCH);
    while receiver.recv_many(&mut batch, BATCH).await > 0 {
        queued.done(batch.iter().map(Payload::size).sum());
        let rows = batch.len() as u64;
        let models = batch.drain(..).map(|payload| payload.into_row(limit));
        if let Err(error) = audit_payload::Entity::insert_many(models)
            .exec_without_returning(&db)
            .await
        {
            counter_add(Metric::AuditPayloadsDroppedTotal, &[], rows);
            tracing::warn!(error = %error, rows, "Audit payloads could not be written and are dropped.");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_takes_bytes_up_to_its_bound_and_frees_them_when_written() {
        let queued = QueuedBytes::new(10 * 1024 * 1024);
        let four_mib = 4 * 1024 * 1024;
        assert!(queued.admit(four_mib));
        assert!(queued.admit(four_mib));
        assert!(!queued.admit(four_mib), "a third would pass the bound");
        assert!(queued.admit(1024), "a small one still fits");
        queued.done(four_mib);
        assert!(queued.admit(four_mib));
    }
}
