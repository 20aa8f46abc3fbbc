//! API key resources.

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use super::now_ms;
use crate::admin::keys;
use crate::api::extract::AdminAuth;
use crate::error::ApiError;
use crate::state::Gateway;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    pub name: Option<String>,
}

pub async fn issue_key(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
    body: Option<web::Json<NewKey>>,
) -> Result<HttpResponse, ApiError> {
    let name = body.and_then(|b| b.into_inner().name);
    let pepper = gw.directory.pepper().clone();
    let (record, view) = keys::issue(gw.directory.db(), &pepper, &id, name, now_ms(&gw)).await?;
    gw.directory.put_key(record);
    Ok(HttpResponse::Created().json(view))
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
