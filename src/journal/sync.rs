//! When journal writes are forced to disk. Every append is one write(2), so a
//! killed process loses nothing; fsync only matters for a machine that loses
//! power. `batch` is group commit: writers that must be durable register the
//! sequence they wait for, and one thread runs one sync for all of them after
//! a short gathering window, then wakes exactly the writers it made durable
//! (a broadcast would wake every waiter on every sync). `interval` syncs on a
//! timer; `off` never does.

use std::fs::File;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::clock::{elapsed, monotonic};
use crate::config::FsyncMode;
use crate::telemetry::metrics::{Metric, counter_add, observe_duration};

/// How long the sync thread sleeps before checking whether its journal is gone.
const IDLE_CHECK: Duration = Duration::from_millis(200);

pub struct Syncer {
    mode: FsyncMode,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// The highest sequence a writer waits for.
    requested: u64,
    /// Every record up to this one is on disk.
    synced: u64,
    /// Writers waiting, with the sequence each needs on disk.
    waiters: Vec<(u64, oneshot::Sender<()>)>,
}

/// What the sync thread needs from the journal: the file to sync and the last
/// sequence written to it (everything in earlier segments was synced when they
/// were closed).
pub trait SyncTarget: Send + Sync + 'static {
    fn current(&self) -> (Arc<File>, u64);
}

impl Syncer {
    pub fn new(mode: FsyncMode) -> Syncer {
        Syncer {
            mode,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        }
    }

    /// Returns once `seq` is on disk (`batch`), at once otherwise.
    pub async fn wait(&self, seq: u64) {
        if self.mode != FsyncMode::Batch {
            return;
        }
        let synced = {
            let mut state = self.lock();
            if state.synced >= seq {
                return;
            }
            let (done, synced) = oneshot::channel();
            state.requested = state.requested.max(seq);
            state.waiters.push((seq, done));
            synced
        };
        self.wake.notify_one();
        // An error means the sync thread is gone with its journal: nothing left to wait for.
        let _ = synced.await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the sync thread; it ends once the journal is dropped. It holds
    /// the journal only while syncing, so dropping the journal releases its
    /// directory at once.
    pub fn spawn<T: SyncTarget>(
        syncer: Arc<Syncer>,
        target: Weak<T>,
        window: Duration,
    ) -> std::io::Result<()> {
        if syncer.mode == FsyncMode::Off {
            return Ok(());
        }
        std::thread::Builder::new()
            .name("tollgate-journal-sync".to_owned())
            .spawn(move || run(&syncer, &target, window))
            .map(|_| ())
    }

    fn synced(&self) -> u64 {
        self.lock().synced
    }

    /// Records that everything up to `seq` is on disk and wakes the writers waiting for it.
    fn mark_synced(&self, seq: u64) {
        let ready = {
            let mut state = self.lock();
            state.synced = state.synced.max(seq);
            let synced = state.synced;
            let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut state.waiters)
                .into_iter()
                .partition(|(needed, _)| *needed <= synced);
            state.waiters = waiting;
            ready
        };
        for (_, done) in ready {
            // A waiter that went away needs no wake.
            let _ = done.send(());
        }
    }
}

fn run<T: SyncTarget>(syncer: &Syncer, target: &Weak<T>, window: Duration) {
    loop {
        match syncer.mode {
            FsyncMode::Batch => {
                if target.strong_count() == 0 {
                    return;
                }
                if !wait_for_writer(syncer) {
                    continue;
                }
                // Writers arriving in this window share the sync below; with no
                // window, those arriving during a sync share the next one.
                if !window.is_zero() {
                    std::thread::sleep(window);
                }
            }
            FsyncMode::Interval => std::thread::sleep(window),
            FsyncMode::Off => return,
        }
        // The journal is held only to read what to sync, never across the fsync:
        // dropping it then releases its directory at once.
        let Some((file, seq)) = target.upgrade().map(|t| t.current()) else {
            return;
        };
        sync_once(syncer, &file, seq);
    }
}

/// Whether a writer waits for a sequence not yet synced (false after an idle spell).
fn wait_for_writer(syncer: &Syncer) -> bool {
    let state = syncer.lock();
    let (state, _) = syncer
        .wake
        .wait_timeout_while(state, IDLE_CHECK, |s| s.requested <= s.synced)
        .unwrap_or_else(PoisonError::into_inner);
    state.requested > state.synced
}

fn sync_once(syncer: &Syncer, file: &File, seq: u64) {
    if seq <= syncer.synced() {
        return;
    }
    let started = monotonic();
    if let Err(error) = file.sync_data() {
        // The writes reached the OS; waiters are released rather than hung.
        tracing::error!(error = %error, "Journal fsync failed.");
        counter_add(Metric::JournalErrorsTotal, &[("op", "fsync")], 1);
    }
    observe_duration(Metric::JournalFsyncSeconds, &[], elapsed(started));
    syncer.mark_synced(seq);
}
