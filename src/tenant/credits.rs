//! A tenant's prepaid balances as the book holds them: the top-ups it knows,
//! by ledger row, so one heard twice (from the ledger's load and from the
//! admin call that wrote it) counts once. Spend is the book's lifetime totals.

use std::collections::HashMap;

use crate::ids::KeyId;
use crate::ledger::credits::CreditTotals;
use crate::money::Nanos;

#[derive(Debug, Clone, Default)]
pub struct Credits {
    /// Top-ups by ledger row id: `None` is the tenant's own balance.
    rows: HashMap<i64, (Option<KeyId>, Nanos)>,
    tenant: Nanos,
    keys: HashMap<KeyId, Nanos>,
}

impl Credits {
    /// The ledger's top-ups, and any this book heard of that the load predates.
    pub fn reload(&mut self, totals: &CreditTotals, added: &HashMap<i64, (Option<KeyId>, Nanos)>) {
        let mut next = Credits {
            tenant: totals.tenant,
            keys: totals.keys.clone(),
            ..Credits::default()
        };
        // The ledger's sums stand for its rows; their amounts are already in them.
        for (id, _, _) in &totals.rows {
            next.rows.insert(*id, (None, Nanos::ZERO));
        }
        for (id, (key, amount)) in added {
            next.add(*id, key.clone(), *amount);
        }
        *self = next;
    }

    /// Adds a top-up unless this row was added before; says whether it was new.
    pub fn add(&mut self, id: i64, key: Option<KeyId>, amount: Nanos) -> bool {
        if self.rows.contains_key(&id) {
            return false;
        }
        match &key {
            None => self.tenant = self.tenant.saturating_add(amount),
            Some(key) => {
                let sum = self.keys.entry(key.clone()).or_default();
                *sum = sum.saturating_add(amount);
            }
        }
        self.rows.insert(id, (key, amount));
        true
    }

    /// The top-ups heard of outside a ledger load, to carry over one.
    pub fn heard(&self) -> HashMap<i64, (Option<KeyId>, Nanos)> {
        self.rows
            .iter()
            .filter(|(_, (key, amount))| key.is_some() || *amount > Nanos::ZERO)
            .map(|(id, row)| (*id, row.clone()))
            .collect()
    }

    pub fn tenant(&self) -> Nanos {
        self.tenant
    }

    pub fn key(&self, key: &KeyId) -> Nanos {
        self.keys.get(key).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_top_up_heard_twice_counts_once() {
        let mut credits = Credits::default();
        assert!(credits.add(7, None, Nanos::new(5)));
        assert!(!credits.add(7, None, Nanos::new(5)));
        assert_eq!(credits.tenant(), Nanos::new(5));
    }

    #[test]
    fn a_reload_keeps_top_ups_it_predates_and_counts_the_rest_once() {
        let mut credits = Credits::default();
        credits.add(1, None, Nanos::new(10));
        credits.add(2, Some(KeyId::new("k")), Nanos::new(3));
        // The ledger read saw row 1 only.
        let totals = CreditTotals {
            tenant: Nanos::new(10),
            keys: HashMap::new(),
            rows: vec![(1, None, Nanos::new(10))],
        };
        let heard = credits.heard();
        credits.reload(&totals, &heard);
        assert_eq!(credits.tenant(), Nanos::new(10));
        assert_eq!(credits.key(&KeyId::new("k")), Nanos::new(3));
        assert!(!credits.add(1, None, Nanos::new(10)));
    }
}
