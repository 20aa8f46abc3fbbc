//! The exact response cache: an identical non-streaming request of the same
//! tenant on the same route is answered without an upstream call and without
//! a reservation. Keys always include the tenant, so one tenant can never read
//! another's answers. Bounded by entries and bytes; oldest entries go first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::config::CacheConfig;
use crate::pricing::Usage;

/// SHA-256 of tenant, door, route and body. The door is in the key because
/// one body can be valid at two doors (chat and Messages) that answer in
/// different shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    pub fn new(tenant: &str, door: &str, route: &str, body: &[u8]) -> CacheKey {
        let mut hasher = Sha256::new();
        for part in [tenant.as_bytes(), door.as_bytes(), route.as_bytes()] {
            hasher.update(u64::try_from(part.len()).unwrap_or(u64::MAX).to_le_bytes());
            hasher.update(part);
        }
        hasher.update(body);
        CacheKey(hasher.finalize().into())
    }

    /// This key for a request the gateway places prompts before (`prompts`):
    /// another prompt, another answer.
    #[must_use]
    pub fn with_placed(self, digest: &[u8; 32]) -> CacheKey {
        let mut hasher = Sha256::new();
        hasher.update(self.0);
        hasher.update(digest);
        CacheKey(hasher.finalize().into())
    }
}

/// A cached answer and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedResponse {
    pub body: Bytes,
    pub provider: String,
    pub model: String,
    /// The original call's usage: a hit is metered with it but charged nothing.
    pub usage: Usage,
    /// The body is in its door's own API, not OpenAI chat (a passthrough answer).
    pub native: bool,
    /// The event id of the ledger row whose answer this is.
    pub source: String,
    /// What that row charged: what serving it again saves.
    pub cost: crate::money::Nanos,
}

impl CachedResponse {
    /// What keeping it costs in memory.
    pub fn size(&self) -> usize {
        self.body.len() + self.provider.len() + self.model.len() + self.source.len()
    }
}

#[derive(Debug)]
struct Entry {
    response: CachedResponse,
    expires_at_ms: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<CacheKey, Entry>,
    order: VecDeque<CacheKey>,
    bytes: usize,
}

#[derive(Debug)]
pub struct ResponseCache {
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
}

impl ResponseCache {
    pub fn new(config: &CacheConfig) -> ResponseCache {
        ResponseCache {
            inner: Mutex::new(Inner::default()),
            max_entries: config.max_entries,
            max_bytes: config.max_bytes,
        }
    }

    pub fn get(&self, key: &CacheKey, now_ms: u64) -> Option<CachedResponse> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let expired = match inner.entries.get(key) {
            Some(entry) if entry.expires_at_ms > now_ms => return Some(entry.response.clone()),
            Some(_) => true,
            None => false,
        };
        if expired && let Some(entry) = inner.entries.remove(key) {
            inner.bytes = inner.bytes.saturating_sub(entry.response.body.len());
        }
        None
    }

    pub fn put(&self, key: CacheKey, response: CachedResponse, expires_at_ms: u64) {
        let size = response.body.len();
        if size > self.max_bytes || self.max_entries == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = inner.entries.insert(
            key,
            Entry {
                response,
                expires_at_ms,
            },
        ) {
            inner.bytes = inner.bytes.saturating_sub(old.response.body.len());
        } else {
            inner.order.push_back(key);
        }
        inner.bytes += size;
        while inner.entries.len() > self.max_entries || inner.bytes > self.max_bytes {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(entry) = inner.entries.remove(&oldest) {
                inner.bytes = inner.bytes.saturating_sub(entry.response.body.len());
            }
        }
        // Keys of entries that expired or were replaced stay in `order` until
        // they reach its front; bound that too.
        if inner.order.len() > self.max_entries.saturating_mul(2) {
            let Inner { entries, order, .. } = &mut *inner;
            order.retain(|k| entries.contains_key(k));
        }
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(body: &'static str) -> CachedResponse {
        CachedResponse {
            body: Bytes::from_static(body.as_bytes()),
            provider: "p".into(),
            model: "m".into(),
            usage: Usage::default(),
            native: false,
            source: "e".into(),
            cost: crate::money::Nanos::ZERO,
        }
    }

    #[test]
    fn keys_separate_tenants_doors_and_routes() {
        let body = br#"{"model":"fast"}"#;
        assert_ne!(
            CacheKey::new("a", "chat", "fast", body),
            CacheKey::new("b", "chat", "fast", body)
        );
        assert_ne!(
            CacheKey::new("a", "chat", "fast", body),
            CacheKey::new("a", "chat", "smart", body)
        );
        assert_ne!(
            CacheKey::new("a", "chat", "fast", body),
            CacheKey::new("a", "messages", "fast", body)
        );
        assert_ne!(
            CacheKey::new("ab", "chat", "c", body),
            CacheKey::new("a", "chat", "bc", body)
        );
        assert_eq!(
            CacheKey::new("a", "chat", "fast", body),
            CacheKey::new("a", "chat", "fast", body)
        );
    }

    #[test]
    fn entries_expire_and_the_oldest_are_evicted() {
        let cache = ResponseCache::new(&CacheConfig {
            max_entries: 2,
            max_bytes: 1024,
            ..CacheConfig::default()
        });
        let k = |i: u8| CacheKey::new("t", "chat", "r", &[i]);
        cache.put(k(1), response("one"), 100);
        assert!(cache.get(&k(1), 99).is_some());
        assert!(cache.get(&k(1), 100).is_none(), "expired");
        cache.put(k(2), response("two"), 1000);
        cache.put(k(3), response("three"), 1000);
        cache.put(k(4), response("four"), 1000);
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&k(2), 0).is_none(), "oldest evicted");
        assert_eq!(cache.get(&k(4), 0).unwrap().body, "four");
    }

    #[test]
    fn the_byte_bound_holds() {
        let cache = ResponseCache::new(&CacheConfig {
            max_entries: 100,
            max_bytes: 8,
            ..CacheConfig::default()
        });
        cache.put(
            CacheKey::new("t", "chat", "r", b"1"),
            response("12345"),
            1000,
        );
        cache.put(
            CacheKey::new("t", "chat", "r", b"2"),
            response("67890"),
            1000,
        );
        assert_eq!(cache.len(), 1);
        cache.put(
            CacheKey::new("t", "chat", "r", b"3"),
            response("too large to keep"),
            1000,
        );
        assert_eq!(cache.len(), 1);
    }
}
