//! `GET /v1/models`: the routes this key may use.

use actix_web::{HttpResponse, web};

use super::extract::TenantAuth;
use crate::openai::models::ModelList;
use crate::state::Gateway;

pub async fn list_models(gw: web::Data<Gateway>, auth: TenantAuth) -> HttpResponse {
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
    HttpResponse::Ok().json(ModelList::new(routes))
}
