//! `/admin/v1/tenants/{id}/credits` and `/admin/v1/keys/{id}/credits`:
//! top-ups of a prepaid balance, and the balance.

use actix_web::{HttpResponse, web};

use super::now_ms;
use crate::admin::credits::{self, Holder, NewCredit};
use crate::admin::tenants;
use crate::api::extract::AdminAuth;
use crate::error::{ApiError, ErrorCode};
use crate::state::Gateway;
use crate::tenant::QuotaError;
use crate::tenant::handle::TenantHandle;
use crate::tenant::store::CreditAdded;

pub async fn add_tenant_credit(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
    body: web::Json<NewCredit>,
) -> Result<HttpResponse, ApiError> {
    let holder = credits::tenant_holder(gw.directory.db(), &id).await?;
    add(&gw, holder, body.into_inner()).await
}

pub async fn add_key_credit(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
    body: web::Json<NewCredit>,
) -> Result<HttpResponse, ApiError> {
    let holder = credits::key_holder(gw.directory.db(), &id).await?;
    add(&gw, holder, body.into_inner()).await
}

pub async fn tenant_balance(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let holder = credits::tenant_holder(gw.directory.db(), &id).await?;
    balance(&gw, holder).await
}

pub async fn key_balance(
    _admin: AdminAuth,
    gw: web::Data<Gateway>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let holder = credits::key_holder(gw.directory.db(), &id).await?;
    balance(&gw, holder).await
}

async fn handle(gw: &Gateway, holder: &Holder) -> Result<TenantHandle, ApiError> {
    let record = tenants::get(gw.directory.db(), holder.tenant.as_str()).await?;
    let record = gw.directory.put_tenant(record);
    gw.tenants
        .handle(&record)
        .map_err(|e| ApiError::internal(e.to_string()))
}

fn unavailable(error: &QuotaError, what: &str) -> ApiError {
    match error {
        QuotaError::StoreDown | QuotaError::LedgerUnreadable | QuotaError::Unavailable => {
            ApiError::new(ErrorCode::QuotaUnavailable, format!("{what}: {error}"))
                .with_retry_after(1)
        }
        other => ApiError::internal(format!("{what}: {other}")),
    }
}

/// Ledger first, then the deciding store; a repeat (same idempotency key)
/// tells the store again, which adds each row once, so retrying after a 503
/// is how a top-up the store missed reaches it.
async fn add(gw: &Gateway, holder: Holder, new: NewCredit) -> Result<HttpResponse, ApiError> {
    let db = gw.directory.db();
    // A hold lives the request's timeout and a margin; its sweep runs within a minute.
    let call_lifetime_ms = gw
        .config
        .server
        .request_timeout_ms
        .saturating_add(crate::pipeline::dispatch::RESERVATION_MARGIN_MS)
        .saturating_add(60_000);
    let (row, written) = credits::add(db, &holder, new, now_ms(gw), call_lifetime_ms).await?;
    let handle = handle(gw, &holder).await?;
    let top_up = CreditAdded {
        key: holder.key.clone(),
        grant: crate::ledger::credits::grant_of(&row).1,
    };
    let recorded = format!(
        "top-up {} is in the ledger, but the quota store has not taken it yet; send the same request again",
        row.id
    );
    handle
        .add_credit(top_up)
        .await
        .map_err(|e| unavailable(&e, &recorded))?;
    let balance = handle
        .balance(holder.key.clone())
        .await
        .map_err(|e| unavailable(&e, "cannot read the balance"))?;
    let view = credits::view(db, &holder, balance, gw.clock.now_ms()).await?;
    let body = serde_json::json!({
        "credit": credits::CreditView::from(row),
        "replayed": !written,
        "balance": view.balance,
    });
    Ok(if written {
        HttpResponse::Created().json(body)
    } else {
        HttpResponse::Ok().json(body)
    })
}

async fn balance(gw: &Gateway, holder: Holder) -> Result<HttpResponse, ApiError> {
    let handle = handle(gw, &holder).await?;
    let balance = handle
        .balance(holder.key.clone())
        .await
        .map_err(|e| unavailable(&e, "cannot read the balance"))?;
    let now = gw.clock.now_ms();
    let view = credits::view(gw.directory.db(), &holder, balance, now).await?;
    Ok(HttpResponse::Ok().json(view))
}
