//! The harness's one wall clock. The gateway's code reads time through its injectable
//! `Clock`; a load generator must measure real elapsed time, so it reads `Instant` here.

use std::time::Instant;

#[expect(
    clippy::disallowed_methods,
    reason = "a load generator measures real elapsed time, not an injectable clock"
)]
pub fn now() -> Instant {
    Instant::now()
}

/// Whole microseconds of `later - earlier`, zero when `later` is not after `earlier`.
pub fn micros_between(earlier: Instant, later: Instant) -> u64 {
    u64::try_from(later.saturating_duration_since(earlier).as_micros()).unwrap_or(u64::MAX)
}
