use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// A closed month of the billing time zone: its invoices are final.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "period_closes")]
pub struct Model {
    /// `YYYY-MM`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub month: String,
    /// The largest `usage.id` when the month closed: a row after it stamped
    /// in a closed month is an adjustment of the first month open then.
    pub watermark: i64,
    pub closed_at_ms: i64,
    pub closed_by: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
