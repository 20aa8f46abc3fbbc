//! `/admin/v1/periods`: months that close.

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use crate::admin::periods;
use crate::api::extract::AdminAuth;
use crate::error::ApiError;
use crate::state::Gateway;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloseBody {
    /// Who closed it, kept beside the close.
    by: Option<String>,
}

/// `POST /admin/v1/periods/{month}/close`: closes the month and every
/// earlier one still open; their invoices are final from then on.
pub async fn close(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    month: web::Path<String>,
    body: Option<web::Json<CloseBody>>,
) -> Result<HttpResponse, ApiError> {
    let body = body.map(web::Json::into_inner).unwrap_or_default();
    let closing = periods::close(
        gw.directory.db(),
        &gw.config.calendar,
        &month,
        gw.clock.now_ms(),
        body.by.as_deref(),
    )
    .await?;
    Ok(HttpResponse::Ok().json(closing))
}

/// `GET /admin/v1/periods`: the closed months, oldest first.
pub async fn list(_admin: AdminAuth, gw: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    let closed = periods::list(gw.directory.db()).await?;
    let through = closed.last().map(|c| c.month.clone());
    Ok(HttpResponse::Ok().json(serde_json::json!({"closed_through": through, "closed": closed})))
}
