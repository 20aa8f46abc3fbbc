//! `/admin/v1/prompt-cache`: the ledger's review of tenants' cache
//! breakpoints, as this replica last made it, or made now.

use actix_web::{HttpResponse, web};
use serde::Serialize;

use crate::api::extract::AdminAuth;
use crate::error::ApiError;
use crate::prompts::advisor::{Review, review_now};
use crate::state::Gateway;

#[derive(Serialize)]
struct Reviewed<'a> {
    currency: &'a str,
    window_hours: u64,
    min_writes: u64,
    /// Every tenant with cache writes or reads in the window.
    tenants: Vec<Review>,
}

fn reviewed(gw: &Gateway, tenants: Vec<Review>) -> HttpResponse {
    let settings = &gw.config.prompt_cache;
    HttpResponse::Ok().json(Reviewed {
        currency: &gw.config.billing.currency,
        window_hours: settings.window_hours,
        min_writes: settings.min_writes,
        tenants,
    })
}

pub async fn last_review(_admin: AdminAuth, gw: web::Data<Gateway>) -> HttpResponse {
    reviewed(&gw, gw.prompt_advisor.reviews())
}

pub async fn review(_admin: AdminAuth, gw: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    let tenants = review_now(&gw)
        .await
        .map_err(|e| ApiError::internal(format!("the ledger could not be read: {e}")))?;
    Ok(reviewed(&gw, tenants))
}
