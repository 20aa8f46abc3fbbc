//! `[prompt_cache]`: the ledger's review of tenants' cache breakpoints.

use serde::Deserialize;

/// `[prompt_cache]`: how the ledger's review runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PromptCacheConfig {
    /// How often the review runs; 0 turns it off (breakpoints stay on in `auto`).
    pub review_interval_ms: u64,
    /// How far back a review reads the ledger.
    pub window_hours: u64,
    /// Writing calls a window needs before it may turn breakpoints off.
    pub min_writes: u64,
}

impl Default for PromptCacheConfig {
    fn default() -> Self {
        PromptCacheConfig {
            review_interval_ms: 300_000,
            window_hours: 24,
            min_writes: 20,
        }
    }
}
