//! Who is asking and how the request is labelled.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Duration;

use crate::directory::{KeyRecord, TenantRecord};
use crate::ids::RequestId;
use crate::ledger::Api;
use crate::routing::Complexity;

#[derive(Debug, Clone)]
pub struct RequestContext {
    pub tenant: Arc<TenantRecord>,
    pub key: Arc<KeyRecord>,
    /// `X-Tollgate-Feature`, for cost attribution.
    pub feature: String,
    /// `X-Tollgate-End-User` as sent: the tier decides whether it is trusted.
    pub end_user_header: Option<String>,
    /// The end user charged, once the tier has said which source it trusts.
    pub end_user: Option<String>,
    /// The agent run: `X-Tollgate-Session`, else the agent's own session header.
    pub session: Option<String>,
    /// The door the request came in by.
    pub api: Api,
    /// The gateway's own id.
    pub request_id: RequestId,
    /// The caller's `X-Request-Id`, if it sent one.
    pub client_request_id: Option<String>,
    /// From W3C `traceparent`.
    pub trace_id: Option<String>,
    /// Forwarded upstream unchanged when traces are off.
    pub traceparent: Option<String>,
    /// The request's span when traces are exported: each attempt's span is its child.
    pub span: Option<crate::telemetry::traces::SpanContext>,
    /// `X-Tollgate-Cache: bypass`: no cache answers this request.
    pub cache_bypass: bool,
    /// `X-Tollgate-Complexity`, for complexity routes (else they estimate it).
    pub complexity: Option<Complexity>,
    /// The caller's `anthropic-version` and `anthropic-beta` (the Messages
    /// door), forwarded to Anthropic upstreams in place of the configured version.
    pub anthropic_headers: Vec<(&'static str, String)>,
}

/// What the handler needs to label and time the request once it is over.
#[derive(Debug, Default)]
pub struct RequestMeter {
    /// The resolved route (`none` until a route is known).
    pub route: RefCell<Option<String>>,
    /// Time spent waiting on upstreams (to the full body, or a stream's head).
    pub upstream: Cell<Duration>,
    /// Time spent not working on purpose: retry backoff and provider queues.
    pub waited: Cell<Duration>,
    /// The answer's tokens (prompt, completion), once a complete answer is charged.
    pub usage: Cell<Option<(u64, u64)>>,
    pub trace_id: RefCell<Option<String>>,
    /// Provider-run tools the door took out of the request's offer (`X-Tollgate-Removed-Tools`).
    pub removed_tools: RefCell<Vec<String>>,
}

impl RequestMeter {
    pub fn route_label(&self) -> String {
        self.route
            .borrow()
            .clone()
            .unwrap_or_else(|| "none".to_owned())
    }

    pub fn add_upstream(&self, duration: Duration) {
        self.upstream
            .set(self.upstream.get().saturating_add(duration));
    }

    pub fn add_wait(&self, duration: Duration) {
        self.waited.set(self.waited.get().saturating_add(duration));
    }

    /// What the gateway itself spent of `latency`: neither upstream calls nor waits.
    pub fn overhead(&self, latency: Duration) -> Duration {
        latency
            .saturating_sub(self.upstream.get())
            .saturating_sub(self.waited.get())
    }
}
