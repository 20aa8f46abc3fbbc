//! A provider's concurrency slots and the state its actor publishes for
//! callers to read without a message. While the breaker is closed and the
//! limit is fixed, a call takes a free slot and gives it back through these
//! atomics: the actor hears only of what needs a decision (a failure, a full
//! provider, a queue to serve, a half-open breaker), and reads the successes
//! it did not hear of from `successes` when it next decides.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub struct Slots {
    /// Set by the actor: the breaker is closed and the limit does not adapt,
    /// so a free slot may be taken and a success reported without it.
    fast: AtomicBool,
    in_flight: AtomicU32,
    limit: AtomicU32,
    /// Successes reported here that the breaker has not counted yet.
    successes: AtomicU32,
    /// Callers waiting in the actor's queue: a freed slot is theirs first.
    queued: AtomicUsize,
}

impl Slots {
    pub fn new(limit: u32) -> Slots {
        Slots {
            limit: AtomicU32::new(limit),
            ..Slots::default()
        }
    }

    /// Takes a slot if one is free.
    pub fn try_take(&self) -> bool {
        let limit = self.limit.load(Ordering::SeqCst);
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// A slot without the actor: only while the fast path is on and nobody queues.
    pub fn try_take_fast(&self) -> bool {
        self.fast.load(Ordering::SeqCst)
            && self.queued.load(Ordering::SeqCst) == 0
            && self.try_take()
    }

    /// Gives a slot back. Returns whether callers wait for it in the actor's queue.
    pub fn give_back(&self) -> bool {
        // Never below zero, even if a slot were given back twice.
        let _ = self
            .in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        self.queued.load(Ordering::SeqCst) > 0
    }

    /// A healthy call ended on the fast path: its slot goes back and its
    /// success waits for the actor. Returns whether callers wait in the
    /// actor's queue, or `None` (nothing done) when the fast path is off and
    /// the actor must hear of the call itself.
    pub fn finish_fast(&self) -> Option<bool> {
        if !self.fast.load(Ordering::SeqCst) {
            return None;
        }
        self.successes.fetch_add(1, Ordering::SeqCst);
        Some(self.give_back())
    }

    pub fn set_fast(&self, on: bool) {
        self.fast.store(on, Ordering::SeqCst);
    }

    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::SeqCst);
    }

    pub fn set_queued(&self, queued: usize) {
        self.queued.store(queued, Ordering::SeqCst);
    }

    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// The successes reported since the last call.
    pub fn take_successes(&self) -> u32 {
        self.successes.swap(0, Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_up_to_the_limit_and_given_back() {
        let slots = Slots::new(2);
        assert!(slots.try_take());
        assert!(slots.try_take());
        assert!(!slots.try_take());
        assert!(!slots.give_back());
        assert!(slots.try_take());
        assert_eq!(slots.in_flight(), 2);
    }

    #[test]
    fn the_fast_path_is_off_until_the_actor_turns_it_on_and_yields_to_a_queue() {
        let slots = Slots::new(4);
        assert!(!slots.try_take_fast());
        assert_eq!(slots.finish_fast(), None);
        slots.set_fast(true);
        assert!(slots.try_take_fast());
        slots.set_queued(1);
        assert!(!slots.try_take_fast(), "a waiter comes first");
        assert_eq!(slots.finish_fast(), Some(true), "the waiter must be told");
        assert_eq!(slots.in_flight(), 0);
        assert_eq!(slots.take_successes(), 1);
        assert_eq!(slots.take_successes(), 0);
    }

    #[test]
    fn giving_back_more_than_was_taken_stays_at_zero() {
        let slots = Slots::new(1);
        slots.give_back();
        assert_eq!(slots.in_flight(), 0);
        assert!(slots.try_take());
        assert!(!slots.try_take());
    }
}
