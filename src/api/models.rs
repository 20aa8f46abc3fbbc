//! `GET /v1/models`: the routes this key may use, in OpenAI's list shape, or
//! in Anthropic's for a request that sends `anthropic-version`.

use actix_web::{HttpRequest, HttpResponse, web};

use super::extract::{AnthropicAuth, is_anthropic};
use crate::anthropic;
use crate::openai::models::ModelList;
use crate::state::Gateway;

pub async fn list_models(
    req: HttpRequest,
    gw: web::Data<Gateway>,
    auth: AnthropicAuth,
) -> HttpResponse {
    let auth = auth.0;
    let tier_routes = gw
        .live()
        .config
        .tiers
        .get(&auth.tenant.tier)
        .map(|t| t.routes.clone())
        .unwrap_or_default();
    let routes = tier_routes
        .into_iter()
        .filter(|route| {
            auth.tenant
                .allowed_routes
                .as_ref()
                .is_none_or(|allowed| allowed.contains(route))
        })
        .map(|route| route.to_string());
    if is_anthropic(&req) {
        return HttpResponse::Ok().json(anthropic::models::ModelList::new(routes));
    }
    HttpResponse::Ok().json(ModelList::new(routes))
}
