//! One ProviderActor per configured upstream owns its circuit breaker and
//! concurrency limit. It only decides (admit or skip); the HTTP call runs on
//! the request's own worker with that worker's client, and the outcome comes
//! back as a small message, or, for a healthy call under a closed breaker,
//! through the slots it publishes (`slots.rs`). No request or response bytes
//! pass a mailbox.

pub mod actor;
pub mod adapters;
pub mod adaptive;
pub mod breaker;
pub mod call;
pub mod classify;
pub mod clients;
pub mod fleet;
pub mod retry;
pub mod shared_breaker;
pub mod slots;

pub use actor::{Permit, ProviderHandle, Skip};
pub use classify::Class;
