use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// Rows and charge a sink acknowledged, by the billing month of the rows.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "export_delivered")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub sink: String,
    /// `YYYY-MM` in the billing time zone.
    #[sea_orm(primary_key, auto_increment = false)]
    pub month: String,
    pub rows: i64,
    pub nanos: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
