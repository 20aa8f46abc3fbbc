//! Metric handles kept per worker thread. The `metrics` macros build an owned
//! key (every label value copied) and look it up in the recorder's registry on
//! every call; the request path records about a dozen series per request, so
//! each thread keeps the handles it has used, found by a hash of the metric
//! and its labels and confirmed by comparing the labels themselves.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use metrics::{Counter, Gauge, Histogram};

use super::metrics::Metric;

/// Label sets are bounded (see `metrics.rs`); this only stops a slow leak if they were not.
const MAX_HANDLES: usize = 4_096;

#[derive(Clone)]
pub enum Handle {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
}

struct Entry {
    metric: Metric,
    labels: Vec<(&'static str, String)>,
    handle: Handle,
}

thread_local! {
    static HANDLES: RefCell<HashMap<u64, Entry, BuildHasherDefault<KeyIsHash>>> =
        RefCell::new(HashMap::default());
}

/// The handle of `metric` with `pairs`: from this thread's cache, or made by
/// `make` and kept. `make` must return the same kind of handle every time.
pub fn cached(
    metric: Metric,
    pairs: &[(&'static str, &str)],
    make: impl FnOnce() -> Handle,
) -> Handle {
    let mut hasher = LabelHasher::default();
    metric.as_str().hash(&mut hasher);
    pairs.hash(&mut hasher);
    let key = hasher.finish();
    HANDLES.with(|handles| {
        let mut handles = handles.borrow_mut();
        if let Some(entry) = handles.get(&key) {
            if entry.metric == metric && same_labels(&entry.labels, pairs) {
                return entry.handle.clone();
            }
            // Two series with one hash: the later one is simply not cached.
            return make();
        }
        if handles.len() >= MAX_HANDLES {
            handles.clear();
        }
        let handle = make();
        handles.insert(
            key,
            Entry {
                metric,
                labels: pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
                handle: handle.clone(),
            },
        );
        handle
    })
}

fn same_labels(kept: &[(&'static str, String)], pairs: &[(&'static str, &str)]) -> bool {
    kept.len() == pairs.len()
        && kept
            .iter()
            .zip(pairs)
            .all(|((k1, v1), (k2, v2))| k1 == k2 && v1 == v2)
}

/// FxHash's step (a rotate, a xor and a multiply per word). SipHash, the
/// default, took 1.5% of the gateway's CPU here. Flooding is no concern: the
/// labels are bounded and chosen by the configuration, and a collision only
/// costs a miss, since every hit is confirmed by comparing the labels.
#[derive(Default)]
struct LabelHasher(u64);

impl LabelHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for LabelHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let mut last = [0; 8];
        last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.add(u64::from_le_bytes(last));
    }

    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    fn write_usize(&mut self, value: usize) {
        self.add(u64::try_from(value).unwrap_or(u64::MAX));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The map's keys are already hashes (`LabelHasher`'s): used as they are.
#[derive(Default)]
struct KeyIsHash(u64);

impl Hasher for KeyIsHash {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(metric: &str, pairs: &[(&str, &str)]) -> u64 {
        let mut hasher = LabelHasher::default();
        metric.hash(&mut hasher);
        pairs.hash(&mut hasher);
        hasher.finish()
    }

    #[test]
    fn label_sets_that_differ_anywhere_hash_apart() {
        let base = hash("m", &[("route", "fast"), ("status", "ok")]);
        for other in [
            hash("n", &[("route", "fast"), ("status", "ok")]),
            hash("m", &[("route", "fast"), ("status", "ko")]),
            hash("m", &[("route", "fas"), ("status", "tok")]),
            hash("m", &[("route", "fast")]),
            hash("m", &[("route", "fast"), ("status", "ok"), ("x", "")]),
        ] {
            assert_ne!(base, other);
        }
        assert_eq!(base, hash("m", &[("route", "fast"), ("status", "ok")]));
    }
}
