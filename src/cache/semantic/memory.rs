//! The semantic cache's in-process index: per tenant, answers grouped by
//! route and conversation context. A lookup compares only the answers that
//! share the request's context. Up to `exact_search_max_entries` of them it
//! compares every one exactly; past that it first ranks them all by the
//! Hamming distance of their sign bits (one XOR and popcount per 64
//! dimensions, about twenty times cheaper than the dot product) and compares
//! only the nearest `CANDIDATES` exactly. The approximate search can miss a
//! close answer ranked out by its signs, which costs a call; it cannot serve
//! one below the threshold, which is always checked exactly. BENCHMARKS.md
//! has both at 10,000 and 100,000 entries. Bounded per tenant by entries and
//! bytes; the oldest go first.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, PoisonError, RwLock};

use super::vector::{Quantized, sign_distance};
use super::{Answer, Hit, Probe};

type Bucket = (String, [u8; 32]);

#[derive(Debug)]
struct Entry {
    vector: Quantized,
    answer: Arc<Answer>,
    expires_at_ms: u64,
}

/// One context's answers, oldest first, with their sign bits side by side
/// in one array: the approximate search reads them in a single pass, where
/// following each entry's own allocation would wait on memory per entry.
#[derive(Debug, Default)]
struct Answers {
    entries: VecDeque<Entry>,
    signs: Vec<u64>,
    /// Words of `signs` per entry: the first entry's (a vector of another
    /// size is never similar, so its bits need not fit).
    words: usize,
    /// Words at the front of `signs` that belong to evicted entries.
    dead: usize,
}

impl Answers {
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn push(&mut self, entry: Entry) {
        if self.entries.is_empty() {
            self.signs.clear();
            self.dead = 0;
            self.words = entry.vector.signs().len();
        }
        let mut bits = entry.vector.signs().to_vec();
        bits.resize(self.words, 0);
        self.signs.extend(bits);
        self.entries.push_back(entry);
    }

    fn pop_front(&mut self) -> Option<Entry> {
        let entry = self.entries.pop_front()?;
        self.dead += self.words;
        // Compacted once half is dead: each word moves at most once per eviction.
        if self.dead * 2 > self.signs.len() {
            self.signs.drain(..self.dead);
            self.dead = 0;
        }
        Some(entry)
    }

    /// Each live entry with its sign bits.
    fn with_signs(&self) -> impl Iterator<Item = (&Entry, &[u64])> {
        let live = &self.signs[self.dead..];
        self.entries.iter().zip(live.chunks(self.words.max(1)))
    }
}

#[derive(Debug, Default)]
struct TenantIndex {
    buckets: HashMap<Bucket, Answers>,
    /// Insertion order across buckets: each bucket's front is its oldest.
    order: VecDeque<Bucket>,
    entries: usize,
    bytes: usize,
}

/// Answers the approximate search compares exactly: the nearest by sign distance.
const CANDIDATES: usize = 64;

/// The most similar of `entries` at or above `threshold`.
fn closest<'a>(
    entries: impl Iterator<Item = &'a Entry>,
    probe: &Probe,
    threshold: u32,
) -> Option<(u32, &'a Entry)> {
    let mut best: Option<(u32, &Entry)> = None;
    for entry in entries {
        let similarity = probe.vector.similarity(&entry.vector);
        if similarity >= threshold && best.is_none_or(|(s, _)| similarity > s) {
            best = Some((similarity, entry));
        }
    }
    best
}

/// The `CANDIDATES` live entries nearest the probe by sign distance.
fn candidates<'a>(bucket: &'a Answers, probe: &Probe, now_ms: u64) -> Vec<&'a Entry> {
    let mut nearest: BinaryHeap<(u32, usize)> = BinaryHeap::with_capacity(CANDIDATES + 1);
    let probe_signs = probe.vector.signs();
    for (i, (entry, signs)) in bucket.with_signs().enumerate() {
        if entry.expires_at_ms <= now_ms {
            continue;
        }
        let distance = sign_distance(probe_signs, signs);
        if nearest.len() < CANDIDATES {
            nearest.push((distance, i));
        } else if nearest.peek().is_some_and(|(worst, _)| distance < *worst) {
            nearest.pop();
            nearest.push((distance, i));
        }
    }
    nearest
        .into_iter()
        .filter_map(|(_, i)| bucket.entries.get(i))
        .collect()
}

impl TenantIndex {
    fn best(&self, probe: &Probe, threshold: u32, now_ms: u64, exact_max: usize) -> Option<Hit> {
        let bucket = self.buckets.get(&(probe.route.clone(), probe.context))?;
        let best = if bucket.len() <= exact_max {
            let live = bucket.entries.iter().filter(|e| e.expires_at_ms > now_ms);
            closest(live, probe, threshold)
        } else {
            closest(
                candidates(bucket, probe, now_ms).into_iter(),
                probe,
                threshold,
            )
        };
        best.map(|(similarity, entry)| Hit {
            answer: Arc::clone(&entry.answer),
            similarity,
        })
    }

    fn insert(&mut self, probe: &Probe, answer: Arc<Answer>, expires_at_ms: u64) {
        let bucket = (probe.route.clone(), probe.context);
        self.bytes += answer.size();
        self.entries += 1;
        self.order.push_back(bucket.clone());
        self.buckets.entry(bucket).or_default().push(Entry {
            vector: probe.vector.clone(),
            answer,
            expires_at_ms,
        });
    }

    fn evict_oldest(&mut self) -> bool {
        let Some(bucket) = self.order.pop_front() else {
            return false;
        };
        if let Some(entries) = self.buckets.get_mut(&bucket) {
            if let Some(entry) = entries.pop_front() {
                self.entries -= 1;
                self.bytes = self.bytes.saturating_sub(entry.answer.size());
            }
            if entries.is_empty() {
                self.buckets.remove(&bucket);
            }
        }
        true
    }
}

#[derive(Debug)]
pub struct MemoryIndex {
    tenants: RwLock<HashMap<String, Arc<RwLock<TenantIndex>>>>,
    max_entries: usize,
    max_bytes: usize,
    /// Contexts with more answers than this are searched approximately.
    exact_max: usize,
}

impl MemoryIndex {
    pub fn new(max_entries: usize, max_bytes: usize, exact_max: usize) -> MemoryIndex {
        MemoryIndex {
            tenants: RwLock::new(HashMap::new()),
            max_entries,
            max_bytes,
            exact_max,
        }
    }

    pub fn lookup(&self, probe: &Probe, threshold: u32, now_ms: u64) -> Option<Hit> {
        let index = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&probe.tenant)
            .cloned()?;
        let index = index.read().unwrap_or_else(PoisonError::into_inner);
        index.best(probe, threshold, now_ms, self.exact_max)
    }

    pub fn put(&self, probe: &Probe, answer: Answer, expires_at_ms: u64) {
        if answer.size() > self.max_bytes || self.max_entries == 0 {
            return;
        }
        let index = {
            let mut tenants = self.tenants.write().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(tenants.entry(probe.tenant.clone()).or_default())
        };
        let mut index = index.write().unwrap_or_else(PoisonError::into_inner);
        index.insert(probe, Arc::new(answer), expires_at_ms);
        while (index.entries > self.max_entries || index.bytes > self.max_bytes)
            && index.evict_oldest()
        {}
    }

    /// Entries kept for one tenant.
    #[cfg(test)]
    pub fn len(&self, tenant: &str) -> usize {
        self.tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .map_or(0, |index| {
                index.read().unwrap_or_else(PoisonError::into_inner).entries
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::semantic::tests::{answer, probe};

    #[test]
    fn the_closest_answer_above_the_threshold_is_found() {
        let index = MemoryIndex::new(100, 1 << 20, usize::MAX);
        index.put(&probe("t", "r", 1, &[1.0, 0.0, 0.0]), answer("x"), 1000);
        index.put(&probe("t", "r", 1, &[0.8, 0.6, 0.0]), answer("y"), 1000);
        let hit = index
            .lookup(&probe("t", "r", 1, &[0.99, 0.14, 0.0]), 900_000, 0)
            .unwrap();
        assert_eq!(hit.answer.body, "x");
        assert!(hit.similarity > 990_000, "{}", hit.similarity);
        let below = probe("t", "r", 1, &[0.0, 0.0, 1.0]);
        assert!(index.lookup(&below, 900_000, 0).is_none());
    }

    #[test]
    fn tenants_routes_contexts_and_expiry_separate_answers() {
        let index = MemoryIndex::new(100, 1 << 20, usize::MAX);
        index.put(&probe("a", "r", 1, &[1.0, 0.0]), answer("x"), 1000);
        let same = [1.0, 0.0];
        assert!(
            index
                .lookup(&probe("b", "r", 1, &same), 900_000, 0)
                .is_none()
        );
        assert!(
            index
                .lookup(&probe("a", "s", 1, &same), 900_000, 0)
                .is_none()
        );
        assert!(
            index
                .lookup(&probe("a", "r", 2, &same), 900_000, 0)
                .is_none()
        );
        assert!(
            index
                .lookup(&probe("a", "r", 1, &same), 900_000, 999)
                .is_some()
        );
        assert!(
            index
                .lookup(&probe("a", "r", 1, &same), 900_000, 1000)
                .is_none()
        );
    }

    #[test]
    fn each_tenant_is_bounded_oldest_first() {
        let index = MemoryIndex::new(3, 1 << 20, usize::MAX);
        for i in 0..5u8 {
            let v = [1.0, f32::from(i)];
            index.put(&probe("t", "r", i % 2, &v), answer("x"), 1000);
        }
        index.put(&probe("u", "r", 0, &[1.0]), answer("y"), 1000);
        assert_eq!(index.len("t"), 3);
        assert_eq!(index.len("u"), 1);
        // The first two (i = 0, 1) went: i = 0 was [1, 0].
        assert!(
            index
                .lookup(&probe("t", "r", 0, &[1.0, 0.0]), 999_999, 0)
                .is_none()
        );
        assert!(
            index
                .lookup(&probe("t", "r", 0, &[1.0, 4.0]), 999_999, 0)
                .is_some()
        );
        let small = MemoryIndex::new(100, 8, usize::MAX);
        small.put(&probe("t", "r", 0, &[1.0]), answer("ab"), 1000);
        // 5 bytes each (body, provider, model, source): two pass the bound of 8.
        small.put(&probe("t", "r", 0, &[1.0]), answer("cd"), 1000);
        assert_eq!(small.len("t"), 1);
    }

    /// A deterministic stream of numbers in [-1, 1).
    struct Noise(u64);

    impl Noise {
        #[expect(
            clippy::cast_precision_loss,
            clippy::float_arithmetic,
            reason = "test vectors: 24 random bits scaled to a float"
        )]
        fn next(&mut self) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        }
    }

    #[expect(clippy::float_arithmetic, reason = "test vectors")]
    fn near(base: &[f32], noise: &mut Noise, amount: f32) -> Vec<f32> {
        base.iter().map(|x| x + amount * noise.next()).collect()
    }

    #[test]
    fn the_approximate_search_finds_what_the_exact_one_does_above_a_high_threshold() {
        const DIMS: usize = 1536;
        let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
        let exact = MemoryIndex::new(10_000, usize::MAX, usize::MAX);
        let approximate = MemoryIndex::new(10_000, usize::MAX, 16);
        // Answers of one context are alike, as questions of one conversation
        // are: a shared direction puts two of them at a cosine near 0.69.
        let common: Vec<f32> = near(&vec![0.0; DIMS], &mut noise, 1.5);
        let mut planted = Vec::new();
        for i in 0..4000u32 {
            let vector = near(&common, &mut noise, 1.0);
            if i % 100 == 0 {
                planted.push(vector.clone());
            }
            for index in [&exact, &approximate] {
                let mut kept = answer("");
                kept.body = bytes::Bytes::from(i.to_string());
                index.put(&probe("t", "r", 1, &vector), kept, 1000);
            }
        }
        let mut found = 0;
        for base in &planted {
            // Noise of 0.7 on those components: a cosine near 0.93 to its answer.
            let question = probe("t", "r", 1, &near(base, &mut noise, 0.7));
            let truth = exact.lookup(&question, 900_000, 0);
            let guess = approximate.lookup(&question, 900_000, 0);
            assert!(truth.is_some(), "every planted question is above 0.9");
            if let (Some(truth), Some(guess)) = (truth, guess) {
                assert_eq!(truth.answer.body, guess.answer.body);
                found += 1;
            }
        }
        assert_eq!(found, planted.len(), "recall of the approximate search");
        let stranger = probe("t", "r", 1, &near(&common, &mut noise, 1.0));
        assert!(approximate.lookup(&stranger, 900_000, 0).is_none());
    }
}
