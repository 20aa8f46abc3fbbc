//! Who is asking and how the request is labelled.

use std::sync::Arc;

use crate::directory::{KeyRecord, TenantRecord};
use crate::ids::RequestId;

#[derive(Debug, Clone)]
pub struct RequestContext {
    pub tenant: Arc<TenantRecord>,
    pub key: Arc<KeyRecord>,
    /// `X-Tollgate-Feature`, for cost attribution.
    pub feature: String,
    /// The gateway's own id.
    pub request_id: RequestId,
    /// The caller's `X-Request-Id`, if it sent one.
    pub client_request_id: Option<String>,
    /// From W3C `traceparent`.
    pub trace_id: Option<String>,
    /// Forwarded upstream unchanged.
    pub traceparent: Option<String>,
}
