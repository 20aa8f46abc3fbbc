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
    let body = json!({
        "status": if database { "ready" } else { "unavailable" },
        "database": if database { "ok" } else { "unreachable" },
        "ledger_backlog_events": backlog,
        "ledger": {
            "backlog_events": backlog,
            "max_backlog_events": gw.ledger.max_backlog(),
            "backlog_full": gw.ledger.is_saturated(),
            "journal": gw.ledger.journal().is_some(),
            "in_flight_attempts": gw.ledger.journal().map_or(0, |j| j.open_reserves()),
        },
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
