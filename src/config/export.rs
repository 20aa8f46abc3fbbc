//! `[export]`: usage delivered to billing systems, each `[[export.sinks]]`
//! entry one receiver. A sink's secret is named by `auth_env`, never written
//! in the file.

use std::collections::{BTreeMap, HashSet};

use serde::Deserialize;

use super::alerts::webhook_url_problem;
use super::env::{EnvSource, Secret, secret};
use super::errors::Problems;

/// `[export]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawExport {
    /// How long a replica's claim on a sink lasts unless renewed: after a
    /// replica dies, another takes its sinks over this long after its last renewal.
    lease_ms: u64,
    /// How often the sending replica looks for new rows (and renews its lease).
    poll_interval_ms: u64,
    /// The longest wait between two tries of a receiver that keeps failing.
    max_backoff_ms: u64,
    sinks: Vec<RawSink>,
}

impl Default for RawExport {
    fn default() -> Self {
        RawExport {
            lease_ms: 15_000,
            poll_interval_ms: 1_000,
            max_backoff_ms: 60_000,
            sinks: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSink {
    name: String,
    /// `cloudevents` or `stripe`.
    kind: String,
    url: String,
    /// The environment variable holding the bearer token (Stripe: the secret key).
    auth_env: Option<String>,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
    #[serde(default = "default_batch_rows")]
    batch_rows: u64,
    /// CloudEvents: the events' `source` and `type`.
    source: Option<String>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    /// Stripe: the meter's event name, what `payload[value]` counts, and
    /// each tenant's Stripe customer.
    event_name: Option<String>,
    value: Option<String>,
    #[serde(default)]
    customers: BTreeMap<String, String>,
}

fn default_timeout_ms() -> u64 {
    5_000
}

fn default_batch_rows() -> u64 {
    100
}

/// `[export]`, checked.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub lease_ms: u64,
    pub poll_interval_ms: u64,
    pub max_backoff_ms: u64,
    pub sinks: Vec<Sink>,
}

impl Default for ExportConfig {
    fn default() -> Self {
        RawExport::default().into_checked(Vec::new())
    }
}

impl ExportConfig {
    /// The sinks' names: what the ledger writes an outbox row for.
    pub fn sink_names(&self) -> Vec<String> {
        self.sinks.iter().map(|s| s.name.clone()).collect()
    }
}

#[derive(Debug, Clone)]
pub struct Sink {
    pub name: String,
    pub url: String,
    pub token: Option<Secret>,
    pub timeout_ms: u64,
    pub batch_rows: u64,
    pub kind: SinkKind,
}

#[derive(Debug, Clone)]
pub enum SinkKind {
    CloudEvents {
        source: String,
        event_type: String,
    },
    Stripe {
        event_name: String,
        value: StripeValue,
        /// Tenant id → Stripe customer id.
        customers: BTreeMap<String, String>,
    },
}

/// What a Stripe meter event's `payload[value]` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StripeValue {
    /// The row's charge in nano-units of the billing currency.
    ChargeNanos,
    /// The row's prompt and completion tokens.
    Tokens,
}

impl RawExport {
    pub(super) fn resolve(self, env: &dyn EnvSource, problems: &mut Problems) -> ExportConfig {
        for (field, value) in [
            ("lease_ms", self.lease_ms),
            ("poll_interval_ms", self.poll_interval_ms),
            ("max_backoff_ms", self.max_backoff_ms),
        ] {
            if value == 0 {
                problems.add(format!("export.{field}"), "must be at least 1");
            }
        }
        if self.poll_interval_ms >= self.lease_ms {
            problems.add(
                "export.poll_interval_ms",
                "must be shorter than export.lease_ms: the lease is renewed at each poll",
            );
        }
        let mut names = HashSet::new();
        let mut sinks = Vec::new();
        for (i, raw) in self.sinks.iter().enumerate() {
            let path = format!("export.sinks[{i}]");
            if !names.insert(raw.name.clone()) {
                problems.add(
                    format!("{path}.name"),
                    format!("`{}` is given twice", raw.name),
                );
            }
            if raw.timeout_ms >= self.lease_ms {
                problems.add(
                    format!("{path}.timeout_ms"),
                    "must be shorter than export.lease_ms: a request outliving the lease lets another replica send the same rows",
                );
            }
            if let Some(sink) = raw.check(&path, env, problems) {
                sinks.push(sink);
            }
        }
        self.into_checked(sinks)
    }

    fn into_checked(self, sinks: Vec<Sink>) -> ExportConfig {
        ExportConfig {
            lease_ms: self.lease_ms,
            poll_interval_ms: self.poll_interval_ms,
            max_backoff_ms: self.max_backoff_ms,
            sinks,
        }
    }
}

impl RawSink {
    fn check(&self, path: &str, env: &dyn EnvSource, problems: &mut Problems) -> Option<Sink> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            problems.add(
                format!("{path}.name"),
                "must be letters, digits, `_` or `-` (it is part of every event's key)",
            );
        }
        if let Some(rule) = webhook_url_problem(&self.url) {
            problems.add(format!("{path}.url"), rule);
        }
        if self.timeout_ms == 0 {
            problems.add(format!("{path}.timeout_ms"), "must be at least 1");
        }
        if self.batch_rows == 0 || self.batch_rows > 1_000 {
            problems.add(format!("{path}.batch_rows"), "must be from 1 to 1000");
        }
        let token = self.auth_env.as_deref().and_then(|name| {
            let found = secret(env, name);
            if found.is_none() {
                problems.add(format!("{path}.auth_env"), format!("`{name}` is not set"));
            }
            found
        });
        let kind = self.kind(path, problems)?;
        Some(Sink {
            name: self.name.clone(),
            url: self.url.clone(),
            token,
            timeout_ms: self.timeout_ms,
            batch_rows: self.batch_rows,
            kind,
        })
    }

    fn kind(&self, path: &str, problems: &mut Problems) -> Option<SinkKind> {
        let stray = |field: &str, set: bool, problems: &mut Problems| {
            if set {
                problems.add(
                    format!("{path}.{field}"),
                    format!("is not a setting of kind `{}`", self.kind),
                );
            }
        };
        match self.kind.as_str() {
            "cloudevents" => {
                stray("event_name", self.event_name.is_some(), problems);
                stray("value", self.value.is_some(), problems);
                stray("customers", !self.customers.is_empty(), problems);
                Some(SinkKind::CloudEvents {
                    source: self.source.clone().unwrap_or_else(|| "tollgate".to_owned()),
                    event_type: self
                        .event_type
                        .clone()
                        .unwrap_or_else(|| "tollgate.usage".to_owned()),
                })
            }
            "stripe" => {
                stray("source", self.source.is_some(), problems);
                stray("type", self.event_type.is_some(), problems);
                let value = match self.value.as_deref() {
                    None | Some("charge_nanos") => StripeValue::ChargeNanos,
                    Some("tokens") => StripeValue::Tokens,
                    Some(other) => {
                        problems.add(
                            format!("{path}.value"),
                            format!("`{other}` is not `charge_nanos` or `tokens`"),
                        );
                        StripeValue::ChargeNanos
                    }
                };
                let Some(event_name) = self.event_name.clone().filter(|n| !n.is_empty()) else {
                    problems.add(
                        format!("{path}.event_name"),
                        "is required for kind `stripe`",
                    );
                    return None;
                };
                for (tenant, customer) in &self.customers {
                    if customer.trim().is_empty() {
                        problems.add(format!("{path}.customers.{tenant}"), "is empty");
                    }
                }
                Some(SinkKind::Stripe {
                    event_name,
                    value,
                    customers: self.customers.clone(),
                })
            }
            other => {
                problems.add(
                    format!("{path}.kind"),
                    format!("`{other}` is not `cloudevents` or `stripe`"),
                );
                None
            }
        }
    }
}
