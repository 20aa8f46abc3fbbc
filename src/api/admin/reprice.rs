//! `/admin/v1/reprice`: the ledger's rows priced again at the current
//! prices; over a closed month only with `write_adjustments`.

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use crate::admin::invalid;
use crate::admin::reprice::{self, RepriceRun};
use crate::api::extract::AdminAuth;
use crate::error::ApiError;
use crate::period::Date;
use crate::state::Gateway;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepriceBody {
    tenant: Option<String>,
    /// First day, YYYY-MM-DD.
    from: Option<String>,
    /// Last day, YYYY-MM-DD (inclusive).
    to: Option<String>,
    /// Write each row's difference as an adjustment of an open month.
    #[serde(default)]
    write_adjustments: bool,
}

/// `POST /admin/v1/reprice`: the report; with `write_adjustments`, what was
/// written. A span over a closed month without it is a 409 naming the month.
pub async fn reprice(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    body: Option<web::Json<RepriceBody>>,
) -> Result<HttpResponse, ApiError> {
    let body = body.map(web::Json::into_inner).unwrap_or_default();
    let day = |field: &str, text: Option<&str>| {
        text.map(|t| {
            Date::parse(t).ok_or_else(|| invalid(field, format!("`{t}` is not a YYYY-MM-DD date")))
        })
        .transpose()
    };
    let run = RepriceRun {
        tenant: body.tenant.as_deref(),
        from: day("from", body.from.as_deref())?,
        to: day("to", body.to.as_deref())?,
        write_adjustments: body.write_adjustments,
        now_ms: gw.clock.now_ms(),
    };
    let billing = gw.live().config.billing();
    let report = reprice::reprice(gw.directory.db(), &gw.config.calendar, &billing, run).await?;
    Ok(HttpResponse::Ok().json(report))
}
