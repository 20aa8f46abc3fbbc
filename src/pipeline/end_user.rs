//! Who the end user of a request is: `X-Tollgate-End-User`, else the body's
//! `user` (the Messages door's `metadata.user_id` arrives translated into
//! it), as far as the key's tier trusts each source. The id is opaque to the
//! gateway; it is capped in length and kept off metric labels.

use sha2::{Digest, Sha256};

use crate::config::{END_USER_MAX_BYTES, EndUserSource, Tier};
use crate::error::{ApiError, ErrorCode};
use crate::openai::chat::ChatRequest;

use super::context::RequestContext;

/// The request's end user, if the tier reads one; a tier that requires one
/// refuses a request that names none. An agent's JSON id (Claude Code's
/// `metadata.user_id`) names its account, else its device; an id past the
/// length cap is kept as a stable hash of itself. On a tier that neither
/// caps nor requires end users, a body's id that is not a usable one is
/// ignored: it decides nothing there, so it refuses nothing either.
pub fn identify(
    ctx: &RequestContext,
    request: &ChatRequest,
    tier: &Tier,
) -> Result<Option<String>, ApiError> {
    let counted = tier.end_user.is_some() || tier.end_user_required;
    for source in &tier.end_user_sources {
        let (value, param) = match source {
            EndUserSource::Header => (ctx.end_user_header.as_deref(), "X-Tollgate-End-User"),
            EndUserSource::Body => (request.body().get("user").and_then(|v| v.as_str()), "user"),
        };
        let Some(id) = value.map(str::trim).filter(|id| !id.is_empty()) else {
            continue;
        };
        let id = agent_account(id).unwrap_or_else(|| id.to_owned());
        match checked(&id, param) {
            Ok(id) => return Ok(Some(id)),
            Err(_) if *source == EndUserSource::Body && !counted => return Ok(None),
            Err(refusal) => return Err(refusal),
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

/// An agent's JSON id: Claude Code sends `{"device_id", "account_uuid",
/// "session_id"}`; the account is the user, else the device. The session
/// changes every run, so it is never the user.
fn agent_account(id: &str) -> Option<String> {
    let ids = AgentIds::read(id)?;
    [ids.account_uuid, ids.device_id]
        .into_iter()
        .flatten()
        .map(|value| value.trim().to_owned())
        .find(|value| !value.is_empty())
}

/// Claude Code's JSON `metadata.user_id`.
#[derive(serde::Deserialize)]
struct AgentIds {
    account_uuid: Option<String>,
    device_id: Option<String>,
    session_id: Option<String>,
}

impl AgentIds {
    fn read(id: &str) -> Option<AgentIds> {
        id.starts_with('{')
            .then(|| serde_json::from_str(id).ok())
            .flatten()
    }
}

/// The id as kept: past the length cap, a stable hash of it (the same id
/// is always the same end user, whatever replica reads it).
fn checked(id: &str, param: &str) -> Result<String, ApiError> {
    if id.len() > END_USER_MAX_BYTES && !id.chars().any(char::is_control) {
        let digest = Sha256::digest(id.as_bytes());
        return Ok(format!("sha256:{}", crate::auth::hex(&digest[..16])));
    }
    match problem(id) {
        Some(problem) => Err(ApiError::invalid_request(param, problem)),
        None => Ok(id.to_owned()),
    }
}

/// The agent run a body names, for a request whose headers name none:
/// Claude Code's JSON `metadata.user_id` (its `session_id`; the Messages
/// door hands it over as `user`), or Codex's `client_metadata.session_id`
/// on the Responses door.
pub fn body_session(request: &ChatRequest) -> Option<String> {
    let from_user = request
        .body()
        .get("user")
        .and_then(|v| v.as_str())
        .and_then(AgentIds::read)
        .and_then(|ids| ids.session_id);
    let id = from_user.or_else(|| request.native()?.client_session.clone())?;
    kept_id(id.trim())
}

/// An id as kept where a bad one is no id rather than a refusal (a session):
/// past the length cap a stable hash of it, `None` with control characters.
pub fn kept_id(id: &str) -> Option<String> {
    if id.chars().any(char::is_control) {
        return None;
    }
    checked(id, "").ok()
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
