//! The on-disk frame of one journal record:
//! `len: u32 LE | crc32(seq ‖ payload): u32 LE | seq: u64 LE | payload (len bytes)`.
//! A crash can leave the last frame of a segment half written; its length or
//! checksum then fails and it, and anything after it, is ignored. Segments are
//! zero-filled ahead of the writes (see `writer`): a header of zeros (no
//! record has sequence 0) marks where the records end.

/// Bytes before the payload.
pub const HEADER_BYTES: usize = 16;
/// A record is a few hundred bytes; anything near this is garbage, not a record.
const MAX_PAYLOAD: usize = 16 * 1024 * 1024;

pub fn encode(seq: u64, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let seq_bytes = seq.to_le_bytes();
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&seq_bytes);
    hasher.update(payload);
    let mut frame = Vec::with_capacity(HEADER_BYTES + payload.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&hasher.finalize().to_le_bytes());
    frame.extend_from_slice(&seq_bytes);
    frame.extend_from_slice(payload);
    frame
}

/// The frames of one segment, in order, up to the first torn or corrupt one.
#[derive(Debug, Default)]
pub struct Decoded<'a> {
    pub frames: Vec<(u64, &'a [u8])>,
    /// Bytes after the last whole frame (a torn tail write, or corruption),
    /// not counting the zero-filled space after them.
    pub torn_bytes: usize,
}

pub fn decode(bytes: &[u8]) -> Decoded<'_> {
    let mut decoded = Decoded::default();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() >= HEADER_BYTES && rest[..HEADER_BYTES].iter().all(|b| *b == 0) {
            decoded.torn_bytes = written_len(rest);
            break;
        }
        let Some(frame) = frame_at(rest) else {
            decoded.torn_bytes = written_len(rest);
            break;
        };
        decoded.frames.push(frame);
        at += HEADER_BYTES + frame.1.len();
    }
    decoded
}

/// Bytes up to the last non-zero one: what was written of a tail.
fn written_len(tail: &[u8]) -> usize {
    tail.iter()
        .rposition(|b| *b != 0)
        .map_or(0, |last| last + 1)
}

fn frame_at(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let header = bytes.get(..HEADER_BYTES)?;
    let len = usize::try_from(u32::from_le_bytes(header[0..4].try_into().ok()?)).ok()?;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let seq_bytes: [u8; 8] = header[8..16].try_into().ok()?;
    if len > MAX_PAYLOAD {
        return None;
    }
    let payload = bytes.get(HEADER_BYTES..HEADER_BYTES + len)?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&seq_bytes);
    hasher.update(payload);
    (hasher.finalize() == crc).then_some((u64::from_le_bytes(seq_bytes), payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut bytes = encode(1, b"one");
        bytes.extend(encode(2, b"two"));
        let decoded = decode(&bytes);
        assert_eq!(decoded.frames, vec![(1, &b"one"[..]), (2, &b"two"[..])]);
        assert_eq!(decoded.torn_bytes, 0);
    }

    #[test]
    fn a_torn_tail_is_ignored_whatever_the_cut() {
        let first = encode(7, b"whole record");
        let second = encode(8, b"the record a crash cut short");
        for cut in 0..second.len() {
            let mut bytes = first.clone();
            bytes.extend_from_slice(&second[..cut]);
            let decoded = decode(&bytes);
            assert_eq!(
                decoded.frames,
                vec![(7, &b"whole record"[..])],
                "cut at {cut}"
            );
            // Trailing zeros are indistinguishable from the zero-filled space.
            let written = second[..cut]
                .iter()
                .rposition(|b| *b != 0)
                .map_or(0, |i| i + 1);
            assert_eq!(decoded.torn_bytes, written, "cut at {cut}");
        }
    }

    #[test]
    fn zero_filled_space_ends_the_records_without_counting_as_torn() {
        let mut bytes = encode(1, b"one");
        bytes.extend(encode(2, b"two"));
        bytes.resize(bytes.len() + 4096, 0);
        let decoded = decode(&bytes);
        assert_eq!(decoded.frames, vec![(1, &b"one"[..]), (2, &b"two"[..])]);
        assert_eq!(decoded.torn_bytes, 0);

        // A record cut short inside the zero-filled space is torn, its zeros are not.
        let whole = encode(1, b"one");
        let cut = encode(2, b"the record a crash cut short");
        for keep in 1..cut.len() {
            let mut bytes = whole.clone();
            bytes.extend_from_slice(&cut[..keep]);
            bytes.resize(bytes.len() + 100, 0);
            let decoded = decode(&bytes);
            assert_eq!(decoded.frames, vec![(1, &b"one"[..])], "cut at {keep}");
            let written = cut[..keep]
                .iter()
                .rposition(|b| *b != 0)
                .map_or(0, |i| i + 1);
            assert_eq!(decoded.torn_bytes, written, "cut at {keep}");
        }
    }

    #[test]
    fn a_flipped_bit_ends_the_segment_there() {
        let mut bytes = encode(1, b"first");
        let second_at = bytes.len();
        bytes.extend(encode(2, b"second"));
        bytes.extend(encode(3, b"third"));
        bytes[second_at + HEADER_BYTES + 2] ^= 0x04;
        let decoded = decode(&bytes);
        assert_eq!(decoded.frames, vec![(1, &b"first"[..])]);
        assert!(decoded.torn_bytes > 0);
    }
}
