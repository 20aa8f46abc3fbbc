use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// A running total of the `usage` rows of one tenant in one period and scope,
/// kept in the same transaction as the rows: what a tenant's quotas start from,
/// read without summing a month of rows.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "usage_totals")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    /// `tenant`, `key` or `feature` (over a month), or `day`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub kind: String,
    /// The UTC month (`YYYY-MM`), or the UTC day (`YYYY-MM-DD`) for `day`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub period: String,
    /// The key id or feature; empty for `tenant` and `day`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub scope: String,
    pub charged_nanos: i64,
    /// Prompt plus completion tokens.
    pub tokens: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
