//! Retries on the same provider: the only backoff and jitter code in the
//! crate. `RetryPolicy` says how long to wait before attempt n (exponential,
//! ±20% jitter, an upstream's `Retry-After` honoured, capped); `RetryBudget`
//! keeps retries to a fraction of requests so an outage cannot become a retry
//! storm.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use rand::Rng;

/// Milli-retries: each request deposits its share, each retry costs 1000.
const RETRY_COST: i64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts on one provider before failing over (1 = no retry).
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    pub max_delay_ms: u64,
}

impl RetryPolicy {
    /// The wait before attempt `attempt` (2 = the first retry). `jitter_permille`
    /// in 0..=1000 maps to −20%..+20%; an upstream `Retry-After` wins when longer.
    pub fn delay(
        &self,
        attempt: u32,
        retry_after_s: Option<u64>,
        jitter_permille: u32,
    ) -> Duration {
        let exponent = attempt.saturating_sub(2).min(16);
        let base = self
            .base_delay_ms
            .saturating_mul(1 << exponent)
            .min(self.max_delay_ms);
        // base × (800 + 400 × jitter / 1000) / 1000, in integers.
        let jittered = base * (800 + 400 * u64::from(jitter_permille.min(1000)) / 1000) / 1000;
        let ms = retry_after_s.map_or(jittered, |s| jittered.max(s.saturating_mul(1000)));
        Duration::from_millis(ms)
    }

    pub fn random_jitter() -> u32 {
        rand::rng().random_range(0..=1000)
    }
}

/// What a provider decides after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try the same provider again after this wait.
    Retry(Duration),
    /// Move on to the route's next target.
    FailOver,
}

impl RetryPolicy {
    /// After `tries` failed attempts on this provider: retry while the policy
    /// allows, the wait ends before the request's deadline (`time_left`) and
    /// the shared retry budget has a retry; otherwise fail over.
    pub fn next(
        &self,
        tries: u32,
        retry_after_s: Option<u64>,
        time_left: Duration,
        jitter_permille: u32,
        budget: &RetryBudget,
    ) -> Next {
        if tries >= self.max_attempts {
            return Next::FailOver;
        }
        let delay = self.delay(tries + 1, retry_after_s, jitter_permille);
        if delay < time_left && budget.withdraw() {
            Next::Retry(delay)
        } else {
            Next::FailOver
        }
    }
}

/// A shared budget of retries per provider: requests deposit a fraction of a
/// retry, retries withdraw one; a burst of `burst` retries is allowed up front.
#[derive(Debug)]
/// Amounts in milli-retries.
pub struct RetryBudget {
    balance: AtomicI64,
    deposit_per_request: i64,
    cap: i64,
}

impl RetryBudget {
    /// `ratio_percent` of requests may be retried, with `burst` retries in reserve.
    pub fn new(ratio_percent: u32, burst: u32) -> RetryBudget {
        let cap = i64::from(burst) * RETRY_COST;
        RetryBudget {
            balance: AtomicI64::new(cap),
            deposit_per_request: i64::from(ratio_percent) * RETRY_COST / 100,
            cap: cap.max(RETRY_COST),
        }
    }

    /// A first attempt earns its share of a retry.
    pub fn deposit(&self) {
        let _ = self
            .balance
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                Some((b + self.deposit_per_request).min(self.cap))
            });
    }

    /// Takes one retry if the budget has it.
    pub fn withdraw(&self) -> bool {
        self.balance
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                (b >= RETRY_COST).then_some(b - RETRY_COST)
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        max_attempts: 3,
        base_delay_ms: 100,
        max_delay_ms: 1000,
    };

    #[test]
    fn backs_off_exponentially_with_bounded_jitter_and_a_cap() {
        assert_eq!(POLICY.delay(2, None, 500), Duration::from_millis(100));
        assert_eq!(POLICY.delay(2, None, 0), Duration::from_millis(80));
        assert_eq!(POLICY.delay(2, None, 1000), Duration::from_millis(120));
        assert_eq!(POLICY.delay(3, None, 500), Duration::from_millis(200));
        assert_eq!(POLICY.delay(10, None, 500), Duration::from_secs(1));
    }

    #[test]
    fn a_longer_retry_after_wins() {
        assert_eq!(POLICY.delay(2, Some(2), 500), Duration::from_secs(2));
        assert_eq!(POLICY.delay(2, Some(0), 500), Duration::from_millis(100));
    }

    #[test]
    fn retries_stop_at_the_policy_the_deadline_or_the_budget() {
        let budget = RetryBudget::new(0, 3);
        let long = Duration::from_secs(10);
        assert_eq!(
            POLICY.next(1, None, long, 500, &budget),
            Next::Retry(Duration::from_millis(100))
        );
        assert_eq!(POLICY.next(3, None, long, 500, &budget), Next::FailOver);
        // A wait that would end past the deadline is not taken, nor is the budget touched.
        assert_eq!(
            POLICY.next(1, Some(5), Duration::from_secs(4), 500, &budget),
            Next::FailOver
        );
        assert!(matches!(
            POLICY.next(2, None, long, 500, &budget),
            Next::Retry(_)
        ));
        assert!(matches!(
            POLICY.next(1, None, long, 500, &budget),
            Next::Retry(_)
        ));
        assert_eq!(
            POLICY.next(1, None, long, 500, &budget),
            Next::FailOver,
            "the budget's three retries are spent"
        );
    }

    #[test]
    fn the_budget_caps_retries_to_a_share_of_requests() {
        let budget = RetryBudget::new(20, 2);
        assert!(budget.withdraw());
        assert!(budget.withdraw());
        assert!(!budget.withdraw(), "the burst is spent");
        for _ in 0..4 {
            budget.deposit();
        }
        assert!(!budget.withdraw(), "4 requests earn 0.8 of a retry");
        budget.deposit();
        assert!(budget.withdraw(), "5 requests earn one");
        for _ in 0..1000 {
            budget.deposit();
        }
        assert!(
            budget.withdraw() && budget.withdraw() && !budget.withdraw(),
            "capped at the burst"
        );
    }
}
