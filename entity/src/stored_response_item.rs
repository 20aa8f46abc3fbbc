use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// An item of a stored response (input or output) by its id, for an
/// `item_reference` that names it.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel, Serialize, Deserialize)]
#[sea_orm(table_name = "stored_response_items")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub response_id: String,
    /// The item, JSON.
    pub item: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
