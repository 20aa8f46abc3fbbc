//! `/admin/v1/bills/import` and `/admin/v1/bills/drift`: a provider's usage
//! and cost exports imported, and their drift from the ledger.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::admin::bill::{self, BillFile, DriftQuery};
use crate::api::extract::{AdminAuth, read_body};
use crate::error::ApiError;
use crate::state::Gateway;

/// An import's body at most: a year of daily buckets grouped by key, model
/// and line item is a few megabytes.
const MAX_IMPORT_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportParams {
    provider: String,
}

/// The body is one exported page as the provider's API returned it, or a
/// JSON array of such pages (an export's pages, or usage and costs together).
pub async fn import(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    req: HttpRequest,
    payload: web::Payload,
    params: web::Query<ImportParams>,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(&req, payload, MAX_IMPORT_BYTES).await?;
    let text = std::str::from_utf8(&body)
        .map_err(|e| ApiError::invalid_request("body", format!("body: not UTF-8 text: {e}")))?;
    let files = if text.trim_start().starts_with('[') {
        let pages: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| {
            ApiError::invalid_request("body", format!("body: not a JSON array of pages: {e}"))
        })?;
        pages
            .iter()
            .enumerate()
            .map(|(i, page)| BillFile {
                name: format!("body[{i}]"),
                text: page.get().to_owned(),
            })
            .collect()
    } else {
        vec![BillFile {
            name: "body".to_owned(),
            text: text.to_owned(),
        }]
    };
    let now_ms = gw.clock.now_ms();
    let imported = bill::import(
        gw.directory.db(),
        &gw.config,
        &params.provider,
        files,
        now_ms,
    )
    .await?;
    Ok(HttpResponse::Ok().json(imported))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftParams {
    provider: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

pub async fn drift(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    params: web::Query<DriftParams>,
) -> Result<HttpResponse, ApiError> {
    let params = params.into_inner();
    let query = DriftQuery {
        provider: params.provider,
        from: params.from,
        to: params.to,
    };
    let report = bill::drift(gw.directory.db(), &gw.config, query).await?;
    Ok(HttpResponse::Ok().json(report))
}
