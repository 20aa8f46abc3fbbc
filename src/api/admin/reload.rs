//! `POST /admin/v1/reload`: the configuration file read again (as on SIGHUP).

use actix_web::{HttpResponse, web};

use crate::api::extract::AdminAuth;
use crate::error::{ApiError, ErrorCode};
use crate::reload::{self, ReloadError};
use crate::state::Gateway;

pub async fn reload_config(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    match reload::reload(&gw) {
        Ok(report) => Ok(HttpResponse::Ok().json(report)),
        Err(error) => {
            tracing::warn!(error = %error, "Configuration reload refused.");
            let code = match error {
                ReloadError::NoSource => ErrorCode::Conflict,
                ReloadError::Invalid(_) => ErrorCode::InvalidRequest,
            };
            Err(ApiError::new(code, error.to_string()))
        }
    }
}
