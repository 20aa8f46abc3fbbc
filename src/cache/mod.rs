//! Answers served without calling a model: the exact cache (an identical
//! request) and the semantic cache (a question close enough to one answered
//! a moment ago). Both are per tenant; neither reserves or charges anything.

mod exact;
pub mod semantic;

pub use exact::{CacheKey, CachedResponse, ResponseCache};
