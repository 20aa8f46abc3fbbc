//! The only place that reads time. Quota, breaker and ledger logic take `now`
//! as a parameter; actors get it from a `Clock`, which tests replace with a
//! `ManualClock` to move time without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Wall-clock milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

pub type SharedClock = Arc<dyn Clock>;

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[expect(
        clippy::disallowed_methods,
        reason = "the system clock is the one reader of time"
    )]
    fn now_ms(&self) -> u64 {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }
}

/// Wall-clock time with its fraction of a second, for log lines.
#[expect(
    clippy::disallowed_methods,
    reason = "the system clock is the one reader of time"
)]
pub fn wall_time() -> jiff::Timestamp {
    jiff::Timestamp::try_from(SystemTime::now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    pub fn new(now_ms: u64) -> Self {
        ManualClock {
            now_ms: AtomicU64::new(now_ms),
        }
    }

    pub fn advance_ms(&self, ms: u64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    pub fn set_ms(&self, ms: u64) {
        self.now_ms.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// A monotonic instant for measuring latencies (never for decisions).
#[expect(
    clippy::disallowed_methods,
    reason = "latency measurement needs a monotonic clock"
)]
pub fn monotonic() -> Instant {
    Instant::now()
}

/// Time elapsed since `start` (zero if the clock went backwards).
pub fn elapsed(start: Instant) -> Duration {
    monotonic().saturating_duration_since(start)
}

/// Whole milliseconds in `duration`, saturating.
pub fn whole_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds elapsed since `start`, saturating.
pub fn elapsed_ms(start: Instant) -> u64 {
    u64::try_from(monotonic().saturating_duration_since(start).as_millis()).unwrap_or(u64::MAX)
}
