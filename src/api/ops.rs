//! `/healthz` (alive), `/readyz` (can serve: the database answers, or the
//! ledger buffers without refusing), `/metrics`.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::config::OnBacklogFull;
use crate::error::{ApiError, ErrorCode};
use crate::state::Gateway;
use crate::storage;

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Ready while requests can be served: with the database away the ledger
/// buffers in its journal, so the gateway stays in the pool (`degraded`)
/// until its backlog bound makes it refuse paid requests.
pub async fn readyz(gw: web::Data<Gateway>) -> HttpResponse {
    let database = storage::ping(gw.directory.db()).await;
    let backlog = gw.ledger.backlog();
    // Redis down is reported, not failed on: every replica shares it, so
    // failing readiness would take the whole fleet out while tenants on the
    // `local` policy can still be served.
    let quota_store = match &gw.quota_store {
        None => "memory",
        // Back empty: waiting for the holds it lost to settle (`tenant/shared/epoch.rs`).
        Some(store) if store.health().is_up() && store.paused() => "redis_restarted",
        Some(store) if store.health().is_up() => "redis",
        Some(_) => "redis_unreachable",
    };
    let full = gw.ledger.is_saturated();
    let buffering = gw.ledger.journal().is_some();
    let refusing = full && gw.config.ledger.on_backlog_full == OnBacklogFull::Refuse;
    let status = match (database, buffering && !refusing) {
        (true, _) => "ready",
        (false, true) => "degraded",
        (false, false) => "unavailable",
    };
    let body = json!({
        "status": status,
        "database": if database { "ok" } else { "unreachable" },
        "quota_store": quota_store,
        "ledger_backlog_events": backlog,
        "ledger": {
            "backlog_events": backlog,
            "max_backlog_events": gw.ledger.max_backlog(),
            "backlog_full": full,
            "journal_only": gw.ledger.journal_only(),
            "journal": buffering,
            "in_flight_attempts": gw.ledger.journal().map_or(0, |j| j.open_reserves()),
        },
    });
    if status == "unavailable" {
        HttpResponse::ServiceUnavailable().json(body)
    } else {
        HttpResponse::Ok().json(body)
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
