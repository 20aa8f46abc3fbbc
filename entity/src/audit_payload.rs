use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// One call of a tenant that opted in to audit: what it sent and what it
/// was answered, keys redacted, kept `audit.retention_days`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "audit_payloads")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The ledger rows' `request_id`.
    pub request_id: String,
    pub tenant_id: String,
    pub key_id: String,
    /// The door: `chat`, `responses`, `messages` or `embeddings`.
    pub api: String,
    /// The HTTP status answered.
    pub status: i32,
    /// `hit` when a cache answered.
    pub cache: Option<String>,
    pub request_body: String,
    /// A stream's events as relayed.
    pub response_body: String,
    /// A body past `audit.max_body_bytes` was cut there.
    pub truncated: bool,
    pub created_at_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
