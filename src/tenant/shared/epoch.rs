//! Redis restarted empty: noticing it, and deciding nothing on it until the
//! holds it lost have settled. A restart loses the hold of every call in
//! flight, on every replica; a decision made before those calls settle would
//! not see them, and their budget could be admitted again. So after a
//! restart each replica decides nothing on Redis (tenants are refused
//! `quota_unavailable` with `Retry-After`, as when it is down, whatever their
//! `on_store_error`: a replica's own share is no safer, its ledger lacks the
//! same calls) until every live replica's holds from before the restart are
//! closed (their settles count their charges in Redis), or until no hold from
//! before it can still be alive (its expiry). Settles go on meanwhile.
//!
//! A restart is noticed by the epoch key: the first replica to find it
//! missing writes a new one, and every replica looks at it on each probe
//! (200 ms), writing its heartbeat beside it, so all notice within a probe.
//! Decisions in that interval are the residue this does not cover. The keys
//! share one hash tag, so a Redis Cluster keeps them in one slot.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const EPOCH_KEY: &str = "{tollgate}:epoch";
/// Each replica's last look (Redis's own time), by replica id.
pub const ALIVE_KEY: &str = "{tollgate}:alive";

/// Where the replicas whose pre-restart holds are closed say so.
pub fn settled_key(epoch: &str) -> String {
    format!("{{tollgate}}:settled:{epoch}")
}

/// Sets the epoch if it is missing and this replica's heartbeat; returns the
/// epoch in force. KEYS: epoch, alive. ARGV: a new epoch, replica.
pub const EPOCH: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], ARGV[1], 'NX')
redis.call('HSET', KEYS[2], ARGV[2], string.format('%d', now))
return {redis.call('GET', KEYS[1])}
";

/// Says this replica's holds from before the restart are closed; returns
/// {'1'} when every replica seen alive in the last two seconds has said so.
/// Heartbeats a minute old are dropped. KEYS: the restart's set, alive.
/// ARGV: replica, ttl ms.
pub const SETTLED: &str = r"
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local alive = redis.call('HGETALL', KEYS[2])
local all = '1'
for i = 1, #alive, 2 do
  local seen = tonumber(alive[i + 1]) or 0
  if seen < now - 60000 then
    redis.call('HDEL', KEYS[2], alive[i])
  elseif seen >= now - 2000 and redis.call('SISMEMBER', KEYS[1], alive[i]) == 0 then
    all = '0'
  end
end
return {all}
";

/// What a restart waits for.
#[derive(Debug, Clone)]
pub struct RestartPolicy {
    pub replica: String,
    /// How long a hold can live (the request's deadline and its margin):
    /// after this none from before the restart is left.
    pub hold_lifetime: Duration,
    /// How long every live replica needs to notice a restart and say it is
    /// alive (two probes).
    pub notice: Duration,
}

#[derive(Debug)]
struct Pause {
    epoch: String,
    since: Instant,
    /// This replica's holds from before the restart still open.
    waiting: HashSet<u64>,
}

/// This replica's view of Redis's epoch and of the holds it placed there.
#[derive(Debug, Default)]
pub struct Epochs {
    seen: Mutex<Option<String>>,
    open: Mutex<HashSet<u64>>,
    pause: Mutex<Option<Pause>>,
    paused: AtomicBool,
}

/// What the prober does next about a pause.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    Nothing,
    /// Tell Redis this replica's pre-restart holds are closed (and learn
    /// whether every live replica's are).
    Say {
        epoch: String,
    },
    /// Every live replica said so, or the holds' lifetime passed.
    Resume,
}

impl Epochs {
    /// Whether decisions on Redis wait for a restart's lost holds.
    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    pub fn opened(&self, id: u64) {
        lock(&self.open).insert(id);
    }

    pub fn closed(&self, id: u64) {
        lock(&self.open).remove(&id);
    }

    /// The epoch a probe found: `true` when it is a new one (Redis restarted
    /// empty since the last look), which pauses decisions.
    pub fn observe(&self, epoch: &str) -> bool {
        let mut seen = lock(&self.seen);
        let restarted = seen.as_deref().is_some_and(|before| before != epoch);
        if seen.as_deref() != Some(epoch) {
            *seen = Some(epoch.to_owned());
        }
        if restarted {
            let waiting = lock(&self.open).clone();
            *lock(&self.pause) = Some(Pause {
                epoch: epoch.to_owned(),
                since: crate::clock::monotonic(),
                waiting,
            });
            self.paused.store(true, Ordering::Release);
        }
        restarted
    }

    /// What a pause needs next; `all_said`: Redis's answer to `Say`.
    pub fn next(&self, policy: &RestartPolicy, all_said: Option<bool>) -> Next {
        let mut pause = lock(&self.pause);
        let Some(current) = pause.as_mut() else {
            return Next::Nothing;
        };
        let waited = current.since.elapsed();
        if waited >= policy.hold_lifetime || (all_said == Some(true) && waited >= policy.notice) {
            *pause = None;
            return Next::Resume;
        }
        let open = lock(&self.open);
        current.waiting.retain(|id| open.contains(id));
        if current.waiting.is_empty() {
            return Next::Say {
                epoch: current.epoch.clone(),
            };
        }
        Next::Nothing
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::Release);
    }
}

/// A poisoned lock still holds consistent sets: each change is one insert or remove.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(notice: Duration) -> RestartPolicy {
        RestartPolicy {
            replica: "r1".into(),
            hold_lifetime: Duration::from_mins(1),
            notice,
        }
    }

    #[test]
    fn a_new_epoch_pauses_until_the_holds_from_before_it_close_and_every_replica_says_so() {
        let epochs = Epochs::default();
        let policy = policy(Duration::ZERO);
        assert!(!epochs.observe("a"), "the first look is no restart");
        epochs.opened(1);
        epochs.opened(2);
        assert!(!epochs.observe("a"));
        assert!(epochs.observe("b"), "a new epoch: Redis restarted");
        assert!(epochs.paused());
        epochs.opened(3);
        epochs.closed(1);
        assert_eq!(epochs.next(&policy, None), Next::Nothing, "hold 2 is open");
        epochs.closed(2);
        assert_eq!(
            epochs.next(&policy, None),
            Next::Say { epoch: "b".into() },
            "a hold placed after the restart is not waited for"
        );
        assert_eq!(
            epochs.next(&policy, Some(false)),
            Next::Say { epoch: "b".into() },
            "another live replica has not said so"
        );
        assert_eq!(epochs.next(&policy, Some(true)), Next::Resume);
        epochs.resume();
        assert!(!epochs.paused());
        assert_eq!(epochs.next(&policy, None), Next::Nothing);
    }

    #[test]
    fn every_replica_gets_its_probes_to_notice_before_a_pause_ends() {
        let epochs = Epochs::default();
        epochs.observe("a");
        epochs.observe("b");
        let slow = policy(Duration::from_mins(1));
        assert_eq!(
            epochs.next(&slow, Some(true)),
            Next::Say { epoch: "b".into() }
        );
    }

    #[test]
    fn a_pause_ends_when_no_hold_from_before_it_can_be_alive() {
        let epochs = Epochs::default();
        epochs.observe("a");
        epochs.opened(1);
        epochs.observe("b");
        let short = RestartPolicy {
            hold_lifetime: Duration::ZERO,
            ..policy(Duration::from_mins(1))
        };
        assert_eq!(epochs.next(&short, None), Next::Resume);
    }
}
