use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// Detail rows past `ledger.retention_days`, summed by day and by every
/// dimension a report groups by: what stays of them once they are deleted.
/// A UTC day and a billing-calendar day cut each other, so a row's group is
/// the piece of both it fell in (`span_start_ms`): reports by UTC day and
/// invoices by local month both stay exact.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "usage_daily")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    /// UTC `YYYY-MM-DD`, as the rows' `day` (its month: the partition they came from).
    #[sea_orm(primary_key, auto_increment = false)]
    pub day: String,
    /// Where the rows' UTC day and billing day overlap begins, Unix ms.
    #[sea_orm(primary_key, auto_increment = false)]
    pub span_start_ms: i64,
    #[sea_orm(primary_key, auto_increment = false)]
    pub key_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub feature: String,
    /// `""` for rows that named no end user.
    #[sea_orm(primary_key, auto_increment = false)]
    pub end_user: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub api: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub route: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub provider: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub model: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub status: String,
    /// `""`: charged at cost.
    #[sea_orm(primary_key, auto_increment = false)]
    pub plan: String,
    /// Detail rows summed here.
    pub rows: i64,
    /// Requests whose last row is among them (a request counts once, where it ended).
    pub requests: i64,
    pub prompt_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    pub completion_tokens: i64,
    pub reserved_nanos: i64,
    pub charged_nanos: i64,
    /// At the providers' prices (rows before plans: their charge).
    pub cost_nanos: i64,
    /// A month being rolled up on PostgreSQL: not counted until its
    /// partition is dropped, in the same transaction.
    pub pending: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
