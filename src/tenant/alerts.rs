//! Budget alerts: each threshold (a percentage of the monthly budget) fires
//! once per period when committed spend crosses it — a log line, a metric,
//! and, when configured, a webhook POST delivered with a timeout and bounded
//! retries. Thresholds already passed when an actor starts are not re-sent.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use crate::config::AlertsConfig;
use crate::money::Nanos;
use crate::telemetry::metrics::{Metric, counter_add};

#[derive(Debug)]
pub struct AlertBook {
    thresholds: Vec<u32>,
    period: String,
    fired: BTreeSet<u32>,
}

/// What a webhook receives.
#[derive(Debug, Clone, Serialize)]
pub struct AlertNotice {
    pub tenant: String,
    pub period: String,
    pub committed: Nanos,
    pub budget: Nanos,
    /// Percent of the budget.
    pub threshold: u32,
}

impl AlertBook {
    pub fn new(thresholds: &[u32]) -> AlertBook {
        let mut thresholds = thresholds.to_vec();
        thresholds.sort_unstable();
        thresholds.dedup();
        AlertBook {
            thresholds,
            period: String::new(),
            fired: BTreeSet::new(),
        }
    }

    /// Thresholds crossed and not yet fired this period (they are marked fired).
    pub fn crossed(&mut self, period: &str, committed: Nanos, budget: Option<Nanos>) -> Vec<u32> {
        if period != self.period {
            period.clone_into(&mut self.period);
            self.fired.clear();
        }
        let Some(budget) = budget.filter(|b| b.get() > 0) else {
            return Vec::new();
        };
        let spent = u128::from(committed.get()) * 100;
        let mut crossed = Vec::new();
        for &threshold in &self.thresholds {
            if spent >= u128::from(budget.get()) * u128::from(threshold)
                && self.fired.insert(threshold)
            {
                crossed.push(threshold);
            }
        }
        crossed
    }
}

/// Logs, counts and (if configured) posts one alert; delivery runs in the background.
pub fn fire(config: &AlertsConfig, notice: AlertNotice) {
    tracing::warn!(tenant = %notice.tenant, period = %notice.period, committed = %notice.committed, budget = %notice.budget, threshold = notice.threshold, "Budget threshold crossed.");
    let threshold = notice.threshold.to_string();
    counter_add(
        Metric::BudgetAlertsTotal,
        &[("threshold", threshold.as_str())],
        1,
    );
    let Some(url) = config.webhook_url.clone() else {
        return;
    };
    let timeout = Duration::from_millis(config.timeout_ms);
    let attempts = config.attempts.max(1);
    actix_rt::spawn(async move {
        // A client per alert: alerts are rare, and this runs on whichever arbiter the actor has.
        let client = awc::Client::builder().timeout(timeout).finish();
        for attempt in 1..=attempts {
            match client.post(url.as_str()).send_json(&notice).await {
                Ok(response) if response.status().is_success() => return,
                Ok(response) => {
                    tracing::warn!(
                        status = response.status().as_u16(),
                        attempt,
                        "Alert webhook refused the alert."
                    );
                }
                Err(error) => tracing::warn!(error = %error, attempt, "Alert webhook failed."),
            }
            if attempt < attempts {
                actix_rt::time::sleep(Duration::from_millis(200 << attempt.min(6))).await;
            }
        }
        tracing::error!(tenant = %notice.tenant, threshold = notice.threshold, "Alert not delivered after every attempt.");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_threshold_fires_once_per_period() {
        let mut book = AlertBook::new(&[100, 80, 80]);
        let budget = Some(Nanos::new(1000));
        assert!(book.crossed("2026-11", Nanos::new(799), budget).is_empty());
        assert_eq!(book.crossed("2026-11", Nanos::new(800), budget), vec![80]);
        assert!(book.crossed("2026-11", Nanos::new(900), budget).is_empty());
        assert_eq!(book.crossed("2026-11", Nanos::new(1200), budget), vec![100]);
        assert_eq!(
            book.crossed("2026-12", Nanos::new(1000), budget),
            vec![80, 100]
        );
        assert!(book.crossed("2026-12", Nanos::new(1000), None).is_empty());
    }
}
