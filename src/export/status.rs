//! The sinks' cursors and outboxes as an operator reads them
//! (`tollgate export status`, `GET /admin/v1/export/sinks`).

use sea_orm::{DatabaseConnection, EntityTrait};
use serde::Serialize;

use entity::export_sink;

use super::outbox::{self, Pending};
use crate::config::{ExportConfig, SinkKind};
use crate::money::Nanos;
use crate::storage::StorageError;

#[derive(Debug, Clone, Serialize)]
pub struct SinkStatus {
    pub name: String,
    pub kind: &'static str,
    /// The replica sending to it, and until when (Unix ms) unless renewed.
    pub owner: Option<String>,
    pub lease_until_ms: u64,
    /// The largest ledger row id delivered.
    pub delivered_through: i64,
    pub delivered_rows: u64,
    pub delivered: Nanos,
    /// When rows were last booked, Unix ms (0: never).
    pub delivered_at_ms: u64,
    pub pending: Pending,
}

/// Every configured sink's status, in the configuration's order.
pub async fn sinks(
    db: &DatabaseConnection,
    config: &ExportConfig,
) -> Result<Vec<SinkStatus>, StorageError> {
    let mut out = Vec::with_capacity(config.sinks.len());
    for sink in &config.sinks {
        let (kind, sendable) = match &sink.kind {
            SinkKind::CloudEvents { .. } => ("cloudevents", None),
            SinkKind::Stripe { customers, .. } => (
                "stripe",
                Some(customers.keys().cloned().collect::<Vec<_>>()),
            ),
        };
        let row = export_sink::Entity::find_by_id(sink.name.clone())
            .one(db)
            .await?;
        let pending = outbox::pending(db, &sink.name, sendable.as_deref()).await?;
        let as_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
        out.push(SinkStatus {
            name: sink.name.clone(),
            kind,
            owner: row.as_ref().and_then(|r| r.owner.clone()),
            lease_until_ms: row.as_ref().map_or(0, |r| as_u64(r.lease_until_ms)),
            delivered_through: row.as_ref().map_or(0, |r| r.delivered_through),
            delivered_rows: row.as_ref().map_or(0, |r| as_u64(r.rows)),
            delivered: row
                .as_ref()
                .map_or(Nanos::ZERO, |r| Nanos::from_db(r.nanos)),
            delivered_at_ms: row.as_ref().map_or(0, |r| as_u64(r.delivered_at_ms)),
            pending,
        });
    }
    Ok(out)
}
