//! `/admin/v1/spend/distribution` and `/admin/v1/spend/monthly`: what one
//! call costs, and each month beside the one before.

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use crate::admin::costs::{self, DistributionQuery, MonthlyQuery};
use crate::api::extract::AdminAuth;
use crate::error::ApiError;
use crate::state::Gateway;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistributionParams {
    tenant: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<u64>,
}

pub async fn distribution(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    params: web::Query<DistributionParams>,
) -> Result<HttpResponse, ApiError> {
    let params = params.into_inner();
    let query = DistributionQuery {
        tenant: params.tenant,
        from: params.from,
        to: params.to,
        limit: params.limit,
    };
    let report = costs::distribution(gw.directory.db(), &gw.config.billing.currency, query).await?;
    Ok(HttpResponse::Ok().json(report))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonthlyParams {
    tenant: Option<String>,
    group_by: Option<String>,
    months: Option<u32>,
    to: Option<String>,
    limit: Option<usize>,
}

pub async fn monthly(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    params: web::Query<MonthlyParams>,
) -> Result<HttpResponse, ApiError> {
    let params = params.into_inner();
    let query = MonthlyQuery {
        tenant: params.tenant,
        group_by: params.group_by,
        months: params.months,
        to: params.to,
        limit: params.limit,
    };
    let config = &gw.config;
    let report = costs::monthly(
        gw.directory.db(),
        &config.calendar,
        &config.billing.currency,
        gw.clock.now_ms(),
        query,
    )
    .await?;
    Ok(HttpResponse::Ok().json(report))
}
