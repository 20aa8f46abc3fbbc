//! The HTTP layer: extract, call one function, map the result. This file is
//! the route table and nothing else.

pub mod admin;
pub mod chat;
pub mod extract;
pub mod headers;
pub mod models;
pub mod ops;

use actix_web::web;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.app_data(extract::json_config())
        .app_data(extract::query_config())
        .app_data(extract::path_config())
        .route(
            "/v1/chat/completions",
            web::post().to(chat::chat_completions),
        )
        .route("/chat/completions", web::post().to(chat::chat_completions))
        .route("/v1/models", web::get().to(models::list_models))
        .route("/healthz", web::get().to(ops::healthz))
        .route("/readyz", web::get().to(ops::readyz))
        .route("/metrics", web::get().to(ops::metrics))
        .service(web::scope("/admin/v1").configure(admin::configure))
        .default_service(web::to(ops::not_found));
}
