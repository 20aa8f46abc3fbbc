//! App::build: storage, actors and the HTTP server, in that order. Shutdown
//! order: stop accepting → let in-flight requests finish (grace period) →
//! flush the ledger.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{App, HttpServer, web};

use crate::api;
use crate::clock::SharedClock;
use crate::config::{Config, ConfigError};
use crate::directory::Directory;
use crate::ledger::LedgerHandle;
use crate::provider::ProviderHandle;
use crate::provider::clients::UpstreamClients;
use crate::state::Gateway;
use crate::storage::{self, StorageError};
use crate::telemetry;
use crate::telemetry::metrics::TenantLabels;
use crate::tenant::TenantRegistry;
use crate::tokenize::Estimator;

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
    #[error("server error: {0}")]
    Server(std::io::Error),
}

pub struct BuildOptions {
    pub clock: SharedClock,
    /// Stop gracefully on SIGINT/SIGTERM (off in tests).
    pub handle_signals: bool,
}

/// A bound, not yet running, gateway.
pub struct Application {
    pub addr: SocketAddr,
    pub gateway: Arc<Gateway>,
    server: Server,
    sync_task: actix_rt::task::JoinHandle<()>,
    handle_signals: bool,
}

impl Application {
    pub async fn build(
        config: Arc<Config>,
        options: BuildOptions,
    ) -> Result<Application, AppError> {
        let metrics = telemetry::metrics::install();
        let pepper = config.require_pepper()?.clone();
        let db = storage::connect_and_migrate(
            &config.storage.database_url,
            config.storage.max_connections,
        )
        .await?;
        let clock = options.clock;
        let directory = Directory::load(db.clone(), pepper, clock.now_ms()).await?;
        let ledger = LedgerHandle::start(
            db.clone(),
            clock.clone(),
            config.ledger.max_batch_rows,
            config.ledger.flush_interval_ms,
            config.ledger.max_backlog_events,
        );
        let tenant_labels = Arc::new(TenantLabels::new(
            config.telemetry.tenant_labels.clone(),
            config.telemetry.tenant_label_limit,
        ));
        let tenants = TenantRegistry::new(
            config.clone(),
            clock.clone(),
            ledger.clone(),
            db,
            tenant_labels.clone(),
        );
        let providers = start_providers(&config, &clock);
        let estimator = Estimator::new(&config.tokenizer);
        estimator.warm_up();

        let gateway = Arc::new(Gateway {
            config: config.clone(),
            directory,
            tenants,
            providers,
            ledger,
            estimator,
            clock,
            metrics,
            active_drains: std::sync::atomic::AtomicUsize::new(0),
            tenant_labels,
            cache: crate::cache::ResponseCache::new(&config.cache),
        });
        let data = web::Data::from(gateway.clone());
        let mut server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::Data::new(UpstreamClients::default()))
                .configure(api::configure)
        })
        .shutdown_timeout(config.server.shutdown_grace_ms.div_ceil(1000));
        if config.server.workers > 0 {
            server = server.workers(config.server.workers);
        }
        // Signals are handled in `run_until_stopped`: actix-server's own handler
        // stops the whole System, which would race the final ledger flush.
        server = server.disable_signals();
        let listen = config.server.listen;
        let server = server.bind(listen).map_err(|source| AppError::Bind {
            addr: listen,
            source,
        })?;
        let addr = server.addrs().first().copied().unwrap_or(listen);
        let server = server.run();
        let sync_task = spawn_sync(gateway.clone());
        tracing::info!(addr = %addr, "Tollgate is listening.");
        Ok(Application {
            addr,
            gateway,
            server,
            sync_task,
            handle_signals: options.handle_signals,
        })
    }

    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until the server stops (signal or handle), then flushes the ledger.
    pub async fn run_until_stopped(self) -> Result<(), AppError> {
        if self.handle_signals {
            let handle = self.server.handle();
            actix_rt::spawn(async move {
                wait_for_signal().await;
                tracing::info!("Stopping: no new connections; finishing in-flight requests.");
                handle.stop(true).await;
            });
        }
        let result = self.server.await.map_err(AppError::Server);
        self.sync_task.abort();
        match self.gateway.ledger.flush().await {
            Ok(()) => tracing::info!("Ledger flushed; stopped."),
            Err(error) => {
                tracing::error!(error = %error, backlog = self.gateway.ledger.backlog(), "Ledger flush at shutdown failed.");
            }
        }
        result
    }
}

fn start_providers(
    config: &Config,
    clock: &SharedClock,
) -> HashMap<crate::ids::ProviderName, ProviderHandle> {
    let mut providers = HashMap::new();
    let mut names: Vec<_> = config.providers.keys().collect();
    names.sort();
    for name in names {
        let provider = &config.providers[name];
        if let Some(env) = provider.missing_key_env() {
            tracing::warn!(provider = %name, env, "Provider disabled: {env} is not set.");
            continue;
        }
        let uri_ok = provider
            .chat_url
            .parse::<actix_web::http::Uri>()
            .is_ok_and(|uri| {
                matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
            });
        if !uri_ok {
            tracing::warn!(provider = %name, base_url = %provider.base_url, "providers.{name}.base_url is not an http(s) URL; its requests will fail with 500.");
        }
        providers.insert(name.clone(), ProviderHandle::start(provider, clock.clone()));
    }
    providers
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

/// Pulls revocations and tenant changes made by other replicas or the CLI.
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
        }
    })
}
