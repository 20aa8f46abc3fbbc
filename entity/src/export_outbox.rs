use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// A ledger row waiting to be delivered to one export sink: a copy of what
/// the sink is sent, taken in the transaction that wrote the ledger row, so
/// every retry sends the same payload.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "export_outbox")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub sink: String,
    /// The ledger row's id: what the idempotency key is made of.
    pub usage_id: i64,
    pub event_id: String,
    pub tenant_id: String,
    pub key_id: String,
    pub feature: String,
    pub end_user: Option<String>,
    pub model: String,
    pub provider: String,
    pub prompt_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    pub completion_tokens: i64,
    pub web_searches: i64,
    pub charged_nanos: i64,
    pub created_at_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
