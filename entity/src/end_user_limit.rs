use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// An admin's override of the tier's end-user template for one end user of
/// one tenant: any of its limits, or a block. `None` keeps the template's.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "end_user_limits")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub end_user: String,
    pub budget_nanos: Option<i64>,
    /// `day`, `week`, `month` or `lifetime`.
    pub period: Option<String>,
    pub rpm: Option<i32>,
    pub blocked: bool,
    pub updated_at_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
