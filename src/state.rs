//! `Gateway`: what every worker shares (configuration, the directory, actor
//! handles). Built once in `app.rs`; cloned as an `Arc` into each worker.
//! The reloadable part (providers, routes, tiers, prices, and the provider
//! actors) is a `Live` snapshot behind a lock that is held only to clone or
//! replace an `Arc`: a request takes one snapshot and keeps it to its end, so
//! a reload never changes a request's route or prices half-way.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use metrics_exporter_prometheus::PrometheusHandle;

use crate::cache::ResponseCache;
use crate::clock::SharedClock;
use crate::config::{Config, EnvSource};
use crate::directory::Directory;
use crate::ids::ProviderName;
use crate::ledger::LedgerHandle;
use crate::provider::ProviderHandle;
use crate::telemetry::metrics::TenantLabels;
use crate::tenant::TenantRegistry;
use crate::tokenize::Estimator;

pub struct Gateway {
    /// The configuration the gateway started with. Providers, routes, tiers
    /// and prices are read from `live()` instead: they change on reload.
    pub config: Arc<Config>,
    pub directory: Arc<Directory>,
    pub tenants: TenantRegistry,
    pub live: RwLock<Arc<Live>>,
    /// Where a reload reads the configuration from; `None`: reload is refused.
    pub reload_source: Option<ConfigSource>,
    /// Serializes reloads, so two cannot start actors for the same change.
    pub reloading: Mutex<()>,
    pub ledger: LedgerHandle,
    pub estimator: Estimator,
    pub clock: SharedClock,
    pub metrics: PrometheusHandle,
    /// Streams being read on after their caller left.
    pub active_drains: AtomicUsize,
    pub tenant_labels: Arc<TenantLabels>,
    pub cache: ResponseCache,
    pub semantic_cache: crate::cache::semantic::SemanticCache,
    /// The ledger's latest verdicts on tenants' prompt-cache breakpoints.
    pub prompt_advisor: crate::prompts::Advisor,
    /// Opted-in tenants' payloads, on their way to `audit_payloads`.
    pub audit: Arc<crate::audit::AuditLog>,
    /// The Responses door's stored responses.
    pub responses: crate::stored::ResponseStore,
    /// The roll-up of ledger rows past retention: one at a time.
    pub retention: crate::ledger::retention::Retention,
    /// The shared quota store, when replicas share limits through Redis.
    pub quota_store: Option<crate::tenant::SharedStore>,
    /// Survives restarts (kept in the journal directory); marks this replica's reservations.
    pub replica_id: Arc<str>,
    /// Where request and attempt spans go (nowhere unless `telemetry.otlp_endpoint` is set).
    pub tracer: crate::telemetry::traces::Tracer,
}

/// The reloadable configuration and the provider actors started for it.
pub struct Live {
    pub config: Arc<Config>,
    /// One handle per provider whose key is set.
    pub providers: HashMap<ProviderName, ProviderHandle>,
}

/// A configuration file and the environment its secrets come from.
pub struct ConfigSource {
    pub path: PathBuf,
    pub env: Box<dyn EnvSource + Send + Sync>,
}

impl Gateway {
    /// The current providers, routes, tiers and prices: keep it for the whole request.
    pub fn live(&self) -> Arc<Live> {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Rolls up the ledger rows past `ledger.retention_days` now.
    pub async fn roll_up_now(
        &self,
    ) -> Result<crate::ledger::retention::RolledUp, crate::ledger::retention::RetentionError> {
        let settings = &self.config.ledger;
        let policy = crate::ledger::retention::Policy {
            retention_days: settings.retention_days,
            batch_rows: settings.retention_batch_rows,
            audit_days: self.config.audit.retention_days,
        };
        let calendar = &self.config.calendar;
        self.retention
            .run(self.directory.db(), calendar, policy, self.clock.now_ms())
            .await
    }

    pub(crate) fn set_live(&self, live: Arc<Live>) {
        *self.live.write().unwrap_or_else(PoisonError::into_inner) = live;
    }
}
