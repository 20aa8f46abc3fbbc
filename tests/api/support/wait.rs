//! Waiting in tests: [`wait_until`] for something to happen, within a bound;
//! [`let_real_time_pass`] only where real time passing is what a test is about.

use std::fmt::Debug;
use std::time::Duration;

/// How often [`wait_until`] looks again.
const POLL: Duration = Duration::from_millis(20);

/// Looks with `look` every 20 ms until it answers `Ok`, and returns what it
/// carried. `Err(state)` means "not yet": once `bound` has passed the test
/// fails, naming `what` and showing the last `state` seen.
///
/// ```ignore
/// let rows = wait_until(Duration::from_secs(5), "two ledger rows", async || {
///     let rows = app.ledger_rows(&tenant).await;
///     done_if(rows.len() >= 2, rows)
/// })
/// .await;
/// ```
pub async fn wait_until<T, S: Debug>(
    bound: Duration,
    what: &str,
    mut look: impl AsyncFnMut() -> Result<T, S>,
) -> T {
    let started = tollgate::clock::monotonic();
    loop {
        match look().await {
            Ok(value) => return value,
            Err(state) => assert!(
                started.elapsed() < bound,
                "timed out after {bound:?} waiting for {what}; last seen: {state:?}"
            ),
        }
        actix_rt::time::sleep(POLL).await;
    }
}

/// `Ok(state)` when `done`, else `Err(state)`: the answer of a [`wait_until`]
/// look whose state is both what a failure shows and what the test goes on with.
pub fn done_if<S>(done: bool, state: S) -> Result<S, S> {
    if done { Ok(state) } else { Err(state) }
}

/// The suite's one deliberate pause, for tests where time passing on the
/// real clock is itself the subject: a window that must elapse, a latency or
/// a client's back-off on purpose, or a period within which something must
/// *not* happen. Waiting for something to happen is [`wait_until`]'s, and
/// time the gateway reads through its clock is a `ManualClock`'s to advance.
pub async fn let_real_time_pass(period: Duration) {
    actix_rt::time::sleep(period).await;
}
