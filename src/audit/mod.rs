//! Audit payloads: for a tenant that opted in (`audit_payloads`), each
//! call's request and response bodies, keys redacted, kept in the database
//! for `audit.retention_days`. Cache hits and refusals are kept too. Bodies
//! go to their own table by a writer off the request path, never to logs.

pub mod redact;
mod stream;
mod writer;

use std::sync::Arc;

use bytes::Bytes;

use crate::clock::SharedClock;
use crate::ledger::Api;

pub use crate::config::AuditConfig;
pub use stream::Audited;
pub use writer::AuditLog;

/// One call being audited: what it sent, waiting for what it is answered.
pub struct Capture {
    log: Arc<AuditLog>,
    clock: SharedClock,
    request_id: String,
    tenant_id: String,
    key_id: String,
    api: Api,
    request: Bytes,
}

impl Capture {
    pub fn new(
        log: &Arc<AuditLog>,
        clock: &SharedClock,
        auth: &crate::api::extract::TenantAuth,
        api: Api,
        request_id: &crate::ids::RequestId,
        request: Bytes,
    ) -> Capture {
        Capture {
            log: log.clone(),
            clock: clock.clone(),
            request_id: request_id.to_string(),
            tenant_id: auth.tenant.id.to_string(),
            key_id: auth.key.id.to_string(),
            api,
            request: worth_keeping(request, log.max_body_bytes()),
        }
    }

    /// The answer, as the caller got it (`cut`: only its start was kept),
    /// handed to the writer with the request: redacting and cutting happen
    /// there, off the request path.
    pub fn finish(self, status: u16, cache: Option<&str>, response: Bytes, cut: bool) {
        let now_ms = self.clock.now_ms();
        self.log.record(Payload {
            request_id: self.request_id,
            tenant_id: self.tenant_id,
            key_id: self.key_id,
            api: self.api,
            status,
            cache: cache.map(str::to_owned),
            request: self.request,
            response,
            cut,
            created_at_ms: now_ms,
        });
    }

    /// How far a stream's events are worth collecting: a key cut at the
    /// limit must still be seen whole to be redacted.
    pub fn collect_limit(&self) -> usize {
        self.log.max_body_bytes().saturating_add(256)
    }
}

/// A call's bodies as handed over, not yet redacted.
pub(crate) struct Payload {
    request_id: String,
    tenant_id: String,
    key_id: String,
    api: Api,
    status: u16,
    cache: Option<String>,
    request: Bytes,
    response: Bytes,
    cut: bool,
    created_at_ms: u64,
}

impl Payload {
    /// The bytes it holds while queued.
    fn size(&self) -> usize {
        self.request.len().saturating_add(self.response.len())
    }

    /// The row kept: both bodies redacted, then cut to `limit` bytes.
    fn into_row(self, limit: usize) -> entity::audit_payload::ActiveModel {
        let (request, cut_request) = kept(&self.request, limit);
        let (response, cut_response) = kept(&self.response, limit);
        entity::audit_payload::ActiveModel {
            id: sea_orm::ActiveValue::NotSet,
            request_id: sea_orm::Set(self.request_id),
            tenant_id: sea_orm::Set(self.tenant_id),
            key_id: sea_orm::Set(self.key_id),
            api: sea_orm::Set(self.api.as_str().to_owned()),
            status: sea_orm::Set(i32::from(self.status)),
            cache: sea_orm::Set(self.cache),
            request_body: sea_orm::Set(request),
            response_body: sea_orm::Set(response),
            truncated: sea_orm::Set(self.cut || cut_request || cut_response),
            created_at_ms: sea_orm::Set(i64::try_from(self.created_at_ms).unwrap_or(i64::MAX)),
        }
    }
}

/// As much of a body as its row can keep, and a margin so that a key cut at
/// the limit is still seen whole to be redacted: a copy, so the rest of a
/// large body is not held while the payload waits for the writer.
fn worth_keeping(body: Bytes, limit: usize) -> Bytes {
    let keep = limit.saturating_add(256);
    if body.len() <= keep {
        return body;
    }
    Bytes::copy_from_slice(&body[..keep])
}

/// `body` redacted, then cut to `limit` bytes (at a character boundary); and whether it was cut.
fn kept(body: &[u8], limit: usize) -> (String, bool) {
    let mut text = redact::redact_body(body);
    if text.len() <= limit {
        return (text, false);
    }
    let mut end = limit.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_request_is_held_only_as_far_as_its_row_keeps_it() {
        let body = Bytes::from(vec![b'x'; 4 * 1024 * 1024]);
        let kept_part = worth_keeping(body, 1024);
        assert_eq!(kept_part.len(), 1024 + 256);
        let small = Bytes::from_static(b"{}");
        assert_eq!(worth_keeping(small.clone(), 1024), small);
    }

    #[test]
    fn a_body_past_the_limit_is_cut_at_a_character_and_marked() {
        assert_eq!(kept(b"short", 10), ("short".to_owned(), false));
        let (text, cut) = kept("ééééé".as_bytes(), 5);
        assert_eq!((text.as_str(), cut), ("éé", true));
    }
}
