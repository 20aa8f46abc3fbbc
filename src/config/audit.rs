//! `[audit]`: how opted-in tenants' payloads are kept.

use serde::Deserialize;

/// `[audit]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Payloads older than this are deleted by the ledger's roll-up runs; 0 keeps them.
    pub retention_days: u32,
    /// A request or response body is kept up to this size, marked `truncated` past it.
    pub max_body_bytes: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            retention_days: 30,
            max_body_bytes: 1024 * 1024,
        }
    }
}
