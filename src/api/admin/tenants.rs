//! Tenant resources and budget status.

use actix_web::{HttpResponse, web};

use super::now_ms;
use crate::admin::tenants::{self, NewTenant, TenantPatch, TenantView};
use crate::api::extract::AdminAuth;
use crate::error::ApiError;
use crate::state::Gateway;

pub async fn create_tenant(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    body: web::Json<NewTenant>,
) -> Result<HttpResponse, ApiError> {
    let record = tenants::create(
        gw.directory.db(),
        &gw.live().config,
        body.into_inner(),
        now_ms(&gw),
    )
    .await?;
    let record = gw.directory.put_tenant(record);
    Ok(HttpResponse::Created().json(TenantView::from(record.as_ref())))
}

pub async fn list_tenants(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    let records = tenants::list(gw.directory.db()).await?;
    let views: Vec<TenantView> = records.iter().map(TenantView::from).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "data": views })))
}

pub async fn get_tenant(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let record = tenants::get(gw.directory.db(), &id).await?;
    Ok(HttpResponse::Ok().json(TenantView::from(&record)))
}

pub async fn update_tenant(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
    body: web::Json<TenantPatch>,
) -> Result<HttpResponse, ApiError> {
    let record = tenants::update(
        gw.directory.db(),
        &gw.live().config,
        &id,
        body.into_inner(),
        now_ms(&gw),
    )
    .await?;
    let record = gw.directory.put_tenant(record);
    // Limits take effect at once on this replica; others pick them up on their next sync.
    gw.tenants.update(&record);
    Ok(HttpResponse::Ok().json(TenantView::from(record.as_ref())))
}

pub async fn budget_status(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let record = tenants::get(gw.directory.db(), &id).await?;
    let record = gw.directory.put_tenant(record);
    let handle = gw
        .tenants
        .handle(&record)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let status = handle
        .status()
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(HttpResponse::Ok().json(status))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureBudget {
    monthly_budget: String,
    /// `day`, `week`, `month` (the default) or `lifetime`.
    period: Option<String>,
}

pub async fn set_feature_budget(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    path: web::Path<(String, String)>,
    body: web::Json<FeatureBudget>,
) -> Result<HttpResponse, ApiError> {
    let (id, feature) = path.into_inner();
    let body = body.into_inner();
    let budget = Some((body.monthly_budget.as_str(), body.period.as_deref()));
    apply_feature_budget(&gw, &id, &feature, budget).await
}

pub async fn delete_feature_budget(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (id, feature) = path.into_inner();
    apply_feature_budget(&gw, &id, &feature, None).await
}

async fn apply_feature_budget(
    gw: &Gateway,
    id: &str,
    feature: &str,
    budget: Option<(&str, Option<&str>)>,
) -> Result<HttpResponse, ApiError> {
    let record =
        tenants::set_feature_budget(gw.directory.db(), id, feature, budget, now_ms(gw)).await?;
    let record = gw.directory.put_tenant(record);
    gw.tenants.update(&record);
    Ok(HttpResponse::Ok().json(TenantView::from(record.as_ref())))
}
