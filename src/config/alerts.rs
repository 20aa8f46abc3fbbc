//! `[alerts]` (budget thresholds pushed to a webhook) and `[reports]` (the
//! daily report pushed once a day).

use serde::Deserialize;

use super::errors::Problems;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// Receives `{"tenant", "period", "committed", "budget", "threshold"}` as a JSON POST.
    pub webhook_url: Option<String>,
    /// Percentages of a tenant's monthly budget; each fires once per period.
    pub thresholds_percent: Vec<u32>,
    pub timeout_ms: u64,
    /// Delivery attempts per alert (with backoff between them).
    pub attempts: u32,
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
