//! What the journal stores, as JSON inside a frame. The wire types are plain
//! data kept apart from the in-memory ones, so a refactor of `UsageEvent`
//! cannot silently change how existing journals read back. Records are read
//! with owned strings and written with borrowed ones (`Written`): copying a
//! row's dozen strings for every record cost more than encoding them.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::ids::{EventId, KeyId, RequestId, TenantId};
use crate::ledger::{Api, AttemptStatus, CacheSource, UsageEvent, UsageKind};
use crate::money::Nanos;
use crate::pricing::Usage;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    bound(deserialize = "S: Deserialize<'de>")
)]
pub enum Record<S = String> {
    /// An attempt about to be sent upstream (its intent). Without a later
    /// `settle` of the same event id it becomes its `orphan` row on replay.
    /// Its wire name predates the word, and journals on disk keep it.
    #[serde(rename = "reserve")]
    Intent {
        deadline_ms: u64,
        orphan: EventRecord<S>,
    },
    /// An attempt's own row, journaled just before its charge is committed in
    /// the shared quota store. It supersedes the attempt's intent: without a
    /// later `settle` replay writes this row, so the ledger charges what the
    /// store may have committed, not the reserved amount.
    Settling { event: EventRecord<S> },
    /// A ledger row, as handed to the ledger.
    Settle { event: EventRecord<S> },
    /// Every settle up to this sequence number is in the database.
    Checkpoint { upto: u64 },
}

/// A record as written: the event's strings borrowed.
pub type Written<'a> = Record<Cow<'a, str>>;

/// `UsageEvent` on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de>"))]
pub struct EventRecord<S = String> {
    pub event_id: S,
    pub request_id: S,
    pub client_request_id: Option<S>,
    pub trace_id: Option<S>,
    pub tenant: S,
    pub key: S,
    pub feature: S,
    /// Absent in records written before end users had budgets, and when none was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_user: Option<S>,
    /// Absent in records written before sessions, and when none was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<S>,
    /// Absent in records written before doors other than chat existed.
    #[serde(default)]
    pub api: Api,
    pub route: S,
    pub provider: S,
    pub model: S,
    pub attempt: u32,
    pub status: S,
    pub upstream_status: Option<u16>,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
    pub completion_tokens: u64,
    /// Absent in records written before searches were priced: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub web_searches: u64,
    pub usage_kind: S,
    pub reserved_nanos: u64,
    pub charged_nanos: u64,
    /// Absent in records written before plans, and where it is the charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_nanos: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<S>,
    pub price_version: S,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    pub error: Option<S>,
    /// Absent in records written before cache hits named their source row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_source: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_similarity: Option<u32>,
    pub created_at_ms: u64,
}

impl<'a> From<&'a UsageEvent> for EventRecord<Cow<'a, str>> {
    fn from(e: &'a UsageEvent) -> Self {
        let text = |s: &'a str| Cow::Borrowed(s);
        let optional = |s: &'a Option<String>| s.as_deref().map(Cow::Borrowed);
        EventRecord {
            event_id: Cow::Owned(e.event_id.to_string()),
            request_id: text(e.request_id.as_str()),
            client_request_id: optional(&e.client_request_id),
            trace_id: optional(&e.trace_id),
            tenant: text(e.tenant.as_str()),
            key: text(e.key.as_str()),
            feature: text(&e.feature),
            end_user: optional(&e.end_user),
            session: optional(&e.session),
            api: e.api,
            route: text(&e.route),
            provider: text(&e.provider),
            model: text(&e.model),
            attempt: e.attempt,
            status: text(e.status.as_str()),
            upstream_status: e.upstream_status,
            prompt_tokens: e.usage.prompt_tokens,
            cached_tokens: e.usage.cached_tokens,
            cache_write_tokens: e.usage.cache_write_tokens,
            completion_tokens: e.usage.completion_tokens,
            web_searches: e.usage.web_searches,
            usage_kind: text(e.usage_kind.as_str()),
            reserved_nanos: e.reserved.get(),
            charged_nanos: e.charged.get(),
            cost_nanos: e.cost.map(Nanos::get),
            plan: optional(&e.plan),
            price_version: text(&e.price_version),
            latency_ms: e.latency_ms,
            ttft_ms: e.ttft_ms,
            error: optional(&e.error),
            cache_source: e.cache.as_ref().map(|c| text(&c.event_id)),
            cache_similarity: e.cache.as_ref().and_then(|c| c.similarity),
            created_at_ms: e.created_at_ms,
        }
    }
}

#[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's signature")]
fn is_zero(n: &u64) -> bool {
    *n == 0
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
            session: self.session.clone(),
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
                web_searches: self.web_searches,
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
            let written: EventRecord<Cow<'_, str>> = EventRecord::from(&event);
            let bytes = serde_json::to_vec(&written).unwrap();
            let back: EventRecord = serde_json::from_slice(&bytes).unwrap();
            // Read back and written again, a record is the same bytes.
            assert_eq!(serde_json::to_vec(&back).unwrap(), bytes);
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
