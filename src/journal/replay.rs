//! Reading back what an earlier process left: the settles past its last
//! checkpoint (their rows may not be in the database yet), and one `orphaned`
//! row per intent that never got a settle (the attempt was in flight when the
//! process died; the upstream may have billed it). An intent superseded by a
//! `settling` record yields that record's row instead: the shared quota store
//! may have committed its cost. Either takes its request's orphan id
//! (`EventId::orphan_of`), so replaying twice, after a crash during replay, or
//! after another replica swept the same shared reservation, yields one row:
//! the database's unique event ids drop repeats.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::frame;
use super::record::{EventRecord, Record};
use super::writer::list_segments;
use crate::ids::EventId;
use crate::ledger::{AttemptStatus, UsageEvent};

#[derive(Debug, Default)]
pub struct Recovered {
    /// Rows to (re)write, settles first, in journal order.
    pub events: Vec<UsageEvent>,
    pub settles: usize,
    pub orphans: usize,
    /// Bytes past the last whole record of each segment (torn writes).
    pub torn_bytes: usize,
    /// Whole frames whose record could not be read back.
    pub unreadable: usize,
    pub last_seq: u64,
    /// The segments read; delete them once `events` are safe elsewhere.
    pub segments: Vec<PathBuf>,
}

pub fn recover(dir: &Path) -> std::io::Result<Recovered> {
    let mut recovered = Recovered {
        segments: list_segments(dir)?,
        ..Recovered::default()
    };
    let mut checkpoint = 0;
    let mut settles: Vec<(u64, EventRecord)> = Vec::new();
    // The last intent or settling of each attempt, in the order attempts began.
    let mut intents: Vec<EventRecord> = Vec::new();
    let mut intent_at: HashMap<String, usize> = HashMap::new();
    let mut settled: HashSet<String> = HashSet::new();
    let mut orphaned_requests: HashSet<String> = HashSet::new();
    for path in &recovered.segments {
        let bytes = std::fs::read(path)?;
        let decoded = frame::decode(&bytes);
        if decoded.torn_bytes > 0 {
            tracing::warn!(segment = %path.display(), bytes = decoded.torn_bytes, "Journal segment ends in a torn record; ignored.");
        }
        recovered.torn_bytes += decoded.torn_bytes;
        for (seq, payload) in decoded.frames {
            recovered.last_seq = recovered.last_seq.max(seq);
            match serde_json::from_slice::<Record>(payload) {
                Ok(Record::Settle { event }) => {
                    settled.insert(event.event_id.clone());
                    if event.status == AttemptStatus::Orphaned.as_str() {
                        orphaned_requests.insert(event.request_id.clone());
                    }
                    settles.push((seq, event));
                }
                Ok(Record::Intent { orphan: row, .. } | Record::Settling { event: row }) => {
                    if let Some(&at) = intent_at.get(&row.event_id) {
                        intents[at] = row;
                    } else {
                        intent_at.insert(row.event_id.clone(), intents.len());
                        intents.push(row);
                    }
                }
                Ok(Record::Checkpoint { upto }) => checkpoint = checkpoint.max(upto),
                Err(error) => {
                    tracing::warn!(segment = %path.display(), seq, error = %error, "Unreadable journal record; skipped.");
                    recovered.unreadable += 1;
                }
            }
        }
    }
    let mut seen = HashSet::new();
    for (seq, record) in settles {
        // Past the checkpoint only: everything up to it is in the database.
        if seq <= checkpoint || !seen.insert(record.event_id.clone()) {
            continue;
        }
        if let Some(event) = readable(&record, &mut recovered.unreadable) {
            recovered.events.push(event);
            recovered.settles += 1;
        }
    }
    for record in intents {
        let open =
            !settled.contains(&record.event_id) && !orphaned_requests.contains(&record.request_id);
        if !open || !seen.insert(record.event_id.clone()) {
            continue;
        }
        if let Some(mut event) = readable(&record, &mut recovered.unreadable) {
            // The request's one orphan row: a replica that swept the shared
            // reservation meanwhile wrote the same id.
            event.event_id = EventId::orphan_of(&event.request_id);
            if event.status == AttemptStatus::Orphaned {
                tracing::warn!(request_id = %event.request_id, tenant = %event.tenant, provider = %event.provider, reserved = %event.reserved, "Attempt in flight when the gateway stopped; recorded as orphaned at its reserved amount.");
                recovered.orphans += 1;
            } else {
                tracing::warn!(request_id = %event.request_id, tenant = %event.tenant, provider = %event.provider, charged = %event.charged, "Attempt settling in the shared quota store when the gateway stopped; recorded at its cost.");
                recovered.settles += 1;
            }
            recovered.events.push(event);
        }
    }
    Ok(recovered)
}

fn readable(record: &EventRecord, unreadable: &mut usize) -> Option<UsageEvent> {
    let event = record.to_event();
    if event.is_none() {
        tracing::warn!(event_id = %record.event_id, "Journal event with an unknown status or id; skipped.");
        *unreadable += 1;
    }
    event
}
