//! Who the end user of a request is: `X-Tollgate-End-User`, else the body's
//! `user` (the Messages door's `metadata.user_id` arrives translated into
//! it), as far as the key's tier trusts each source. The id is opaque to the
//! gateway; it is capped in length and kept off metric labels.

use crate::config::{END_USER_MAX_BYTES, EndUserSource, Tier};
use crate::error::{ApiError, ErrorCode};
use crate::openai::chat::ChatRequest;

use super::context::RequestContext;

/// The request's end user, if the tier reads one; a tier that requires one
/// refuses a request that names none.
pub fn identify(
    ctx: &RequestContext,
    request: &ChatRequest,
    tier: &Tier,
) -> Result<Option<String>, ApiError> {
    for source in &tier.end_user_sources {
        let (value, param) = match source {
            EndUserSource::Header => (ctx.end_user_header.as_deref(), "X-Tollgate-End-User"),
            EndUserSource::Body => (request.body().get("user").and_then(|v| v.as_str()), "user"),
        };
        if let Some(id) = value.map(str::trim).filter(|id| !id.is_empty()) {
            return checked(id, param).map(Some);
        }
    }
    if tier.end_user_required {
        return Err(ApiError::new(
            ErrorCode::EndUserRequired,
            format!(
                "this key's tier caps spend per end user: name one in {}",
                sources(&tier.end_user_sources)
            ),
        ));
    }
    Ok(None)
}

fn checked(id: &str, param: &str) -> Result<String, ApiError> {
    match problem(id) {
        Some(problem) => Err(ApiError::invalid_request(param, problem)),
        None => Ok(id.to_owned()),
    }
}

/// What is wrong with an end user id, if anything.
pub fn problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("an end user id may not be empty".to_owned());
    }
    if id.len() > END_USER_MAX_BYTES {
        return Some(format!(
            "an end user id is at most {END_USER_MAX_BYTES} bytes"
        ));
    }
    id.chars()
        .any(char::is_control)
        .then(|| "an end user id may not contain control characters".to_owned())
}

fn sources(trusted: &[EndUserSource]) -> String {
    let names: Vec<&str> = trusted
        .iter()
        .map(|source| match source {
            EndUserSource::Header => "the X-Tollgate-End-User header",
            EndUserSource::Body => "the body's `user` (`metadata.user_id` on /v1/messages)",
        })
        .collect();
    if names.is_empty() {
        "no source this tier trusts (set `end_user_sources`)".to_owned()
    } else {
        names.join(" or ")
    }
}
