//! The semantic cache's settings: `[cache.semantic]` (where the index lives)
//! and a route's `semantic_cache = { … }` (whether and how it is used).

use serde::Deserialize;

/// Similarities are in millionths: 1,000,000 is the same direction.
pub const ONE: u32 = 1_000_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SemanticCacheConfig {
    /// `memory` (one process) or `postgres` (shared by replicas; the
    /// server needs the pgvector extension).
    pub store: SemanticStore,
    /// The store's database; default `storage.database_url` when that is PostgreSQL.
    pub database_url: Option<String>,
    pub max_entries_per_tenant: usize,
    /// In process only: the shared store is bounded by entries and TTL.
    pub max_bytes_per_tenant: usize,
    /// A lookup or store slower than this is a miss.
    pub timeout_ms: u64,
    /// In process only: a conversation context with more cached answers than
    /// this is searched approximately (sign bits first, then the nearest
    /// exactly); up to it, exactly.
    pub exact_search_max_entries: usize,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SemanticStore {
    #[default]
    Memory,
    Postgres,
}

impl SemanticStore {
    /// The `store` label of the semantic cache's metrics.
    pub const fn name(self) -> &'static str {
        match self {
            SemanticStore::Memory => "memory",
            SemanticStore::Postgres => "postgres",
        }
    }
}

impl Default for SemanticCacheConfig {
    fn default() -> Self {
        SemanticCacheConfig {
            store: SemanticStore::Memory,
            database_url: None,
            max_entries_per_tenant: 10_000,
            // An exact comparison costs about half a microsecond at 1,536
            // dimensions: 256 of them cost about the approximate search of 10,000.
            exact_search_max_entries: 256,
            max_bytes_per_tenant: 64 * 1024 * 1024,
            timeout_ms: 100,
        }
    }
}

impl SemanticCacheConfig {
    /// The PostgreSQL database a `postgres` store uses.
    pub fn store_url<'a>(&'a self, ledger_url: &'a str) -> Result<&'a str, String> {
        let url = self.database_url.as_deref().unwrap_or(ledger_url);
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(url)
        } else {
            Err(
                "cache.semantic.store = \"postgres\" needs cache.semantic.database_url \
                 (or storage.database_url) to name a PostgreSQL database with pgvector"
                    .to_owned(),
            )
        }
    }
}

/// A route's `semantic_cache` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSemanticRoute {
    pub threshold: Threshold,
    pub ttl_ms: u64,
    /// The route the question is embedded through, charged like any call.
    pub embedding_route: String,
    /// Cache answers sampled at a temperature above 0 too. Off by default:
    /// such an answer was one draw among many, and absent `temperature` is
    /// the provider's default (1), not 0.
    #[serde(default)]
    pub any_temperature: bool,
    /// A last user turn containing any of these words (case-insensitive)
    /// asks about live data: never answered from the cache.
    #[serde(default)]
    pub bypass_when: Vec<String>,
    /// One end user's answers serve the tenant's other end users too. Off by
    /// default: an end user could otherwise plant an answer that others get
    /// for a question merely close to theirs.
    #[serde(default)]
    pub share_across_end_users: bool,
}

/// `0.92` or `"0.92"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Threshold {
    Number(f64),
    Text(String),
}

/// A route's semantic cache, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemanticRoute {
    /// In millionths of a cosine.
    pub threshold: u32,
    pub ttl_ms: u64,
    pub embedding_route: String,
    pub any_temperature: bool,
    /// Lowercased.
    pub bypass_when: Vec<String>,
    /// Answers are shared by the tenant's end users (else each end user's are theirs).
    pub share_across_end_users: bool,
}

impl RawSemanticRoute {
    /// `others` tells whether a route of that name exists and has a
    /// semantic cache itself.
    pub fn validate(
        &self,
        route: &str,
        others: impl Fn(&str) -> Option<bool>,
    ) -> Result<SemanticRoute, (String, String)> {
        let entry = |field: &str| format!("routes.{route}.semantic_cache.{field}");
        let text = match &self.threshold {
            // Display gives a float's shortest exact decimal: parsed as text, no arithmetic.
            Threshold::Number(n) => n.to_string(),
            Threshold::Text(t) => t.clone(),
        };
        let threshold = parse_millionths(&text)
            .filter(|t| (1..=ONE).contains(t))
            .ok_or_else(|| {
                (
                    entry("threshold"),
                    format!(
                        "`{text}` is not a similarity above 0 and at most 1 (six decimals at most)"
                    ),
                )
            })?;
        if self.ttl_ms == 0 {
            return Err((entry("ttl_ms"), "must be positive".to_owned()));
        }
        match others(&self.embedding_route) {
            None => {
                return Err((
                    entry("embedding_route"),
                    format!("unknown route `{}`", self.embedding_route),
                ));
            }
            Some(true) => {
                return Err((
                    entry("embedding_route"),
                    format!("`{}` has a semantic cache itself", self.embedding_route),
                ));
            }
            Some(false) => {}
        }
        Ok(SemanticRoute {
            threshold,
            ttl_ms: self.ttl_ms,
            embedding_route: self.embedding_route.clone(),
            any_temperature: self.any_temperature,
            share_across_end_users: self.share_across_end_users,
            bypass_when: self.bypass_when.iter().map(|w| w.to_lowercase()).collect(),
        })
    }
}

/// `0.92` as 920,000; `1` as 1,000,000; at most six decimals.
fn parse_millionths(text: &str) -> Option<u32> {
    let (whole, fraction) = text.trim().split_once('.').unwrap_or((text.trim(), ""));
    if whole.is_empty() && fraction.is_empty() || fraction.len() > 6 {
        return None;
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: u32 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let padded = format!("{fraction:0<6}");
    let fraction: u32 = padded.parse().ok()?;
    whole.checked_mul(ONE)?.checked_add(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(threshold: Threshold, embedding_route: &str) -> RawSemanticRoute {
        RawSemanticRoute {
            threshold,
            ttl_ms: 1000,
            embedding_route: embedding_route.to_owned(),
            any_temperature: false,
            bypass_when: vec!["Today".into()],
            share_across_end_users: false,
        }
    }

    fn others(name: &str) -> Option<bool> {
        match name {
            "embed" => Some(false),
            "chat" => Some(true),
            _ => None,
        }
    }

    #[test]
    fn thresholds_parse_exactly_from_numbers_and_text() {
        let ok = raw(Threshold::Number(0.92), "embed")
            .validate("chat", others)
            .unwrap();
        assert_eq!(ok.threshold, 920_000);
        assert_eq!(ok.bypass_when, ["today"]);
        let text = raw(Threshold::Text("0.999999".into()), "embed");
        assert_eq!(text.validate("chat", others).unwrap().threshold, 999_999);
        assert_eq!(parse_millionths("1"), Some(ONE));
        for bad in ["0", "1.5", "0.1234567", "-0.5", "x", ""] {
            let raw = raw(Threshold::Text(bad.into()), "embed");
            assert!(raw.validate("chat", others).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_embedding_route_must_exist_and_not_be_cached_itself() {
        let (entry, reason) = raw(Threshold::Number(0.9), "nope")
            .validate("chat", others)
            .unwrap_err();
        assert_eq!(entry, "routes.chat.semantic_cache.embedding_route");
        assert!(reason.contains("unknown route `nope`"), "{reason}");
        let (_, reason) = raw(Threshold::Number(0.9), "chat")
            .validate("chat", others)
            .unwrap_err();
        assert!(reason.contains("semantic cache itself"), "{reason}");
    }
}
