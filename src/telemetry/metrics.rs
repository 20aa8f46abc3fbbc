//! Every metric name is a `Metric` variant; the raw `metrics` macros are
//! banned elsewhere (clippy.toml) so names and label sets cannot drift from
//! the dashboards. Labels are bounded: route, provider and model come from
//! configuration, status from `ErrorCode::as_str()`.

use std::sync::OnceLock;

use metrics::{Label, Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    RequestsTotal,
    RequestDurationSeconds,
    UpstreamDurationSeconds,
    UpstreamAttemptsTotal,
    FallbacksTotal,
    TokensTotal,
    CostNanosTotal,
    RejectionsTotal,
    ReservationOverrunNanosTotal,
    ReservationsOrphanedTotal,
    LedgerEventsFlushed,
    LedgerWriteErrors,
    LedgerBacklogEvents,
    ProviderInFlight,
    BreakerOpen,
}

impl Metric {
    pub const ALL: [Metric; 15] = [
        Metric::RequestsTotal,
        Metric::RequestDurationSeconds,
        Metric::UpstreamDurationSeconds,
        Metric::UpstreamAttemptsTotal,
        Metric::FallbacksTotal,
        Metric::TokensTotal,
        Metric::CostNanosTotal,
        Metric::RejectionsTotal,
        Metric::ReservationOverrunNanosTotal,
        Metric::ReservationsOrphanedTotal,
        Metric::LedgerEventsFlushed,
        Metric::LedgerWriteErrors,
        Metric::LedgerBacklogEvents,
        Metric::ProviderInFlight,
        Metric::BreakerOpen,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Metric::RequestsTotal => "tollgate_requests_total",
            Metric::RequestDurationSeconds => "tollgate_request_duration_seconds",
            Metric::UpstreamDurationSeconds => "tollgate_upstream_duration_seconds",
            Metric::UpstreamAttemptsTotal => "tollgate_upstream_attempts_total",
            Metric::FallbacksTotal => "tollgate_fallbacks_total",
            Metric::TokensTotal => "tollgate_tokens_total",
            Metric::CostNanosTotal => "tollgate_cost_nanos_total",
            Metric::RejectionsTotal => "tollgate_rejections_total",
            Metric::ReservationOverrunNanosTotal => "tollgate_reservation_overrun_nanos_total",
            Metric::ReservationsOrphanedTotal => "tollgate_reservations_orphaned_total",
            Metric::LedgerEventsFlushed => "tollgate_ledger_events_flushed_total",
            Metric::LedgerWriteErrors => "tollgate_ledger_write_errors_total",
            Metric::LedgerBacklogEvents => "tollgate_ledger_backlog_events",
            Metric::ProviderInFlight => "tollgate_provider_in_flight",
            Metric::BreakerOpen => "tollgate_breaker_open",
        }
    }

    const fn help(self) -> &'static str {
        match self {
            Metric::RequestsTotal => "Chat requests by route and final status.",
            Metric::RequestDurationSeconds => "Time from request to response, by route.",
            Metric::UpstreamDurationSeconds => {
                "Upstream call latency by provider, model and outcome."
            }
            Metric::UpstreamAttemptsTotal => "Upstream attempts by provider and outcome.",
            Metric::FallbacksTotal => "Requests served by a later target, by route.",
            Metric::TokensTotal => {
                "Tokens metered, by type (prompt, cached, cache_write, completion)."
            }
            Metric::CostNanosTotal => "Charged cost in nano-units of the billing currency.",
            Metric::RejectionsTotal => "Requests refused before the upstream, by reason.",
            Metric::ReservationOverrunNanosTotal => "Charged cost above its reservation.",
            Metric::ReservationsOrphanedTotal => {
                "Reservations that expired unsettled and were committed."
            }
            Metric::LedgerEventsFlushed => "Ledger events written to the database.",
            Metric::LedgerWriteErrors => "Failed ledger batch writes (kept and retried).",
            Metric::LedgerBacklogEvents => "Ledger events recorded and not yet in the database.",
            Metric::ProviderInFlight => "Upstream calls in flight, by provider.",
            Metric::BreakerOpen => "1 while the provider's circuit breaker refuses calls.",
        }
    }
}

pub fn describe_all() {
    for metric in Metric::ALL {
        let name = metric.as_str();
        let help = metric.help();
        if name.ends_with("_seconds") {
            describe_histogram!(name, Unit::Seconds, help);
        } else if name.ends_with("_total") {
            describe_counter!(name, help);
        } else {
            describe_gauge!(name, help);
        }
    }
}

fn labels(pairs: &[(&'static str, &str)]) -> Vec<Label> {
    pairs
        .iter()
        .map(|(k, v)| Label::new(*k, (*v).to_owned()))
        .collect()
}

#[expect(
    clippy::disallowed_macros,
    reason = "this module is the one user of the raw macros"
)]
pub fn counter_add(metric: Metric, pairs: &[(&'static str, &str)], value: u64) {
    metrics::counter!(metric.as_str(), labels(pairs)).increment(value);
}

#[expect(
    clippy::disallowed_macros,
    reason = "this module is the one user of the raw macros"
)]
pub fn gauge_set(metric: Metric, pairs: &[(&'static str, &str)], value: f64) {
    metrics::gauge!(metric.as_str(), labels(pairs)).set(value);
}

#[expect(
    clippy::disallowed_macros,
    reason = "this module is the one user of the raw macros"
)]
pub fn observe_ms(metric: Metric, pairs: &[(&'static str, &str)], ms: u64) {
    metrics::histogram!(metric.as_str(), labels(pairs)).record(ms_to_seconds(ms));
}

#[expect(
    clippy::cast_precision_loss,
    clippy::float_arithmetic,
    reason = "Prometheus histograms take seconds as f64; precision past 2^53 ms is irrelevant"
)]
fn ms_to_seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// A count as a gauge value.
#[expect(
    clippy::cast_precision_loss,
    reason = "gauges are f64; counts stay far below 2^53"
)]
pub fn as_gauge(n: usize) -> f64 {
    n as f64
}

/// Installs the process-wide recorder once; later calls get the same handle,
/// so tests that build several apps in one binary share it.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("_seconds".to_owned()),
                    &[
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                        5.0, 10.0, 30.0, 60.0,
                    ],
                )
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("A metrics recorder was already installed; /metrics may be empty.");
            }
            describe_all();
            handle
        })
        .clone()
}
