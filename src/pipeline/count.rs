//! count_tokens: a Messages body's input tokens as the gateway's estimator
//! counts them for the route (the count reservations are made with). Nothing
//! goes upstream, nothing is held or charged and no ledger row is written,
//! but it is a call like any other: key, route and tier checks, the door's
//! field table, the end user (a tier that requires one, a blocked one) and the
//! requests-per-minute limit. The prompts the gateway would place first
//! count too: they are part of what the model reads and what is reserved.

use std::sync::Arc;

use super::chat::{allowed_rate, resolve_route};
use super::context::{RequestContext, RequestMeter};
use crate::error::ApiError;
use crate::openai::chat::ChatRequest;
use crate::prompts::Prefix;
use crate::state::Gateway;
use crate::tenant::RateDecision;
use crate::tokenize::{Counting, OwnedPrompt};

/// The count, and the rate decision the call was let through by.
pub struct Counted {
    pub input_tokens: u64,
    pub rate: RateDecision,
}

pub async fn count_tokens(
    gw: &Arc<Gateway>,
    ctx: &RequestContext,
    meter: &RequestMeter,
    body: &[u8],
) -> Result<Counted, ApiError> {
    let request = ChatRequest::parse_count_tokens(body)?;
    let live = gw.live();
    let route = resolve_route(&live.config, ctx, request.model(), request.body())?;
    *meter.route.borrow_mut() = Some(route.name.to_string());
    super::chat::check_fields(&request, route, ctx)?;
    let tier = live.config.tiers.get(&ctx.tenant.tier).ok_or_else(|| {
        ApiError::internal(format!("tiers.{} is not configured", ctx.tenant.tier))
    })?;
    if let Some(id) = super::end_user::identify(ctx, &request, tier)? {
        let identified = RequestContext {
            end_user: Some(id),
            ..ctx.clone()
        };
        super::chat::end_user_hold(&identified, tier)?;
    }
    let tenant = gw
        .tenants
        .handle(&ctx.tenant)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let rate = allowed_rate(&tenant).await?;
    let placed = Prefix::of(route, &ctx.tenant, true)
        .map_or(0, |prefix| prefix.tokens(&gw.estimator, &route.countings));
    let input_tokens = exact(gw, &route.countings, &request).await + placed;
    Ok(Counted { input_tokens, rate })
}

/// Bodies at least this large are counted exactly off the request's worker.
const OFF_WORKER_BYTES: usize = 64 * 1024;

/// A request's input counted exactly (the estimate holds are made with).
/// Counting a body of a few megabytes takes long enough to stall every other
/// request on its worker, so a large one is counted on the blocking pool; if
/// that fails, it is held at its bytes, a bound never below the count.
pub(super) async fn exact(gw: &Gateway, countings: &[Counting], request: &ChatRequest) -> u64 {
    let size = request
        .native()
        .map_or(request.raw().len(), |native| native.body.len());
    if size < OFF_WORKER_BYTES {
        return gw.estimator.estimate_for(countings, request.prompt());
    }
    let estimator = gw.estimator;
    let owned = (countings.to_vec(), OwnedPrompt::of(request.prompt()));
    let counted = actix_web::web::block(move || {
        let (countings, prompt) = owned;
        estimator.estimate_for(&countings, prompt.as_prompt())
    })
    .await;
    counted.unwrap_or_else(|_| gw.estimator.bound_for(countings, request.prompt()).tokens)
}
