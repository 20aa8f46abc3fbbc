use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// An export sink's lease (one replica sends at a time) and its cursor.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "export_sinks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub sink: String,
    /// The replica holding the lease, until `lease_until_ms`.
    pub owner: Option<String>,
    pub lease_until_ms: i64,
    /// The largest ledger row id delivered.
    pub delivered_through: i64,
    /// Rows and charge delivered since the sink was first configured.
    pub rows: i64,
    pub nanos: i64,
    /// When rows were last booked, Unix ms (0: never).
    pub delivered_at_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
