//! LedgerActor: one per process, on its own arbiter so database writes never
//! share a thread with quota decisions. Every database write runs inside
//! `ctx.wait`, so writes are serialized and an awaited `Flush` returns only
//! once every event recorded before it is in the database.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix::prelude::*;
use sea_orm::DatabaseConnection;

use super::batch::Batch;
use super::event::UsageEvent;
use super::repo;
use crate::clock::SharedClock;
use crate::telemetry::metrics::{Metric, as_gauge, counter_add, gauge_set, observe, observe_ms};

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("the ledger is not running")]
    Stopped,
    #[error("ledger database write failed: {0}")]
    Database(String),
}

#[derive(Message)]
#[rtype(result = "()")]
struct Record(UsageEvent);

/// Writes every event recorded so far; replies once they are in the database.
#[derive(Message)]
#[rtype(result = "Result<(), LedgerError>")]
struct Flush;

pub struct LedgerActor {
    db: DatabaseConnection,
    clock: SharedClock,
    batch: Batch,
    flush_interval: Duration,
    /// Shared with the handle: events recorded and not yet in the database.
    backlog: Arc<AtomicUsize>,
}

impl LedgerActor {
    fn write_batch(&mut self, ctx: &mut Context<Self>) {
        let events = self.batch.take();
        if events.is_empty() {
            return;
        }
        let db = self.db.clone();
        let fut = async move {
            let result = repo::insert_batch(&db, &events)
                .await
                .map_err(|e| e.to_string());
            (events, result)
        };
        ctx.wait(fut.into_actor(self).map(|(events, result), act, _ctx| {
            act.after_write(events, result);
        }));
    }

    fn after_write(&mut self, events: Vec<UsageEvent>, result: Result<(), String>) {
        match result {
            Ok(()) => {
                let n = events.len();
                self.backlog.fetch_sub(n, Ordering::SeqCst);
                let rows = u64::try_from(n).unwrap_or(u64::MAX);
                counter_add(Metric::LedgerEventsFlushed, &[], rows);
                observe(Metric::LedgerBatchRows, &[], as_gauge(n));
                let now = self.clock.now_ms();
                if let Some(oldest) = events.iter().map(|e| e.created_at_ms).min() {
                    observe_ms(Metric::LedgerLagSeconds, &[], now.saturating_sub(oldest));
                }
            }
            Err(error) => {
                tracing::warn!(error = %error, events = events.len(), "Ledger write failed; keeping the batch for the next flush.");
                counter_add(Metric::LedgerWriteErrors, &[], 1);
                let now = self.clock.now_ms();
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
            if !act.batch.is_empty() {
                act.write_batch(ctx);
            }
        });
    }
}

impl Handler<Record> for LedgerActor {
    type Result = ();

    fn handle(&mut self, msg: Record, ctx: &mut Context<Self>) {
        let now = self.clock.now_ms();
        self.batch.push(msg.0, now);
        if self.batch.is_full() {
            self.write_batch(ctx);
        }
    }
}

impl Handler<Flush> for LedgerActor {
    type Result = AtomicResponse<Self, Result<(), LedgerError>>;

    fn handle(&mut self, _msg: Flush, _ctx: &mut Context<Self>) -> Self::Result {
        let mut chunks = Vec::new();
        while !self.batch.is_empty() {
            chunks.push(self.batch.take());
        }
        let db = self.db.clone();
        let fut = async move {
            let mut outcomes = Vec::with_capacity(chunks.len());
            let mut failed = false;
            for chunk in chunks {
                // After one failure the rest are not tried: the database is away.
                let result = if failed {
                    Err("an earlier chunk of this flush failed".to_owned())
                } else {
                    repo::insert_batch(&db, &chunk)
                        .await
                        .map_err(|e| e.to_string())
                };
                failed |= result.is_err();
                outcomes.push((chunk, result));
            }
            outcomes
        };
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(|outcomes, act, _ctx| {
            let mut first_error = None;
            for (chunk, result) in outcomes {
                if let Err(e) = &result {
                    first_error.get_or_insert_with(|| e.clone());
                }
                act.after_write(chunk, result);
            }
            first_error.map_or(Ok(()), |e| Err(LedgerError::Database(e)))
        })))
    }
}

/// The typed front of the LedgerActor.
#[derive(Clone)]
pub struct LedgerHandle {
    addr: Addr<LedgerActor>,
    backlog: Arc<AtomicUsize>,
    max_backlog: usize,
}

impl LedgerHandle {
    /// Starts the actor on its own arbiter.
    pub fn start(
        db: DatabaseConnection,
        clock: SharedClock,
        max_batch_rows: usize,
        flush_interval_ms: u64,
        max_backlog: usize,
    ) -> LedgerHandle {
        let backlog = Arc::new(AtomicUsize::new(0));
        let shared = backlog.clone();
        let arbiter = Arbiter::new();
        let addr = LedgerActor::start_in_arbiter(&arbiter.handle(), move |_ctx| LedgerActor {
            db,
            clock,
            batch: Batch::new(max_batch_rows),
            flush_interval: Duration::from_millis(flush_interval_ms.max(1)),
            backlog: shared,
        });
        LedgerHandle {
            addr,
            backlog,
            max_backlog,
        }
    }

    /// Hands an event over. Delivery is unconditional: the upstream call already
    /// happened, so dropping its row would lose money. The bound is kept at
    /// admission instead (`is_saturated`).
    pub fn record(&self, event: UsageEvent) {
        self.backlog.fetch_add(1, Ordering::SeqCst);
        self.addr.do_send(Record(event));
    }

    /// Too many events wait for the database; new paid requests should be refused.
    pub fn is_saturated(&self) -> bool {
        self.backlog.load(Ordering::SeqCst) >= self.max_backlog
    }

    pub fn backlog(&self) -> usize {
        self.backlog.load(Ordering::SeqCst)
    }

    pub async fn flush(&self) -> Result<(), LedgerError> {
        self.addr
            .send(Flush)
            .await
            .map_err(|_| LedgerError::Stopped)?
    }
}
