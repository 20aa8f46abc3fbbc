//! Stored responses of the Responses door: what `store` (true unless the
//! caller says false) keeps, so that a later request may name an earlier
//! response (`previous_response_id`) or one of its items (`item_reference`),
//! and `GET`/`DELETE /v1/responses/{id}` find it. The gateway keeps them in
//! its own database, one tenant's apart from every other's, for
//! `responses.retention_days` and up to `responses.max_bytes_per_tenant`
//! (the oldest go first); a provider is never asked to store anything.
//!
//! A request that names stored state is expanded before anything else
//! reads it (`expand`): the earlier input and output take the place of the
//! reference, so the field table, the hold and the provider all see the
//! whole conversation; a 40-turn conversation by reference is held for all
//! 40 turns.

mod expand;
mod stream;
mod writer;

use sea_orm::{ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

pub use crate::config::StoreConfig;
pub use expand::Expanded;
pub use stream::relay;

use crate::error::{ApiError, ErrorCode};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// The stored responses, in the gateway's database.
#[derive(Clone)]
pub struct ResponseStore {
    db: DatabaseConnection,
    config: StoreConfig,
    writer: mpsc::Sender<writer::Job>,
}

/// What saving a response needs: whose it is, the input it answered.
#[derive(Debug, Clone)]
pub struct Keep {
    pub tenant: String,
    /// Every input item, earlier turns' included.
    pub input: Vec<Value>,
    pub now_ms: u64,
}

impl ResponseStore {
    /// Starts its writer (`writer.rs`): call within the runtime.
    pub fn new(db: DatabaseConnection, config: StoreConfig) -> ResponseStore {
        let writer = writer::start(db.clone(), config.max_bytes_per_tenant);
        ResponseStore { db, config, writer }
    }

    /// The stored response `id` of `tenant` (its input and response object),
    /// if it is there and not past its retention.
    async fn load(
        &self,
        tenant: &str,
        id: &str,
        now_ms: u64,
    ) -> Result<Option<(Vec<Value>, Value)>, ApiError> {
        use entity::stored_response::{Column, Entity};
        let row = Entity::find()
            .filter(Column::TenantId.eq(tenant))
            .filter(Column::Id.eq(id))
            .filter(Column::ExpiresAtMs.gt(db_ms(now_ms)))
            .one(&self.db)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(row.map(|row| {
            let input = serde_json::from_str(&row.input).unwrap_or_default();
            let response = serde_json::from_str(&row.response).unwrap_or(Value::Null);
            (input, response)
        }))
    }

    /// Items of `tenant`'s stored responses by id, in the order asked; an id
    /// not there is `None`.
    async fn items(&self, tenant: &str, ids: &[String]) -> Result<Vec<Option<Value>>, ApiError> {
        use entity::stored_response_item::{Column, Entity};
        let rows = Entity::find()
            .filter(Column::TenantId.eq(tenant))
            .filter(Column::Id.is_in(ids.iter().cloned()))
            .all(&self.db)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(ids
            .iter()
            .map(|id| {
                rows.iter()
                    .find(|row| &row.id == id)
                    .and_then(|row| serde_json::from_str(&row.item).ok())
            })
            .collect())
    }

    /// Keeps `response` (its object as answered) with the input it answered,
    /// once its batch is written; a response larger than the tenant's whole
    /// allowance is not kept.
    pub async fn save(&self, keep: &Keep, response: &Value) {
        let Some(id) = response["id"].as_str() else {
            return;
        };
        let input = Value::Array(keep.input.clone()).to_string();
        let object = response.to_string();
        let bytes = u64::try_from(input.len() + object.len()).unwrap_or(u64::MAX);
        if bytes > self.config.max_bytes_per_tenant {
            tracing::warn!(tenant = %keep.tenant, response = id, bytes, "A response larger than the tenant's whole store allowance was not stored.");
            return;
        }
        let items = keep
            .input
            .iter()
            .chain(response["output"].as_array().into_iter().flatten())
            .filter_map(|item| {
                Some(entity::stored_response_item::ActiveModel {
                    tenant_id: Set(keep.tenant.clone()),
                    id: Set(item["id"].as_str()?.to_owned()),
                    response_id: Set(id.to_owned()),
                    item: Set(item.to_string()),
                })
            })
            .collect();
        let row = entity::stored_response::ActiveModel {
            tenant_id: Set(keep.tenant.clone()),
            id: Set(id.to_owned()),
            input: Set(input),
            response: Set(object),
            bytes: Set(i64::try_from(bytes).unwrap_or(i64::MAX)),
            created_at_ms: Set(db_ms(keep.now_ms)),
            expires_at_ms: Set(db_ms(keep.now_ms.saturating_add(self.retention_ms()))),
        };
        let (done, written) = oneshot::channel();
        let job = writer::Job {
            tenant: keep.tenant.clone(),
            bytes,
            now_ms: keep.now_ms,
            row,
            items,
            done,
        };
        if self.writer.send(job).await.is_ok() {
            let _ = written.await;
        }
    }

    /// `GET /v1/responses/{id}`: the response object.
    pub async fn response(&self, tenant: &str, id: &str, now_ms: u64) -> Result<Value, ApiError> {
        match self.load(tenant, id, now_ms).await? {
            Some((_, response)) => Ok(response),
            None => Err(not_found(id)),
        }
    }

    /// `GET /v1/responses/{id}/input_items`: its input, as a list.
    pub async fn input_items(
        &self,
        tenant: &str,
        id: &str,
        now_ms: u64,
    ) -> Result<Value, ApiError> {
        let Some((input, _)) = self.load(tenant, id, now_ms).await? else {
            return Err(not_found(id));
        };
        Ok(json!({
            "object": "list",
            "first_id": input.first().and_then(|i| i.get("id")).cloned().unwrap_or(Value::Null),
            "last_id": input.last().and_then(|i| i.get("id")).cloned().unwrap_or(Value::Null),
            "has_more": false,
            "data": input,
        }))
    }

    /// `DELETE /v1/responses/{id}`.
    pub async fn delete(&self, tenant: &str, id: &str, now_ms: u64) -> Result<Value, ApiError> {
        if self.load(tenant, id, now_ms).await?.is_none() {
            return Err(not_found(id));
        }
        forget(&self.db, tenant, id)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(json!({"id": id, "object": "response", "deleted": true}))
    }

    fn retention_ms(&self) -> u64 {
        u64::from(self.config.retention_days).saturating_mul(DAY_MS)
    }
}

/// Deletes one stored response and the items it brought.
pub(super) async fn forget<C: sea_orm::ConnectionTrait>(
    db: &C,
    tenant: &str,
    id: &str,
) -> Result<(), sea_orm::DbErr> {
    use entity::{stored_response, stored_response_item};
    stored_response_item::Entity::delete_many()
        .filter(stored_response_item::Column::TenantId.eq(tenant))
        .filter(stored_response_item::Column::ResponseId.eq(id))
        .exec(db)
        .await?;
    stored_response::Entity::delete_many()
        .filter(stored_response::Column::TenantId.eq(tenant))
        .filter(stored_response::Column::Id.eq(id))
        .exec(db)
        .await?;
    Ok(())
}

fn db_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("Response with id '{id}' not found."),
    )
}

fn unavailable(error: &sea_orm::DbErr) -> ApiError {
    tracing::warn!(error = %error, "The stored responses could not be read.");
    ApiError::new(
        ErrorCode::Overloaded,
        "stored responses are unavailable; try again shortly",
    )
    .with_retry_after(1)
}
