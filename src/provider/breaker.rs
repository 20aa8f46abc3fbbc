//! Breaker: closed → open after N consecutive retryable failures → half-open
//! after a cooldown, where one probe decides between closed and open again.
//! Pure state; `now` is a parameter.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open { until_ms: u64 },
    HalfOpen { probing: bool },
}

#[derive(Debug, Clone)]
pub struct Breaker {
    state: BreakerState,
    consecutive_failures: u32,
    threshold: u32,
    cooldown_ms: u64,
}

impl Breaker {
    pub fn new(threshold: u32, cooldown_ms: u64) -> Breaker {
        Breaker {
            state: BreakerState::Closed,
            consecutive_failures: 0,
            threshold: threshold.max(1),
            cooldown_ms,
        }
    }

    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Whether a call may go out now; in half-open only one probe at a time.
    /// Returns `Some(is_probe)` when admitted.
    pub fn admit(&mut self, now_ms: u64) -> Option<bool> {
        match self.state {
            BreakerState::Closed => Some(false),
            BreakerState::Open { until_ms } if now_ms >= until_ms => {
                self.state = BreakerState::HalfOpen { probing: true };
                Some(true)
            }
            BreakerState::Open { .. } | BreakerState::HalfOpen { probing: true } => None,
            BreakerState::HalfOpen { probing: false } => {
                self.state = BreakerState::HalfOpen { probing: true };
                Some(true)
            }
        }
    }

    pub fn on_success(&mut self) {
        self.consecutive_failures = 0;
        self.state = BreakerState::Closed;
    }

    pub fn on_failure(&mut self, now_ms: u64) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let trip = matches!(self.state, BreakerState::HalfOpen { .. })
            || self.consecutive_failures >= self.threshold;
        if trip {
            self.state = BreakerState::Open {
                until_ms: now_ms.saturating_add(self.cooldown_ms),
            };
        }
    }

    /// A probe ended without a verdict (the caller went away): let another try.
    pub fn on_abandoned_probe(&mut self) {
        if self.state == (BreakerState::HalfOpen { probing: true }) {
            self.state = BreakerState::HalfOpen { probing: false };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_then_probes_after_cooldown() {
        let mut breaker = Breaker::new(3, 1000);
        for _ in 0..2 {
            assert_eq!(breaker.admit(0), Some(false));
            breaker.on_failure(0);
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
        breaker.on_failure(0);
        assert_eq!(breaker.state(), BreakerState::Open { until_ms: 1000 });
        assert_eq!(breaker.admit(999), None);
        assert_eq!(breaker.admit(1000), Some(true));
        assert_eq!(breaker.admit(1000), None, "one probe at a time");
        breaker.on_failure(1000);
        assert_eq!(breaker.state(), BreakerState::Open { until_ms: 2000 });
        assert_eq!(breaker.admit(2000), Some(true));
        breaker.on_success();
        assert_eq!(breaker.admit(2000), Some(false));
    }

    #[test]
    fn a_success_resets_the_failure_count() {
        let mut breaker = Breaker::new(2, 1000);
        breaker.on_failure(0);
        breaker.on_success();
        breaker.on_failure(0);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }
}
