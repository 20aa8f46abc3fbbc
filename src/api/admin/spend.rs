//! Spend reports.

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use crate::admin::reconcile::{self, ReconcileQuery};
use crate::admin::spend::{self, SpendQuery};
use crate::admin::{invoice, report};
use crate::api::extract::AdminAuth;
use crate::error::ApiError;
use crate::period::Date;
use crate::state::Gateway;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpendParams {
    group_by: Option<String>,
    from: Option<String>,
    to: Option<String>,
    tenant: Option<String>,
    /// `key` or `cost`.
    sort: Option<String>,
    limit: Option<usize>,
}

pub async fn tenant_spend(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
    params: web::Query<SpendParams>,
) -> Result<HttpResponse, ApiError> {
    crate::admin::tenants::get(gw.directory.db(), &id).await?;
    let params = params.into_inner();
    let query = SpendQuery {
        tenant: Some(id.into_inner()),
        group_by: params.group_by,
        from: params.from,
        to: params.to,
        sort: params.sort,
        limit: params.limit,
    };
    let report = spend::report(gw.directory.db(), &gw.config.billing.currency, query).await?;
    Ok(HttpResponse::Ok().json(report))
}

pub async fn all_spend(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    params: web::Query<SpendParams>,
) -> Result<HttpResponse, ApiError> {
    let params = params.into_inner();
    let query = SpendQuery {
        tenant: params.tenant,
        group_by: params.group_by.or_else(|| Some("tenant".to_owned())),
        from: params.from,
        to: params.to,
        sort: params.sort,
        limit: params.limit,
    };
    let report = spend::report(gw.directory.db(), &gw.config.billing.currency, query).await?;
    Ok(HttpResponse::Ok().json(report))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileParams {
    tenant: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

/// Rows charged their hold without the provider's usage, for reconciliation.
pub async fn reconciliation(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    params: web::Query<ReconcileParams>,
) -> Result<HttpResponse, ApiError> {
    let params = params.into_inner();
    let query = ReconcileQuery {
        tenant: params.tenant,
        from: params.from,
        to: params.to,
    };
    let report = reconcile::report(gw.directory.db(), &gw.config.billing.currency, query).await?;
    Ok(HttpResponse::Ok().json(report))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportParams {
    /// `YYYY-MM-DD`; yesterday (UTC) when absent.
    date: Option<String>,
}

pub async fn daily_report(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    params: web::Query<ReportParams>,
) -> Result<HttpResponse, ApiError> {
    let date = match params.into_inner().date {
        Some(text) => Date::parse(&text).ok_or_else(|| {
            ApiError::invalid_request("date", format!("`{text}` is not a YYYY-MM-DD date"))
        })?,
        None => gw.config.calendar.yesterday(gw.clock.now_ms()),
    };
    let config = &gw.config;
    let report = report::daily(
        gw.directory.db(),
        &config.billing.currency,
        &config.calendar,
        date,
    )
    .await?;
    Ok(HttpResponse::Ok().json(report))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvoiceParams {
    /// `json` (default) or `csv`.
    format: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonthParams {
    /// YYYY-MM.
    month: String,
}

/// `GET /admin/v1/invoices/check?month=YYYY-MM`: every tenant's invoices of
/// the month, the ledger and the exports side by side; `agrees` is false and
/// `differences` lists each one where they do not.
pub async fn month_check(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    params: web::Query<MonthParams>,
) -> Result<HttpResponse, ApiError> {
    let currency = &gw.config.billing.currency;
    let checked = crate::admin::month_check::check(
        gw.directory.db(),
        &gw.config.calendar,
        currency,
        &params.month,
        &gw.config.export.sink_names(),
    )
    .await?;
    Ok(HttpResponse::Ok().json(checked))
}

/// `GET /admin/v1/tenants/{id}/invoices/{month}`: the month's invoice, with
/// the ledger's own sum beside its total (JSON), or its lines (CSV).
pub async fn tenant_invoice(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    path: web::Path<(String, String)>,
    params: web::Query<InvoiceParams>,
) -> Result<HttpResponse, ApiError> {
    let (id, month) = path.into_inner();
    let db = gw.directory.db();
    let currency = &gw.config.billing.currency;
    let invoice = invoice::build(db, &gw.config.calendar, currency, &id, &month).await?;
    match params.format.as_deref().unwrap_or("json") {
        "csv" => Ok(HttpResponse::Ok()
            .content_type("text/csv; charset=utf-8")
            .body(invoice::csv(&invoice))),
        "json" => {
            let check = invoice::check(db, &invoice).await?;
            Ok(HttpResponse::Ok().json(serde_json::json!({"invoice": invoice, "check": check})))
        }
        other => Err(crate::admin::invalid("format", format!("`{other}`: use json or csv")).into()),
    }
}
