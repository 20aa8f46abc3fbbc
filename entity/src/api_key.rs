use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "api_keys")]
pub struct Model {
    /// The public key id of `tg_<id>_<secret>`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    pub name: Option<String>,
    /// Hex HMAC-SHA256 of the secret under the deployment's pepper; never the secret.
    #[serde(skip_serializing)]
    pub secret_hash: String,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
    /// The key's own monthly cap inside its tenant's; `None`: only the tenant's applies.
    pub monthly_budget_nanos: Option<i64>,
    /// When the key stops working (ms since the epoch); `None`: never.
    pub expires_at_ms: Option<i64>,
    /// The key spends its prepaid balance (see `credit`) instead of a monthly budget.
    pub on_credits: bool,
    /// What `monthly_budget_nanos` runs over: `day`, `week`, `month` or `lifetime` (`None`: a month).
    pub budget_period: Option<String>,
    /// The key's own cap on calls in flight at once; `None`: only the tenant's applies.
    pub max_in_flight: Option<i32>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
