//! API key resources.

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use super::now_ms;
use crate::admin::keys::{self, NewKey};
use crate::api::extract::AdminAuth;
use crate::error::ApiError;
use crate::state::Gateway;

pub async fn issue_key(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
    body: Option<web::Json<NewKey>>,
) -> Result<HttpResponse, ApiError> {
    let new = body.map(web::Json::into_inner).unwrap_or_default();
    let pepper = gw.directory.pepper().clone();
    let (record, view) = keys::issue(gw.directory.db(), &pepper, &id, new, now_ms(&gw)).await?;
    gw.directory.put_key(record);
    Ok(HttpResponse::Created().json(view))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyPatch {
    /// A decimal budget, or `null` to remove the key's own budget.
    monthly_budget: Option<String>,
}

pub async fn update_key(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
    body: web::Json<KeyPatch>,
) -> Result<HttpResponse, ApiError> {
    let budget = body.into_inner().monthly_budget;
    let view = keys::set_budget(gw.directory.db(), &id, budget.as_deref(), now_ms(&gw)).await?;
    // The cached key is re-read with its new budget on its next use.
    gw.directory.evict_key(&crate::ids::KeyId::new(id.as_str()));
    Ok(HttpResponse::Ok().json(view))
}

pub async fn list_keys(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let keys = keys::list(gw.directory.db(), &id).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "data": keys })))
}

pub async fn revoke_key(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let key_id = keys::revoke(gw.directory.db(), &id, now_ms(&gw)).await?;
    gw.directory.evict_key(&key_id);
    Ok(HttpResponse::Ok().json(serde_json::json!({ "id": key_id, "revoked": true })))
}
