//! `[reconcile]`: comparing the ledger with the providers' bills.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::errors::Problems;
use super::providers::Provider;
use crate::ids::ProviderName;

/// `[reconcile]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcileConfig {
    /// `TollgateBillDrift` fires when a provider's bill and the ledger differ
    /// by more than this share of the bill, in percent.
    pub max_drift_percent: f64,
    /// Per provider, the provider's own id of the API key the gateway calls it
    /// with (OpenAI `key_…`, Anthropic `apikey_…`): the drift report compares
    /// the ledger with that key's lines and shows other keys' apart.
    pub key_ids: BTreeMap<String, String>,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            max_drift_percent: 2.0,
            key_ids: BTreeMap::new(),
        }
    }
}

impl ReconcileConfig {
    pub(super) fn check(
        &self,
        providers: &HashMap<ProviderName, Provider>,
        problems: &mut Problems,
    ) {
        if !(self.max_drift_percent.is_finite() && (0.0..=100.0).contains(&self.max_drift_percent))
        {
            problems.add(
                "reconcile.max_drift_percent",
                format!(
                    "{} is not a percentage from 0 to 100",
                    self.max_drift_percent
                ),
            );
        }
        for (provider, key_id) in &self.key_ids {
            if !providers.contains_key(&ProviderName::new(provider.as_str())) {
                problems.add(
                    format!("reconcile.key_ids.{provider}"),
                    "names no configured provider",
                );
            }
            if key_id.trim().is_empty() {
                problems.add(format!("reconcile.key_ids.{provider}"), "is empty");
            }
        }
    }

    /// `max_drift_percent` as a ratio of the bill.
    #[expect(
        clippy::float_arithmetic,
        reason = "a threshold for a gauge, not money"
    )]
    pub fn max_drift_ratio(&self) -> f64 {
        self.max_drift_percent / 100.0
    }
}

impl crate::bill::drift::KeyIds for ReconcileConfig {
    fn key_id(&self, provider: &str) -> Option<&str> {
        self.key_ids.get(provider).map(String::as_str)
    }
}
