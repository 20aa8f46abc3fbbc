use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// A reprice's difference for one ledger row, booked as an adjustment of an
/// open month's invoice: the row's charge at the new prices less what it was
/// billed so far (its charge and earlier adjustments), as a debit or a credit.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "reprice_adjustments")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The run's idempotency key: unique with `usage_id`.
    pub run_key: String,
    /// The `usage.id` adjusted.
    pub usage_id: i64,
    /// The price version repriced at: the adjustment's reason.
    pub price_version: String,
    /// `YYYY-MM` of the billing time zone whose invoice shows it.
    pub month: String,
    pub tenant_id: String,
    pub key_id: String,
    pub provider: String,
    pub model: String,
    pub feature: String,
    /// One of the two is zero.
    pub debit_nanos: i64,
    pub credit_nanos: i64,
    pub created_at_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
