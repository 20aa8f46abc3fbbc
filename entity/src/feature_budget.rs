use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// A budget (monthly unless `period` says otherwise) for one feature (`X-Tollgate-Feature`) inside one tenant.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "feature_budgets")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub feature: String,
    pub monthly_budget_nanos: i64,
    /// What the budget runs over: `day`, `week`, `month` or `lifetime` (`None`: a month).
    pub period: Option<String>,
    pub updated_at_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
