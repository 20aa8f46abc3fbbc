//! `/admin/v1/tenants/{id}/end-users/{user}`: an end user's override and status.

use actix_web::{HttpResponse, web};

use super::now_ms;
use crate::admin::end_users::{self, EndUserChange};
use crate::admin::tenants;
use crate::api::extract::AdminAuth;
use crate::error::{ApiError, ErrorCode};
use crate::state::Gateway;
use crate::tenant::QuotaError;
use crate::tenant::end_users::EndUserHold;

pub async fn get_end_user(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (id, user) = path.into_inner();
    end_users::check_id(&user)?;
    let record = gw
        .directory
        .put_tenant(tenants::get(gw.directory.db(), &id).await?);
    let Some(limits) = end_users::limits_of(&gw.live().config, &record, &user) else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!(
                "tenant `{id}` has no end-user limits: its tier has no template and `{user}` no override"
            ),
        ));
    };
    let handle = gw
        .tenants
        .handle(&record)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let hold = EndUserHold {
        id: user.clone(),
        limits: limits.clone(),
    };
    let status = handle.end_user(hold).await.map_err(|e| match e {
        QuotaError::StoreDown | QuotaError::LedgerUnreadable | QuotaError::Unavailable => {
            ApiError::new(ErrorCode::QuotaUnavailable, e.to_string()).with_retry_after(1)
        }
        other => ApiError::internal(other.to_string()),
    })?;
    Ok(HttpResponse::Ok().json(end_users::view(&record, &user, &limits, status)))
}

pub async fn put_end_user(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    path: web::Path<(String, String)>,
    body: web::Json<EndUserChange>,
) -> Result<HttpResponse, ApiError> {
    apply(&gw, path.into_inner(), Some(body.into_inner())).await
}

pub async fn delete_end_user(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    apply(&gw, path.into_inner(), None).await
}

async fn apply(
    gw: &Gateway,
    (id, user): (String, String),
    change: Option<EndUserChange>,
) -> Result<HttpResponse, ApiError> {
    let record = end_users::set(gw.directory.db(), &id, &user, change, now_ms(gw)).await?;
    let record = gw.directory.put_tenant(record);
    gw.tenants.update(&record);
    let set = record.end_users.get(&user).cloned();
    Ok(HttpResponse::Ok().json(serde_json::json!({"end_user": user, "override": set})))
}
