//! LedgerActor: one per process, on its own arbiter so database writes never
//! share a thread with quota decisions. Every database write runs inside
//! `ctx.wait`, so writes are serialized and an awaited `Flush` returns only
//! once every event recorded before it is in the database. Events arrive in
//! journal order (the journal hands them over under its lock) and leave in
//! that order, so after each committed batch "every settle up to its last
//! sequence is in the database" holds and is written as the checkpoint.
//! A failed write keeps its batch and is retried with backoff; the journal
//! keeps the events safe meanwhile.

use std::borrow::Borrow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::prelude::*;
use sea_orm::DatabaseConnection;

use super::batch::Batch;
use super::event::UsageEvent;
use super::repo;
use super::settlements::Settlements;
use crate::arbiter::OwnedArbiter;
use crate::calendar::Calendar;
use crate::clock::SharedClock;
use crate::config::{LedgerConfig, OnBacklogFull};
use crate::journal::{Cursor, Journal};
use crate::provider::retry::RetryPolicy;
use crate::telemetry::metrics::{Metric, as_gauge, counter_add, gauge_set, observe, observe_ms};

/// How often end users' day totals too old to matter are deleted.
const PRUNE_INTERVAL: Duration = Duration::from_hours(1);

/// The longest wait between two tries of a database that keeps failing.
const MAX_RETRY_DELAY_MS: u64 = 5_000;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("the ledger is not running")]
    Stopped,
    #[error("ledger database write failed: {0}")]
    Database(String),
}

/// An event and its journal sequence number (0 when there is no journal).
#[derive(Debug)]
pub struct Journaled {
    pub seq: u64,
    pub event: UsageEvent,
}

impl Borrow<UsageEvent> for Journaled {
    fn borrow(&self) -> &UsageEvent {
        &self.event
    }
}

/// Rows handed over and not yet taken by the actor, in journal order. A
/// shared queue rather than a message per row: a message wakes the ledger's
/// thread for every request, the queue is drained on the actor's timer (or
/// at once when it holds a whole batch).
type Inbox = Arc<Mutex<Vec<Journaled>>>;

/// The inbox holds a whole batch: take it now rather than at the next tick.
#[derive(Message)]
#[rtype(result = "()")]
struct Drain;

/// A row arrived in an empty inbox: an idle ledger writes it at once rather
/// than at the next tick, so a report run right after a call shows it.
#[derive(Message)]
#[rtype(result = "()")]
struct Nudge;

/// Writes every event recorded so far; replies once they are in the database.
#[derive(Message)]
#[rtype(result = "Result<(), LedgerError>")]
struct Flush;

pub struct LedgerActor {
    db: DatabaseConnection,
    clock: SharedClock,
    /// Where an end user's day begins, for their running totals.
    calendar: Calendar,
    /// The export sinks each written row is queued for (none: no outbox).
    export_sinks: Arc<[String]>,
    batch: Batch<Journaled>,
    flush_interval: Duration,
    /// Shared with the handle: events recorded and not yet in the database.
    backlog: Arc<AtomicUsize>,
    journal: Option<Arc<Journal>>,
    retry: RetryPolicy,
    /// Consecutive failed writes; batch writes wait until `retry_at_ms`.
    failures: u32,
    retry_at_ms: u64,
    /// When the last write began: within a tick of it the ledger is busy,
    /// and rows wait for the tick to share a batch.
    last_write_ms: u64,
    max_batch_rows: usize,
    /// Rows kept in memory at most; past it the journal alone holds the
    /// newer ones (`spill`) until the database has caught up.
    memory_limit: usize,
    /// Reads back, in order, the rows recorded since memory filled up.
    spill: Option<Cursor>,
    /// Shared with the handle: whether a spill is on.
    spilling: Arc<AtomicBool>,
    /// Rows up to this sequence were written from the journal: their own
    /// `Record` messages, still queued, are dropped.
    written_upto: u64,
    inbox: Inbox,
}

impl LedgerActor {
    /// Every row handed over so far, in order, leaving the inbox empty.
    fn take_inbox(&self) -> Vec<Journaled> {
        std::mem::take(&mut *lock(&self.inbox))
    }

    /// Moves every handed-over row into the batch (or the spill), in order.
    fn drain(&mut self, ctx: &mut Context<Self>) {
        let rows = self.take_inbox();
        for row in rows {
            self.accept(row, ctx);
        }
    }

    fn write_batch(&mut self, ctx: &mut Context<Self>) {
        if self.clock.now_ms() < self.retry_at_ms {
            return;
        }
        // Memory first: it holds the oldest rows, and journal order is kept.
        let events = if self.batch.is_empty() {
            self.read_spilled().unwrap_or_default()
        } else {
            self.batch.take()
        };
        if events.is_empty() {
            return;
        }
        self.last_write_ms = self.clock.now_ms();
        let db = self.db.clone();
        let calendar = self.calendar.clone();
        let sinks = self.export_sinks.clone();
        let fut = async move {
            let result = repo::insert_exported_batch(&db, &events, &calendar, &sinks)
                .await
                .map_err(|e| e.to_string());
            (events, result)
        };
        ctx.wait(fut.into_actor(self).map(|(events, result), act, ctx| {
            let written = result.is_ok();
            act.after_write(events, result);
            // Catching up after an outage: the next batch at once, after the mailbox had its turn.
            if written && (!act.batch.is_empty() || act.spill.is_some()) {
                ctx.run_later(Duration::ZERO, LedgerActor::write_batch);
            }
        }));
    }

    /// The next rows of the spill, in journal order; `None` (and the spill
    /// over) once every row recorded so far has been read.
    fn read_spilled(&mut self) -> Option<Vec<Journaled>> {
        let (Some(cursor), Some(journal)) = (&mut self.spill, &self.journal) else {
            return None;
        };
        let upto = journal.last_seq();
        match cursor.next_batch(upto, self.max_batch_rows) {
            Ok(events) if events.is_empty() => {
                self.spill = None;
                self.spilling.store(false, Ordering::SeqCst);
                self.written_upto = upto;
                tracing::info!(
                    backlog = self.backlog.load(Ordering::SeqCst),
                    "Ledger caught up with the rows kept in the journal only."
                );
                None
            }
            Ok(events) => Some(events),
            Err(error) => {
                tracing::error!(error = %error, "Cannot read ledger rows back from the journal; retrying.");
                counter_add(Metric::JournalErrorsTotal, &[("op", "read")], 1);
                None
            }
        }
    }

    fn after_write(&mut self, events: Vec<Journaled>, result: Result<(), String>) {
        match result {
            Ok(()) => {
                self.failures = 0;
                self.retry_at_ms = 0;
                let n = events.len();
                self.backlog.fetch_sub(n, Ordering::SeqCst);
                let rows = u64::try_from(n).unwrap_or(u64::MAX);
                counter_add(Metric::LedgerEventsFlushed, &[], rows);
                observe(Metric::LedgerBatchRows, &[], as_gauge(n));
                let now = self.clock.now_ms();
                if let Some(oldest) = events.iter().map(|e| e.event.created_at_ms).min() {
                    observe_ms(Metric::LedgerLagSeconds, &[], now.saturating_sub(oldest));
                }
                let upto = events.iter().map(|e| e.seq).max().unwrap_or(0);
                if let (Some(journal), true) = (&self.journal, upto > 0) {
                    journal.checkpoint(upto);
                }
            }
            Err(error) => {
                self.failures = self.failures.saturating_add(1);
                let delay = self
                    .retry
                    .delay(self.failures + 1, None, RetryPolicy::random_jitter());
                let now = self.clock.now_ms();
                self.retry_at_ms =
                    now.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
                tracing::warn!(error = %error, events = events.len(), backlog = self.backlog.load(Ordering::SeqCst), retry_in_ms = delay.as_millis(), "Ledger write failed; keeping the batch and retrying.");
                counter_add(Metric::LedgerWriteErrors, &[], 1);
                self.batch.restore(events, now);
            }
        }
        gauge_set(
            Metric::LedgerBacklogEvents,
            &[],
            as_gauge(self.backlog.load(Ordering::SeqCst)),
        );
    }
}

impl Actor for LedgerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.flush_interval, |act, ctx| {
            act.drain(ctx);
            if !act.batch.is_empty() || act.spill.is_some() {
                act.write_batch(ctx);
            }
        });
        ctx.run_interval(PRUNE_INTERVAL, LedgerActor::prune);
    }
}

impl LedgerActor {
    /// Deletes end users' day totals no budget period can still include.
    /// Not a write of rows: it runs beside them, and a failure waits for the next hour.
    fn prune(&mut self, ctx: &mut Context<Self>) {
        let db = self.db.clone();
        let before = self.calendar.day_key(
            self.clock
                .now_ms()
                .saturating_sub(repo::END_USER_DAYS_KEPT * 86_400_000),
        );
        ctx.spawn(
            async move {
                if let Err(error) = repo::prune_end_user_days(&db, &before).await {
                    tracing::warn!(error = %error, "Could not delete end users' old day totals; retrying in an hour.");
                }
            }
            .into_actor(self),
        );
    }
}

impl Handler<Nudge> for LedgerActor {
    type Result = ();

    fn handle(&mut self, _msg: Nudge, ctx: &mut Context<Self>) {
        let interval_ms = u64::try_from(self.flush_interval.as_millis()).unwrap_or(u64::MAX);
        if self.clock.now_ms() < self.last_write_ms.saturating_add(interval_ms) {
            return;
        }
        self.drain(ctx);
        if !self.batch.is_empty() {
            self.write_batch(ctx);
        }
    }
}

impl Handler<Drain> for LedgerActor {
    type Result = ();

    fn handle(&mut self, _msg: Drain, ctx: &mut Context<Self>) {
        self.drain(ctx);
    }
}

impl LedgerActor {
    fn accept(&mut self, row: Journaled, ctx: &mut Context<Self>) {
        self.accept_queued(row);
        if self.batch.is_full() {
            self.write_batch(ctx);
        }
    }

    /// Queues a row for the next write, or leaves it to the spill.
    fn accept_queued(&mut self, row: Journaled) {
        // Sequence 0: no journal, or the row did not reach it; memory is its only copy.
        let seq = row.seq;
        let journaled = seq != 0;
        if journaled && seq <= self.written_upto {
            return;
        }
        if journaled && self.spill.is_some() {
            // The journal holds it; the spill reads it back in order.
            return;
        }
        if journaled
            && self.batch.len() >= self.memory_limit
            && let Some(journal) = &self.journal
        {
            tracing::warn!(
                rows = self.batch.len(),
                "Ledger backlog past its bound: newer rows are kept in the journal only until the database catches up."
            );
            self.spill = Some(journal.cursor(seq));
            self.spilling.store(true, Ordering::SeqCst);
            return;
        }
        let now = self.clock.now_ms();
        self.batch.push(row, now);
    }
}

impl Handler<Flush> for LedgerActor {
    type Result = AtomicResponse<Self, Result<(), LedgerError>>;

    fn handle(&mut self, _msg: Flush, _ctx: &mut Context<Self>) -> Self::Result {
        // An explicit flush tries at once, whatever the backoff says.
        self.retry_at_ms = 0;
        // Without writing (a full batch would start its own write first): every
        // row handed over before the flush is in the chunks below.
        let rows = self.take_inbox();
        for row in rows {
            self.accept_queued(row);
        }
        let mut chunks = Vec::new();
        while !self.batch.is_empty() {
            chunks.push(self.batch.take());
        }
        let db = self.db.clone();
        let calendar = self.calendar.clone();
        let sinks = self.export_sinks.clone();
        // The spill's cursor travels with the flush and comes back with its outcome.
        let mut spill = self.spill.take();
        let upto = self.journal.as_ref().map_or(0, |j| j.last_seq());
        let max_rows = self.max_batch_rows;
        let fut = async move {
            let mut outcomes = Vec::with_capacity(chunks.len());
            let mut failed = false;
            for chunk in chunks {
                // After one failure the rest are not tried: the database is away.
                let result = if failed {
                    Err("an earlier chunk of this flush failed".to_owned())
                } else {
                    repo::insert_exported_batch(&db, &chunk, &calendar, &sinks)
                        .await
                        .map_err(|e| e.to_string())
                };
                failed |= result.is_err();
                outcomes.push((chunk, result));
            }
            let mut caught_up = false;
            while let (Some(cursor), false) = (&mut spill, failed) {
                match cursor.next_batch(upto, max_rows) {
                    Ok(chunk) if chunk.is_empty() => {
                        caught_up = true;
                        break;
                    }
                    Ok(chunk) => {
                        let result = repo::insert_exported_batch(&db, &chunk, &calendar, &sinks)
                            .await
                            .map_err(|e| e.to_string());
                        failed |= result.is_err();
                        outcomes.push((chunk, result));
                    }
                    Err(error) => {
                        failed = true;
                        outcomes.push((Vec::new(), Err(format!("journal read: {error}"))));
                    }
                }
            }
            (outcomes, spill, caught_up)
        };
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(
            move |(outcomes, spill, caught_up), act, _ctx| {
                act.spill = spill;
                if caught_up {
                    act.spill = None;
                    act.spilling.store(false, Ordering::SeqCst);
                    act.written_upto = upto;
                }
                let mut first_error = None;
                // Last chunk first: each failed chunk goes back in front of the batch,
                // so restoring in reverse keeps journal order (the checkpoint relies on it).
                for (chunk, result) in outcomes.into_iter().rev() {
                    if let Err(e) = &result {
                        first_error = Some(e.clone());
                    }
                    act.after_write(chunk, result);
                }
                first_error.map_or(Ok(()), |e| Err(LedgerError::Database(e)))
            },
        )))
    }
}

/// The typed front of the LedgerActor.
#[derive(Clone)]
pub struct LedgerHandle {
    addr: Addr<LedgerActor>,
    backlog: Arc<AtomicUsize>,
    max_backlog: usize,
    on_full: OnBacklogFull,
    pub(super) journal: Option<Arc<Journal>>,
    /// Set while the backlog is full, so `continue` logs once per episode.
    full_logged: Arc<AtomicBool>,
    spilling: Arc<AtomicBool>,
    inbox: Inbox,
    max_batch_rows: usize,
    /// Quotas live in a shared store: a settle journals its row first.
    pub(super) shared_quotas: bool,
    /// Settles that finish after their response (shared quotas only).
    pub(super) settlements: Arc<Settlements>,
    /// The actor's thread: it stops when the last handle is dropped.
    _arbiter: OwnedArbiter,
}

impl LedgerHandle {
    /// Quotas are in a shared store (Redis): see `settle`.
    #[must_use]
    pub fn with_shared_quotas(mut self) -> LedgerHandle {
        self.shared_quotas = true;
        self
    }

    /// Starts the actor on its own arbiter.
    pub fn start(
        db: DatabaseConnection,
        clock: SharedClock,
        config: &LedgerConfig,
        calendar: Calendar,
        export_sinks: Vec<String>,
        journal: Option<Arc<Journal>>,
    ) -> LedgerHandle {
        let backlog = Arc::new(AtomicUsize::new(0));
        let shared = backlog.clone();
        let arbiter = OwnedArbiter::new();
        let flush_interval_ms = config.flush_interval_ms.max(1);
        let max_batch_rows = config.max_batch_rows;
        let max_backlog_events = config.max_backlog_events;
        let actor_journal = journal.clone();
        let spilling = Arc::new(AtomicBool::new(false));
        let actor_spilling = spilling.clone();
        let inbox = Inbox::default();
        let actor_inbox = inbox.clone();
        let addr = LedgerActor::start_in_arbiter(arbiter.handle(), move |_ctx| LedgerActor {
            db,
            clock,
            calendar,
            export_sinks: export_sinks.into(),
            batch: Batch::new(max_batch_rows),
            flush_interval: Duration::from_millis(flush_interval_ms),
            backlog: shared,
            journal: actor_journal,
            retry: RetryPolicy {
                max_attempts: u32::MAX,
                base_delay_ms: flush_interval_ms,
                max_delay_ms: MAX_RETRY_DELAY_MS.max(flush_interval_ms),
            },
            failures: 0,
            retry_at_ms: 0,
            last_write_ms: 0,
            max_batch_rows,
            memory_limit: max_backlog_events.max(1),
            spill: None,
            spilling: actor_spilling,
            written_upto: 0,
            inbox: actor_inbox,
        });
        LedgerHandle {
            addr,
            backlog,
            max_backlog: config.max_backlog_events,
            on_full: config.on_backlog_full,
            journal,
            full_logged: Arc::new(AtomicBool::new(false)),
            spilling,
            inbox,
            max_batch_rows: max_batch_rows.max(1),
            shared_quotas: false,
            settlements: Arc::new(Settlements::default()),
            _arbiter: arbiter,
        }
    }

    /// Hands an event over: journaled (one write to the OS) and then queued
    /// for the database. Delivery is unconditional: the upstream call already
    /// happened, so dropping its row would lose money. The bound is kept at
    /// admission instead (`admit_paid`).
    pub fn record(&self, event: UsageEvent) {
        self.append(event);
    }

    /// `record`, then waits until the row is as durable as `ledger.fsync`
    /// makes it (group commit in `batch` mode). Dropping the future after the
    /// call began loses nothing: the row was recorded before the first await.
    pub async fn record_durable(&self, event: UsageEvent) {
        let seq = self.append(event);
        if let Some(journal) = &self.journal {
            journal.wait_durable(seq).await;
        }
    }

    fn append(&self, event: UsageEvent) -> u64 {
        if let Some(journal) = &self.journal {
            return journal.append_settle(event, |event, seq| self.deliver(event, seq));
        }
        self.deliver(event, 0);
        0
    }

    fn deliver(&self, event: UsageEvent, seq: u64) {
        self.backlog.fetch_add(1, Ordering::SeqCst);
        // Unbounded on purpose (see `record`); the backlog bound limits what reaches here.
        let queued = {
            let mut inbox = lock(&self.inbox);
            inbox.push(Journaled { seq, event });
            inbox.len()
        };
        if queued == self.max_batch_rows {
            self.addr.do_send(Drain);
        } else if queued == 1 {
            self.addr.do_send(Nudge);
        }
    }

    /// Journals an attempt about to be sent upstream; `orphan` is its row if
    /// the process dies before the attempt's own row is recorded. Returns once
    /// the record is as durable as `ledger.fsync` makes it.
    pub async fn journal_intent(&self, orphan: &UsageEvent, deadline_ms: u64) {
        if let Some(journal) = &self.journal {
            journal.append_reserve(orphan, deadline_ms).await;
        }
    }

    /// Journals the row of an attempt whose charge the shared quota store is
    /// about to commit (`Journal::append_settling`); `record` follows with
    /// the row as settled.
    pub fn settling(&self, event: &UsageEvent) {
        if let Some(journal) = &self.journal {
            journal.append_settling(event);
        }
    }

    /// Whether a new paid request may go ahead, per `ledger.on_backlog_full`.
    pub fn admit_paid(&self) -> bool {
        if !self.is_saturated() {
            if self.full_logged.load(Ordering::Relaxed) {
                self.full_logged.store(false, Ordering::Relaxed);
                tracing::info!(
                    backlog = self.backlog(),
                    "Ledger backlog below its bound again."
                );
            }
            return true;
        }
        let first = !self.full_logged.swap(true, Ordering::Relaxed);
        match self.on_full {
            OnBacklogFull::Refuse => {
                counter_add(Metric::LedgerBacklogFullTotal, &[("action", "refused")], 1);
                if first {
                    tracing::error!(
                        backlog = self.backlog(),
                        max = self.max_backlog,
                        "Ledger backlog full; refusing new paid requests until the database catches up."
                    );
                }
                false
            }
            OnBacklogFull::Continue => {
                counter_add(
                    Metric::LedgerBacklogFullTotal,
                    &[("action", "continued")],
                    1,
                );
                if first {
                    tracing::error!(
                        backlog = self.backlog(),
                        max = self.max_backlog,
                        "Ledger backlog full; serving on (ledger.on_backlog_full = continue), the journal holds the rows."
                    );
                }
                true
            }
        }
    }

    /// At least `ledger.max_backlog_events` rows wait for the database; a
    /// settle finishing after its answer is a row on its way, and counts.
    pub fn is_saturated(&self) -> bool {
        let on_the_way = self.settlements.in_flight();
        self.backlog.load(Ordering::SeqCst) + on_the_way >= self.max_backlog
    }

    pub fn backlog(&self) -> usize {
        self.backlog.load(Ordering::SeqCst)
    }

    /// Whether rows past the backlog bound are kept in the journal only, to
    /// be read back once the database has taken the older ones.
    pub fn journal_only(&self) -> bool {
        self.spilling.load(Ordering::SeqCst)
    }

    pub fn max_backlog(&self) -> usize {
        self.max_backlog
    }

    pub fn journal(&self) -> Option<&Arc<Journal>> {
        self.journal.as_ref()
    }

    pub async fn flush(&self) -> Result<(), LedgerError> {
        self.addr
            .send(Flush)
            .await
            .map_err(|_| LedgerError::Stopped)?
    }
}

fn lock(inbox: &Inbox) -> std::sync::MutexGuard<'_, Vec<Journaled>> {
    inbox.lock().unwrap_or_else(PoisonError::into_inner)
}
