use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// What an expired grant left unspent, booked once per grant.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "credit_breakage")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    #[sea_orm(unique)]
    pub credit_id: i64,
    pub tenant_id: String,
    /// Empty for the tenant's own balance.
    pub key_id: String,
    pub amount_nanos: i64,
    pub booked_at_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
