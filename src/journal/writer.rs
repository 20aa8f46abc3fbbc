//! The append side of the journal: numbered segments of framed records in one
//! directory, owned by one process (an advisory lock on `LOCK`). Appends are
//! serialized by one mutex, which also orders the hand-over to the ledger, so
//! the ledger sees settles in sequence order and its checkpoint ("every settle
//! up to n is in the database") is exact. Reserves still open when a segment
//! closes are copied into the next one, so deleting a segment below the
//! checkpoint never loses an attempt in flight.
//!
//! Segments are zero-filled ahead of the writes, a mebibyte at a time, and
//! records overwrite the zeros in place: an fsync then flushes data only,
//! where an append would also commit the file system's journal for the new
//! size and blocks on every sync (twice the fsync latency on this kind of
//! disk, and more CPU per write).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::cursor::Cursor;
use super::frame;
use super::record::{EventRecord, Record, Written};
use super::replay::{self, Recovered};
use super::sync::{SyncTarget, Syncer};
use crate::config::FsyncMode;
use crate::ids::EventId;
use crate::ledger::{AttemptStatus, UsageEvent};
use crate::telemetry::metrics::{Metric, counter_add};

const SEGMENT_SUFFIX: &str = ".seg";
/// Tries at taking the directory's lock, 10 ms apart.
const LOCK_ATTEMPTS: u32 = 100;
/// Zeros written ahead of the records at a time.
const PREPARE_BYTES: u64 = 1024 * 1024;
/// ... a page per write(2): the page cache then holds the segment in pages,
/// not in the large folios one big write makes, and ext4 walks every block
/// of the folio a record lands in on each later write: with 1 MiB writes the
/// records' write(2)s took 5.0% of the gateway's CPU, with pages 2.8%.
const PREPARE_WRITE_BYTES: usize = 4096;

#[derive(Debug, Clone)]
pub struct JournalOptions {
    pub dir: PathBuf,
    pub fsync: FsyncMode,
    pub group_commit_ms: u64,
    pub fsync_interval_ms: u64,
    pub segment_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal directory {dir}: {source}")]
    Io { dir: String, source: std::io::Error },
    #[error(
        "journal directory {0} is in use by another running gateway (set ledger.journal_dir per process)"
    )]
    Locked(String),
}

pub struct Journal {
    inner: Mutex<Inner>,
    syncer: Arc<Syncer>,
}

struct Inner {
    dir: PathBuf,
    file: Arc<File>,
    current: PathBuf,
    /// Bytes of records in the current segment: where the next one goes.
    current_bytes: u64,
    /// The current segment's length: zeros past `current_bytes`.
    prepared_bytes: u64,
    /// Bytes of intents carried into the current segment when it began: they
    /// do not count towards its size, or many long streams would rotate it on
    /// every append.
    carried_bytes: u64,
    /// Closed segments and the last sequence each holds.
    sealed: Vec<(PathBuf, u64)>,
    last_seq: u64,
    /// Reserves without a settle yet, with their payload for carrying forward.
    open: HashMap<EventId, OpenIntent>,
    segment_bytes: u64,
    fsync: FsyncMode,
    /// Held for the life of the journal: the advisory lock lives on this handle.
    _lock: File,
}

struct OpenIntent {
    request_id: String,
    payload: Vec<u8>,
}

impl Journal {
    /// Locks the directory, reads what an earlier process left (see
    /// `replay`), and starts a new segment after it. The old segments stay
    /// until `retire` is called once their events are safe elsewhere.
    pub fn open(options: &JournalOptions) -> Result<(Arc<Journal>, Recovered), JournalError> {
        let io = |source| JournalError::Io {
            dir: options.dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&options.dir).map_err(io)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(options.dir.join("LOCK"))
            .map_err(io)?;
        // A previous owner that is going away (a journal being dropped, a killed
        // process the kernel is still reaping) lets go within moments.
        let mut attempts = 0;
        while lock.try_lock().is_err() {
            attempts += 1;
            if attempts == LOCK_ATTEMPTS {
                return Err(JournalError::Locked(options.dir.display().to_string()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let recovered = replay::recover(&options.dir).map_err(io)?;
        // Past every old segment's name too: an old segment left empty (a run that
        // wrote nothing) must not share its name with the new one, which `retire`
        // would then delete.
        let named = recovered
            .segments
            .iter()
            .filter_map(|p| first_seq_of(p))
            .max()
            .unwrap_or(0);
        let first_seq = recovered.last_seq.max(named) + 1;
        let (file, current) = new_segment(&options.dir, first_seq).map_err(io)?;
        let journal = Arc::new(Journal {
            inner: Mutex::new(Inner {
                dir: options.dir.clone(),
                file: Arc::new(file),
                current,
                current_bytes: 0,
                prepared_bytes: 0,
                carried_bytes: 0,
                sealed: Vec::new(),
                last_seq: first_seq - 1,
                open: HashMap::new(),
                segment_bytes: options.segment_bytes,
                fsync: options.fsync,
                _lock: lock,
            }),
            syncer: Arc::new(Syncer::new(options.fsync)),
        });
        let window = match options.fsync {
            FsyncMode::Batch => options.group_commit_ms,
            FsyncMode::Interval | FsyncMode::Off => options.fsync_interval_ms.max(1),
        };
        Syncer::spawn(
            journal.syncer.clone(),
            Arc::downgrade(&journal),
            Duration::from_millis(window),
        )
        .map_err(io)?;
        Ok((journal, recovered))
    }

    /// Appends a ledger row and, under the same lock, hands it on with its
    /// sequence number: hand-overs happen in sequence order. A row that did
    /// not reach the journal is handed on with 0: the ledger must keep it in
    /// memory, it cannot be read back. Returns that number, for `wait_durable`.
    pub fn append_settle(&self, event: UsageEvent, deliver: impl FnOnce(UsageEvent, u64)) -> u64 {
        let record = Record::Settle {
            event: EventRecord::from(&event),
        };
        let mut inner = self.lock();
        // Closed before the append: a rotation inside it must not carry this reserve
        // past its own settle.
        if event.status == AttemptStatus::Orphaned {
            // The tenant actor's orphan settles the whole reservation, whichever attempt was open.
            let request = event.request_id.as_str();
            inner.open.retain(|_, open| open.request_id != request);
        }
        inner.open.remove(&event.event_id);
        let seq = inner.append(&record).unwrap_or(0);
        deliver(event, seq);
        seq
    }

    /// Returns once record `seq` is on disk (`batch`), at once in the other modes.
    pub async fn wait_durable(&self, seq: u64) {
        self.syncer.wait(seq).await;
    }

    /// Appends the reserve of an attempt about to be sent: `orphan` is the row
    /// replay writes if no settle of the same event id follows. Returns once
    /// the record is as durable as the fsync mode makes it.
    pub async fn append_reserve(&self, orphan: &UsageEvent, deadline_ms: u64) {
        let record = Record::Intent {
            deadline_ms,
            orphan: EventRecord::from(orphan),
        };
        let seq = {
            let mut inner = self.lock();
            let Some(payload) = encode(&record) else {
                return;
            };
            // Opened before the append: a rotation inside it carries this reserve forward.
            inner.open.insert(
                orphan.event_id,
                OpenIntent {
                    request_id: orphan.request_id.to_string(),
                    payload: payload.clone(),
                },
            );
            inner.append_payload(&payload).unwrap_or(0)
        };
        self.wait_durable(seq).await;
    }

    /// Journals the row of an attempt whose charge is about to be committed in
    /// the shared quota store, in place of its reserve (see `Record::Settling`):
    /// a process killed between the store's commit and the row's own settle
    /// then leaves the row the store charged for. Not waited for: only a lost
    /// machine, not a killed process, loses the write, and then replay charges
    /// the reserved amount, never less than the store. Nothing is written if
    /// the attempt has no open reserve (its request was already orphaned).
    pub fn append_settling(&self, event: &UsageEvent) {
        let record = Record::Settling {
            event: EventRecord::from(event),
        };
        let Some(payload) = encode(&record) else {
            return;
        };
        let mut inner = self.lock();
        let Some(open) = inner.open.get_mut(&event.event_id) else {
            return;
        };
        // A rotation from here on carries the row forward, not the reserve.
        open.payload.clone_from(&payload);
        inner.append_payload(&payload);
    }

    /// Every settle up to `upto` is in the database: segments wholly below it go.
    pub fn checkpoint(&self, upto: u64) {
        let mut inner = self.lock();
        inner.append(&Record::Checkpoint { upto });
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.sealed)
            .into_iter()
            .partition(|(_, last)| *last <= upto);
        inner.sealed = kept;
        drop(inner);
        remove(gone.into_iter().map(|(path, _)| path));
    }

    /// Forces everything written so far to disk, whatever the fsync mode.
    pub fn sync_now(&self) {
        let file = self.lock().file.clone();
        if let Err(error) = file.sync_data() {
            tracing::error!(error = %error, "Journal fsync failed.");
            counter_add(Metric::JournalErrorsTotal, &[("op", "fsync")], 1);
        }
    }

    /// Deletes segments an earlier process left, once their events are safe.
    pub fn retire(&self, segments: &[PathBuf]) {
        let current = self.lock().current.clone();
        remove(segments.iter().filter(|p| **p != current).cloned());
    }

    /// The last sequence number written: every frame up to it is whole on disk.
    pub fn last_seq(&self) -> u64 {
        self.lock().last_seq
    }

    /// A reader of the settles from `from_seq` on, in order.
    pub fn cursor(&self, from_seq: u64) -> Cursor {
        Cursor::new(&self.lock().dir, from_seq)
    }

    /// Attempts sent upstream and not settled yet.
    pub fn open_reserves(&self) -> usize {
        self.lock().open.len()
    }

    /// Segment files on disk, the current one included.
    pub fn segments(&self) -> usize {
        self.lock().sealed.len() + 1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SyncTarget for Journal {
    fn current(&self) -> (Arc<File>, u64) {
        let inner = self.lock();
        (inner.file.clone(), inner.last_seq)
    }
}

impl Inner {
    /// The record's sequence number, or `None` if it did not reach the file.
    fn append(&mut self, record: &Written<'_>) -> Option<u64> {
        let payload = encode(record)?;
        self.append_payload(&payload)
    }

    fn append_payload(&mut self, payload: &[u8]) -> Option<u64> {
        self.last_seq += 1;
        let seq = self.last_seq;
        let written = self.write_frame(seq, payload);
        if self.current_bytes.saturating_sub(self.carried_bytes) >= self.segment_bytes {
            self.rotate();
        }
        written.then_some(seq)
    }

    fn write_frame(&mut self, seq: u64, payload: &[u8]) -> bool {
        let frame = frame::encode(seq, payload);
        let end = self.current_bytes + frame.len() as u64;
        if end > self.prepared_bytes {
            self.prepare(end);
        }
        // One write(2) per record: once it returns, a killed process loses nothing.
        match self.file.write_all_at(&frame, self.current_bytes) {
            Ok(()) => {
                self.current_bytes += frame.len() as u64;
                true
            }
            Err(error) => {
                // The row still goes to the database; only its crash safety is lost.
                tracing::error!(error = %error, "Journal write failed.");
                counter_add(Metric::JournalErrorsTotal, &[("op", "write")], 1);
                false
            }
        }
    }

    /// Zero-fills the segment past `end`. On failure the record is written
    /// anyway; it only extends the file as an append would.
    fn prepare(&mut self, end: u64) {
        let target = end.next_multiple_of(PREPARE_BYTES);
        let zeros = [0u8; PREPARE_WRITE_BYTES];
        while self.prepared_bytes < target {
            if let Err(error) = self.file.write_all_at(&zeros, self.prepared_bytes) {
                tracing::warn!(error = %error, "Cannot zero-fill the journal segment ahead of its records.");
                counter_add(Metric::JournalErrorsTotal, &[("op", "write")], 1);
                return;
            }
            self.prepared_bytes += PREPARE_WRITE_BYTES as u64;
        }
    }

    fn rotate(&mut self) {
        if self.fsync != FsyncMode::Off
            && let Err(error) = self.file.sync_data()
        {
            tracing::error!(error = %error, "Journal fsync failed.");
            counter_add(Metric::JournalErrorsTotal, &[("op", "fsync")], 1);
        }
        let (file, path) = match new_segment(&self.dir, self.last_seq + 1) {
            Ok(opened) => opened,
            Err(error) => {
                // Keep appending to the full segment rather than lose records.
                tracing::error!(error = %error, "Cannot start a new journal segment.");
                counter_add(Metric::JournalErrorsTotal, &[("op", "rotate")], 1);
                return;
            }
        };
        let closed = std::mem::replace(&mut self.current, path);
        self.sealed.push((closed, self.last_seq));
        self.file = Arc::new(file);
        self.current_bytes = 0;
        self.prepared_bytes = 0;
        let carried: Vec<Vec<u8>> = self.open.values().map(|o| o.payload.clone()).collect();
        for payload in carried {
            self.last_seq += 1;
            let seq = self.last_seq;
            self.write_frame(seq, &payload);
        }
        self.carried_bytes = self.current_bytes;
    }
}

fn encode(record: &Written<'_>) -> Option<Vec<u8>> {
    serde_json::to_vec(record)
        .inspect_err(|error| {
            tracing::error!(error = %error, "Journal record not encodable.");
            counter_add(Metric::JournalErrorsTotal, &[("op", "encode")], 1);
        })
        .ok()
}

/// The first sequence number a segment's name carries.
pub fn first_seq_of(path: &Path) -> Option<u64> {
    path.file_stem()?.to_str()?.parse().ok()
}

fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}{SEGMENT_SUFFIX}")
}

/// Segment files of `dir`, oldest first.
pub fn list_segments(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let is_segment = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(SEGMENT_SUFFIX));
        if is_segment {
            segments.push(path);
        }
    }
    // Zero-padded first sequence numbers: name order is sequence order.
    segments.sort();
    Ok(segments)
}

fn new_segment(dir: &Path, first_seq: u64) -> std::io::Result<(File, PathBuf)> {
    let path = dir.join(segment_name(first_seq));
    // Not append mode: records overwrite the zero-filled space at their offset.
    // A new name every time, so nothing written earlier is ever overwritten.
    let file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&path)?;
    // The new name must survive a power loss too, or its records would.
    File::open(dir)?.sync_all()?;
    Ok((file, path))
}

fn remove(paths: impl Iterator<Item = PathBuf>) {
    for path in paths {
        if let Err(error) = std::fs::remove_file(&path) {
            tracing::warn!(error = %error, segment = %path.display(), "Cannot delete a journal segment.");
            counter_add(Metric::JournalErrorsTotal, &[("op", "delete")], 1);
        }
    }
}
