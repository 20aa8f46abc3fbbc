use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// A tenant's invoice of a closed month, as it was when the month closed.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "closed_invoices")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    /// `YYYY-MM`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub month: String,
    /// The invoice's lines as JSON.
    pub lines: String,
    pub total_nanos: i64,
    pub rows: i64,
    /// The ledger's own sum of the same rows, read apart when it closed.
    pub ledger_nanos: i64,
    pub ledger_rows: i64,
    /// The credits among the ledger's adjustments of the month.
    pub ledger_credit_nanos: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
