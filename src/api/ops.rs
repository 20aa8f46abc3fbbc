//! `/healthz` (alive), `/readyz` (the database answers), `/metrics`.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::error::{ApiError, ErrorCode};
use crate::state::Gateway;
use crate::storage;

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

pub async fn readyz(gw: web::Data<Gateway>) -> HttpResponse {
    let database = storage::ping(gw.directory.db()).await;
    let backlog = gw.ledger.backlog();
    // Redis down is reported, not failed on: every replica shares it, so
    // failing readiness would take the whole fleet out while tenants on the
    // `local` policy can still be served.
    let quota_store = match &gw.quota_store {
        None => "memory",
        Some(store) if store.health().is_up() => "redis",
        Some(_) => "redis_unreachable",
    };
    let body = json!({
        "status": if database { "ready" } else { "unavailable" },
        "database": if database { "ok" } else { "unreachable" },
        "quota_store": quota_store,
        "ledger_backlog_events": backlog,
    });
    if database {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

pub async fn metrics(gw: web::Data<Gateway>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(gw.metrics.render())
}

pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(ErrorCode::NotFound, "no such endpoint"))
}
