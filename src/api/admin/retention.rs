//! `/admin/v1/ledger/rollup`: the roll-up of rows past `ledger.retention_days`, now.

use actix_web::{HttpResponse, web};

use crate::api::extract::AdminAuth;
use crate::error::{ApiError, ErrorCode};
use crate::ledger::retention::RetentionError;
use crate::state::Gateway;

pub async fn roll_up(_admin: AdminAuth, gw: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    match gw.roll_up_now().await {
        Ok(done) => Ok(HttpResponse::Ok().json(done)),
        Err(RetentionError::Busy) => Err(ApiError::new(
            ErrorCode::Conflict,
            "a roll-up is already running; try again when it ends",
        )),
        Err(RetentionError::Storage(e)) => Err(ApiError::internal(format!(
            "the roll-up stopped at a database error (what it committed stays): {e}"
        ))),
    }
}
