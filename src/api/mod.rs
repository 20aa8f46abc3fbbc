//! The HTTP layer: extract, call one function, map the result. This file is
//! the route table and nothing else.

pub mod admin;
pub mod chat;
pub mod extract;
pub mod headers;
pub mod messages;
pub mod models;
pub mod ops;
mod stored;

use actix_web::web;

/// Which endpoints one listener serves (`server.admin_listen` splits them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// Every endpoint, on the one listener there is.
    All,
    /// The model API and `/healthz`.
    Api,
    /// `/metrics`, `/readyz`, `/admin/v1/*` and `/healthz`.
    Admin,
}

pub fn configure(cfg: &mut web::ServiceConfig, surface: Surface) {
    cfg.app_data(extract::json_config())
        .app_data(extract::query_config())
        .app_data(extract::path_config());
    if surface != Surface::Admin {
        cfg.route(
            "/v1/chat/completions",
            web::post().to(chat::chat_completions),
        )
        .route("/chat/completions", web::post().to(chat::chat_completions))
        .route("/v1/embeddings", web::post().to(chat::embeddings))
        .route("/v1/responses", web::post().to(chat::responses))
        .route("/v1/responses/{id}", web::get().to(stored::get_response))
        .route(
            "/v1/responses/{id}",
            web::delete().to(stored::delete_response),
        )
        .route(
            "/v1/responses/{id}/input_items",
            web::get().to(stored::input_items),
        )
        .route("/responses", web::post().to(chat::responses))
        .route("/embeddings", web::post().to(chat::embeddings))
        .service(
            web::resource("/v1/messages")
                .route(web::post().to(messages::messages))
                .default_service(web::to(messages::unknown)),
        )
        .service(
            web::resource("/v1/messages/count_tokens")
                .route(web::post().to(messages::count_tokens))
                .default_service(web::to(messages::unknown)),
        )
        .route("/v1/messages/{rest:.*}", web::to(messages::unknown))
        .route("/v1/models", web::get().to(models::list_models));
    }
    cfg.route("/healthz", web::get().to(ops::healthz))
        // Claude Code probes its base URL with `HEAD /` before its first call.
        .route("/", web::head().to(ops::healthz))
        .route("/", web::get().to(ops::healthz));
    if surface != Surface::Api {
        cfg.route("/readyz", web::get().to(ops::readyz))
            .route("/metrics", web::get().to(ops::metrics))
            .service(web::scope("/admin/v1").configure(admin::configure));
    }
    // Elsewhere's endpoints answer here as unknown ones do: 404 in the OpenAI envelope.
    cfg.default_service(web::to(ops::not_found));
}
