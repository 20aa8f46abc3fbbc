//! Counters whose label values the configuration already names (routes,
//! their fallback pairs, providers and their outcomes, cache results, alert
//! thresholds) are exported at 0 from the start and after each reload: a
//! panel or alert rule that selects one of them has a series before the
//! first event, and `increase()` sees the first one.

use super::metrics::{Metric, counter_add, gauge_set, zero};
use crate::config::{Config, Route};

/// `tollgate_upstream_attempts_total`'s outcomes (see `pipeline::attempt`).
const ATTEMPT_OUTCOMES: [&str; 5] = ["ok", "retryable", "rate_limited", "rejected", "local_error"];
/// Why a stream ended before its provider finished it (see `pipeline::stream`).
const STREAM_ENDS: [&str; 3] = ["cut_at_hold", "partial", "client_cancelled"];

pub fn zero_configured(config: &Config) {
    for (name, route) in &config.routes {
        zero_route(config, name.as_str(), route);
    }
    for provider in config.providers.keys() {
        zero_provider(provider.as_str());
    }
    // At 0 with traces off too: the panel then says so rather than nothing.
    counter_add(Metric::TraceSpansExportedTotal, &[], 0);
    counter_add(Metric::TokenizerFailuresTotal, &[], 0);

    counter_add(Metric::QuotaHoldsLostTotal, &[], 0);
    for scope in ["tenant", "key"] {
        counter_add(Metric::InFlightRefusalsTotal, &[("scope", scope)], 0);
    }
    counter_add(Metric::AuditPayloadsDroppedTotal, &[], 0);
    gauge_set(
        Metric::BillDriftLimitRatio,
        &[],
        config.reconcile.max_drift_ratio(),
    );
    for sink in &config.export.sinks {
        let labels = [("sink", sink.name.as_str())];
        for gauge in [
            Metric::ExportPendingRows,
            Metric::ExportWaitingRows,
            Metric::ExportOldestPendingSeconds,
        ] {
            gauge_set(gauge, &labels, 0.0);
        }
        for counter in [
            Metric::ExportDeliveredRowsTotal,
            Metric::ExportDeliveredNanosTotal,
            Metric::ExportFailuresTotal,
        ] {
            counter_add(counter, &labels, 0);
        }
    }
    for reason in ["queue_full", "export_failed"] {
        counter_add(Metric::TraceSpansDroppedTotal, &[("reason", reason)], 0);
    }
    for threshold in &config.alerts.thresholds_percent {
        let threshold = threshold.to_string();
        counter_add(
            Metric::BudgetAlertsTotal,
            &[("threshold", threshold.as_str())],
            0,
        );
    }
}

/// A route's requests, stream steps, caches and fallback pairs.
fn zero_route(config: &Config, route_name: &str, route: &Route) {
    counter_add(
        Metric::RequestsTotal,
        &[("route", route_name), ("status", "ok")],
        0,
    );
    for outcome in ["granted", "refused"] {
        let labels = [("route", route_name), ("outcome", outcome)];
        counter_add(Metric::StreamHoldStepsTotal, &labels, 0);
    }
    if route.cache_ttl_ms > 0 {
        for result in ["hit", "miss"] {
            counter_add(
                Metric::CacheRequestsTotal,
                &[("route", route_name), ("result", result)],
                0,
            );
        }
    }
    if route.semantic_cache.is_some() {
        for result in crate::pipeline::semantic::RESULTS {
            let labels = [("route", route_name), ("result", result)];
            counter_add(Metric::SemanticCacheRequestsTotal, &labels, 0);
        }
        for reason in crate::pipeline::semantic::BYPASS_REASONS {
            let labels = [("route", route_name), ("reason", reason)];
            counter_add(Metric::SemanticCacheBypassesTotal, &labels, 0);
        }
        counter_add(
            Metric::SemanticCacheSavedNanosTotal,
            &[("route", route_name)],
            0,
        );
        let store = config.cache.semantic.store.name();
        zero(
            Metric::SemanticCacheLookupSeconds,
            &[("route", route_name), ("store", store)],
        );
    }
    // A fallback goes from a failed target to any later one.
    for (i, from) in route.targets.iter().enumerate() {
        for to in route.targets.iter().skip(i + 1) {
            if from.provider == to.provider {
                continue;
            }
            let labels = [
                ("route", route_name),
                ("from", from.provider.as_str()),
                ("to", to.provider.as_str()),
            ];
            counter_add(Metric::FallbacksTotal, &labels, 0);
        }
    }
}

/// A provider's attempts, prompt tokens and stream ends.
fn zero_provider(provider: &str) {
    for outcome in ATTEMPT_OUTCOMES {
        let labels = [("provider", provider), ("outcome", outcome)];
        counter_add(Metric::UpstreamAttemptsTotal, &labels, 0);
    }
    for kind in ["prompt", "cached", "cache_write"] {
        let labels = [("provider", provider), ("type", kind)];
        counter_add(Metric::ProviderPromptTokensTotal, &labels, 0);
    }
    for reason in STREAM_ENDS {
        let labels = [("provider", provider), ("reason", reason)];
        counter_add(Metric::StreamInterruptionsTotal, &labels, 0);
    }
    counter_add(Metric::FleetFullTotal, &[("provider", provider)], 0);
    gauge_set(Metric::FleetLeasesInUse, &[("provider", provider)], 0.0);
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::KEY_PEPPER_ENV;
    use crate::telemetry::metrics::{Zero, install};

    /// Every part whose counters the configuration names: two providers on a
    /// route (a fallback pair), the exact and the semantic cache, alerts, an
    /// export sink.
    const EVERY_PART: &str = r#"
        [alerts]
        thresholds_percent = [80, 100]
        [[export.sinks]]
        name = "openmeter"
        kind = "cloudevents"
        url = "http://127.0.0.1:9/api/v1/events"
        [providers.first]
        kind = "openai"
        base_url = "http://127.0.0.1:9/v1"
        api_key_env = "FIRST_KEY"
        [providers.second]
        kind = "openai"
        base_url = "http://127.0.0.1:9/v1"
        api_key_env = "SECOND_KEY"
        [routes.chat]
        targets = ["first/chat-model", "second/chat-model"]
        cache_ttl_ms = 60000
        semantic_cache = { threshold = 0.92, ttl_ms = 60000, embedding_route = "embed" }
        [routes.embed]
        targets = ["first/embed-model"]
        [tiers.free]
        routes = ["chat", "embed"]
        rpm = 60
        default_max_tokens = 100
        [[prices]]
        provider = "first"
        model = "chat-model"
        input = "1"
        output = "1"
        [[prices]]
        provider = "second"
        model = "chat-model"
        input = "1"
        output = "1"
        [[prices]]
        provider = "first"
        model = "embed-model"
        input = "1"
        output = "0"
    "#;

    #[test]
    fn every_metric_declared_to_start_at_zero_has_a_series_before_any_event() {
        let handle = install();
        let env = HashMap::from([(KEY_PEPPER_ENV.to_owned(), "pepper".to_owned())]);
        let config = Config::from_toml(EVERY_PART, &env).unwrap();
        zero_configured(&config);
        let scrape = handle.render();
        for &metric in Metric::ALL {
            if matches!(metric.zero(), Zero::Start | Zero::Configured) {
                let name = metric.as_str();
                assert!(
                    scrape
                        .lines()
                        .any(|line| line.starts_with(name) && !line.starts_with('#')),
                    "{name} is declared to start at 0 but has no series"
                );
            }
        }
    }
}
