//! Configuration hot reload (SIGHUP, or `POST /admin/v1/reload`): the file is
//! read and validated again; a refused one leaves everything as it was. An
//! accepted one replaces the `Live` snapshot (providers, routes, tiers,
//! prices) in one step: requests already running finish on the snapshot they
//! took. A provider whose settings did not change keeps its actor (breaker,
//! queue and retry budget carry on); a changed or new one gets a fresh actor.
//! Tier limits reach running tenant actors through `TenantRegistry::update`.
//! Other sections (`[server]`, `[storage]`, …) take effect on restart.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use serde::Serialize;

use crate::clock::SharedClock;
use crate::config::{Config, ConfigErrors};
use crate::ids::ProviderName;
use crate::provider::ProviderHandle;
use crate::state::{Gateway, Live};
use crate::tenant::SharedStore;

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("this gateway was started without a configuration file to reload")]
    NoSource,
    #[error("the new configuration was refused, the running one is kept: {0}")]
    Invalid(#[from] ConfigErrors),
}

/// What a reload changed, for the operator who asked.
#[derive(Debug, Serialize)]
pub struct ReloadReport {
    pub price_version: String,
    /// Providers with a new actor: added, or with changed settings.
    pub providers_started: Vec<String>,
    /// Providers whose actor (and breaker state) carried over.
    pub providers_kept: Vec<String>,
    pub routes: Vec<String>,
    pub tiers: Vec<String>,
}

/// Reads the configuration file again and applies it, or refuses it.
pub fn reload(gw: &Gateway) -> Result<ReloadReport, ReloadError> {
    let source = gw.reload_source.as_ref().ok_or(ReloadError::NoSource)?;
    let _one_at_a_time = gw.reloading.lock().unwrap_or_else(PoisonError::into_inner);
    let config = Config::load(&source.path, source.env.as_ref())?;
    Ok(apply(gw, config))
}

fn apply(gw: &Gateway, config: Arc<Config>) -> ReloadReport {
    let previous = gw.live();
    let (providers, started) =
        start_providers(&config, &gw.clock, Some(&previous), gw.quota_store.as_ref());
    crate::telemetry::zeros::zero_configured(&config);
    let mut kept: Vec<String> = providers
        .keys()
        .map(ToString::to_string)
        .filter(|name| !started.contains(name))
        .collect();
    kept.sort();
    let mut routes: Vec<String> = config.routes.keys().map(ToString::to_string).collect();
    routes.sort();
    let mut tiers: Vec<String> = config.tiers.keys().cloned().collect();
    tiers.sort();
    let price_version = config.price_version.clone();

    // Tenants started after this line see the new tiers; running ones get them pushed below.
    gw.tenants.set_config(config.clone());
    gw.set_live(Arc::new(Live { config, providers }));
    for tenant in gw.tenants.running_tenants() {
        if let Some(record) = gw.directory.tenant(&tenant) {
            gw.tenants.update(&record);
        }
    }
    tracing::info!(price_version = %price_version, providers_started = ?started, providers_kept = ?kept, "Configuration reloaded.");
    ReloadReport {
        price_version,
        providers_started: started,
        providers_kept: kept,
        routes,
        tiers,
    }
}

/// A handle for every provider whose key is set: the previous one where its
/// settings are unchanged, else a new actor. Returns the names started anew.
pub fn start_providers(
    config: &Config,
    clock: &SharedClock,
    previous: Option<&Live>,
    shared: Option<&SharedStore>,
) -> (HashMap<ProviderName, ProviderHandle>, Vec<String>) {
    let mut providers = HashMap::new();
    let mut started = Vec::new();
    let mut names: Vec<_> = config.providers.keys().collect();
    names.sort();
    for name in names {
        let Some(provider) = config.providers.get(name) else {
            continue;
        };
        if let Some(env) = provider.missing_key_env() {
            tracing::warn!(provider = %name, env, "Provider disabled: {env} is not set.");
            continue;
        }
        if let Some(note) = provider.per_replica_fleet_note(shared.is_some()) {
            tracing::warn!(provider = %name, "{note}");
        }
        let unchanged = previous.and_then(|live| {
            let before = live.config.providers.get(name)?;
            (before == provider).then(|| live.providers.get(name).cloned())?
        });
        if let Some(handle) = unchanged {
            providers.insert(name.clone(), handle);
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
        providers.insert(
            name.clone(),
            ProviderHandle::start(provider, clock.clone(), shared, config.storage.replicas),
        );
        started.push(name.to_string());
    }
    (providers, started)
}
