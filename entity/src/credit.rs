use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// One grant of prepaid credit (a top-up), never changed once written: a
/// tenant's (or a key's) balance is what its grants valid now have left.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "credits")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub tenant_id: String,
    /// Empty for the tenant's own balance.
    pub key_id: String,
    pub amount_nanos: i64,
    /// Unique per tenant: a retried top-up finds the first one.
    pub idempotency_key: String,
    /// Who added it, as the caller of the admin API said.
    pub added_by: String,
    pub reason: String,
    pub created_at_ms: i64,
    /// `paid` or `promotional`.
    pub kind: String,
    /// Lower is drawn first.
    pub priority: i32,
    /// Drawn from this instant on (`None`: from when it was written).
    pub starts_at_ms: Option<i64>,
    /// Drawn until this instant; then what is left is breakage (`None`: never).
    pub expires_at_ms: Option<i64>,
    /// Past its expiry by the longest a call lives: no call can draw it any
    /// more, and what it left is breakage.
    pub closes_at_ms: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
