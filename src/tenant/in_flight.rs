//! Calls in flight: a tenant's (its tier's `max_in_flight`, or its own) and
//! a key's cap on calls open at once. A call takes a slot before anything is
//! held or sent and gives it back when it ends, on every path (its guard's
//! drop). The slot is the call's, not an attempt's: a call's holds come and
//! go (one per billed attempt, one per step of a growing stream), so they
//! cannot count calls. In memory the slots are counted here, under the
//! tenant actor; in Redis (`shared/leases.rs`) each slot is a lease with an
//! expiry, so a replica that dies gives its slots back when they expire.

use std::collections::HashMap;
use std::fmt;

use crate::ids::KeyId;

/// How long past the request's deadline a slot outlives a call that never
/// gave it back: only a replica that died keeps one that long.
pub const CALL_MARGIN_MS: u64 = 5_000;

/// One call's slot, unique in its tenant (random where replicas share it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallId(pub u64);

/// The caps a call is counted against (`None`: no cap in that scope).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallCaps {
    pub tenant: Option<u32>,
    pub key: Option<u32>,
}

impl CallCaps {
    pub fn any(&self) -> bool {
        self.tenant.is_some() || self.key.is_some()
    }
}

/// A call asking for a slot.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: CallId,
    pub key: KeyId,
    pub caps: CallCaps,
    /// When the slot is given back if its call never says so (a dead replica).
    pub expires_at_ms: u64,
}

/// Where a cap refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallScope {
    Tenant,
    Key(KeyId),
}

impl CallScope {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            CallScope::Tenant => "tenant",
            CallScope::Key(_) => "key",
        }
    }
}

impl fmt::Display for CallScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallScope::Tenant => f.write_str("the tenant"),
            CallScope::Key(key) => write!(f, "key `{key}`"),
        }
    }
}

/// A call refused: its scope already has `limit` calls in flight.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{scope} has its cap of {limit} calls in flight; retry when one ends")]
pub struct Crowded {
    pub scope: CallScope,
    pub limit: u32,
}

/// The slots open in one tenant, by call, and how many each key has.
#[derive(Debug, Default)]
pub struct InFlight {
    open: HashMap<CallId, (KeyId, u64)>,
    by_key: HashMap<KeyId, u32>,
}

impl InFlight {
    /// Opens the call's slot if neither cap is reached, all or nothing.
    pub fn enter(&mut self, call: &Call, now_ms: u64) -> Result<(), Crowded> {
        self.expire(now_ms);
        if self.open.contains_key(&call.id) {
            return Ok(());
        }
        let tenant = u32::try_from(self.open.len()).unwrap_or(u32::MAX);
        if let Some(limit) = call.caps.tenant.filter(|limit| tenant >= *limit) {
            return Err(Crowded {
                scope: CallScope::Tenant,
                limit,
            });
        }
        let key = self.by_key.get(&call.key).copied().unwrap_or(0);
        if let Some(limit) = call.caps.key.filter(|limit| key >= *limit) {
            return Err(Crowded {
                scope: CallScope::Key(call.key.clone()),
                limit,
            });
        }
        self.open
            .insert(call.id, (call.key.clone(), call.expires_at_ms));
        *self.by_key.entry(call.key.clone()).or_default() += 1;
        Ok(())
    }

    /// Gives a slot back; one given back before changes nothing.
    pub fn leave(&mut self, id: CallId) -> bool {
        let Some((key, _)) = self.open.remove(&id) else {
            return false;
        };
        if let Some(count) = self.by_key.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.by_key.remove(&key);
            }
        }
        true
    }

    pub fn holds(&self, id: CallId) -> bool {
        self.open.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Slots past their expiry: a guard gives its slot back on every path,
    /// so only a call this book lost track of gets here.
    fn expire(&mut self, now_ms: u64) {
        let lapsed: Vec<CallId> = self
            .open
            .iter()
            .filter(|(_, (_, expires))| *expires <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in lapsed {
            self.leave(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: u64, key: &str, tenant: Option<u32>, per_key: Option<u32>) -> Call {
        Call {
            id: CallId(id),
            key: KeyId::new(key),
            caps: CallCaps {
                tenant,
                key: per_key,
            },
            expires_at_ms: 1_000,
        }
    }

    #[test]
    fn a_tenant_cap_of_two_admits_two_then_refuses_until_one_leaves() {
        let mut book = InFlight::default();
        assert!(book.enter(&call(1, "a", Some(2), None), 0).is_ok());
        assert!(book.enter(&call(2, "b", Some(2), None), 0).is_ok());
        let refused = book.enter(&call(3, "a", Some(2), None), 0).unwrap_err();
        assert_eq!(refused.scope, CallScope::Tenant);
        assert_eq!(refused.limit, 2);
        assert!(book.leave(CallId(1)));
        assert!(!book.leave(CallId(1)), "a second leave changes nothing");
        assert!(book.enter(&call(3, "a", Some(2), None), 0).is_ok());
    }

    #[test]
    fn a_key_cap_counts_only_that_keys_calls() {
        let mut book = InFlight::default();
        assert!(book.enter(&call(1, "a", None, Some(1)), 0).is_ok());
        let refused = book.enter(&call(2, "a", None, Some(1)), 0).unwrap_err();
        assert_eq!(refused.scope, CallScope::Key(KeyId::new("a")));
        assert!(book.enter(&call(3, "b", None, Some(1)), 0).is_ok());
        assert_eq!(book.len(), 2);
    }

    #[test]
    fn a_refused_call_takes_nothing_and_lapsed_slots_are_given_back() {
        let mut book = InFlight::default();
        assert!(book.enter(&call(1, "a", Some(1), Some(5)), 0).is_ok());
        assert!(book.enter(&call(2, "a", Some(1), Some(5)), 0).is_err());
        assert_eq!(book.len(), 1);
        assert!(book.enter(&call(2, "a", Some(1), Some(5)), 1_000).is_ok());
        assert!(!book.holds(CallId(1)));
    }
}
