//! `[cache]`: the exact response cache's bounds and where the semantic cache lives.

use serde::Deserialize;

use super::errors::Problems;
use super::semantic_cache::{SemanticCacheConfig, SemanticStore};
use super::storage::StorageConfig;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Cached responses kept at most (oldest evicted first).
    pub max_entries: usize,
    /// Total bytes of cached bodies kept at most.
    pub max_bytes: usize,
    /// Where the semantic cache keeps its answers (routes switch it on).
    pub semantic: SemanticCacheConfig,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_entries: 10_000,
            max_bytes: 64 * 1024 * 1024,
            semantic: SemanticCacheConfig::default(),
        }
    }
}
impl CacheConfig {
    /// A shared semantic cache needs a PostgreSQL database to live in.
    pub(super) fn check(&self, storage: &StorageConfig, problems: &mut Problems) {
        if self.semantic.store != SemanticStore::Postgres {
            return;
        }
        if let Err(reason) = self.semantic.store_url(&storage.database_url) {
            problems.add("cache.semantic.database_url", reason);
        }
    }
}
