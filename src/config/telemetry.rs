//! `[telemetry]`: metric labels, logs and traces.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Tenants that always get their own metric label.
    pub tenant_labels: Vec<String>,
    /// Beyond those, the first this many tenants seen get one; the rest share `other`.
    pub tenant_label_limit: usize,
    /// Adds a `feature` label to the cost counter (one series per tenant × feature).
    pub feature_labels: bool,
    /// Tenants whose prompts may be logged (at debug level); everyone else's never are.
    pub log_prompts_for: Vec<String>,
    /// JSON log lines (default) or human-readable ones.
    pub json_logs: bool,
    /// An OTLP/HTTP collector (`http://127.0.0.1:4318`): spans go to
    /// `{otlp_endpoint}/v1/traces`. Unset: no traces.
    pub otlp_endpoint: Option<String>,
    /// How long one export may take before its spans are dropped.
    pub otlp_timeout_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            tenant_labels: Vec::new(),
            tenant_label_limit: 100,
            feature_labels: false,
            log_prompts_for: Vec::new(),
            json_logs: true,
            otlp_endpoint: None,
            otlp_timeout_ms: 2_000,
        }
    }
}
