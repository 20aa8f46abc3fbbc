//! Breaker: closed → open after N consecutive retryable failures, or when the
//! error rate over a sliding window passes a threshold with enough requests
//! → half-open after a cooldown, where a growing share of requests is let
//! through (20% → 50% → 100%, one observation window each) → closed. Any
//! failure while half-open opens it again. Pure state; `now` is a parameter.
//! Every state change goes through `Breaker::enter` and is returned to the
//! caller as a `Transition`, the one thing to publish (metric, log, replicas).

/// Shares of requests admitted while half-open, one per observation window.
const RAMP_PERCENT: [u32; 3] = [20, 50, 100];
/// The error-rate window is kept as this many buckets, so old results age out in steps.
const BUCKET_COUNT: usize = 10;
const BUCKETS: u64 = BUCKET_COUNT as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open {
        until_ms: u64,
    },
    /// `step` indexes `RAMP_PERCENT`; the step began at `since_ms`.
    HalfOpen {
        step: usize,
        since_ms: u64,
    },
}

impl BreakerState {
    /// The share of requests this state admits, in percent.
    pub fn admit_percent(self) -> u32 {
        match self {
            BreakerState::Closed => 100,
            BreakerState::Open { .. } => 0,
            BreakerState::HalfOpen { step, .. } => RAMP_PERCENT.get(step).copied().unwrap_or(100),
        }
    }
}

/// A change of state, for whoever publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub from: BreakerState,
    pub to: BreakerState,
}

/// The breaker's knobs (see `[providers.NAME]` in the README).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive retryable failures that open it.
    pub consecutive_failures: u32,
    /// Error rate (percent) over `window_ms` that opens it; 0 turns the rate trigger off.
    pub error_rate_percent: u32,
    pub window_ms: u64,
    /// The rate trigger needs at least this many results in the window.
    pub min_requests: u32,
    pub cooldown_ms: u64,
    /// How long each half-open step is watched before the next.
    pub ramp_window_ms: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// Which slice of time (now / bucket width) the counts belong to.
    slot: u64,
    total: u32,
    failures: u32,
}

#[derive(Debug, Clone)]
pub struct Breaker {
    config: BreakerConfig,
    state: BreakerState,
    consecutive_failures: u32,
    buckets: [Bucket; BUCKET_COUNT],
    /// Half-open bookkeeping for the current step: requests seen, admitted, and successes.
    seen: u64,
    admitted: u64,
    successes: u64,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Breaker {
        Breaker {
            config: BreakerConfig {
                consecutive_failures: config.consecutive_failures.max(1),
                min_requests: config.min_requests.max(1),
                window_ms: config.window_ms.max(BUCKETS),
                ..config
            },
            state: BreakerState::Closed,
            consecutive_failures: 0,
            buckets: [Bucket::default(); BUCKET_COUNT],
            seen: 0,
            admitted: 0,
            successes: 0,
        }
    }

    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Whether a call may go out now, and the transition deciding it made, if any.
    /// While half-open, admissions are spread evenly: the n-th request of a
    /// step goes out when that keeps the admitted share at or under the step's.
    pub fn admit(&mut self, now_ms: u64) -> (bool, Option<Transition>) {
        let transition = self.tick(now_ms);
        let admitted = match self.state {
            BreakerState::Closed => true,
            BreakerState::Open { .. } => false,
            BreakerState::HalfOpen { .. } => {
                self.seen += 1;
                let percent = u64::from(self.state.admit_percent());
                let admit = self.admitted * 100 < self.seen * percent;
                if admit {
                    self.admitted += 1;
                }
                admit
            }
        };
        (admitted, transition)
    }

    /// A call answered (2xx, or a 4xx about the request itself).
    pub fn on_success(&mut self, now_ms: u64) -> Option<Transition> {
        self.on_successes(1, now_ms)
    }

    /// `n` calls answered since the breaker last heard of any.
    pub fn on_successes(&mut self, n: u32, now_ms: u64) -> Option<Transition> {
        if n == 0 {
            return None;
        }
        self.consecutive_failures = 0;
        self.count(now_ms, n, false);
        if matches!(self.state, BreakerState::HalfOpen { .. }) {
            self.successes += u64::from(n);
        }
        self.tick(now_ms)
    }

    /// A call failed in a way that says the provider is unwell (timeout, 5xx, 429…).
    pub fn on_failure(&mut self, now_ms: u64) -> Option<Transition> {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.count(now_ms, 1, true);
        let trip = match self.state {
            BreakerState::HalfOpen { .. } => true,
            BreakerState::Closed => {
                self.consecutive_failures >= self.config.consecutive_failures
                    || self.rate_exceeded(now_ms)
            }
            // A call admitted before the breaker opened: it is already open.
            BreakerState::Open { .. } => false,
        };
        trip.then(|| self.open(now_ms))
    }

    /// Time-driven moves: open → half-open after the cooldown, and up the ramp
    /// once a step's window has passed with a success and no failure in it.
    fn tick(&mut self, now_ms: u64) -> Option<Transition> {
        match self.state {
            BreakerState::Open { until_ms } if now_ms >= until_ms => {
                Some(self.enter(BreakerState::HalfOpen {
                    step: 0,
                    since_ms: now_ms,
                }))
            }
            BreakerState::HalfOpen { step, since_ms }
                if self.successes > 0
                    && now_ms >= since_ms.saturating_add(self.config.ramp_window_ms) =>
            {
                let next = step + 1;
                Some(if next < RAMP_PERCENT.len() {
                    self.enter(BreakerState::HalfOpen {
                        step: next,
                        since_ms: now_ms,
                    })
                } else {
                    self.enter(BreakerState::Closed)
                })
            }
            _ => None,
        }
    }

    /// Takes the state another replica moved to (see `shared_breaker.rs`).
    pub fn adopt(&mut self, state: BreakerState) -> Option<Transition> {
        (state != self.state).then(|| self.enter(state))
    }

    fn open(&mut self, now_ms: u64) -> Transition {
        self.enter(BreakerState::Open {
            until_ms: now_ms.saturating_add(self.config.cooldown_ms),
        })
    }

    /// The one place the state changes.
    fn enter(&mut self, to: BreakerState) -> Transition {
        let from = self.state;
        self.state = to;
        self.seen = 0;
        self.admitted = 0;
        self.successes = 0;
        if matches!(to, BreakerState::Closed | BreakerState::Open { .. }) {
            // A fresh start: results from before the outage (or from probing) do not count.
            self.consecutive_failures = 0;
            self.buckets = [Bucket::default(); BUCKET_COUNT];
        }
        Transition { from, to }
    }

    fn bucket_width(&self) -> u64 {
        self.config.window_ms / BUCKETS
    }

    fn count(&mut self, now_ms: u64, n: u32, failed: bool) {
        let slot = now_ms / self.bucket_width();
        let index = usize::try_from(slot % BUCKETS).unwrap_or(0);
        let bucket = &mut self.buckets[index];
        if bucket.slot != slot {
            *bucket = Bucket {
                slot,
                total: 0,
                failures: 0,
            };
        }
        bucket.total = bucket.total.saturating_add(n);
        if failed {
            bucket.failures = bucket.failures.saturating_add(n);
        }
    }

    fn rate_exceeded(&self, now_ms: u64) -> bool {
        if self.config.error_rate_percent == 0 {
            return false;
        }
        let current = now_ms / self.bucket_width();
        let (total, failures) = self
            .buckets
            .iter()
            .filter(|b| b.total > 0 && current.saturating_sub(b.slot) < BUCKETS)
            .fold((0u64, 0u64), |(t, f), b| {
                (t + u64::from(b.total), f + u64::from(b.failures))
            });
        total >= u64::from(self.config.min_requests)
            && failures * 100 >= total * u64::from(self.config.error_rate_percent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BreakerConfig {
        BreakerConfig {
            consecutive_failures: 3,
            error_rate_percent: 0,
            window_ms: 10_000,
            min_requests: 10,
            cooldown_ms: 1000,
            ramp_window_ms: 500,
        }
    }

    fn admitted_of(breaker: &mut Breaker, n: usize, now_ms: u64) -> usize {
        (0..n).filter(|_| breaker.admit(now_ms).0).count()
    }

    #[test]
    fn opens_after_consecutive_failures_and_refuses_until_the_cooldown() {
        let mut breaker = Breaker::new(config());
        for _ in 0..2 {
            assert!(breaker.admit(0).0);
            assert_eq!(breaker.on_failure(0), None);
        }
        let transition = breaker.on_failure(0).unwrap();
        assert_eq!(transition.from, BreakerState::Closed);
        assert_eq!(transition.to, BreakerState::Open { until_ms: 1000 });
        assert_eq!(admitted_of(&mut breaker, 10, 999), 0);
        let (admitted, transition) = breaker.admit(1000);
        assert!(admitted, "the first request after the cooldown probes");
        assert_eq!(
            transition.map(|t| t.to),
            Some(BreakerState::HalfOpen {
                step: 0,
                since_ms: 1000
            })
        );
    }

    #[test]
    fn a_success_resets_the_consecutive_count() {
        let mut breaker = Breaker::new(config());
        breaker.on_failure(0);
        breaker.on_failure(0);
        breaker.on_success(0);
        breaker.on_failure(0);
        breaker.on_failure(0);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn half_open_ramps_20_50_100_then_closes() {
        let mut breaker = Breaker::new(config());
        for _ in 0..3 {
            breaker.on_failure(0);
        }
        // 20%: two of ten, spread out (the first and the sixth).
        let pattern: Vec<bool> = (0..10).map(|_| breaker.admit(1000).0).collect();
        assert_eq!(
            pattern,
            [
                true, false, false, false, false, true, false, false, false, false
            ]
        );
        breaker.on_success(1100);
        assert_eq!(
            admitted_of(&mut breaker, 10, 1499),
            2,
            "still 20% within the window"
        );
        assert_eq!(admitted_of(&mut breaker, 10, 1500), 5, "50% after it");
        breaker.on_success(1600);
        assert_eq!(
            admitted_of(&mut breaker, 10, 2000),
            10,
            "100% after the next"
        );
        assert!(matches!(
            breaker.state(),
            BreakerState::HalfOpen { step: 2, .. }
        ));
        let closed = breaker.on_success(2500).unwrap();
        assert_eq!(closed.to, BreakerState::Closed);
    }

    #[test]
    fn a_step_without_a_success_does_not_advance() {
        let mut breaker = Breaker::new(config());
        for _ in 0..3 {
            breaker.on_failure(0);
        }
        assert!(breaker.admit(1000).0);
        // The probe has not answered yet: no evidence, no wider opening.
        assert_eq!(admitted_of(&mut breaker, 10, 5000), 2);
        assert!(matches!(
            breaker.state(),
            BreakerState::HalfOpen { step: 0, .. }
        ));
    }

    #[test]
    fn a_failure_while_half_open_opens_it_again() {
        let mut breaker = Breaker::new(config());
        for _ in 0..3 {
            breaker.on_failure(0);
        }
        breaker.admit(1000);
        breaker.on_success(1000);
        breaker.admit(1500);
        assert!(matches!(
            breaker.state(),
            BreakerState::HalfOpen { step: 1, .. }
        ));
        let reopened = breaker.on_failure(1600).unwrap();
        assert_eq!(reopened.to, BreakerState::Open { until_ms: 2600 });
        assert_eq!(admitted_of(&mut breaker, 5, 2000), 0);
    }

    #[test]
    fn the_error_rate_trips_without_consecutive_failures() {
        let mut breaker = Breaker::new(BreakerConfig {
            consecutive_failures: 100,
            error_rate_percent: 50,
            ..config()
        });
        // Alternating results: 50% errors, never two failures in a row.
        for i in 0..9 {
            if i % 2 == 0 {
                assert_eq!(breaker.on_failure(i * 100), None);
            } else {
                breaker.on_success(i * 100);
            }
        }
        assert_eq!(breaker.state(), BreakerState::Closed, "9 < min_requests");
        breaker.on_success(900);
        let opened = breaker.on_failure(1000).unwrap();
        assert_eq!(opened.to, BreakerState::Open { until_ms: 2000 });
    }

    #[test]
    fn old_results_leave_the_window() {
        let mut breaker = Breaker::new(BreakerConfig {
            consecutive_failures: 100,
            error_rate_percent: 50,
            ..config()
        });
        for _ in 0..9 {
            breaker.on_failure(0);
        }
        // Ten seconds later those nine failures are out of the window.
        for _ in 0..9 {
            breaker.on_success(10_000);
        }
        assert_eq!(breaker.on_failure(10_000), None);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn a_rate_below_the_threshold_keeps_it_closed() {
        let mut breaker = Breaker::new(BreakerConfig {
            consecutive_failures: 100,
            error_rate_percent: 50,
            ..config()
        });
        for i in 0..30 {
            if i % 3 == 0 {
                breaker.on_failure(i);
            } else {
                breaker.on_success(i);
            }
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
    }
}
