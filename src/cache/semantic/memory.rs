//! The semantic cache's in-process index: per tenant, answers grouped by
//! route and conversation context, searched exhaustively. Exact search is
//! enough here: a lookup compares only the answers that share the request's
//! context, and a dot product of 12-bit integers is cheap (BENCHMARKS.md has
//! the lookup at 10,000 and 100,000 entries). Bounded per tenant by entries
//! and bytes; the oldest go first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, PoisonError, RwLock};

use super::vector::Quantized;
use super::{Answer, Hit, Probe};

type Bucket = (String, [u8; 32]);

#[derive(Debug)]
struct Entry {
    vector: Quantized,
    answer: Arc<Answer>,
    expires_at_ms: u64,
}

#[derive(Debug, Default)]
struct TenantIndex {
    buckets: HashMap<Bucket, VecDeque<Entry>>,
    /// Insertion order across buckets: each bucket's front is its oldest.
    order: VecDeque<Bucket>,
    entries: usize,
    bytes: usize,
}

impl TenantIndex {
    fn best(&self, probe: &Probe, threshold: u32, now_ms: u64) -> Option<Hit> {
        let bucket = self.buckets.get(&(probe.route.clone(), probe.context))?;
        let mut best: Option<(u32, &Entry)> = None;
        for entry in bucket.iter().filter(|e| e.expires_at_ms > now_ms) {
            let similarity = probe.vector.similarity(&entry.vector);
            if similarity >= threshold && best.is_none_or(|(s, _)| similarity > s) {
                best = Some((similarity, entry));
            }
        }
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
        self.buckets.entry(bucket).or_default().push_back(Entry {
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
}

impl MemoryIndex {
    pub fn new(max_entries: usize, max_bytes: usize) -> MemoryIndex {
        MemoryIndex {
            tenants: RwLock::new(HashMap::new()),
            max_entries,
            max_bytes,
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
        index.best(probe, threshold, now_ms)
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
        let index = MemoryIndex::new(100, 1 << 20);
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
        let index = MemoryIndex::new(100, 1 << 20);
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
        let index = MemoryIndex::new(3, 1 << 20);
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
        let small = MemoryIndex::new(100, 8);
        small.put(&probe("t", "r", 0, &[1.0]), answer("ab"), 1000);
        // 5 bytes each (body, provider, model, source): two pass the bound of 8.
        small.put(&probe("t", "r", 0, &[1.0]), answer("cd"), 1000);
        assert_eq!(small.len("t"), 1);
    }
}
