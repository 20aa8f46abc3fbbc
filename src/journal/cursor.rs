//! Reading settles back in journal order from a sequence number on: how the
//! ledger writes rows it stopped keeping in memory during a long database
//! outage. A cursor reads only frames up to a sequence the caller saw under
//! the journal's lock, so it never meets a frame still being written.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use super::frame::{self, HEADER_BYTES};
use super::record::Record;
use super::writer::{first_seq_of, list_segments};
use crate::ledger::Journaled;

pub struct Cursor {
    dir: PathBuf,
    /// Settles below this are not returned.
    from_seq: u64,
    /// The segment being read (by its first sequence) and where its next frame starts.
    segment: Option<(u64, PathBuf)>,
    offset: u64,
}

impl Cursor {
    pub fn new(dir: &Path, from_seq: u64) -> Cursor {
        Cursor {
            dir: dir.to_path_buf(),
            from_seq,
            segment: None,
            offset: 0,
        }
    }

    /// Up to `max` settles with `from_seq <= seq <= upto`, in order; the cursor
    /// moves past them. Empty when every settle up to `upto` has been read.
    pub fn next_batch(&mut self, upto: u64, max: usize) -> std::io::Result<Vec<Journaled>> {
        let mut out = Vec::new();
        loop {
            let segments = numbered(&self.dir)?;
            let Some(index) = self.current_index(&segments) else {
                return Ok(out);
            };
            let (first, path) = &segments[index];
            if self.segment.as_ref().is_none_or(|(f, _)| f != first) {
                self.segment = Some((*first, path.clone()));
                self.offset = 0;
            }
            let mut file = std::fs::File::open(path)?;
            file.seek(SeekFrom::Start(self.offset))?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            for (seq, payload) in frame::decode(&bytes).frames {
                if seq > upto {
                    return Ok(out);
                }
                self.offset += (HEADER_BYTES + payload.len()) as u64;
                if seq < self.from_seq {
                    continue;
                }
                if let Ok(Record::Settle { event }) = serde_json::from_slice(payload)
                    && let Some(event) = event.to_event()
                {
                    out.push(Journaled { seq, event });
                    if out.len() >= max {
                        return Ok(out);
                    }
                }
            }
            // This segment is read to its end: go on with the next one, if any.
            let Some((next, next_path)) = segments.get(index + 1) else {
                return Ok(out);
            };
            self.segment = Some((*next, next_path.clone()));
            self.offset = 0;
        }
    }

    /// The segment to read: the current one, or at first the one holding `from_seq`.
    fn current_index(&self, segments: &[(u64, PathBuf)]) -> Option<usize> {
        let at = self
            .segment
            .as_ref()
            .map_or(self.from_seq, |(first, _)| *first);
        segments.iter().rposition(|(first, _)| *first <= at).or(
            // Everything before `at` is gone: start with the oldest left.
            (!segments.is_empty()).then_some(0),
        )
    }
}

/// Segments with the first sequence their name carries, oldest first.
fn numbered(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    Ok(list_segments(dir)?
        .into_iter()
        .filter_map(|path| Some((first_seq_of(&path)?, path)))
        .collect())
}
