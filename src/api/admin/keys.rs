//! API key resources.

use actix_web::{HttpResponse, web};

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

pub async fn update_key(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
    body: web::Json<keys::KeyChange>,
) -> Result<HttpResponse, ApiError> {
    let view = keys::update(gw.directory.db(), &id, body.into_inner(), now_ms(&gw)).await?;
    // The cached key is re-read with its new budget and expiry on its next use.
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
