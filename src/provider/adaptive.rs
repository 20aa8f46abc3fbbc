//! Adaptive concurrency limit: limit = target × baseline latency / current
//! latency, within bounds, re-sampled once per window. The current latency is
//! the mean of the window's calls; the baseline is the lowest window mean seen,
//! drifting up by 1/16 of the gap per window so a lasting change of the
//! provider's normal speed is eventually accepted. Pure integers; `now` is a
//! parameter.

/// The baseline closes this fraction (1/n) of its gap to a slower window each time.
const BASELINE_DRIFT_DIVISOR: u64 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveConfig {
    /// The limit at baseline latency.
    pub target: u32,
    pub min: u32,
    pub max: u32,
    pub window_ms: u64,
}

#[derive(Debug, Clone)]
pub struct AdaptiveLimit {
    config: AdaptiveConfig,
    limit: u32,
    /// `None` until a first window has ended.
    baseline_ms: Option<u64>,
    window_start_ms: u64,
    latency_sum_ms: u64,
    calls: u64,
}

impl AdaptiveLimit {
    pub fn new(config: AdaptiveConfig, now_ms: u64) -> AdaptiveLimit {
        let min = config.min.max(1);
        let max = config.max.max(min);
        let config = AdaptiveConfig { min, max, ..config };
        AdaptiveLimit {
            config,
            limit: config.target.clamp(min, max),
            baseline_ms: None,
            window_start_ms: now_ms,
            latency_sum_ms: 0,
            calls: 0,
        }
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Records one call's latency; at a window's end returns the new limit.
    pub fn observe(&mut self, latency_ms: u64, now_ms: u64) -> Option<u32> {
        self.latency_sum_ms = self.latency_sum_ms.saturating_add(latency_ms);
        self.calls += 1;
        if now_ms < self.window_start_ms.saturating_add(self.config.window_ms) {
            return None;
        }
        // A zero mean (sub-millisecond calls) would divide by zero below.
        let current = (self.latency_sum_ms / self.calls).max(1);
        let baseline = match self.baseline_ms {
            Some(baseline) if baseline <= current => {
                baseline + (current - baseline) / BASELINE_DRIFT_DIVISOR
            }
            _ => current,
        };
        self.baseline_ms = Some(baseline);
        self.limit = Self::compute(self.config, baseline, current);
        self.window_start_ms = now_ms;
        self.latency_sum_ms = 0;
        self.calls = 0;
        Some(self.limit)
    }

    /// target × baseline / current, rounded down, within [min, max].
    fn compute(config: AdaptiveConfig, baseline_ms: u64, current_ms: u64) -> u32 {
        let scaled = u64::from(config.target).saturating_mul(baseline_ms) / current_ms.max(1);
        u32::try_from(scaled)
            .unwrap_or(u32::MAX)
            .clamp(config.min, config.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AdaptiveConfig {
        AdaptiveConfig {
            target: 100,
            min: 5,
            max: 200,
            window_ms: 10_000,
        }
    }

    #[test]
    fn the_formula_in_integers() {
        assert_eq!(AdaptiveLimit::compute(config(), 200, 200), 100);
        assert_eq!(AdaptiveLimit::compute(config(), 200, 400), 50);
        assert_eq!(
            AdaptiveLimit::compute(config(), 200, 300),
            66,
            "rounded down"
        );
        assert_eq!(
            AdaptiveLimit::compute(config(), 200, 100_000),
            5,
            "the floor"
        );
        assert_eq!(
            AdaptiveLimit::compute(config(), 400, 100),
            200,
            "the ceiling"
        );
        assert_eq!(AdaptiveLimit::compute(config(), 0, 0), 5);
    }

    #[test]
    fn re_samples_once_per_window() {
        let mut limit = AdaptiveLimit::new(config(), 0);
        assert_eq!(limit.limit(), 100);
        // First window: 200 ms on average sets the baseline.
        assert_eq!(limit.observe(100, 1000), None);
        assert_eq!(limit.observe(300, 10_000), Some(100));
        // Twice as slow: half the limit (the baseline drifts up by 1/16 of the gap).
        assert_eq!(limit.observe(400, 15_000), None);
        assert_eq!(limit.observe(400, 20_000), Some(53));
        assert_eq!(limit.limit(), 53);
        // Back to normal: the limit recovers.
        assert_eq!(limit.observe(212, 30_000), Some(100));
    }

    #[test]
    fn a_faster_window_lowers_the_baseline_at_once() {
        let mut limit = AdaptiveLimit::new(config(), 0);
        limit.observe(400, 10_000);
        assert_eq!(limit.observe(100, 20_000), Some(100));
        assert_eq!(limit.observe(200, 30_000), Some(53));
    }

    #[test]
    fn bounds_hold_whatever_the_target() {
        let limit = AdaptiveLimit::new(
            AdaptiveConfig {
                target: 1000,
                min: 0,
                max: 50,
                window_ms: 1,
            },
            0,
        );
        assert_eq!(limit.limit(), 50);
    }
}
