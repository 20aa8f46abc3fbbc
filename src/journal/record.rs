//! What the journal stores, as JSON inside a frame. The wire types are plain
//! data kept apart from the in-memory ones, so a refactor of `UsageEvent`
//! cannot silently change how existing journals read back.

use serde::{Deserialize, Serialize};

use crate::ids::{EventId, KeyId, RequestId, TenantId};
use crate::ledger::{Api, AttemptStatus, CacheSource, UsageEvent, UsageKind};
use crate::money::Nanos;
use crate::pricing::Usage;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// An attempt about to be sent upstream. Without a later `settle` of the
    /// same event id it becomes its `orphan` row on replay.
    Reserve {
        deadline_ms: u64,
        orphan: EventRecord,
    },
    /// An attempt's own row, journaled just before its charge is committed in
    /// the shared quota store. It supersedes the attempt's reserve: without a
    /// later `settle` replay writes this row, so the ledger charges what the
    /// store may have committed, not the reserved amount.
    Settling { event: EventRecord },
    /// A ledger row, as handed to the ledger.
    Settle { event: EventRecord },
    /// Every settle up to this sequence number is in the database.
    Checkpoint { upto: u64 },
}

/// `UsageEvent` on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventRecord {
    pub event_id: String,
    pub request_id: String,
    pub client_request_id: Option<String>,
    pub trace_id: Option<String>,
    pub tenant: String,
    pub key: String,
    pub feature: String,
    /// Absent in records written before end users had budgets, and when none was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_user: Option<String>,
    /// Absent in records written before doors other than chat existed.
    #[serde(default)]
    pub api: Api,
    pub route: String,
    pub provider: String,
    pub model: String,
    pub attempt: u32,
    pub status: String,
    pub upstream_status: Option<u16>,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
    pub completion_tokens: u64,
    pub usage_kind: String,
    pub reserved_nanos: u64,
    pub charged_nanos: u64,
    /// Absent in records written before plans, and where it is the charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_nanos: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    pub price_version: String,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    pub error: Option<String>,
    /// Absent in records written before cache hits named their source row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_similarity: Option<u32>,
    pub created_at_ms: u64,
}

impl From<&UsageEvent> for EventRecord {
    fn from(e: &UsageEvent) -> EventRecord {
        EventRecord {
            event_id: e.event_id.to_string(),
            request_id: e.request_id.to_string(),
            client_request_id: e.client_request_id.clone(),
            trace_id: e.trace_id.clone(),
            tenant: e.tenant.to_string(),
            key: e.key.to_string(),
            feature: e.feature.clone(),
            end_user: e.end_user.clone(),
            api: e.api,
            route: e.route.clone(),
            provider: e.provider.clone(),
            model: e.model.clone(),
            attempt: e.attempt,
            status: e.status.as_str().to_owned(),
            upstream_status: e.upstream_status,
            prompt_tokens: e.usage.prompt_tokens,
            cached_tokens: e.usage.cached_tokens,
            cache_write_tokens: e.usage.cache_write_tokens,
            completion_tokens: e.usage.completion_tokens,
            usage_kind: e.usage_kind.as_str().to_owned(),
            reserved_nanos: e.reserved.get(),
            charged_nanos: e.charged.get(),
            cost_nanos: e.cost.map(Nanos::get),
            plan: e.plan.clone(),
            price_version: e.price_version.clone(),
            latency_ms: e.latency_ms,
            ttft_ms: e.ttft_ms,
            error: e.error.clone(),
            cache_source: e.cache.as_ref().map(|c| c.event_id.clone()),
            cache_similarity: e.cache.as_ref().and_then(|c| c.similarity),
            created_at_ms: e.created_at_ms,
        }
    }
}

impl EventRecord {
    /// `None` when the record names an unknown status or a malformed id:
    /// replay reports it rather than inventing a row.
    pub fn to_event(&self) -> Option<UsageEvent> {
        Some(UsageEvent {
            event_id: EventId::parse(&self.event_id)?,
            request_id: RequestId::new(self.request_id.as_str()),
            client_request_id: self.client_request_id.clone(),
            trace_id: self.trace_id.clone(),
            tenant: TenantId::new(self.tenant.as_str()),
            key: KeyId::new(self.key.as_str()),
            feature: self.feature.clone(),
            end_user: self.end_user.clone(),
            api: self.api,
            route: self.route.clone(),
            provider: self.provider.clone(),
            model: self.model.clone(),
            attempt: self.attempt,
            status: AttemptStatus::parse(&self.status)?,
            upstream_status: self.upstream_status,
            usage: Usage {
                prompt_tokens: self.prompt_tokens,
                cached_tokens: self.cached_tokens,
                cache_write_tokens: self.cache_write_tokens,
                completion_tokens: self.completion_tokens,
            },
            usage_kind: UsageKind::parse(&self.usage_kind)?,
            reserved: Nanos::new(self.reserved_nanos),
            charged: Nanos::new(self.charged_nanos),
            cost: self.cost_nanos.map(Nanos::new),
            plan: self.plan.clone(),
            price_version: self.price_version.clone(),
            latency_ms: self.latency_ms,
            ttft_ms: self.ttft_ms,
            error: self.error.clone(),
            cache: self.cache_source.as_ref().map(|event_id| CacheSource {
                event_id: event_id.clone(),
                similarity: self.cache_similarity,
            }),
            created_at_ms: self.created_at_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_survives_the_journal() {
        for status in AttemptStatus::ALL {
            let event = UsageEvent::sample(status);
            let bytes = serde_json::to_vec(&EventRecord::from(&event)).unwrap();
            let back: EventRecord = serde_json::from_slice(&bytes).unwrap();
            let back = back.to_event().unwrap_or_else(|| panic!("{status:?} lost"));
            assert_eq!(back.status, status);
            assert_eq!(back.event_id, event.event_id);
            assert_eq!(
                (back.usage, back.charged, back.client_request_id),
                (event.usage, event.charged, event.client_request_id)
            );
        }
    }
}
