//! Key ids that are not in memory: the only way a request that has not
//! authenticated can reach the database. Three bounds keep a flood of
//! well-formed unknown keys off the pool the ledger needs:
//! - an id the database did not know is remembered for `ttl_ms` (bounded
//!   count), and refused without a query meanwhile;
//! - concurrent misses for one id share one query;
//! - at most `MAX_IN_FLIGHT` ids are looked up at once; beyond that an id is
//!   refused without a query.
//!
//! Invariant: a negative entry is written under the same lock that ends its
//! lookup, so a request sees either the lookup in flight or its answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use super::KeyRecord;
use crate::ids::KeyId;
use crate::telemetry::metrics::{Metric, counter_add};

/// Concurrent database lookups of key ids not in memory. A lookup is a
/// primary-key read of well under a millisecond, so two serve thousands of
/// keys issued on other replicas per second, far more than any deployment
/// issues, while the rest of the pool stays with the ledger and tenant loads.
/// Waiting for a slot instead would queue a flood in memory in front of the
/// pool; refusing with 503 would invite every flooding client to retry. So a
/// miss beyond the limit is a 401 like any unknown key. A real key issued on
/// another replica meets it only while a flood saturates the limit, and for
/// at most a sync interval: the sync pulls every newly issued key.
pub const MAX_IN_FLIGHT: usize = 2;

/// Unknown ids remembered at once (about 100 bytes each). An attacker who
/// cycles through more distinct ids than this gains nothing from the cache
/// anyway; `MAX_IN_FLIGHT` bounds what those cost.
const MAX_UNKNOWN: usize = 10_000;

/// The answer of one database lookup, shared with the requests that waited for it.
#[derive(Debug, Clone)]
pub enum Outcome {
    Found(Arc<KeyRecord>),
    Unknown,
    Failed,
}

/// What a request whose key id is not in memory does next.
pub enum KeyLookup<'a> {
    /// The database did not know this id a moment ago.
    KnownUnknown,
    /// `MAX_IN_FLIGHT` lookups are running.
    Busy,
    /// Another request is looking this id up: wait for its outcome.
    Follow(watch::Receiver<Option<Outcome>>),
    /// Query the database, then report through the ticket.
    Lead(Ticket<'a>),
}

pub struct KeyMisses {
    ttl_ms: u64,
    state: Mutex<State>,
    /// Database lookups since start (tests and diagnostics).
    queries: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Unknown ids and when their entry expires (Unix ms).
    unknown: HashMap<KeyId, u64>,
    in_flight: HashMap<KeyId, watch::Receiver<Option<Outcome>>>,
}

impl KeyMisses {
    pub fn new(ttl_ms: u64) -> KeyMisses {
        KeyMisses {
            ttl_ms,
            state: Mutex::new(State::default()),
            queries: AtomicU64::new(0),
        }
    }

    pub fn admit(&self, id: &KeyId, now_ms: u64) -> KeyLookup<'_> {
        let mut state = self.lock();
        match state.unknown.get(id) {
            Some(&expires) if now_ms < expires => {
                drop(state);
                record("cached_unknown");
                return KeyLookup::KnownUnknown;
            }
            Some(_) => {
                state.unknown.remove(id);
            }
            None => {}
        }
        if let Some(waiting) = state.in_flight.get(id) {
            return KeyLookup::Follow(waiting.clone());
        }
        if state.in_flight.len() >= MAX_IN_FLIGHT {
            drop(state);
            record("busy");
            return KeyLookup::Busy;
        }
        let (sender, receiver) = watch::channel(None);
        state.in_flight.insert(id.clone(), receiver);
        self.queries.fetch_add(1, Ordering::Relaxed);
        KeyLookup::Lead(Ticket {
            misses: self,
            id: id.clone(),
            sender: Some(sender),
        })
    }

    /// A key issued through this process is usable at once.
    pub fn forget(&self, id: &KeyId) {
        self.lock().unknown.remove(id);
    }

    /// Database lookups of key ids since this process started.
    pub fn queries(&self) -> u64 {
        self.queries.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere while holding it; the maps stay usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The right to query the database for one id. Dropped unfinished (the
/// request was cancelled mid-query), it ends the lookup as failed, so the
/// followers stop waiting and the next request may look the id up again.
pub struct Ticket<'a> {
    misses: &'a KeyMisses,
    id: KeyId,
    sender: Option<watch::Sender<Option<Outcome>>>,
}

impl Ticket<'_> {
    pub fn finish(mut self, outcome: Outcome, now_ms: u64) {
        record(match outcome {
            Outcome::Found(_) => "found",
            Outcome::Unknown => "unknown",
            Outcome::Failed => "error",
        });
        {
            let mut state = self.misses.lock();
            state.in_flight.remove(&self.id);
            if matches!(outcome, Outcome::Unknown) {
                if state.unknown.len() >= MAX_UNKNOWN {
                    state.unknown.retain(|_, expires| now_ms < *expires);
                }
                if state.unknown.len() >= MAX_UNKNOWN {
                    state.unknown.clear();
                }
                let expires = now_ms.saturating_add(self.misses.ttl_ms);
                state.unknown.insert(self.id.clone(), expires);
            }
        }
        if let Some(sender) = self.sender.take() {
            sender.send_replace(Some(outcome));
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.sender.is_some() {
            self.misses.lock().in_flight.remove(&self.id);
        }
    }
}

/// Waits for the lookup another request leads; a lookup that ended without
/// an answer (its request was cancelled) counts as failed.
pub async fn follow(mut waiting: watch::Receiver<Option<Outcome>>) -> Outcome {
    match waiting.wait_for(Option::is_some).await {
        Ok(outcome) => outcome.clone().unwrap_or(Outcome::Failed),
        Err(_) => Outcome::Failed,
    }
}

fn record(result: &'static str) {
    counter_add(Metric::AuthKeyLookupsTotal, &[("result", result)], 1);
}

/// Every `result` label, so the series exist (at 0) before the first miss.
pub const RESULTS: [&str; 5] = ["found", "unknown", "error", "cached_unknown", "busy"];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TenantId;

    fn id(s: &str) -> KeyId {
        KeyId::new(s)
    }

    fn lead(admission: KeyLookup<'_>) -> Ticket<'_> {
        match admission {
            KeyLookup::Lead(ticket) => ticket,
            _ => panic!("expected to lead the lookup"),
        }
    }

    #[test]
    fn an_unknown_id_is_queried_once_until_its_entry_expires() {
        let misses = KeyMisses::new(1_000);
        lead(misses.admit(&id("a"), 0)).finish(Outcome::Unknown, 0);
        assert!(matches!(
            misses.admit(&id("a"), 999),
            KeyLookup::KnownUnknown
        ));
        assert_eq!(misses.queries(), 1);
        lead(misses.admit(&id("a"), 1_000)).finish(Outcome::Unknown, 1_000);
        assert_eq!(misses.queries(), 2);
    }

    #[test]
    fn forgetting_an_id_lets_it_be_looked_up_at_once() {
        let misses = KeyMisses::new(1_000);
        lead(misses.admit(&id("a"), 0)).finish(Outcome::Unknown, 0);
        misses.forget(&id("a"));
        assert!(matches!(misses.admit(&id("a"), 1), KeyLookup::Lead(_)));
    }

    #[test]
    fn concurrent_misses_share_a_lookup_and_the_rest_are_refused() {
        let misses = KeyMisses::new(1_000);
        let first = lead(misses.admit(&id("a"), 0));
        let KeyLookup::Follow(waiting) = misses.admit(&id("a"), 0) else {
            panic!("a second miss for the same id waits for the first");
        };
        let _second = lead(misses.admit(&id("b"), 0));
        assert_eq!(MAX_IN_FLIGHT, 2);
        assert!(matches!(misses.admit(&id("c"), 0), KeyLookup::Busy));
        let record = Arc::new(KeyRecord {
            id: id("a"),
            tenant: TenantId::new("t"),
            secret_hash: String::new(),
            monthly_budget: None,
            expires_at_ms: None,
            on_credits: false,
            budget_period: crate::calendar::Period::Month,
            max_in_flight: None,
        });
        first.finish(Outcome::Found(record), 0);
        assert!(matches!(waiting.borrow().as_ref(), Some(Outcome::Found(_))));
        assert_eq!(misses.queries(), 2);
        assert!(matches!(misses.admit(&id("c"), 0), KeyLookup::Lead(_)));
    }

    #[test]
    fn a_cancelled_lookup_frees_its_slot_and_its_followers() {
        let misses = KeyMisses::new(1_000);
        let ticket = lead(misses.admit(&id("a"), 0));
        let KeyLookup::Follow(waiting) = misses.admit(&id("a"), 0) else {
            panic!("expected to follow");
        };
        drop(ticket);
        assert!(waiting.has_changed().is_err(), "the followers are woken");
        assert!(matches!(misses.admit(&id("a"), 0), KeyLookup::Lead(_)));
    }

    #[test]
    fn the_negative_cache_is_bounded() {
        let misses = KeyMisses::new(1_000);
        for n in 0..=MAX_UNKNOWN {
            lead(misses.admit(&id(&format!("k{n}")), 0)).finish(Outcome::Unknown, 0);
        }
        assert!(misses.lock().unknown.len() <= MAX_UNKNOWN);
    }
}
