//! `[alerts]` (budget thresholds and alert-only rate limits pushed to a
//! webhook, beside each tenant's own) and `[reports]` (the daily report pushed
//! once a day).

use serde::Deserialize;

use super::errors::Problems;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// Receives every tenant's alerts as a JSON POST (see `tenant/alerts.rs`
    /// for the body); a tenant's own `alert_webhook_url` receives its alerts too.
    pub webhook_url: Option<String>,
    /// Percentages of a tenant's monthly budget; each fires once per period.
    pub thresholds_percent: Vec<u32>,
    pub timeout_ms: u64,
    /// Delivery attempts per alert and target (with backoff between them).
    pub attempts: u32,
}

/// Why `text` cannot receive alerts: a webhook is an absolute `http` or
/// `https` URL with a host.
pub fn webhook_url_problem(text: &str) -> Option<&'static str> {
    const RULE: &str = "must be an http:// or https:// URL with a host";
    let Ok(uri) = text.parse::<awc::http::Uri>() else {
        return Some(RULE);
    };
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    let host_ok = uri.host().is_some_and(|host| !host.is_empty());
    (!scheme_ok || !host_ok).then_some(RULE)
}

/// `[reports]`: yesterday's daily report pushed once a day.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportsConfig {
    /// Receives `{"report": …, "text": …}` as a JSON POST; unset: no push.
    pub daily_webhook_url: Option<String>,
    /// When the day's push goes, `HH:MM` in `billing.timezone`.
    pub daily_at: String,
    pub timeout_ms: u64,
    /// Delivery attempts (with backoff between them).
    pub attempts: u32,
}

impl Default for ReportsConfig {
    fn default() -> Self {
        ReportsConfig {
            daily_webhook_url: None,
            daily_at: "08:00".to_owned(),
            timeout_ms: 2000,
            attempts: 5,
        }
    }
}

/// `HH:MM` as minutes after midnight.
pub fn parse_time_of_day(text: &str) -> Option<u32> {
    let (hours, minutes) = text.split_once(':')?;
    let (hours, minutes): (u32, u32) = (hours.parse().ok()?, minutes.parse().ok()?);
    (text.len() == 5 && hours < 24 && minutes < 60).then_some(hours * 60 + minutes)
}

impl Default for AlertsConfig {
    fn default() -> Self {
        AlertsConfig {
            webhook_url: None,
            thresholds_percent: vec![80, 100],
            timeout_ms: 2000,
            attempts: 3,
        }
    }
}

impl AlertsConfig {
    pub(super) fn check(&self, problems: &mut Problems) {
        if let Some(problem) = self.webhook_url.as_deref().and_then(webhook_url_problem) {
            problems.add("alerts.webhook_url", problem);
        }
    }
}

impl ReportsConfig {
    pub(super) fn check(&self, problems: &mut Problems) {
        if parse_time_of_day(&self.daily_at).is_none() {
            problems.add(
                "reports.daily_at",
                "must be a time of day HH:MM (24 h, in billing.timezone)",
            );
        }
    }
}
