use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// One line of a provider's usage or cost export: a time bucket's usage or
/// cost for one grouping (API key, model, line item …). Importing a bucket
/// again replaces its lines.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "bill_lines")]
pub struct Model {
    /// The configured provider the export was imported for.
    #[sea_orm(primary_key, auto_increment = false)]
    pub provider: String,
    /// `openai_usage`, `openai_costs`, `anthropic_usage` or `anthropic_costs`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub report: String,
    /// The bucket's start, Unix ms (UTC, as the provider cut it).
    #[sea_orm(primary_key, auto_increment = false)]
    pub start_ms: i64,
    pub end_ms: i64,
    /// The provider's id of the API key (`""`: the export did not group by key).
    #[sea_orm(primary_key, auto_increment = false)]
    pub key_id: String,
    /// `""`: the line names no model.
    #[sea_orm(primary_key, auto_increment = false)]
    pub model: String,
    /// The rest of the line's grouping (line item, project, workspace, tier).
    #[sea_orm(primary_key, auto_increment = false)]
    pub item: String,
    pub requests: i64,
    /// All input tokens, cached and cache-write included.
    pub input_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    pub output_tokens: i64,
    /// Cost lines' amount in nano-units of the billing currency (negative
    /// for a credit); `None` on usage lines.
    pub amount_nanos: Option<i64>,
    pub imported_at_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
