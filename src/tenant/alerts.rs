//! Alerts: each budget threshold (a percentage of the tenant's budget) fires
//! once per period when committed spend crosses it, and an alert-only rate
//! limit fires once per limit and minute a call passes over it — a log line,
//! a metric, and a JSON POST to the global webhook and the tenant's own,
//! whichever are set, each delivered with a timeout and bounded retries
//! under an id that stays the same for every delivery of one alert.
//! Thresholds already passed when an actor starts are not re-sent.

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

impl AlertBook {
    pub fn new(thresholds: &[u32]) -> AlertBook {
        let mut book = AlertBook {
            thresholds: Vec::new(),
            period: String::new(),
            fired: BTreeSet::new(),
        };
        book.set_thresholds(thresholds);
        book
    }

    /// New thresholds (the tenant's changed): one already passed fires at
    /// the next change of committed spend, one fired before does not again.
    pub fn set_thresholds(&mut self, thresholds: &[u32]) {
        let mut thresholds = thresholds.to_vec();
        thresholds.sort_unstable();
        thresholds.dedup();
        self.thresholds = thresholds;
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

/// What a webhook receives: one JSON object per alert.
#[derive(Debug, Clone, Serialize)]
pub struct AlertNotice {
    /// The same for every delivery of one alert (retries, both targets,
    /// every replica), so a receiver drops duplicates by it; also sent as
    /// the `Idempotency-Key` header.
    pub id: String,
    pub tenant: String,
    /// Whose limit it is: `tenant` (the tenant's own budget and rates).
    pub scope: &'static str,
    /// The budget period (`2026-11`), or the minute a rate was passed in (RFC 3339).
    pub period: String,
    #[serde(flatten)]
    pub event: AlertEvent,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AlertEvent {
    /// Committed spend reached `threshold` percent of the budget.
    Budget {
        threshold: u32,
        /// Decimal strings in the billing currency.
        committed: Nanos,
        budget: Nanos,
    },
    /// An alert-only rate limit let a call pass over it (the first in its minute).
    Rate {
        limit: RateLimit,
        /// The limit itself: requests or tokens per minute.
        per_minute: u64,
    },
}

/// A per-minute limit of a tenant that may be set to alert only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimit {
    Rpm,
    Tpm,
}

impl RateLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            RateLimit::Rpm => "rpm",
            RateLimit::Tpm => "tpm",
        }
    }
}

impl AlertNotice {
    pub fn budget(
        tenant: &str,
        period: &str,
        threshold: u32,
        committed: Nanos,
        budget: Nanos,
    ) -> Self {
        AlertNotice {
            id: format!("budget:{tenant}:tenant:{period}:{threshold}"),
            tenant: tenant.to_owned(),
            scope: "tenant",
            period: period.to_owned(),
            event: AlertEvent::Budget {
                threshold,
                committed,
                budget,
            },
        }
    }

    /// A rate passed in the minute that `now_ms` falls in.
    pub fn rate(tenant: &str, limit: RateLimit, per_minute: u64, now_ms: u64) -> Self {
        let minute_ms = now_ms - now_ms % 60_000;
        let period = i64::try_from(minute_ms)
            .ok()
            .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
            .map_or_else(|| minute_ms.to_string(), |at| at.to_string());
        AlertNotice {
            id: format!("rate:{tenant}:{}:{minute_ms}", limit.as_str()),
            tenant: tenant.to_owned(),
            scope: "tenant",
            period,
            event: AlertEvent::Rate { limit, per_minute },
        }
    }
}

/// Which webhook a delivery went to (the metric's `target` label).
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// `[alerts] webhook_url`: every tenant's alerts.
    Global,
    /// The tenant's own `alert_webhook_url`.
    Tenant,
}

impl Target {
    pub const ALL: [Target; 2] = [Target::Global, Target::Tenant];

    pub fn as_str(self) -> &'static str {
        match self {
            Target::Global => "global",
            Target::Tenant => "tenant",
        }
    }
}

/// How a delivery ended (the metric's `outcome` label).
pub const OUTCOMES: [&str; 2] = ["delivered", "failed"];

/// Logs and counts a budget threshold crossed, and posts it to the targets.
pub fn budget_crossed(config: &AlertsConfig, tenant_url: Option<&str>, notice: &AlertNotice) {
    if let AlertEvent::Budget {
        threshold,
        committed,
        budget,
    } = &notice.event
    {
        tracing::warn!(tenant = %notice.tenant, period = %notice.period, committed = %committed, budget = %budget, threshold, "Budget threshold crossed.");
        let threshold = threshold.to_string();
        counter_add(
            Metric::BudgetAlertsTotal,
            &[("threshold", threshold.as_str())],
            1,
        );
    }
    post(config, tenant_url, notice);
}

/// Posts one alert to the global target and the tenant's, whichever are
/// set; each delivery runs in the background with a timeout and bounded
/// retries, off the actor's own work.
pub fn post(config: &AlertsConfig, tenant_url: Option<&str>, notice: &AlertNotice) {
    let targets = [
        (Target::Global, config.webhook_url.as_deref()),
        (Target::Tenant, tenant_url),
    ];
    for (target, url) in targets {
        let Some(url) = url else { continue };
        let delivery = Delivery {
            url: url.to_owned(),
            target,
            timeout: Duration::from_millis(config.timeout_ms),
            attempts: config.attempts.max(1),
            notice: notice.clone(),
        };
        actix_rt::spawn(delivery.run());
    }
}

struct Delivery {
    url: String,
    target: Target,
    timeout: Duration,
    attempts: u32,
    notice: AlertNotice,
}

impl Delivery {
    async fn run(self) {
        // A client per alert: alerts are rare, and this runs on whichever arbiter the actor has.
        let client = awc::Client::builder().timeout(self.timeout).finish();
        let target = self.target.as_str();
        for attempt in 1..=self.attempts {
            let sent = client
                .post(self.url.as_str())
                .insert_header(("Idempotency-Key", self.notice.id.as_str()))
                .send_json(&self.notice)
                .await;
            match sent {
                Ok(response) if response.status().is_success() => {
                    counter_add(
                        Metric::AlertDeliveriesTotal,
                        &[("target", target), ("outcome", "delivered")],
                        1,
                    );
                    return;
                }
                Ok(response) => {
                    tracing::warn!(
                        status = response.status().as_u16(),
                        attempt,
                        target,
                        "Alert webhook refused the alert."
                    );
                }
                Err(error) => {
                    tracing::warn!(error = %error, attempt, target, "Alert webhook failed.");
                }
            }
            if attempt < self.attempts {
                actix_rt::time::sleep(Duration::from_millis(200 << attempt.min(6))).await;
            }
        }
        counter_add(
            Metric::AlertDeliveriesTotal,
            &[("target", target), ("outcome", "failed")],
            1,
        );
        tracing::error!(tenant = %self.notice.tenant, id = %self.notice.id, target, "Alert not delivered after every attempt.");
    }
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

    #[test]
    fn one_alert_has_one_id_and_its_fields_as_the_receiver_reads_them() {
        let budget = AlertNotice::budget(
            "acme",
            "2026-11",
            80,
            Nanos::new(4_000_000_000),
            Nanos::new(5_000_000_000),
        );
        let body = serde_json::to_value(&budget).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "id": "budget:acme:tenant:2026-11:80", "tenant": "acme", "scope": "tenant",
                "period": "2026-11", "kind": "budget", "threshold": 80,
                "committed": "4", "budget": "5"
            })
        );
        // 2026-11-30T12:00:59.999Z and 12:00:00Z are one minute; 12:01:00Z the next.
        let minute = 1_796_040_000_000;
        let first = AlertNotice::rate("acme", RateLimit::Tpm, 1000, minute + 59_999);
        assert_eq!(
            first.id,
            AlertNotice::rate("acme", RateLimit::Tpm, 1000, minute).id
        );
        assert_ne!(
            first.id,
            AlertNotice::rate("acme", RateLimit::Rpm, 60, minute).id
        );
        assert_ne!(
            first.id,
            AlertNotice::rate("acme", RateLimit::Tpm, 1000, minute + 60_000).id
        );
        let body = serde_json::to_value(&first).unwrap();
        assert_eq!(body["kind"], "rate");
        assert_eq!(body["limit"], "tpm");
        assert_eq!(body["per_minute"], 1000);
        assert_eq!(body["period"], "2026-11-30T12:00:00Z");
    }
}
