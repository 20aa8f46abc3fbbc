//! The chat use case, free of HTTP types: admission (`chat.rs`: route, tier,
//! cache, rate limit, the worst case reserved) → the attempt loop
//! (`dispatch.rs`: every attempt under a hold, `hold.rs`; the provider decides
//! retries) → each attempt a value (`attempt.rs`: journaled, sent, ended by
//! one verb that writes its row) → settlement (`settle.rs`, and `stream.rs` for streams) through
//! the ledger, which writes each attempt's row as it settles (`record.rs`).
//! `count.rs` answers the Messages door's count_tokens from the estimator.

pub mod attempt;
pub mod cache_charge;
pub mod chat;
pub mod context;
pub mod count;
pub mod degraded;
pub mod dispatch;
pub mod end_user;
pub mod hold;
pub mod record;
pub mod semantic;
pub mod settle;
pub mod sse;
pub mod stream;

pub use chat::{ChatOutcome, handle_chat};
pub use context::{RequestContext, RequestMeter};
