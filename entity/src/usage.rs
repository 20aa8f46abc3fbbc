use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// One upstream attempt (or a cache hit, or an orphaned reservation).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "usage")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// Unique: replaying an event never inserts it twice.
    #[sea_orm(unique)]
    pub event_id: String,
    pub request_id: String,
    pub client_request_id: Option<String>,
    pub trace_id: Option<String>,
    pub tenant_id: String,
    pub key_id: String,
    pub feature: String,
    /// The end user charged, if the request named one.
    pub end_user: Option<String>,
    /// The agent run the call belonged to (`X-Tollgate-Session` or the agent's own id).
    pub session: Option<String>,
    /// The door: `chat`, `responses`, `messages` or `embeddings`.
    pub api: String,
    pub route: String,
    pub provider: String,
    pub model: String,
    pub attempt: i32,
    /// `ok`, `fallback_ok`, `upstream_error`, `client_error`, `local_error`, `orphaned`, …
    pub status: String,
    pub upstream_status: Option<i32>,
    pub prompt_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    pub completion_tokens: i64,
    /// `reported` (from the upstream), `estimated`, or `none`.
    pub usage_kind: String,
    pub reserved_nanos: i64,
    pub charged_nanos: i64,
    pub price_version: String,
    pub latency_ms: i64,
    pub ttft_ms: Option<i64>,
    pub error: Option<String>,
    /// A cache hit's: the event id of the row whose answer it reused.
    pub cache_source: Option<String>,
    /// A semantic cache hit's: the question's similarity, in millionths.
    pub cache_similarity: Option<i32>,
    pub created_at_ms: i64,
    /// UTC `YYYY-MM-DD` of `created_at_ms`.
    pub day: String,
    /// UTC `YYYY-MM`: the budget period.
    pub period: String,
    /// What the call cost at the providers' prices; `charged_nanos` is what
    /// the tenant was charged (`None`, rows before plans: the same).
    pub cost_nanos: Option<i64>,
    /// The plan the tenant was charged under (`None`: at cost).
    pub plan: Option<String>,
    /// Searches a provider-run search tool made, each charged its fee.
    pub web_searches: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
