//! Every metric name is a `Metric` variant; the raw `metrics` macros are
//! banned elsewhere (clippy.toml) so names and label sets cannot drift from
//! the dashboards. Labels are bounded: route, provider and model come from
//! configuration, status from `ErrorCode::as_str()`.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Label, Unit, describe_counter, describe_gauge, describe_histogram};

use super::handles::{self, Handle};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Declares every metric once: its variant, name, kind, when its series
/// first appears, and its help text. The enum, `ALL` and every accessor
/// follow from this one list.
macro_rules! metrics {
    ($($variant:ident => $name:literal, $kind:ident, $zero:ident, $help:literal;)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Metric {
            $($variant,)*
        }

        impl Metric {
            pub const ALL: &[Metric] = &[$(Metric::$variant,)*];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Metric::$variant => $name,)*
                }
            }

            pub const fn help(self) -> &'static str {
                match self {
                    $(Metric::$variant => $help,)*
                }
            }

            pub const fn kind(self) -> MetricKind {
                match self {
                    $(Metric::$variant => MetricKind::$kind,)*
                }
            }

            pub const fn zero(self) -> Zero {
                match self {
                    $(Metric::$variant => Zero::$zero,)*
                }
            }
        }
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

/// When a metric's series exist before its first event, so a panel or an
/// alert that selects one reads 0 rather than "No data".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zero {
    /// At 0 from the start (`zero_unlabeled`, or the fixed label sets
    /// `zeros.rs` exports whatever the configuration).
    Start,
    /// At 0 for each label value the configuration names (`zeros.rs`), from
    /// the start and after each reload.
    Configured,
    /// At 0 for each named tenant when its actor starts on a shared store.
    TenantStart,
    /// Only from the first event: its labels are values only the event
    /// knows (a tenant, a model, an error code, a provider's live state).
    Event,
}

metrics! {
    RequestsTotal => "tollgate_requests_total", Counter, Configured,
        "Chat requests by route and final status (`ok` or the error code).";
    RequestDurationSeconds => "tollgate_request_duration_seconds", Histogram, Event,
        "Time from request to response headers, by route.";
    GatewayOverheadSeconds => "tollgate_gateway_overhead_seconds", Histogram, Event,
        "Time spent in the gateway itself (request time minus upstream time), by route.";
    UpstreamDurationSeconds => "tollgate_upstream_duration_seconds", Histogram, Event,
        "Upstream call latency (to the full body, or to the first chunk of a stream) by provider, model and outcome.";
    UpstreamTtftSeconds => "tollgate_upstream_ttft_seconds", Histogram, Event,
        "Time to the first streamed chunk, by provider and model.";
    UpstreamAttemptsTotal => "tollgate_upstream_attempts_total", Counter, Configured,
        "Upstream attempts by provider and outcome: ok, retryable (timeouts, connection errors, 5xx), rate_limited (429), rejected (other 4xx), local_error.";
    FallbacksTotal => "tollgate_fallbacks_total", Counter, Configured,
        "Requests served by a later target, by route, failed provider and serving provider.";
    TokensTotal => "tollgate_tokens_total", Counter, Event,
        "Tokens metered, by tenant and type (prompt, cached, cache_write, completion).";
    CostNanosTotal => "tollgate_cost_nanos_total", Counter, Event,
        "Charged cost in nano-units of the billing currency, by tenant (and feature when enabled).";
    BudgetUtilizationRatio => "tollgate_budget_utilization_ratio", Gauge, Event,
        "Committed spend over the monthly budget, by tenant (tenants with a budget).";
    ReservedNanos => "tollgate_reserved_nanos", Gauge, Event,
        "Budget held by outstanding reservations, by tenant.";
    ReservationChargeRatio => "tollgate_reservation_charge_ratio", Histogram, Event,
        "Charged cost over reserved worst case per call (above 1: overrun).";
    ReservationOverrunNanosTotal => "tollgate_reservation_overrun_nanos_total", Counter, Start,
        "Charged cost above its reservation.";
    ReservationsOrphanedTotal => "tollgate_reservations_orphaned_total", Counter, Start,
        "Reservations that expired unsettled and were committed.";
    EndUserLoadsTotal => "tollgate_end_user_loads_total", Counter, Start,
        "End users' period spend read from the ledger (new in a period, evicted from memory, or expired in Redis).";
    UnknownOutcomesTotal => "tollgate_upstream_unknown_outcomes_total", Counter, Event,
        "Attempts that reached the provider and ended without a usage report, charged their hold, by provider.";
    BudgetAlertsTotal => "tollgate_budget_alerts_total", Counter, Configured,
        "Budget thresholds crossed, by threshold percent (once per tenant and period).";
    AlertDeliveriesTotal => "tollgate_alert_deliveries_total", Counter, Start,
        "Alert webhook deliveries by target (global: `[alerts] webhook_url`, tenant: the tenant's own) and outcome (delivered, failed after every attempt).";
    RateOverLimitTotal => "tollgate_rate_over_limit_total", Counter, Event,
        "Calls an alert-only rate limit let pass over it, by tenant and limit (rpm, tpm).";
    RejectionsTotal => "tollgate_rejections_total", Counter, Event,
        "Requests refused before the upstream, by kind.";
    InFlightRefusalsTotal => "tollgate_in_flight_refusals_total", Counter, Start,
        "Calls refused with 429 because their tenant or key had its cap of calls in flight (`max_in_flight`), by scope (tenant, key).";
    StreamInterruptionsTotal => "tollgate_stream_interruptions_total", Counter, Configured,
        "Streams that did not end normally, by provider and reason (partial, client_cancelled, cut_at_hold).";
    StreamHoldStepsTotal => "tollgate_stream_hold_steps_total", Counter, Configured,
        "Steps a growing stream hold asked for, by route and outcome (granted; refused, which ends the stream).";
    TokenizerFailuresTotal => "tollgate_tokenizer_failures_total", Counter, Start,
        "Texts the tokenizer failed on, counted by their bytes instead (expected to stay 0).";
    FieldRefusalsTotal => "tollgate_field_refusals_total", Counter, Event,
        "Requests refused for a body field, header or value the gateway cannot price, by door and field.";
    QuotaHoldsLostTotal => "tollgate_quota_holds_lost_total", Counter, Start,
        "Settles of holds the shared quota store had no record of (it restarted empty); their rows keep their charge.";
    CacheRequestsTotal => "tollgate_cache_requests_total", Counter, Configured,
        "Response cache lookups by route and result (hit, miss).";
    LedgerEventsFlushed => "tollgate_ledger_events_flushed_total", Counter, Start,
        "Ledger events written to the database.";
    LedgerWriteErrors => "tollgate_ledger_write_errors_total", Counter, Start,
        "Failed ledger batch writes (kept and retried).";
    LedgerBacklogEvents => "tollgate_ledger_backlog_events", Gauge, Start,
        "Ledger events recorded and not yet in the database.";
    LedgerBatchRows => "tollgate_ledger_batch_rows", Histogram, Event,
        "Rows per ledger database write.";
    LedgerLagSeconds => "tollgate_ledger_lag_seconds", Histogram, Event,
        "Age of the oldest event of a ledger batch when it was written.";
    LedgerBacklogFullTotal => "tollgate_ledger_backlog_full_total", Counter, Start,
        "Paid requests that found the ledger backlog full, by action (refused, continued).";
    JournalFsyncSeconds => "tollgate_journal_fsync_seconds", Histogram, Event,
        "Duration of one journal fsync (shared by a group).";
    JournalErrorsTotal => "tollgate_journal_errors_total", Counter, Start,
        "Journal I/O failures by operation (write, fsync, rotate, delete, encode, read).";
    JournalReplayedTotal => "tollgate_journal_replayed_events_total", Counter, Start,
        "Events replayed from the journal at start, by kind (settle, orphan).";
    ProviderInFlight => "tollgate_provider_in_flight", Gauge, Event,
        "Upstream calls in flight, by provider.";
    FleetLeasesInUse => "tollgate_provider_fleet_leases", Gauge, Configured,
        "Calls in flight at a provider across every replica, as the shared store's leases count them, by provider (0 without `fleet_max_concurrency` or a shared store).";
    FleetFullTotal => "tollgate_provider_fleet_full_total", Counter, Configured,
        "Calls that skipped a provider because it had `fleet_max_concurrency` calls in flight across the fleet, by provider.";
    ProviderQueued => "tollgate_provider_queued", Gauge, Event,
        "Calls waiting for a provider slot, by provider.";
    BreakerState => "tollgate_breaker_state", Gauge, Event,
        "Circuit breaker state by provider: 0 closed, 1 half-open, 2 open.";
    QuotaStoreUp => "tollgate_quota_store_up", Gauge, Event,
        "Whether the shared quota store (Redis) answers: 1 up, 0 down (absent without Redis).";
    QuotaStoreErrorsTotal => "tollgate_quota_store_errors_total", Counter, Event,
        "Shared quota store calls that failed or timed out.";
    QuotaStoreFallbacksTotal => "tollgate_quota_store_fallbacks_total", Counter, Event,
        "Quota decisions made without the shared store, by policy (local, fail_closed).";
    QuotaDriftNanos => "tollgate_quota_drift_nanos", Gauge, TenantStart,
        "Shared store committed spend minus the ledger's at the last reconciliation, by tenant.";
    ProviderConcurrencyLimit => "tollgate_provider_concurrency_limit", Gauge, Event,
        "Calls a provider may have in flight (moves when its limit is adaptive).";
    AuthKeyLookupsTotal => "tollgate_auth_key_lookups_total", Counter, Start,
        "Key ids not in memory, by result: found, unknown and error queried the database; cached_unknown and busy were refused without a query.";
    RetryBackoffSeconds => "tollgate_retry_backoff_seconds", Histogram, Event,
        "Time a request slept before retrying the same provider, by provider (not in the gateway's overhead).";
    ProviderQueueWaitSeconds => "tollgate_provider_queue_wait_seconds", Histogram, Event,
        "Time a request waited for a provider's concurrency permit, by provider (not in the gateway's overhead).";
    TraceSpansExportedTotal => "tollgate_trace_spans_exported_total", Counter, Start,
        "Spans the OTLP collector accepted.";
    TraceSpansDroppedTotal => "tollgate_trace_spans_dropped_total", Counter, Start,
        "Spans dropped, by reason: queue_full (the exporter fell behind) or export_failed (the collector did not accept them).";
    ProviderPromptTokensTotal => "tollgate_provider_prompt_tokens_total", Counter, Configured,
        "Prompt tokens by provider and type: prompt (uncached), cached (read from the provider's prompt cache), cache_write.";
    SemanticCacheRequestsTotal => "tollgate_semantic_cache_requests_total", Counter, Configured,
        "Semantic cache requests by route and result: hit, miss, bypass (not looked up), error (the embedding or the store failed: served as a miss).";
    SemanticCacheBypassesTotal => "tollgate_semantic_cache_bypasses_total", Counter, Configured,
        "Requests not looked up in the semantic cache, by route and reason (header, tools, temperature, rule, no_question).";
    SemanticCacheLookupSeconds => "tollgate_semantic_cache_lookup_seconds", Histogram, Configured,
        "Time to search the semantic cache's index (after the embedding call), by route and store.";
    SemanticCacheSavedNanosTotal => "tollgate_semantic_cache_saved_nanos_total", Counter, Configured,
        "What the answers served from the semantic cache cost when they were bought, by route.";
    PromptBreakpointsOffTenants => "tollgate_prompt_breakpoints_off_tenants", Gauge, Event,
        "Tenants in `auto` whose cache breakpoints the ledger's last review turned off (their cache writes cost more than their reads saved).";
    AuditPayloadsDroppedTotal => "tollgate_audit_payloads_dropped_total", Counter, Start,
        "Audit payloads of opted-in tenants not kept: the writer's queue was full or the database refused them.";
    BillDriftRatio => "tollgate_bill_drift_ratio", Gauge, Event,
        "A provider's imported bill less the ledger's cost, as a share of the bill, over the days of the last drift computed (an import or a drift report): positive where the provider billed more.";
    BillDriftLimitRatio => "tollgate_bill_drift_limit_ratio", Gauge, Configured,
        "The drift share past which TollgateBillDrift fires (`reconcile.max_drift_percent` ÷ 100).";
    ExportPendingRows => "tollgate_export_pending_rows", Gauge, Configured,
        "Ledger rows waiting in an export sink's outbox, by sink (every replica reports the database's count).";
    ExportWaitingRows => "tollgate_export_waiting_rows", Gauge, Configured,
        "Rows of a Stripe sink's outbox that cannot be sent: their tenant has no customer mapping, by sink.";
    ExportOldestPendingSeconds => "tollgate_export_oldest_pending_seconds", Gauge, Configured,
        "Age of the oldest row waiting for an export sink (0 when none waits), by sink: TollgateExportStalled watches it.";
    ExportDeliveredRowsTotal => "tollgate_export_delivered_rows_total", Counter, Configured,
        "Ledger rows an export sink acknowledged and this replica booked, by sink.";
    ExportDeliveredNanosTotal => "tollgate_export_delivered_nanos_total", Counter, Configured,
        "The charge of the rows an export sink acknowledged, in nano-units, by sink.";
    ExportFailuresTotal => "tollgate_export_failures_total", Counter, Configured,
        "Requests to an export sink that failed (refused, timed out, connection lost) and are retried, by sink.";
}

pub fn describe_all() {
    for &metric in Metric::ALL {
        let name = metric.as_str();
        let help = metric.help();
        match metric.kind() {
            MetricKind::Histogram if name.ends_with("_seconds") => {
                describe_histogram!(name, Unit::Seconds, help);
            }
            MetricKind::Histogram => describe_histogram!(name, help),
            MetricKind::Counter => describe_counter!(name, help),
            MetricKind::Gauge => describe_gauge!(name, help),
        }
    }
}

/// Counters start at 0 so `rate()` and `increase()` see their first event.
fn zero_unlabeled() {
    for metric in [
        Metric::ReservationOverrunNanosTotal,
        Metric::ReservationsOrphanedTotal,
        Metric::EndUserLoadsTotal,
        Metric::LedgerEventsFlushed,
        Metric::LedgerWriteErrors,
    ] {
        counter_add(metric, &[], 0);
    }
    gauge_set(Metric::LedgerBacklogEvents, &[], 0.0);
    // The ledger's failure counters have small fixed label sets: all start at 0,
    // so an alert on their first increase fires.
    for op in ["write", "fsync", "rotate", "delete", "encode", "read"] {
        counter_add(Metric::JournalErrorsTotal, &[("op", op)], 0);
    }
    for action in ["refused", "continued"] {
        counter_add(Metric::LedgerBacklogFullTotal, &[("action", action)], 0);
    }
    for kind in ["settle", "orphan"] {
        counter_add(Metric::JournalReplayedTotal, &[("kind", kind)], 0);
    }
    for target in crate::tenant::alerts::Target::ALL {
        for outcome in crate::tenant::alerts::OUTCOMES {
            let pairs = [("target", target.as_str()), ("outcome", outcome)];
            counter_add(Metric::AlertDeliveriesTotal, &pairs, 0);
        }
    }
    // A flood of unknown keys shows as its first `cached_unknown` or `busy`.
    for result in crate::directory::misses::RESULTS {
        counter_add(Metric::AuthKeyLookupsTotal, &[("result", result)], 0);
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
    let make = || Handle::Counter(metrics::counter!(metric.as_str(), labels(pairs)));
    if let Handle::Counter(counter) = handle(metric, pairs, make) {
        counter.increment(value);
    }
}

#[expect(
    clippy::disallowed_macros,
    reason = "this module is the one user of the raw macros"
)]
pub fn gauge_set(metric: Metric, pairs: &[(&'static str, &str)], value: f64) {
    let make = || Handle::Gauge(metrics::gauge!(metric.as_str(), labels(pairs)));
    if let Handle::Gauge(gauge) = handle(metric, pairs, make) {
        gauge.set(value);
    }
}

pub fn observe_ms(metric: Metric, pairs: &[(&'static str, &str)], ms: u64) {
    observe(metric, pairs, ms_to_seconds(ms));
}

/// A duration in seconds, to the microsecond: a whole-millisecond reading
/// would put the gateway's sub-millisecond work in the first bucket.
pub fn observe_duration(metric: Metric, pairs: &[(&'static str, &str)], duration: Duration) {
    observe(metric, pairs, micros_to_seconds(duration.as_micros()));
}

#[expect(
    clippy::disallowed_macros,
    reason = "this module is the one user of the raw macros"
)]
pub fn observe(metric: Metric, pairs: &[(&'static str, &str)], value: f64) {
    let make = || Handle::Histogram(metrics::histogram!(metric.as_str(), labels(pairs)));
    if let Handle::Histogram(histogram) = handle(metric, pairs, make) {
        histogram.record(value);
    }
}

/// Exports `metric` with `pairs` before its first event: a counter or a
/// gauge at 0, a histogram with no sample (its buckets at 0).
#[expect(
    clippy::disallowed_macros,
    reason = "the one place a histogram is registered without a sample"
)]
pub fn zero(metric: Metric, pairs: &[(&'static str, &str)]) {
    match metric.kind() {
        MetricKind::Counter => counter_add(metric, pairs, 0),
        MetricKind::Gauge => gauge_set(metric, pairs, 0.0),
        MetricKind::Histogram => {
            let make = || Handle::Histogram(metrics::histogram!(metric.as_str(), labels(pairs)));
            handle(metric, pairs, make);
        }
    }
}

/// A handle from this thread's cache once the recorder is installed; before
/// that the macros hand out handles that record nothing, which must not be kept.
fn handle(metric: Metric, pairs: &[(&'static str, &str)], make: impl FnOnce() -> Handle) -> Handle {
    if INSTALLED.get().is_some() {
        handles::cached(metric, pairs, make)
    } else {
        make()
    }
}

#[expect(
    clippy::cast_precision_loss,
    clippy::float_arithmetic,
    reason = "Prometheus histograms take seconds as f64; precision past 2^53 ms is irrelevant"
)]
fn ms_to_seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

#[expect(
    clippy::cast_precision_loss,
    clippy::float_arithmetic,
    reason = "Prometheus histograms take seconds as f64; precision past 2^53 µs is irrelevant"
)]
fn micros_to_seconds(micros: u128) -> f64 {
    micros as f64 / 1_000_000.0
}

/// Buckets from 10 µs: the gateway's own work per request and an fsync.
const FINE_SECONDS: [f64; 16] = [
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];
/// Buckets from 1 ms to ten minutes: whole requests, upstream calls and waits.
const WIDE_SECONDS: [f64; 20] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
    120.0, 180.0, 300.0, 600.0,
];

/// `part / whole` as a gauge or histogram value (0 when `whole` is 0).
#[expect(
    clippy::cast_precision_loss,
    clippy::float_arithmetic,
    reason = "ratios are reported as f64; money stays integer everywhere else"
)]
pub fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// `a - b` as a gauge value (negative when `b` is larger).
#[expect(
    clippy::cast_precision_loss,
    clippy::float_arithmetic,
    reason = "gauges are f64; nano amounts past 2^53 lose only precision"
)]
pub fn signed_difference(a: u64, b: u64) -> f64 {
    if a >= b {
        (a - b) as f64
    } else {
        -((b - a) as f64)
    }
}

/// An amount as a gauge value.
#[expect(
    clippy::cast_precision_loss,
    reason = "gauges are f64; nano amounts past 2^53 lose only precision"
)]
pub fn as_gauge_u64(n: u64) -> f64 {
    n as f64
}

/// A count as a gauge value.
#[expect(
    clippy::cast_precision_loss,
    reason = "gauges are f64; counts stay far below 2^53"
)]
pub fn as_gauge(n: usize) -> f64 {
    n as f64
}

/// Bounds the `tenant` label: tenants named in `always` keep their own label;
/// beyond them the first `limit` tenants seen do; every other tenant is
/// `other`. So the number of series cannot grow with the number of tenants.
#[derive(Debug)]
pub struct TenantLabels {
    always: Vec<String>,
    limit: usize,
    seen: std::sync::RwLock<std::collections::HashSet<String>>,
}

pub const OTHER_TENANTS: &str = "other";

impl TenantLabels {
    pub fn new(always: Vec<String>, limit: usize) -> TenantLabels {
        TenantLabels {
            always,
            limit,
            seen: std::sync::RwLock::default(),
        }
    }

    pub fn label(&self, tenant: &str) -> String {
        if self.always.iter().any(|t| t == tenant) {
            return tenant.to_owned();
        }
        let known = self
            .seen
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.contains(tenant) {
            return tenant.to_owned();
        }
        drop(known);
        let mut seen = self
            .seen
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.len() < self.limit {
            seen.insert(tenant.to_owned());
            tenant.to_owned()
        } else {
            OTHER_TENANTS.to_owned()
        }
    }
}

/// Installs the process-wide recorder once; later calls get the same handle,
/// so tests that build several apps in one binary share it.
static INSTALLED: OnceLock<PrometheusHandle> = OnceLock::new();

pub fn install() -> PrometheusHandle {
    INSTALLED
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(Metric::ReservationChargeRatio.as_str().to_owned()),
                    &[0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.5, 2.0],
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(Metric::LedgerBatchRows.as_str().to_owned()),
                        &[1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0],
                    )
                })
                .and_then(|b| {
                    [
                        Metric::GatewayOverheadSeconds,
                        Metric::JournalFsyncSeconds,
                        Metric::SemanticCacheLookupSeconds,
                    ]
                    .into_iter()
                    .try_fold(b, |b, metric| {
                        b.set_buckets_for_metric(
                            Matcher::Full(metric.as_str().to_owned()),
                            &FINE_SECONDS,
                        )
                    })
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &WIDE_SECONDS)
                })
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("A metrics recorder was already installed; /metrics may be empty.");
            }
            describe_all();
            zero_unlabeled();
            spawn_upkeep(handle.clone());
            handle
        })
        .clone()
}

/// How often histogram samples are folded into their buckets.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The recorder keeps every histogram sample until it is folded into the
/// buckets, which otherwise happens only when `/metrics` is rendered: without
/// a scraper each request left its samples behind for good (about 120 bytes
/// per request, a steady growth of resident memory).
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("tollgate-metrics".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_INTERVAL);
                handle.run_upkeep();
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(error = %error, "Cannot start the metrics upkeep thread; histogram samples wait for /metrics to be scraped.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count in one bucket of one series of a scrape.
    fn bucket(scrape: &str, series: &str, le: &str) -> Option<u64> {
        let head = format!("{series},le=\"{le}\"}} ");
        scrape
            .lines()
            .find_map(|line| line.strip_prefix(head.as_str()))
            .and_then(|count| count.parse().ok())
    }

    #[test]
    fn every_metric_has_its_help_text() {
        for metric in Metric::ALL {
            assert!(!metric.help().is_empty(), "{}", metric.as_str());
        }
    }

    #[test]
    fn durations_land_in_microsecond_buckets_fit_for_their_quantity() {
        let handle = install();
        let route = [("route", "unit-buckets")];
        observe_duration(
            Metric::GatewayOverheadSeconds,
            &route,
            Duration::from_micros(37),
        );
        observe_duration(
            Metric::UpstreamDurationSeconds,
            &[("provider", "p"), ("model", "m"), ("outcome", "ok")],
            Duration::from_secs(150),
        );
        let scrape = handle.render();
        let overhead = "tollgate_gateway_overhead_seconds_bucket{route=\"unit-buckets\"";
        // 37 µs: above the 25 µs bucket, inside the 50 µs one.
        assert_eq!(bucket(&scrape, overhead, "0.000025"), Some(0), "{scrape}");
        assert_eq!(bucket(&scrape, overhead, "0.00005"), Some(1), "{scrape}");
        let upstream =
            "tollgate_upstream_duration_seconds_bucket{provider=\"p\",model=\"m\",outcome=\"ok\"";
        // Two and a half minutes: past two minutes, inside three.
        assert_eq!(bucket(&scrape, upstream, "120"), Some(0), "{scrape}");
        assert_eq!(bucket(&scrape, upstream, "180"), Some(1), "{scrape}");
    }

    #[test]
    fn tenant_labels_are_bounded() {
        let labels = TenantLabels::new(vec!["vip".into()], 2);
        assert_eq!(labels.label("a"), "a");
        assert_eq!(labels.label("b"), "b");
        assert_eq!(labels.label("c"), OTHER_TENANTS);
        assert_eq!(labels.label("a"), "a");
        assert_eq!(labels.label("vip"), "vip");
    }

    #[test]
    fn every_metric_is_named_for_its_kind() {
        for &metric in Metric::ALL {
            let name = metric.as_str();
            assert!(name.starts_with("tollgate_"), "{name}");
            assert_eq!(
                metric.kind() == MetricKind::Counter,
                name.ends_with("_total"),
                "{name}"
            );
        }
    }
}
