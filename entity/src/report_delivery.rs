use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// A day whose daily report push one replica claimed, and how it went.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "report_deliveries")]
pub struct Model {
    /// The report's local day, `YYYY-MM-DD`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub date: String,
    /// The replica that claimed it.
    pub replica: String,
    /// `sending`, `delivered` or `failed`.
    pub status: String,
    pub attempts: i32,
    pub updated_at_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
