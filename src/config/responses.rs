//! `[responses]`: how the Responses door keeps stored responses.

use serde::Deserialize;

/// `[responses]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// A stored response is forgotten this long after it was answered.
    pub retention_days: u32,
    /// What one tenant's stored responses may take; the oldest make room.
    pub max_bytes_per_tenant: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            retention_days: 30,
            max_bytes_per_tenant: 64 * 1024 * 1024,
        }
    }
}
