//! What each agent run (a session) has spent and holds, for a tier's
//! `session` cap: a runaway tool loop stops at its session's cap, not at the
//! tenant's budget. A session lives in the quota store only: one unseen for
//! its idle time, with nothing held, is forgotten. The same rule runs in
//! Redis (`shared/scripts.rs`: a session hash that expires after its idle
//! time), and a store that restarts empty forgets its sessions; the
//! tenant's, keys' and end users' budgets, seeded from the ledger, still hold.

use std::collections::HashMap;

use crate::money::Nanos;

/// A request's session and the cap its tier gives one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHold {
    pub id: String,
    pub budget: Nanos,
    pub idle_ms: u64,
}

#[derive(Debug, Default)]
pub struct Sessions {
    by_id: HashMap<String, Session>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Session {
    spent: Nanos,
    reserved: Nanos,
    seen_ms: u64,
    idle_ms: u64,
}

impl Sessions {
    /// What the session may still hold.
    pub fn remaining(&self, hold: &SessionHold) -> Nanos {
        let session = self.by_id.get(&hold.id).copied().unwrap_or_default();
        hold.budget
            .saturating_sub(session.spent.saturating_add(session.reserved))
    }

    pub fn hold(&mut self, hold: &SessionHold, amount: Nanos, now_ms: u64) {
        let session = self.by_id.entry(hold.id.clone()).or_default();
        session.reserved = session.reserved.saturating_add(amount);
        session.seen_ms = now_ms;
        session.idle_ms = hold.idle_ms;
    }

    /// A hold of the session closed at `charged`.
    pub fn close(&mut self, id: &str, amount: Nanos, charged: Nanos) {
        if let Some(session) = self.by_id.get_mut(id) {
            session.reserved = session.reserved.saturating_sub(amount);
            session.spent = session.spent.saturating_add(charged);
        }
    }

    /// Forgets the sessions idle past their time with nothing held.
    pub fn forget_idle(&mut self, now_ms: u64) {
        self.by_id.retain(|_, session| {
            session.reserved > Nanos::ZERO
                || now_ms < session.seen_ms.saturating_add(session.idle_ms)
        });
    }

    /// What the session has spent (0 for one the store does not know).
    pub fn spent_of(&self, id: &str) -> Nanos {
        self.by_id.get(id).map_or(Nanos::ZERO, |s| s.spent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_holds_and_spends_within_its_cap_and_is_forgotten_when_idle() {
        let hold = SessionHold {
            id: "run-1".into(),
            budget: Nanos::new(100),
            idle_ms: 1_000,
        };
        let mut sessions = Sessions::default();
        assert_eq!(sessions.remaining(&hold), Nanos::new(100));
        sessions.hold(&hold, Nanos::new(60), 0);
        assert_eq!(sessions.remaining(&hold), Nanos::new(40));
        sessions.close("run-1", Nanos::new(60), Nanos::new(25));
        assert_eq!(sessions.remaining(&hold), Nanos::new(75));
        sessions.hold(&hold, Nanos::new(10), 500);
        // Held: not forgotten however long it is idle.
        sessions.forget_idle(10_000);
        assert_eq!(sessions.spent_of("run-1"), Nanos::new(25));
        sessions.close("run-1", Nanos::new(10), Nanos::new(10));
        sessions.forget_idle(1_499);
        assert_eq!(sessions.spent_of("run-1"), Nanos::new(35));
        sessions.forget_idle(1_500);
        assert_eq!(sessions.spent_of("run-1"), Nanos::ZERO);
        assert_eq!(sessions.remaining(&hold), Nanos::new(100));
    }
}
