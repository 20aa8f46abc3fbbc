//! A tenant's prepaid balances as the book holds them: the tenant's pool of
//! grants and each key's (`grants.rs` states the drawing rule). A grant is
//! known by its ledger row, so one heard twice (from the ledger's load and
//! from the admin call that wrote it) counts once. Spend is the book's
//! lifetime totals; every settle draws its charge from both pools it touches.

use std::collections::HashMap;

use super::grants::{Grant, GrantState, Pool};
use crate::ids::KeyId;
use crate::ledger::credits::CreditTotals;
use crate::money::Nanos;

#[derive(Debug, Clone, Default)]
pub struct Credits {
    tenant: Pool,
    keys: HashMap<KeyId, Pool>,
}

impl Credits {
    /// The ledger's grants and draws, and any grant this book heard of that
    /// the load predates (with what it drew since).
    pub fn reload(&mut self, totals: &CreditTotals) {
        let mut next = Credits::default();
        for (key, state) in &totals.grants {
            next.pool_mut(key.as_ref()).add(state.clone());
        }
        for (key, pool) in self.pools() {
            for state in pool.grants() {
                next.pool_mut(key).add(state.clone());
            }
        }
        *self = next;
    }

    fn pools(&self) -> impl Iterator<Item = (Option<&KeyId>, &Pool)> {
        std::iter::once((None, &self.tenant)).chain(self.keys.iter().map(|(k, p)| (Some(k), p)))
    }

    fn pool_mut(&mut self, key: Option<&KeyId>) -> &mut Pool {
        match key {
            None => &mut self.tenant,
            Some(key) => self.keys.entry(key.clone()).or_default(),
        }
    }

    pub fn pool(&self, key: Option<&KeyId>) -> Option<&Pool> {
        match key {
            None => Some(&self.tenant),
            Some(key) => self.keys.get(key),
        }
    }

    /// Adds a grant unless this row was added before; says whether it was new.
    pub fn add(&mut self, key: Option<&KeyId>, grant: Grant) -> bool {
        self.pool_mut(key).add(GrantState {
            grant,
            drawn: Nanos::ZERO,
            booked: false,
        })
    }

    /// What the tenant's (`None`) or a key's grants allow in all at `now_ms`.
    pub fn limit(&self, key: Option<&KeyId>, now_ms: u64) -> Nanos {
        self.pool(key)
            .map_or(Nanos::ZERO, |pool| pool.limit(now_ms))
    }

    /// A settle's charge, drawn from the tenant's grants and its key's.
    pub fn draw(&mut self, key: &KeyId, charge: Nanos, now_ms: u64) {
        if charge == Nanos::ZERO {
            return;
        }
        self.tenant.draw(charge, now_ms);
        if let Some(pool) = self.keys.get_mut(key) {
            pool.draw(charge, now_ms);
        }
    }

    /// Grants closed by `now_ms` whose breakage is not booked: (key, grant row, what it left).
    pub fn due_breakage(&self, now_ms: u64) -> Vec<(Option<KeyId>, i64, Nanos)> {
        self.pools()
            .flat_map(|(key, pool)| {
                pool.due_breakage(now_ms)
                    .into_iter()
                    .map(move |(id, left)| (key.cloned(), id, left))
            })
            .collect()
    }

    /// A grant's breakage is booked.
    pub fn mark_booked(&mut self, key: Option<&KeyId>, id: i64) {
        self.pool_mut(key).mark_booked(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::grants::GrantKind;

    fn grant(id: i64, amount: u64) -> Grant {
        Grant {
            id,
            kind: GrantKind::Paid,
            priority: 0,
            starts_ms: 0,
            expires_ms: None,
            closes_ms: None,
            amount: Nanos::new(amount),
        }
    }

    #[test]
    fn a_grant_heard_twice_counts_once() {
        let mut credits = Credits::default();
        assert!(credits.add(None, grant(7, 5)));
        assert!(!credits.add(None, grant(7, 5)));
        assert_eq!(credits.limit(None, 0), Nanos::new(5));
    }

    #[test]
    fn a_reload_keeps_grants_it_predates_and_counts_the_rest_once() {
        let mut credits = Credits::default();
        credits.add(None, grant(1, 10));
        credits.add(Some(&KeyId::new("k")), grant(2, 3));
        // The ledger read saw row 1 only, with 4 drawn from it.
        let totals = CreditTotals {
            grants: vec![(
                None,
                GrantState {
                    grant: grant(1, 10),
                    drawn: Nanos::new(4),
                    booked: false,
                },
            )],
        };
        credits.reload(&totals);
        assert_eq!(credits.limit(None, 0), Nanos::new(10));
        assert_eq!(credits.limit(Some(&KeyId::new("k")), 0), Nanos::new(3));
        assert!(!credits.add(None, grant(1, 10)));
        let pool = credits.pool(None).unwrap();
        assert_eq!(pool.grants()[0].drawn, Nanos::new(4));
    }

    #[test]
    fn a_charge_draws_the_tenant_s_grants_and_its_key_s() {
        let key = KeyId::new("k");
        let mut credits = Credits::default();
        credits.add(None, grant(1, 10));
        credits.add(Some(&key), grant(2, 10));
        credits.draw(&key, Nanos::new(3), 0);
        credits.draw(&KeyId::new("other"), Nanos::new(1), 0);
        assert_eq!(credits.pool(None).unwrap().grants()[0].drawn, Nanos::new(4));
        assert_eq!(
            credits.pool(Some(&key)).unwrap().grants()[0].drawn,
            Nanos::new(3)
        );
    }
}
