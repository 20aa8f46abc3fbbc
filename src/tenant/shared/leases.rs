//! Leases with an expiry: slots counted across replicas. Each set of leases
//! is a sorted set of lease ids scored by when each expires; every script
//! first drops the expired ones, so a replica that dies holding leases gives
//! them back when they expire, with no one to sweep them. A tenant's calls
//! in flight (`in_flight.rs`: the tenant's set and its keys', in one script,
//! all or nothing) and a provider's calls across the fleet (`provider/fleet.rs`)
//! are both counted this way.

use super::{SharedQuota, SharedStore, StoreFailure, field, keys};
use crate::ids::KeyId;
use crate::tenant::in_flight::{Call, CallId, CallScope, Crowded};

/// KEYS: sets of leases. ARGV: now, the lease id, its expiry, then one cap
/// per set (-1: none). A lease is taken in every set or in none; the reply is
/// `0`, or the 1-based index of the first set at its cap.
pub(super) const LEASE: &str = r"
local now = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local cap = tonumber(ARGV[3 + i])
  if cap >= 0 and not redis.call('ZSCORE', key, ARGV[2]) and redis.call('ZCARD', key) >= cap then
    return {tostring(i)}
  end
end
local ttl = math.max(tonumber(ARGV[3]) - now, 1)
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, ARGV[3], ARGV[2])
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return {'0'}
";

/// KEYS: sets of leases. ARGV: the lease id, given back in every set.
pub(super) const UNLEASE: &str = r"
for _, key in ipairs(KEYS) do
  redis.call('ZREM', key, ARGV[1])
end
return {'1'}
";

/// KEYS[1]: a set of leases. ARGV: now. The leases not yet expired.
pub(super) const LEASES: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]))
return {tostring(redis.call('ZCARD', KEYS[1]))}
";

impl SharedStore {
    /// Takes lease `id` in every set of `sets` (a set and its cap, `None`:
    /// none), or in none: `Some(i)` names the first set at its cap.
    pub async fn lease(
        &self,
        sets: &[(String, Option<u32>)],
        id: &str,
        expires_at_ms: u64,
        now_ms: u64,
    ) -> Result<Option<usize>, StoreFailure> {
        let keys: Vec<String> = sets.iter().map(|(key, _)| key.clone()).collect();
        let mut args = vec![now_ms.to_string(), id.to_owned(), expires_at_ms.to_string()];
        args.extend(
            sets.iter()
                .map(|(_, cap)| cap.map_or_else(|| "-1".to_owned(), |c| c.to_string())),
        );
        let reply = self.run(&self.scripts.lease, &keys, &args).await?;
        let at: usize = field(&reply, 0)?
            .parse()
            .map_err(|_| StoreFailure("unexpected lease reply".to_owned()))?;
        Ok(at.checked_sub(1))
    }

    /// Gives lease `id` back in every set of `keys`.
    pub async fn unlease(&self, keys: &[String], id: &str) -> Result<(), StoreFailure> {
        self.run(&self.scripts.unlease, keys, &[id.to_owned()])
            .await
            .map(drop)
    }

    /// The leases of one set not yet expired.
    pub async fn leases(&self, key: &str, now_ms: u64) -> Result<u64, StoreFailure> {
        let reply = self
            .run(
                &self.scripts.leases,
                &[key.to_owned()],
                &[now_ms.to_string()],
            )
            .await?;
        field(&reply, 0)?
            .parse()
            .map_err(|_| StoreFailure("unexpected leases reply".to_owned()))
    }
}

impl SharedQuota {
    /// The tenant's set of calls in flight and the key's.
    fn call_sets(&self, key: &KeyId) -> [String; 2] {
        [self.keys.calls(), self.keys.key_calls(key.as_str())]
    }

    /// Opens a call's slot in the tenant's set and its key's, or neither.
    pub async fn enter_call(
        &self,
        call: &Call,
        now_ms: u64,
    ) -> Result<Result<(), Crowded>, StoreFailure> {
        let [tenant, key] = self.call_sets(&call.key);
        let sets = [(tenant, call.caps.tenant), (key, call.caps.key)];
        let refused = self
            .store
            .lease(&sets, &call.id.0.to_string(), call.expires_at_ms, now_ms)
            .await?;
        Ok(match refused {
            None => Ok(()),
            Some(0) => Err(Crowded {
                scope: CallScope::Tenant,
                limit: call.caps.tenant.unwrap_or(0),
            }),
            Some(_) => Err(Crowded {
                scope: CallScope::Key(call.key.clone()),
                limit: call.caps.key.unwrap_or(0),
            }),
        })
    }

    pub async fn leave_call(&self, id: CallId, key: &KeyId) -> Result<(), StoreFailure> {
        self.store
            .unlease(&self.call_sets(key), &id.0.to_string())
            .await
    }
}

/// A key's set of calls, named by the key's id as key-safe text.
pub(super) fn key_calls(prefix: &str, key: &str) -> String {
    format!("{prefix}:f:{}", keys::hex_id(key))
}
