//! Usage exported to billing systems exactly once per sink
//! (`[[export.sinks]]`). The ledger writes, in the transaction that writes
//! its rows, one outbox row per (sink, ledger row) for every row with a
//! charge or some usage (tokens of any class, searches); a row with neither
//! is not exported. Nothing is written when no sink is configured.
//!
//! One replica at a time sends to a sink: the one holding its lease
//! (`lease`), renewed at every poll and every acknowledgement. Rows go in id
//! order, each under a key made of the sink and the ledger row's id
//! (`events::idempotency_key`), the same in every retry, from every replica,
//! after every restart, so a receiver that de-duplicates by it (OpenMeter,
//! Stripe) holds each row once. Rows a receiver acknowledged are deleted in
//! the transaction that adds them to the sink's cursor and monthly totals,
//! fenced by the lease: a row is counted once however often it was sent. A
//! failing receiver is retried with a backoff capped at `export.max_backoff_ms`.

pub mod events;
pub mod lease;
pub mod outbox;
pub mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use entity::export_outbox;

use crate::clock::monotonic;
use crate::config::{Sink, SinkKind};
use crate::state::Gateway;
use crate::storage::StorageError;
use crate::telemetry::metrics::{Metric, counter_add, gauge_set};

pub use outbox::{DeliveredTotals, delivered_totals};

/// How often each replica counts a sink's outbox for its gauges: a count
/// reads the whole outbox, which grows while a receiver is away.
const GAUGE_INTERVAL: Duration = Duration::from_secs(5);

/// One sender per configured sink.
pub fn spawn(gateway: &Arc<Gateway>) -> Vec<actix_rt::task::JoinHandle<()>> {
    gateway
        .config
        .export
        .sinks
        .iter()
        .map(|sink| {
            let sender = Sender::new(gateway.clone(), sink.clone());
            actix_rt::spawn(sender.run())
        })
        .collect()
}

struct Sender {
    gw: Arc<Gateway>,
    sink: Sink,
    client: awc::Client,
    /// Tenants whose rows can be sent (a Stripe sink: those with a customer).
    sendable: Option<Vec<String>>,
    held: bool,
    /// Rows waiting for a customer mapping at the last look: logged when it changes.
    waiting: u64,
    counted_at: Option<Instant>,
    failures: u32,
    retry_at: Option<Instant>,
}

impl Sender {
    fn new(gw: Arc<Gateway>, sink: Sink) -> Sender {
        let client = awc::Client::builder()
            .timeout(Duration::from_millis(sink.timeout_ms))
            .finish();
        let sendable = match &sink.kind {
            SinkKind::Stripe { customers, .. } => Some(customers.keys().cloned().collect()),
            SinkKind::CloudEvents { .. } => None,
        };
        Sender {
            gw,
            sink,
            client,
            sendable,
            held: false,
            waiting: 0,
            counted_at: None,
            failures: 0,
            retry_at: None,
        }
    }

    async fn run(mut self) {
        let poll = Duration::from_millis(self.gw.config.export.poll_interval_ms);
        if let Err(error) = lease::ensure(self.gw.directory.db(), &self.sink.name).await {
            tracing::warn!(sink = %self.sink.name, error = %error, "Cannot register the export sink yet.");
        }
        loop {
            actix_rt::time::sleep(poll).await;
            if let Err(error) = self.tick().await {
                tracing::warn!(sink = %self.sink.name, error = %error, "The export's database step failed; trying again.");
            }
        }
    }

    fn lease_until(&self) -> u64 {
        self.gw
            .clock
            .now_ms()
            .saturating_add(self.gw.config.export.lease_ms)
    }

    async fn tick(&mut self) -> Result<(), StorageError> {
        self.report_pending().await?;
        let gw = self.gw.clone();
        let db = gw.directory.db();
        let name = self.sink.name.clone();
        let name = name.as_str();
        if !self.held {
            // The row may be missing still if the database was away at start.
            lease::ensure(db, name).await?;
        }
        let now = gw.clock.now_ms();
        let held = lease::claim(db, name, &gw.replica_id, now, self.lease_until()).await?;
        if held != self.held {
            tracing::info!(sink = name, replica = %gw.replica_id, held, "Export sink lease changed hands.");
            self.held = held;
        }
        if !held || self.retry_at.is_some_and(|at| monotonic() < at) {
            return Ok(());
        }
        let rows =
            outbox::next_rows(db, name, self.sendable.as_deref(), self.sink.batch_rows).await?;
        for chunk in rows.chunks(events::rows_per_request(&self.sink).max(1)) {
            if !self.deliver(chunk).await? {
                break;
            }
        }
        Ok(())
    }

    /// Sends one request's rows and, once acknowledged, books them;
    /// `false`: stop this round (the send failed or the lease was lost).
    async fn deliver(&mut self, rows: &[export_outbox::Model]) -> Result<bool, StorageError> {
        let name = self.sink.name.as_str();
        if let Err(error) = events::send(&self.client, &self.sink, rows).await {
            self.failed(&error);
            return Ok(false);
        }
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let (now, until) = (self.gw.clock.now_ms(), self.lease_until());
        let db = self.gw.directory.db();
        let calendar = &self.gw.config.calendar;
        let owner = &self.gw.replica_id;
        let Some(delivered) =
            outbox::acknowledge(db, name, owner, &ids, calendar, now, until).await?
        else {
            tracing::warn!(
                sink = name,
                "Another replica took the export sink over; its rows are booked by it."
            );
            self.held = false;
            return Ok(false);
        };
        self.failures = 0;
        self.retry_at = None;
        counter_add(
            Metric::ExportDeliveredRowsTotal,
            &[("sink", name)],
            delivered.rows,
        );
        counter_add(
            Metric::ExportDeliveredNanosTotal,
            &[("sink", name)],
            delivered.nanos.get(),
        );
        Ok(true)
    }

    fn failed(&mut self, error: &str) {
        let name = self.sink.name.as_str();
        self.failures = self.failures.saturating_add(1);
        let config = &self.gw.config.export;
        let delay_ms = config
            .poll_interval_ms
            .saturating_mul(1_u64 << self.failures.min(16))
            .min(config.max_backoff_ms);
        self.retry_at = Some(monotonic() + Duration::from_millis(delay_ms));
        counter_add(Metric::ExportFailuresTotal, &[("sink", name)], 1);
        tracing::warn!(sink = name, failures = self.failures, retry_in_ms = delay_ms, error = %error, "The export sink did not take a batch; it is sent again.");
    }

    /// The outbox's gauges, from the database (every replica reports the same).
    async fn report_pending(&mut self) -> Result<(), StorageError> {
        if self
            .counted_at
            .is_some_and(|at| at.elapsed() < GAUGE_INTERVAL)
        {
            return Ok(());
        }
        self.counted_at = Some(monotonic());
        let name = self.sink.name.as_str();
        let pending =
            outbox::pending(self.gw.directory.db(), name, self.sendable.as_deref()).await?;
        let age_ms = pending
            .oldest_ms
            .map_or(0, |at| self.gw.clock.now_ms().saturating_sub(at));
        let labels = [("sink", name)];
        gauge_set(Metric::ExportPendingRows, &labels, as_f64(pending.rows));
        gauge_set(Metric::ExportWaitingRows, &labels, as_f64(pending.waiting));
        gauge_set(
            Metric::ExportOldestPendingSeconds,
            &labels,
            as_f64(age_ms / 1_000),
        );
        if pending.waiting > 0 && pending.waiting != self.waiting {
            tracing::warn!(
                sink = name,
                rows = pending.waiting,
                "Export rows wait for a tenant's customer mapping."
            );
        }
        self.waiting = pending.waiting;
        Ok(())
    }
}

fn as_f64(v: u64) -> f64 {
    crate::telemetry::metrics::as_gauge_u64(v)
}
