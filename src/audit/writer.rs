//! The audit writer: payloads are handed over without waiting, then
//! redacted and written in batches by one task, so no request waits for the
//! database or spends its time on redaction. A full
//! queue drops the payload, counted (`tollgate_audit_payloads_dropped_total`)
//! and never logged with its text.

use sea_orm::{DatabaseConnection, EntityTrait};
use tokio::sync::mpsc;

use entity::audit_payload;

use super::Payload;

use crate::telemetry::metrics::{Metric, counter_add};

/// Payloads waiting for the database at most.
const QUEUE: usize = 10_000;

/// Payloads per INSERT at most: 10 parameters each.
const BATCH: usize = 200;

pub struct AuditLog {
    sender: mpsc::Sender<Payload>,
    max_body_bytes: usize,
}

impl AuditLog {
    /// Starts the writer on the current runtime.
    pub fn start(db: DatabaseConnection, max_body_bytes: usize) -> AuditLog {
        let (sender, receiver) = mpsc::channel(QUEUE);
        actix_rt::spawn(write(db, receiver, max_body_bytes));
        AuditLog {
            sender,
            max_body_bytes,
        }
    }

    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    pub(super) fn record(&self, payload: Payload) {
        if self.sender.try_send(payload).is_err() {
            counter_add(Metric::AuditPayloadsDroppedTotal, &[], 1);
        }
    }
}

async fn write(db: DatabaseConnection, mut receiver: mpsc::Receiver<Payload>, limit: usize) {
    let mut batch = Vec::with_capacity(BATCH);
    while receiver.recv_many(&mut batch, BATCH).await > 0 {
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
