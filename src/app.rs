//! App::build: storage, actors and the HTTP server, in that order. Shutdown
//! order: stop accepting → let in-flight requests finish (grace period) →
//! flush the ledger.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{App, HttpServer, web};

use crate::api::{self, Surface};
use crate::clock::SharedClock;
use crate::config::{Config, ConfigError};
use crate::directory::Directory;
use crate::journal::{Journal, JournalError, JournalOptions, Recovered};
use crate::ledger::LedgerHandle;
use crate::provider::clients::UpstreamClients;
use crate::reload;
use crate::state::{ConfigSource, Gateway, Live};
use crate::storage::{self, StorageError};
use crate::telemetry;
use crate::telemetry::metrics::{Metric, TenantLabels, counter_add};
use crate::tenant::shared::{RestartPolicy, restart};
use crate::tenant::{SharedStore, TenantRegistry};
use crate::tokenize::Estimator;
use sea_orm::DatabaseConnection;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("server error: {0}")]
    Server(std::io::Error),
    #[error("{0}")]
    QuotaStore(String),
    #[error("telemetry.otlp_endpoint: {0}")]
    Traces(String),
    #[error("{0}")]
    SemanticCache(String),
}

pub struct BuildOptions {
    pub clock: SharedClock,
    /// Stop gracefully on SIGINT/SIGTERM and reload on SIGHUP (off in tests).
    pub handle_signals: bool,
    /// The file a reload reads; `None` refuses reloads.
    pub reload_source: Option<ConfigSource>,
}

/// Series the dashboards select exist before their first event.
fn zero_metrics(config: &Config) {
    // No review has turned anyone's breakpoints off yet; once per process,
    // as the gauge is (a reload keeps the last review's).
    static NO_REVIEW_YET: std::sync::Once = std::sync::Once::new();
    crate::telemetry::zeros::zero_configured(config);
    NO_REVIEW_YET.call_once(|| {
        crate::telemetry::metrics::gauge_set(
            crate::telemetry::metrics::Metric::PromptBreakpointsOffTenants,
            &[],
            0.0,
        );
    });
}

fn start_tracer(config: &Config) -> Result<crate::telemetry::traces::Tracer, AppError> {
    Ok(match &config.telemetry.otlp_endpoint {
        Some(endpoint) => {
            let timeout = std::time::Duration::from_millis(config.telemetry.otlp_timeout_ms);
            crate::telemetry::traces::Tracer::start(endpoint, timeout).map_err(AppError::Traces)?
        }
        None => crate::telemetry::traces::Tracer::off(),
    })
}

/// The daily report's push, the review of prompt-cache breakpoints, the
/// ledger's roll-up, where they are on, the look for unbooked breakage and
/// the export senders.
fn spawn_background(gateway: &Arc<Gateway>) -> Vec<actix_rt::task::JoinHandle<()>> {
    [
        crate::admin::daily_push::spawn(gateway.clone()),
        crate::prompts::advisor::spawn(gateway.clone()),
        crate::ledger::retention::spawn(gateway.clone()),
        crate::admin::breakage::spawn(gateway.clone()),
    ]
    .into_iter()
    .flatten()
    .chain(crate::export::spawn(gateway))
    .collect()
}

/// A bound, not yet running, gateway.
pub struct Application {
    pub addr: SocketAddr,
    /// The bound `server.admin_listen`, when set.
    pub admin_addr: Option<SocketAddr>,
    pub gateway: Arc<Gateway>,
    server: Server,
    admin_server: Option<Server>,
    sync_task: actix_rt::task::JoinHandle<()>,
    /// The daily report's push (when `reports.daily_webhook_url` is set) and
    /// the review of prompt-cache breakpoints (unless turned off).
    background: Vec<actix_rt::task::JoinHandle<()>>,
    handle_signals: bool,
}

impl Application {
    pub async fn build(
        config: Arc<Config>,
        options: BuildOptions,
    ) -> Result<Application, AppError> {
        let handle_signals = options.handle_signals;
        // Boxed: the assembly's future is large, and built once.
        let gateway = Box::pin(assemble(&config, options)).await?;
        Application::listen(gateway, &config, handle_signals)
    }

    /// Binds the API's (and the admin's) address and starts serving, with
    /// the background tasks beside them.
    fn listen(
        gateway: Arc<Gateway>,
        config: &Config,
        handle_signals: bool,
    ) -> Result<Application, AppError> {
        let (surface, admin) = match config.server.admin_listen {
            Some(admin) => (Surface::Api, Some(admin)),
            None => (Surface::All, None),
        };
        // Both addresses are bound before either serves, so a bad one stops the start cleanly.
        let api = bind(&gateway, config, config.server.listen, surface)?;
        let admin = admin
            .map(|admin| bind(&gateway, config, admin, Surface::Admin))
            .transpose()?;
        let addr = api.addr;
        let admin_addr = admin.as_ref().map(|admin| admin.addr);
        let server = (api.run)();
        let admin_server = admin.map(|admin| (admin.run)());
        let sync_task = spawn_sync(gateway.clone());
        let background = spawn_background(&gateway);
        tracing::info!(addr = %addr, "Tollgate is listening.");
        if let Some(admin_addr) = admin_addr {
            tracing::info!(addr = %admin_addr, "Metrics, readiness and the admin API are served here only.");
        }
        Ok(Application {
            addr,
            admin_addr,
            gateway,
            server,
            admin_server,
            sync_task,
            background,
            handle_signals,
        })
    }
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until the server stops (signal or handle), then flushes the ledger.
    /// The admin listener stops after the API's in-flight requests have
    /// finished, so metrics and readiness can be watched through the drain.
    pub async fn run_until_stopped(self) -> Result<(), AppError> {
        let admin = self.admin_server.map(|server| {
            let handle = server.handle();
            (handle, actix_rt::spawn(server))
        });
        if self.handle_signals {
            let handle = self.server.handle();
            let gateway = self.gateway.clone();
            let grace = Duration::from_millis(gateway.config.shutdown_grace_ms());
            actix_rt::spawn(reload_on_hangup(self.gateway.clone()));
            actix_rt::spawn(async move {
                wait_for_signal().await;
                tracing::info!("Stopping: no new connections; finishing in-flight requests.");
                // Settlements detached from their responses run on the workers: they finish first.
                finish_settlements(&gateway, grace).await;
                handle.stop(true).await;
            });
        }
        let result = self.server.await.map_err(AppError::Server);
        if let Some((handle, running)) = admin {
            handle.stop(true).await;
            if let Ok(Err(error)) = running.await {
                tracing::warn!(error = %error, "The admin listener ended with an error.");
            }
        }
        self.sync_task.abort();
        for task in &self.background {
            task.abort();
        }
        match self.gateway.ledger.flush().await {
            Ok(()) => tracing::info!("Ledger flushed; stopped."),
            Err(error) => {
                tracing::error!(error = %error, backlog = self.gateway.ledger.backlog(), "Ledger flush at shutdown failed.");
            }
        }
        release_sinks(&self.gateway).await;
        result
    }
}

/// Gives back the export sinks this replica sends to, once its senders are
/// stopped and its last rows queued, so another replica goes on at once.
async fn release_sinks(gateway: &Gateway) {
    if gateway.config.export.sinks.is_empty() {
        return;
    }
    let db = gateway.directory.db();
    match crate::export::lease::release(db, &gateway.replica_id).await {
        Ok(released) if released > 0 => tracing::info!(released, "Gave back the export sinks."),
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(error = %error, "Cannot give back the export sinks; another replica takes them when their leases lapse.");
        }
    }
}

/// Waits for the settlements that finish after their response; a stop that
/// outruns one leaves its row to the journal's `settling` record.
async fn finish_settlements(gateway: &Gateway, grace: Duration) {
    let unfinished = gateway.ledger.finish_settlements(grace).await;
    if unfinished > 0 {
        tracing::warn!(
            unfinished,
            "Settlements still running at the stop; their rows are replayed from the journal on the next start."
        );
    }
}

/// A listener that is bound and not yet serving.
struct Bound {
    addr: SocketAddr,
    run: Box<dyn FnOnce() -> Server>,
}

/// Binds one listener serving `surface`.
fn bind(
    gateway: &Arc<Gateway>,
    config: &Config,
    listen: SocketAddr,
    surface: Surface,
) -> Result<Bound, AppError> {
    let data = web::Data::from(gateway.clone());
    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(web::Data::new(UpstreamClients::default()))
            .configure(|cfg| api::configure(cfg, surface))
    })
    .shutdown_timeout(config.shutdown_grace_ms().div_ceil(1000))
    // A stream's head and first event go out as separate writes; with
    // Nagle on, the event waited for the client's delayed ACK (~40 ms).
    .tcp_nodelay(true);
    if surface == Surface::Admin {
        // Scrapes, probes and operators: one thread keeps up, and the API keeps the cores.
        server = server.workers(1);
    } else if config.server.workers > 0 {
        server = server.workers(config.server.workers);
    }
    // Signals are handled in `run_until_stopped`: actix-server's own handler
    // stops the whole System, which would race the final ledger flush.
    server = server.disable_signals();
    let server = server.bind(listen).map_err(|source| AppError::Bind {
        addr: listen,
        source,
    })?;
    let addr = server.addrs().first().copied().unwrap_or(listen);
    Ok(Bound {
        addr,
        run: Box::new(move || server.run()),
    })
}

async fn reload_on_hangup(gateway: Arc<Gateway>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        tracing::warn!("Cannot listen for SIGHUP; reload through POST /admin/v1/reload.");
        return;
    };
    while hangup.recv().await.is_some() {
        if let Err(error) = reload::reload(&gateway) {
            tracing::error!(error = %error, "Configuration reload failed.");
        }
    }
}

/// Opens the journal, starts the ledger on it and replays what an earlier
/// process left, all before anything is served: tenants then load committed
/// spend that includes the replayed rows.
/// The shared quota store when `storage.redis_url` is set, after this
/// replica's reservations from before a restart are settled by the ledger.
async fn open_quota_store(
    config: &Config,
    db: &DatabaseConnection,
    replica_id: &str,
    clock: &SharedClock,
) -> Result<Option<SharedStore>, AppError> {
    let Some(url) = &config.storage.redis_url else {
        return Ok(None);
    };
    let store = SharedStore::new(
        url,
        config.storage.redis_pool_size,
        config.storage.redis_timeout_ms,
        config.calendar.clone(),
    )
    .map_err(AppError::QuotaStore)?;
    store.start_prober(RestartPolicy {
        replica: replica_id.to_owned(),
        hold_lifetime: Duration::from_millis(
            config
                .server
                .request_timeout_ms
                .saturating_add(crate::pipeline::dispatch::RESERVATION_MARGIN_MS),
        ),
        notice: SharedStore::PROBE_INTERVAL * 2,
    });
    // The replay before this has put every row this replica journaled in the database.
    let resolved = restart::resolve_own(&store, db, replica_id, clock.now_ms()).await;
    if resolved > 0 {
        tracing::info!(
            resolved,
            "Settled this replica's shared reservations from before its restart by the ledger."
        );
    }
    Ok(Some(store))
}

async fn open_ledger(
    config: &Config,
    db: &sea_orm::DatabaseConnection,
    clock: &SharedClock,
) -> Result<LedgerHandle, AppError> {
    let Some(dir) = config.journal_dir() else {
        return Ok(LedgerHandle::start(
            db.clone(),
            clock.clone(),
            &config.ledger,
            config.calendar.clone(),
            config.export.sink_names(),
            None,
        ));
    };
    let options = JournalOptions {
        dir,
        fsync: config.ledger.fsync,
        group_commit_ms: config.ledger.group_commit_ms,
        fsync_interval_ms: config.ledger.fsync_interval_ms,
        segment_bytes: config.ledger.journal_segment_bytes,
    };
    let (journal, recovered) = Journal::open(&options)?;
    let ledger = LedgerHandle::start(
        db.clone(),
        clock.clone(),
        &config.ledger,
        config.calendar.clone(),
        config.export.sink_names(),
        Some(journal.clone()),
    );
    replay(&ledger, &journal, recovered).await;
    Ok(ledger)
}

/// Re-records the recovered rows (journaled again in the new segment, so the
/// old segments can go once that is synced) and tries to write them at once;
/// an unreachable database leaves them in the backlog, not lost.
async fn replay(ledger: &LedgerHandle, journal: &Journal, recovered: Recovered) {
    let Recovered {
        events,
        settles,
        orphans,
        torn_bytes,
        unreadable,
        segments,
        ..
    } = recovered;
    if events.is_empty() && torn_bytes == 0 && unreadable == 0 {
        journal.retire(&segments);
        return;
    }
    tracing::warn!(
        settles,
        orphans,
        torn_bytes,
        unreadable,
        "Replaying the ledger journal of an earlier run."
    );
    counter_add(
        Metric::JournalReplayedTotal,
        &[("kind", "settle")],
        settles as u64,
    );
    counter_add(
        Metric::JournalReplayedTotal,
        &[("kind", "orphan")],
        orphans as u64,
    );
    for event in events {
        ledger.record(event);
    }
    journal.sync_now();
    journal.retire(&segments);
    if let Err(error) = ledger.flush().await {
        tracing::warn!(error = %error, backlog = ledger.backlog(), "Replayed ledger rows wait for the database.");
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let terminate = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    let (Ok(mut terminate), Ok(mut interrupt)) = (terminate, interrupt) else {
        tracing::warn!("Cannot listen for signals; stop the gateway through its process manager.");
        return std::future::pending::<()>().await;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
}

/// Pulls revocations and tenant changes made by other replicas or the CLI,
/// and rolls stopped tenants' budget gauges into a new month.
fn spawn_sync(gateway: Arc<Gateway>) -> actix_rt::task::JoinHandle<()> {
    let interval = Duration::from_millis(gateway.config.storage.sync_interval_ms.max(50));
    actix_rt::spawn(async move {
        loop {
            actix_rt::time::sleep(interval).await;
            match gateway.directory.sync().await {
                Ok(changed) => {
                    for tenant in changed {
                        gateway.tenants.update(&tenant);
                    }
                }
                Err(error) => tracing::warn!(error = %error, "Directory sync failed; retrying."),
            }
            gateway.tenants.roll_resting_gauges(gateway.clock.now_ms());
        }
    })
}

/// The gateway with everything it decides with: the database migrated, the
/// directory, the ledger and its journal, the quota store, the tenants and
/// providers, the caches and the tracer.
async fn assemble(config: &Arc<Config>, options: BuildOptions) -> Result<Arc<Gateway>, AppError> {
    let metrics = telemetry::metrics::install();
    let pepper = config.require_pepper()?.clone();
    let db = storage::connect_and_migrate(&config.storage.database_url, config.storage.pool_size())
        .await?;
    let clock = options.clock;
    crate::ledger::retention::prepare(&db, clock.now_ms()).await?;
    // An unknown key id is remembered as long as a change elsewhere takes to arrive.
    let unknown_ttl = config.storage.sync_interval_ms;
    let directory = Directory::load(db.clone(), pepper, clock.clone(), unknown_ttl).await?;
    let ledger = open_ledger(config, &db, &clock).await?;
    let replica_id = restart::replica_id(config.journal_dir().as_deref());
    let tenant_labels = Arc::new(TenantLabels::new(
        config.telemetry.tenant_labels.clone(),
        config.telemetry.tenant_label_limit,
    ));
    let quota_store = open_quota_store(config, &db, &replica_id, &clock).await?;
    let ledger = if quota_store.is_some() {
        ledger.with_shared_quotas()
    } else {
        ledger
    };
    let tenants = TenantRegistry::new(
        config.clone(),
        clock.clone(),
        ledger.clone(),
        db,
        tenant_labels.clone(),
        quota_store.clone(),
    );
    let (providers, _) = reload::start_providers(config, &clock, None, quota_store.as_ref());
    zero_metrics(config);
    let estimator = Estimator::new(config.tokenizer.counting());
    estimator.warm_up(config.routes.values().flat_map(|route| &route.countings));

    let tracer = start_tracer(config)?;
    let semantic_cache = crate::cache::semantic::SemanticCache::new(
        &config.cache.semantic,
        &config.storage.database_url,
    )
    .map_err(AppError::SemanticCache)?;
    let tables_db = directory.db().clone();
    let audit = Arc::new(crate::audit::AuditLog::start(
        tables_db.clone(),
        config.audit.max_body_bytes,
    ));
    Ok(Arc::new(Gateway {
        config: config.clone(),
        directory,
        tenants,
        live: RwLock::new(Arc::new(Live {
            config: config.clone(),
            providers,
        })),
        reload_source: options.reload_source,
        reloading: Mutex::new(()),
        ledger,
        estimator,
        clock,
        metrics,
        active_drains: std::sync::atomic::AtomicUsize::new(0),
        tenant_labels,
        cache: crate::cache::ResponseCache::new(&config.cache),
        semantic_cache,
        prompt_advisor: crate::prompts::Advisor::default(),
        audit,
        responses: crate::stored::ResponseStore::new(tables_db, config.responses.clone()),
        retention: crate::ledger::retention::Retention::default(),
        quota_store,
        replica_id: replica_id.into(),
        tracer,
    }))
}
