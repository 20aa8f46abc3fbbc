//! The semantic cache: a question close enough (by the cosine of its
//! embedding) to one this tenant asked on this route, in the same
//! conversation context, is answered with the earlier answer. The index is
//! in process (`memory`) or shared by replicas (`postgres`: PostgreSQL with
//! pgvector). A store that cannot answer is a miss, never an error.

mod memory;
mod postgres;
pub mod vector;

use std::sync::Arc;
use std::time::Duration;

pub use crate::config::semantic_cache::{
    RawSemanticRoute, SemanticCacheConfig, SemanticRoute, SemanticStore,
};
use vector::Quantized;

/// What a lookup (and the put after a miss) is about.
#[derive(Debug, Clone)]
pub struct Probe {
    pub tenant: String,
    pub route: String,
    /// SHA-256 of everything in the request but the last user turn: two
    /// conversations never share an answer by accident.
    pub context: [u8; 32],
    pub vector: Quantized,
    /// As the embeddings call returned it: what the shared store indexes.
    pub raw: Vec<f32>,
}

/// An answer kept for reuse: the exact cache's entry, found another way.
pub type Answer = crate::cache::CachedResponse;

#[derive(Debug, Clone)]
pub struct Hit {
    pub answer: Arc<Answer>,
    /// In millionths (`vector::ONE` is the same direction).
    pub similarity: u32,
}

/// A lookup's result; `Unavailable` is served as a miss.
#[derive(Debug)]
pub enum Lookup {
    Hit(Hit),
    Miss,
    Unavailable(String),
}

pub struct SemanticCache {
    store: Store,
}

enum Store {
    Memory(memory::MemoryIndex),
    Postgres(postgres::PostgresIndex),
}

impl SemanticCache {
    /// `ledger_url`: `storage.database_url`, used when the cache names no
    /// server of its own.
    pub fn new(config: &SemanticCacheConfig, ledger_url: &str) -> Result<SemanticCache, String> {
        let store = match config.store {
            SemanticStore::Memory => Store::Memory(memory::MemoryIndex::new(
                config.max_entries_per_tenant,
                config.max_bytes_per_tenant,
                config.exact_search_max_entries,
            )),
            SemanticStore::Postgres => Store::Postgres(postgres::PostgresIndex::new(
                config.store_url(ledger_url)?,
                Duration::from_millis(config.timeout_ms),
                config.max_entries_per_tenant,
            )),
        };
        Ok(SemanticCache { store })
    }

    pub fn store_name(&self) -> &'static str {
        match self.store {
            Store::Memory(_) => SemanticStore::Memory.name(),
            Store::Postgres(_) => SemanticStore::Postgres.name(),
        }
    }

    pub async fn lookup(&self, probe: &Probe, threshold: u32, now_ms: u64) -> Lookup {
        match &self.store {
            Store::Memory(index) => match index.lookup(probe, threshold, now_ms) {
                Some(hit) => Lookup::Hit(hit),
                None => Lookup::Miss,
            },
            Store::Postgres(index) => match index.lookup(probe, threshold, now_ms).await {
                Ok(Some(hit)) => Lookup::Hit(hit),
                Ok(None) => Lookup::Miss,
                Err(e) => Lookup::Unavailable(e),
            },
        }
    }

    /// Keeps an answer at once if the index is in process; else hands it back.
    pub fn put_local(
        &self,
        probe: &Probe,
        answer: Answer,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<(), Box<Answer>> {
        match &self.store {
            Store::Memory(index) => {
                index.put(probe, answer, now_ms.saturating_add(ttl_ms));
                Ok(())
            }
            Store::Postgres(_) => Err(Box::new(answer)),
        }
    }

    /// Keeps an answer until `expires_at_ms`; a store that cannot take it
    /// now says why (the answer was served; only its reuse is lost).
    pub async fn put(
        &self,
        probe: &Probe,
        answer: Answer,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<(), String> {
        match &self.store {
            Store::Memory(index) => {
                index.put(probe, answer, now_ms.saturating_add(ttl_ms));
                Ok(())
            }
            Store::Postgres(index) => index.put(probe, &answer, ttl_ms, now_ms).await,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::money::Nanos;
    use crate::pricing::Usage;
    use bytes::Bytes;

    pub fn probe(tenant: &str, route: &str, context: u8, v: &[f32]) -> Probe {
        Probe {
            tenant: tenant.to_owned(),
            route: route.to_owned(),
            context: [context; 32],
            vector: Quantized::from_f32(v).unwrap(),
            raw: v.to_vec(),
        }
    }

    pub fn answer(body: &'static str) -> Answer {
        Answer {
            body: Bytes::from_static(body.as_bytes()),
            provider: "p".into(),
            model: "m".into(),
            usage: Usage::default(),
            native: false,
            source: "e".into(),
            cost: Nanos::ZERO,
        }
    }
}
