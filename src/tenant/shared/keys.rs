//! Redis key names of one tenant. The `{tenant}` hash tag keeps all of them
//! in one Cluster slot, which a multi-key script needs.

use crate::ids::TenantId;

#[derive(Debug, Clone)]
pub struct TenantKeys {
    prefix: String,
}

impl TenantKeys {
    pub fn new(tenant: &TenantId) -> TenantKeys {
        TenantKeys {
            prefix: format!("tg:{{{tenant}}}"),
        }
    }

    /// Request and token buckets.
    pub fn buckets(&self) -> String {
        format!("{}:b", self.prefix)
    }

    /// Held reservations by id.
    pub fn held(&self) -> String {
        format!("{}:h", self.prefix)
    }

    /// Held reservation ids by expiry.
    pub fn expiry(&self) -> String {
        format!("{}:x", self.prefix)
    }

    /// Where the hashes of end users' windows begin.
    pub fn end_user_prefix(&self) -> String {
        format!("{}:u:", self.prefix)
    }

    /// One end user's spend and bucket in one budget window.
    pub fn end_user(&self, id: &str, window: &str) -> String {
        format!("{}:u:{}:{window}", self.prefix, hex_id(id))
    }

    /// One agent run's spend and holds (see `scripts.rs`).
    pub fn session(&self, id: &str) -> String {
        format!("{}:s:{}", self.prefix, hex_id(id))
    }

    /// The tenant's calls in flight, as leases by expiry (see `leases.rs`).
    pub fn calls(&self) -> String {
        format!("{}:f", self.prefix)
    }

    /// One key's calls in flight.
    pub fn key_calls(&self, key: &str) -> String {
        super::leases::key_calls(&self.prefix, key)
    }

    /// Prepaid balances and lifetime spend (see `scripts.rs`).
    pub fn credit(&self) -> String {
        format!("{}:c", self.prefix)
    }

    /// Spend in one day, ISO week or lifetime, by the window's key.
    pub fn window(&self, key: &str) -> String {
        format!("{}:w:{key}", self.prefix)
    }

    /// Money and tokens of one month (`YYYY-MM`).
    pub fn month(&self, month: &str) -> String {
        format!("{}:m:{month}", self.prefix)
    }
}

/// An end user id as key-safe text: ids are opaque, and may hold `:`, `|` or braces.
pub fn hex_id(id: &str) -> String {
    use std::fmt::Write as _;
    id.bytes()
        .fold(String::with_capacity(id.len() * 2), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_tenant_shares_its_hash_tag() {
        let keys = TenantKeys::new(&TenantId::new("acme"));
        for key in [
            keys.buckets(),
            keys.held(),
            keys.expiry(),
            keys.month("2026-11"),
            keys.credit(),
            keys.window("2026-W49"),
            keys.calls(),
            keys.key_calls("k1"),
        ] {
            assert!(key.starts_with("tg:{acme}:"), "{key}");
        }
    }
}
