//! `GET` and `DELETE /v1/responses/{id}` and `GET …/input_items`: a tenant's
//! stored responses, by the key that stored them or any other key of the
//! same tenant; another tenant's are not found.

use actix_web::{HttpResponse, web};

use super::extract::TenantAuth;
use crate::error::ApiError;
use crate::state::Gateway;

pub async fn get_response(
    gw: web::Data<Gateway>,
    auth: TenantAuth,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let response = gw
        .responses
        .response(auth.tenant.id.as_str(), &id, gw.clock.now_ms())
        .await?;
    Ok(HttpResponse::Ok().json(response))
}

pub async fn input_items(
    gw: web::Data<Gateway>,
    auth: TenantAuth,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let items = gw
        .responses
        .input_items(auth.tenant.id.as_str(), &id, gw.clock.now_ms())
        .await?;
    Ok(HttpResponse::Ok().json(items))
}

pub async fn delete_response(
    gw: web::Data<Gateway>,
    auth: TenantAuth,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let deleted = gw
        .responses
        .delete(auth.tenant.id.as_str(), &id, gw.clock.now_ms())
        .await?;
    Ok(HttpResponse::Ok().json(deleted))
}
