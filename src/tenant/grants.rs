//! Grants of prepaid credit, and the order they are drawn in. A balance is
//! one pool of grants (the tenant's own, or one key's); each grant has an
//! amount, a start, maybe an expiry, a kind and a priority.
//!
//! The rule, kept alike by the book (memory) and the Lua scripts (Redis):
//! - What a pool may spend in all (its *limit*) is every started grant's
//!   amount, less what expired grants left unspent: an expired grant counts
//!   only what was drawn from it. A balance is that limit less the pool's
//!   lifetime spend and what calls in flight hold, so a hold stays all or
//!   nothing across every grant at once.
//! - A settle draws its charge from the grants valid at that instant, in
//!   order: lower `priority` first, then promotional before paid, then the
//!   earliest expiry, then the oldest. What they cannot cover is drawn from
//!   grants expired but not closed yet (a call admitted before an expiry
//!   that ends after it); what is still left is spend no grant covers, and
//!   lowers the balance like any spend.
//! - A grant closes when no call admitted before its expiry can still settle
//!   (its expiry plus the longest a call lives, fixed when it is written):
//!   from then on it draws nothing, and what it left is breakage, booked
//!   once in the ledger. Every rule here is a function of the clock, so
//!   every store, and a replay of the ledger, draws alike.

use serde::Serialize;

use crate::money::Nanos;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GrantKind {
    /// Drawn before paid credit of the same priority.
    Promotional,
    Paid,
}

impl GrantKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GrantKind::Promotional => "promotional",
            GrantKind::Paid => "paid",
        }
    }

    pub fn parse(text: &str) -> Option<GrantKind> {
        match text {
            "promotional" => Some(GrantKind::Promotional),
            "paid" => Some(GrantKind::Paid),
            _ => None,
        }
    }
}

/// One grant as the ledger wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Its ledger row.
    pub id: i64,
    pub kind: GrantKind,
    pub priority: i32,
    pub starts_ms: u64,
    pub expires_ms: Option<u64>,
    /// When it stops being drawn at all (after `expires_ms`).
    pub closes_ms: Option<u64>,
    pub amount: Nanos,
}

impl Grant {
    /// The drawing order's key: lower first.
    fn order(&self) -> (i32, GrantKind, u64, i64) {
        (
            self.priority,
            self.kind,
            self.expires_ms.unwrap_or(u64::MAX),
            self.id,
        )
    }

    pub fn started(&self, now_ms: u64) -> bool {
        self.starts_ms <= now_ms
    }

    pub fn expired(&self, now_ms: u64) -> bool {
        self.expires_ms.is_some_and(|at| at <= now_ms)
    }

    pub fn closed(&self, now_ms: u64) -> bool {
        self.expired(now_ms) && self.closes_ms.is_none_or(|at| at <= now_ms)
    }
}

/// A grant and what has been drawn from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantState {
    pub grant: Grant,
    pub drawn: Nanos,
    /// Its breakage is booked in the ledger.
    pub booked: bool,
}

impl GrantState {
    pub fn left(&self) -> Nanos {
        self.grant.amount.saturating_sub(self.drawn)
    }
}

/// A balance's grants, in drawing order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pool {
    grants: Vec<GrantState>,
}

impl Pool {
    /// Adds a grant unless the pool has it; says whether it was new.
    pub fn add(&mut self, state: GrantState) -> bool {
        if self.grants.iter().any(|g| g.grant.id == state.grant.id) {
            return false;
        }
        let at = self
            .grants
            .partition_point(|g| g.grant.order() < state.grant.order());
        self.grants.insert(at, state);
        true
    }

    pub fn grants(&self) -> &[GrantState] {
        &self.grants
    }

    /// What the pool may spend in all at `now_ms` (see the module's rule).
    pub fn limit(&self, now_ms: u64) -> Nanos {
        self.grants
            .iter()
            .filter(|g| g.grant.started(now_ms))
            .map(|g| {
                if g.grant.expired(now_ms) {
                    g.drawn
                } else {
                    g.grant.amount
                }
            })
            .fold(Nanos::ZERO, Nanos::saturating_add)
    }

    /// Draws `charge` from the grants in order; returns what none covered.
    pub fn draw(&mut self, charge: Nanos, now_ms: u64) -> Nanos {
        let mut left = charge;
        for expired_pass in [false, true] {
            for g in &mut self.grants {
                if left == Nanos::ZERO {
                    return left;
                }
                let eligible = g.grant.started(now_ms)
                    && !g.grant.closed(now_ms)
                    && g.grant.expired(now_ms) == expired_pass;
                if eligible {
                    let take = left.min(g.left());
                    g.drawn = g.drawn.saturating_add(take);
                    left = left.saturating_sub(take);
                }
            }
        }
        left
    }

    /// Grants closed by `now_ms` whose breakage is not booked: (row, left).
    pub fn due_breakage(&self, now_ms: u64) -> Vec<(i64, Nanos)> {
        self.grants
            .iter()
            .filter(|g| !g.booked && g.grant.closed(now_ms))
            .map(|g| (g.grant.id, g.left()))
            .collect()
    }

    /// Marks a grant's breakage booked.
    pub fn mark_booked(&mut self, id: i64) {
        if let Some(g) = self.grants.iter_mut().find(|g| g.grant.id == id) {
            g.booked = true;
        }
    }

    /// When the next grant not started yet starts.
    pub fn next_start(&self, now_ms: u64) -> Option<u64> {
        self.grants
            .iter()
            .filter(|g| !g.grant.started(now_ms))
            .map(|g| g.grant.starts_ms)
            .min()
    }
}

/// Grants shown in a refusal at most.
const NOTE_GRANTS: usize = 5;

/// What a refused balance's grants say: which ran out (used up or expired)
/// and when the next one starts; `None` for a pool without grants.
pub fn note(pool: &Pool, now_ms: u64) -> Option<String> {
    let time = |ms: u64| {
        i64::try_from(ms)
            .ok()
            .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
            .map_or_else(|| format!("{ms} ms"), |at| at.to_string())
    };
    let out: Vec<String> = pool
        .grants
        .iter()
        .filter(|g| g.grant.started(now_ms))
        .filter_map(|g| {
            let (id, kind) = (g.grant.id, g.grant.kind.as_str());
            match g.grant.expires_ms {
                Some(at) if at <= now_ms => {
                    Some(format!("grant {id} ({kind}) expired at {}", time(at)))
                }
                _ if g.left() == Nanos::ZERO => Some(format!("grant {id} ({kind}) is used up")),
                _ => None,
            }
        })
        .rev()
        .take(NOTE_GRANTS)
        .collect();
    let next = pool
        .grants
        .iter()
        .filter(|g| !g.grant.started(now_ms))
        .min_by_key(|g| g.grant.starts_ms)
        .map(|g| {
            format!(
                "the next, grant {}, starts at {}",
                g.grant.id,
                time(g.grant.starts_ms)
            )
        });
    let mut parts = out;
    parts.extend(next);
    (!parts.is_empty()).then(|| parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(id: i64, kind: GrantKind, amount: u64, expires_ms: Option<u64>) -> GrantState {
        GrantState {
            grant: Grant {
                id,
                kind,
                priority: 0,
                starts_ms: 0,
                expires_ms,
                closes_ms: expires_ms.map(|at| at + 100),
                amount: Nanos::new(amount),
            },
            drawn: Nanos::ZERO,
            booked: false,
        }
    }

    fn drawn(pool: &Pool) -> Vec<(i64, u64)> {
        pool.grants()
            .iter()
            .map(|g| (g.grant.id, g.drawn.get()))
            .collect()
    }

    #[test]
    fn promotional_is_drawn_first_then_the_earliest_expiry() {
        let mut pool = Pool::default();
        pool.add(grant(1, GrantKind::Paid, 10, None));
        pool.add(grant(2, GrantKind::Paid, 10, Some(500)));
        pool.add(grant(3, GrantKind::Promotional, 10, Some(900)));
        assert_eq!(pool.draw(Nanos::new(15), 100), Nanos::ZERO);
        assert_eq!(drawn(&pool), vec![(3, 10), (2, 5), (1, 0)]);
        assert_eq!(pool.limit(100), Nanos::new(30));
    }

    #[test]
    fn a_lower_priority_number_goes_before_the_kind() {
        let mut pool = Pool::default();
        pool.add(grant(1, GrantKind::Promotional, 10, None));
        let mut first = grant(2, GrantKind::Paid, 10, None);
        first.grant.priority = -1;
        pool.add(first);
        pool.draw(Nanos::new(4), 0);
        assert_eq!(drawn(&pool), vec![(2, 4), (1, 0)]);
    }

    #[test]
    fn an_expired_grant_counts_only_what_was_drawn_and_its_rest_is_breakage() {
        let mut pool = Pool::default();
        pool.add(grant(1, GrantKind::Promotional, 10, Some(500)));
        pool.add(grant(2, GrantKind::Paid, 10, None));
        pool.draw(Nanos::new(4), 100);
        assert_eq!(pool.limit(499), Nanos::new(20));
        assert_eq!(pool.limit(500), Nanos::new(14));
        // A call held across the expiry draws the valid grant first.
        pool.draw(Nanos::new(3), 550);
        assert_eq!(drawn(&pool), vec![(1, 4), (2, 3)]);
        assert_eq!(pool.due_breakage(599), vec![]);
        assert_eq!(pool.due_breakage(600), vec![(1, Nanos::new(6))]);
        pool.mark_booked(1);
        assert_eq!(pool.due_breakage(700), vec![]);
    }

    #[test]
    fn a_call_held_across_an_expiry_falls_back_on_the_expired_grant_until_it_closes() {
        let mut pool = Pool::default();
        pool.add(grant(1, GrantKind::Promotional, 10, Some(500)));
        assert_eq!(pool.draw(Nanos::new(6), 599), Nanos::ZERO);
        assert_eq!(pool.limit(599), Nanos::new(6));
        assert_eq!(pool.draw(Nanos::new(1), 600), Nanos::new(1));
    }

    #[test]
    fn a_refusal_names_the_grants_that_ran_out_and_the_next_start() {
        let mut pool = Pool::default();
        pool.add(grant(1, GrantKind::Promotional, 10, Some(500)));
        pool.add(grant(2, GrantKind::Paid, 10, None));
        let mut later = grant(3, GrantKind::Paid, 10, None);
        later.grant.starts_ms = 86_400_000;
        pool.add(later);
        pool.draw(Nanos::new(10), 600);
        assert_eq!(
            note(&pool, 600).as_deref(),
            Some(
                "grant 2 (paid) is used up; grant 1 (promotional) expired at 1970-01-01T00:00:00.5Z; the next, grant 3, starts at 1970-01-02T00:00:00Z"
            )
        );
        assert_eq!(note(&Pool::default(), 0), None);
    }

    #[test]
    fn a_grant_not_started_neither_counts_nor_draws() {
        let mut pool = Pool::default();
        let mut later = grant(1, GrantKind::Paid, 10, None);
        later.grant.starts_ms = 1_000;
        pool.add(later);
        assert_eq!(pool.limit(999), Nanos::ZERO);
        assert_eq!(pool.draw(Nanos::new(2), 999), Nanos::new(2));
        assert_eq!(pool.next_start(999), Some(1_000));
        assert_eq!(pool.limit(1_000), Nanos::new(10));
        assert_eq!(pool.next_start(1_000), None);
    }
}
