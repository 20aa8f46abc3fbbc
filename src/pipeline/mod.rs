//! The chat use case, free of HTTP types: route → rate limit → reserve →
//! dispatch with failover → settle, with a ledger row per upstream attempt.

pub mod attempt;
pub mod chat;
pub mod context;
pub mod degraded;
pub mod hold;
pub mod record;
pub mod settle;
pub mod sse;
pub mod stream;

pub use chat::{ChatOutcome, handle_chat};
pub use context::{RequestContext, RequestMeter};
