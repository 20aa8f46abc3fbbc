//! One ledger event: an upstream attempt, a cache hit or an orphaned reservation.

use crate::ids::{EventId, KeyId, RequestId, TenantId};
use crate::money::Nanos;
use crate::period::Date;
use crate::pricing::Usage;

/// What became of one attempt; the wire value is the `usage.status` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptStatus {
    /// Served by the route's first target.
    Ok,
    /// Served by a later target after an earlier one failed.
    FallbackOk,
    /// The upstream failed (timeout, connection, 5xx, 429); the gateway moved on.
    UpstreamError,
    /// The upstream refused the request itself (4xx); passed back to the caller.
    ClientError,
    /// The request never left: the provider's settings are wrong.
    LocalError,
    /// A reservation that expired unsettled, committed at its reserved amount.
    Orphaned,
    /// A stream the upstream cut (or garbled) after it began: billed for what was streamed.
    Partial,
    /// A stream whose caller disconnected before its end.
    ClientCancelled,
    /// Answered from the response cache: no upstream call, no charge.
    CacheHit,
    /// Every target failed and the route's degraded answer was served: no charge.
    Degraded,
}

impl AttemptStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptStatus::Ok => "ok",
            AttemptStatus::FallbackOk => "fallback_ok",
            AttemptStatus::UpstreamError => "upstream_error",
            AttemptStatus::ClientError => "client_error",
            AttemptStatus::LocalError => "local_error",
            AttemptStatus::Orphaned => "orphaned",
            AttemptStatus::Partial => "partial",
            AttemptStatus::ClientCancelled => "client_cancelled",
            AttemptStatus::CacheHit => "cache_hit",
            AttemptStatus::Degraded => "degraded",
        }
    }

    /// Every status, so parsing cannot forget one (a forgotten status made
    /// replay skip its journaled rows).
    pub const ALL: [AttemptStatus; 10] = [
        AttemptStatus::Ok,
        AttemptStatus::FallbackOk,
        AttemptStatus::UpstreamError,
        AttemptStatus::ClientError,
        AttemptStatus::LocalError,
        AttemptStatus::Orphaned,
        AttemptStatus::Partial,
        AttemptStatus::ClientCancelled,
        AttemptStatus::CacheHit,
        AttemptStatus::Degraded,
    ];

    pub fn parse(text: &str) -> Option<AttemptStatus> {
        AttemptStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// The door a request came in by: the `usage.api` column and a report key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST /v1/chat/completions`.
    #[default]
    Chat,
    /// `POST /v1/responses`.
    Responses,
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/embeddings`.
    Embeddings,
}

impl Api {
    pub const ALL: [Api; 4] = [Api::Chat, Api::Responses, Api::Messages, Api::Embeddings];

    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Responses => "responses",
            Api::Messages => "messages",
            Api::Embeddings => "embeddings",
        }
    }

    pub fn parse(text: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.as_str() == text)
    }
}

/// Where a row's token counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageKind {
    Reported,
    Estimated,
    None,
    /// The request reached the provider and ended without a usage report: it
    /// may have been billed, so it is charged its hold and awaits reconciliation.
    Unknown,
}

impl UsageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            UsageKind::Reported => "reported",
            UsageKind::Estimated => "estimated",
            UsageKind::None => "none",
            UsageKind::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<UsageKind> {
        [
            UsageKind::Reported,
            UsageKind::Estimated,
            UsageKind::None,
            UsageKind::Unknown,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

#[derive(Debug, Clone)]
pub struct UsageEvent {
    pub event_id: EventId,
    pub request_id: RequestId,
    pub client_request_id: Option<String>,
    pub trace_id: Option<String>,
    pub tenant: TenantId,
    pub key: KeyId,
    pub feature: String,
    /// The end user charged, if the request named one.
    pub end_user: Option<String>,
    /// The agent run (session) the call belonged to, if it named one.
    pub session: Option<String>,
    /// The door the request came in by.
    pub api: Api,
    pub route: String,
    pub provider: String,
    pub model: String,
    pub attempt: u32,
    pub status: AttemptStatus,
    pub upstream_status: Option<u16>,
    pub usage: Usage,
    pub usage_kind: UsageKind,
    pub reserved: Nanos,
    /// What the tenant is charged: what budgets and credits count.
    pub charged: Nanos,
    /// What the call cost at the providers' prices; `None`: the charge
    /// (no plan, or a charge made without the provider's usage).
    pub cost: Option<Nanos>,
    /// The tenant's plan (`None`: charged the cost).
    pub plan: Option<String>,
    pub price_version: String,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    pub error: Option<String>,
    /// A cache hit's source row and, for a semantic hit, its similarity.
    pub cache: Option<CacheSource>,
    pub created_at_ms: u64,
}

/// Which row's answer a cache hit reused, and how close the question was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSource {
    pub event_id: String,
    /// Millionths of a cosine; `None` for the exact cache.
    pub similarity: Option<u32>,
}

impl UsageEvent {
    pub fn to_active_model(&self) -> entity::usage::ActiveModel {
        use sea_orm::ActiveValue::{NotSet, Set};
        let date = Date::from_unix_ms(self.created_at_ms);
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        entity::usage::ActiveModel {
            id: NotSet,
            event_id: Set(self.event_id.to_string()),
            request_id: Set(self.request_id.to_string()),
            client_request_id: Set(self.client_request_id.clone()),
            trace_id: Set(self.trace_id.clone()),
            tenant_id: Set(self.tenant.to_string()),
            key_id: Set(self.key.to_string()),
            feature: Set(self.feature.clone()),
            end_user: Set(self.end_user.clone()),
            session: Set(self.session.clone()),
            api: Set(self.api.as_str().to_owned()),
            route: Set(self.route.clone()),
            provider: Set(self.provider.clone()),
            model: Set(self.model.clone()),
            attempt: Set(i32::try_from(self.attempt).unwrap_or(i32::MAX)),
            status: Set(self.status.as_str().to_owned()),
            upstream_status: Set(self.upstream_status.map(i32::from)),
            prompt_tokens: Set(int(self.usage.prompt_tokens)),
            cached_tokens: Set(int(self.usage.cached_tokens)),
            cache_write_tokens: Set(int(self.usage.cache_write_tokens)),
            completion_tokens: Set(int(self.usage.completion_tokens)),
            web_searches: Set(int(self.usage.web_searches)),
            usage_kind: Set(self.usage_kind.as_str().to_owned()),
            reserved_nanos: Set(self.reserved.to_db()),
            charged_nanos: Set(self.charged.to_db()),
            cost_nanos: Set(Some(self.cost.unwrap_or(self.charged).to_db())),
            plan: Set(self.plan.clone()),
            price_version: Set(self.price_version.clone()),
            latency_ms: Set(int(self.latency_ms)),
            ttft_ms: Set(self.ttft_ms.map(int)),
            error: Set(self.error.clone()),
            cache_source: Set(self.cache.as_ref().map(|c| c.event_id.clone())),
            cache_similarity: Set(self
                .cache
                .as_ref()
                .and_then(|c| c.similarity)
                .map(|s| i32::try_from(s).unwrap_or(i32::MAX))),
            created_at_ms: Set(int(self.created_at_ms)),
            day: Set(date.day_key()),
            period: Set(date.month_key()),
        }
    }
}

#[cfg(test)]
impl UsageEvent {
    /// A row with every optional field given but `ttft_ms` and `error`.
    pub fn sample(status: AttemptStatus) -> UsageEvent {
        use crate::ids::{EventId, KeyId, RequestId, TenantId};
        UsageEvent {
            event_id: EventId::generate(),
            request_id: RequestId::new("r"),
            client_request_id: Some("client-1".to_owned()),
            trace_id: Some("abc".to_owned()),
            tenant: TenantId::new("t"),
            key: KeyId::new("k"),
            end_user: None,
            session: None,
            feature: "unknown".to_owned(),
            api: Api::Chat,
            route: "fast".to_owned(),
            provider: "p".to_owned(),
            model: "m".to_owned(),
            attempt: 1,
            status,
            upstream_status: Some(200),
            usage: crate::pricing::Usage {
                prompt_tokens: 10,
                completion_tokens: 3,
                ..crate::pricing::Usage::default()
            },
            usage_kind: UsageKind::Reported,
            reserved: Nanos::new(7),
            charged: Nanos::new(5),
            cost: Some(Nanos::new(4)),
            plan: Some("resale".to_owned()),
            price_version: "v".to_owned(),
            latency_ms: 1,
            ttft_ms: None,
            error: None,
            cache: None,
            created_at_ms: 1_764_460_800_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adding a status breaks this match until `ALL` is considered too.
    fn position(status: AttemptStatus) -> usize {
        match status {
            AttemptStatus::Ok => 0,
            AttemptStatus::FallbackOk => 1,
            AttemptStatus::UpstreamError => 2,
            AttemptStatus::ClientError => 3,
            AttemptStatus::LocalError => 4,
            AttemptStatus::Orphaned => 5,
            AttemptStatus::Partial => 6,
            AttemptStatus::ClientCancelled => 7,
            AttemptStatus::CacheHit => 8,
            AttemptStatus::Degraded => 9,
        }
    }

    #[test]
    fn every_status_reads_back_from_its_column_value() {
        for (i, status) in AttemptStatus::ALL.into_iter().enumerate() {
            assert_eq!(position(status), i);
            assert_eq!(AttemptStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(
            AttemptStatus::parse("degraded"),
            Some(AttemptStatus::Degraded)
        );
        assert_eq!(AttemptStatus::parse("unknown"), None);
    }
}
