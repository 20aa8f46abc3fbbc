//! `[storage]`: the database and the shared quota store, whose URLs the
//! environment may override.

use serde::Deserialize;

use super::env::{DATABASE_URL_ENV, EnvSource, REDIS_URL_ENV};
use super::errors::Problems;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    pub database_url: String,
    /// The database pool; unset: `pool_size()` picks one for the backend.
    pub max_connections: Option<u32>,
    /// How often each replica polls the database for revoked keys and changed tenants.
    pub sync_interval_ms: u64,
    /// Shared quota store for replicas (`redis://host:port/db`); without it
    /// every replica keeps its own quotas in memory.
    pub redis_url: Option<String>,
    /// Every Redis call gives up after this long, so a frozen Redis cannot hold requests.
    pub redis_timeout_ms: u64,
    /// Multiplexed connections to Redis for each thread that calls it, used
    /// in turn; each pipelines the concurrent calls on it, so a few carry a
    /// whole replica's decisions.
    pub redis_pool_size: usize,
    /// How many replicas share the limits; a tenant served from the local
    /// store while Redis is down gets this share of its limits on each replica.
    pub replicas: u32,
    /// How often Redis's committed spend is compared with the ledger.
    pub reconcile_interval_ms: u64,
}

/// PostgreSQL serves many connections at once; SQLite takes one writer at a
/// time, so past the ledger, the directory's sync and a reader or two, more
/// connections only add threads and page caches.
pub(super) const POSTGRES_POOL: u32 = 8;
pub(super) const SQLITE_POOL: u32 = 4;

impl StorageConfig {
    /// Connections the gateway opens to its database.
    pub fn pool_size(&self) -> u32 {
        self.max_connections
            .unwrap_or(if crate::storage::is_sqlite(&self.database_url) {
                SQLITE_POOL
            } else {
                POSTGRES_POOL
            })
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            database_url: "sqlite://tollgate.db?mode=rwc".to_owned(),
            max_connections: None,
            sync_interval_ms: 1000,
            redis_url: None,
            redis_timeout_ms: 100,
            redis_pool_size: 2,
            replicas: 1,
            reconcile_interval_ms: 60_000,
        }
    }
}
impl StorageConfig {
    /// `[storage]`, with the URLs the environment overrides.
    pub(super) fn resolve(&self, env: &dyn EnvSource, problems: &mut Problems) -> StorageConfig {
        let mut database_url = self.database_url.clone();
        if let Some(url) = env.get(DATABASE_URL_ENV) {
            database_url = url;
        }
        let mut redis_url = self.redis_url.clone().filter(|u| !u.is_empty());
        if let Some(url) = env.get(REDIS_URL_ENV) {
            redis_url = Some(url).filter(|u| !u.is_empty());
        }
        if self.replicas == 0 {
            problems.add("storage.replicas", "must be at least 1");
        }
        // Each replica would keep its own quotas in memory and give every
        // tenant its whole budget and limits: N replicas, N times the cap.
        if self.replicas > 1 && redis_url.is_none() {
            problems.add(
                "storage.replicas",
                format!(
                    "{} replicas need a shared quota store: set storage.redis_url (or {REDIS_URL_ENV}), \
                     or replicas = 1; without one each replica gives every tenant its whole budget",
                    self.replicas
                ),
            );
        }
        if self.redis_timeout_ms == 0 {
            problems.add("storage.redis_timeout_ms", "must be positive");
        }
        if self.max_connections == Some(0) {
            problems.add("storage.max_connections", "must be at least 1");
        }
        StorageConfig {
            database_url,
            redis_url,
            ..self.clone()
        }
    }
}
