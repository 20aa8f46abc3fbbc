use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// A response of the Responses door kept for later requests that name it
/// (`previous_response_id`) and for `GET /v1/responses/{id}`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "stored_responses")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// Every input item it was answered on (earlier turns included), a JSON array.
    pub input: String,
    /// The response object as answered.
    pub response: String,
    /// `input` and `response` together: what counts against the tenant's limit.
    pub bytes: i64,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
