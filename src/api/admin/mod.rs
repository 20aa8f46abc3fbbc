//! `/admin/v1/…`: every handler takes `AdminAuth`, so none can forget it.

pub mod bill;
pub mod costs;
pub mod credits;
pub mod end_users;
pub mod export;
pub mod keys;
pub mod periods;
pub mod prompt_cache;
pub mod reload;
pub mod reprice;
pub mod retention;
pub mod spend;
pub mod tenants;

use actix_web::web;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/tenants", web::post().to(tenants::create_tenant))
        .route("/tenants", web::get().to(tenants::list_tenants))
        .route("/tenants/{id}", web::get().to(tenants::get_tenant))
        .route("/tenants/{id}", web::patch().to(tenants::update_tenant))
        .route(
            "/tenants/{id}/budget",
            web::get().to(tenants::budget_status),
        )
        .route(
            "/tenants/{id}/credits",
            web::post().to(credits::add_tenant_credit),
        )
        .route(
            "/tenants/{id}/credits",
            web::get().to(credits::tenant_balance),
        )
        .route(
            "/keys/{id}/credits",
            web::post().to(credits::add_key_credit),
        )
        .route("/keys/{id}/credits", web::get().to(credits::key_balance))
        .route("/tenants/{id}/keys", web::post().to(keys::issue_key))
        .route("/tenants/{id}/keys", web::get().to(keys::list_keys))
        .route("/keys/{id}", web::delete().to(keys::revoke_key))
        .route("/keys/{id}", web::patch().to(keys::update_key))
        .route(
            "/tenants/{id}/features/{feature}/budget",
            web::put().to(tenants::set_feature_budget),
        )
        .route(
            "/tenants/{id}/features/{feature}/budget",
            web::delete().to(tenants::delete_feature_budget),
        )
        .route(
            "/tenants/{id}/end-users/{user}",
            web::get().to(end_users::get_end_user),
        )
        .route(
            "/tenants/{id}/end-users/{user}",
            web::put().to(end_users::put_end_user),
        )
        .route(
            "/tenants/{id}/end-users/{user}",
            web::delete().to(end_users::delete_end_user),
        )
        .route("/tenants/{id}/spend", web::get().to(spend::tenant_spend))
        .route(
            "/tenants/{id}/invoices/{month}",
            web::get().to(spend::tenant_invoice),
        )
        .route("/invoices/check", web::get().to(spend::month_check))
        .route("/reprice", web::post().to(reprice::reprice))
        .route("/spend", web::get().to(spend::all_spend))
        .route("/periods", web::get().to(periods::list))
        .route("/periods/{month}/close", web::post().to(periods::close))
        .route("/spend/distribution", web::get().to(costs::distribution))
        .route("/spend/monthly", web::get().to(costs::monthly))
        .route("/reports/daily", web::get().to(spend::daily_report))
        .route("/reconciliation", web::get().to(spend::reconciliation))
        .route("/bills/import", web::post().to(bill::import))
        .route("/bills/drift", web::get().to(bill::drift))
        .route("/reload", web::post().to(reload::reload_config))
        .route("/prompt-cache", web::get().to(prompt_cache::last_review))
        .route("/prompt-cache/review", web::post().to(prompt_cache::review))
        .route("/ledger/rollup", web::post().to(retention::roll_up))
        .route("/export/sinks", web::get().to(export::sinks));
}

fn now_ms(gw: &crate::state::Gateway) -> i64 {
    i64::try_from(gw.clock.now_ms()).unwrap_or(i64::MAX)
}
