//! The prompts the gateway places before a caller's own: the route's
//! platform prompt, then the tenant's. The most stable text goes first, so a
//! provider's prompt cache hits on it whatever the caller sends after:
//! Anthropic gets a cache breakpoint after each (`cache_control`, `place`),
//! OpenAI-compatible providers rely on the order alone. The placed text is
//! counted into the reservation like the caller's own, and is part of both
//! caches' keys: a different prompt is a different question.
//!
//! Breakpoints cost: a cache write is priced above plain input. Where a
//! tenant's writes cost more than its reads save, `advisor` turns its
//! breakpoints off, from the ledger, not from a guess.

pub mod advisor;
pub mod place;

use sha2::{Digest, Sha256};

use crate::config::Route;
use crate::directory::TenantRecord;
use crate::tokenize::{Counting, Estimator};

pub use self::advisor::{Advisor, Breakpoints};

pub use crate::config::MAX_PROMPT_BYTES;

/// The key of a tenant prompt that applies to every route without one of its own.
pub const EVERY_ROUTE: &str = "*";

/// What one request gets placed before its own content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix<'a> {
    pub platform: Option<&'a str>,
    pub tenant: Option<&'a str>,
    /// Anthropic cache breakpoints after each placed prompt.
    pub breakpoints: bool,
}

impl<'a> Prefix<'a> {
    /// The route's platform prompt and the tenant's prompt for the route (or
    /// for every route); `None` when neither has one. `advised` is whether
    /// the ledger's review leaves the tenant's breakpoints on.
    pub fn of(route: &'a Route, tenant: &'a TenantRecord, advised: bool) -> Option<Prefix<'a>> {
        let platform = route.platform_prompt.as_deref();
        let tenant_prompt = tenant
            .prompts
            .get(route.name.as_str())
            .or_else(|| tenant.prompts.get(EVERY_ROUTE))
            .map(String::as_str);
        if platform.is_none() && tenant_prompt.is_none() {
            return None;
        }
        let breakpoints = match tenant.prompt_breakpoints {
            Breakpoints::On => true,
            Breakpoints::Off => false,
            Breakpoints::Auto => advised,
        };
        Some(Prefix {
            platform,
            tenant: tenant_prompt,
            breakpoints,
        })
    }

    /// The placed texts, in order.
    pub fn texts(&self) -> impl Iterator<Item = &'a str> + use<'a> {
        self.platform.into_iter().chain(self.tenant)
    }

    /// Input tokens the placed texts add, by the route's countings.
    pub fn tokens(&self, estimator: &Estimator, countings: &[Counting]) -> u64 {
        let texts: Vec<&str> = self.texts().collect();
        estimator.placed_for(countings, &texts)
    }

    /// What a cache key must tell apart: the texts, each with its length.
    /// Breakpoints do not change an answer, so they are left out.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        for text in [self.platform, self.tenant] {
            let text = text.unwrap_or_default();
            hasher.update(u64::try_from(text.len()).unwrap_or(u64::MAX).to_le_bytes());
            hasher.update(text.as_bytes());
        }
        hasher.finalize().into()
    }
}
