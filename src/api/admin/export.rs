//! `/admin/v1/export/sinks`: the export sinks' cursors and outboxes.

use actix_web::{HttpResponse, web};

use crate::api::extract::AdminAuth;
use crate::error::ApiError;
use crate::state::Gateway;

/// `GET /admin/v1/export/sinks`: each configured sink's lease holder,
/// cursor, delivered totals and pending rows.
pub async fn sinks(_admin: AdminAuth, gw: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    let sinks = crate::export::status::sinks(gw.directory.db(), &gw.config.export)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "sinks": sinks })))
}
