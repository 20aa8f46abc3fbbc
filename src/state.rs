//! `Gateway`: what every worker shares (configuration, the directory, actor
//! handles). Built once in `app.rs`; cloned as an `Arc` into each worker.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::cache::ResponseCache;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::directory::Directory;
use crate::ids::ProviderName;
use crate::ledger::LedgerHandle;
use crate::provider::ProviderHandle;
use crate::telemetry::metrics::TenantLabels;
use crate::tenant::TenantRegistry;
use crate::tokenize::Estimator;

pub struct Gateway {
    pub config: Arc<Config>,
    pub directory: Arc<Directory>,
    pub tenants: TenantRegistry,
    pub providers: HashMap<ProviderName, ProviderHandle>,
    pub ledger: LedgerHandle,
    pub estimator: Estimator,
    pub clock: SharedClock,
    pub metrics: PrometheusHandle,
    /// Streams being read on after their caller left.
    pub active_drains: AtomicUsize,
    pub tenant_labels: Arc<TenantLabels>,
    pub cache: ResponseCache,
    /// The shared quota store, when replicas share limits through Redis.
    pub quota_store: Option<crate::tenant::SharedStore>,
}
