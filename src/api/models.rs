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
    let live = gw.live();
    let tier_routes = live
        .config
        .tiers
        .get(&auth.tenant.tier)
        .map_or(&[][..], |t| t.routes.as_slice());
    let routes = auth
        .tenant
        .usable_routes(tier_routes)
        .into_iter()
        .map(|route| route.to_string());
    if is_anthropic(&req) {
        return HttpResponse::Ok().json(anthropic::models::ModelList::new(routes));
    }
    HttpResponse::Ok().json(ModelList::new(routes))
}
