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

    /// Money and tokens of one month (`YYYY-MM`).
    pub fn month(&self, month: &str) -> String {
        format!("{}:m:{month}", self.prefix)
    }
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
        ] {
            assert!(key.starts_with("tg:{acme}:"), "{key}");
        }
    }
}
