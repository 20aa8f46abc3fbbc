//! 1,000 requests held open by a 2 s upstream, through a freshly started gateway (so its memory
//! is that of the held requests, not what earlier cells left in its allocator): its resident
//! memory and open file descriptors before, at the peak and after. Then, optionally, a soak that
//! keeps about 1,000 in flight and samples the resident memory to show whether it stays flat.

use std::cell::Cell;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use crate::clock::{micros_between, now};
use crate::generator::{self, ClosedLoop, Outcome, Target};
use crate::plan::Runner;
use crate::procs::{open_fds, rss_kib};
use crate::stack::{SLOW_MS, SLOW_ROUTE};
use crate::stats::{self, Percentiles};

/// Connections, each with one request outstanding at any time.
pub const IN_FLIGHT: usize = 1_000;
/// How often the peak is sampled while the requests are held.
const PEAK_EVERY: Duration = Duration::from_millis(250);
/// After the load: long enough for the last answers and closes to be processed.
const AFTER_WAIT: Duration = Duration::from_secs(3);
/// The start of a soak that its trend leaves out: the connections ramp up, and the allocator
/// refills what it returned to the system while the gateway was idle.
const SOAK_RAMP_S: u64 = 5;
/// 150 MB (decimal, as the target is written) in KiB.
pub const TARGET_KIB: u64 = 150_000_000 / 1024;

/// A gateway process's footprint at one moment.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Footprint {
    pub rss_kib: Option<u64>,
    pub fds: Option<u64>,
}

impl Footprint {
    fn of(pid: u32) -> Self {
        Self {
            rss_kib: rss_kib(pid),
            fds: open_fds(pid),
        }
    }

    fn max(self, other: Self) -> Self {
        Self {
            rss_kib: self.rss_kib.max(other.rss_kib),
            fds: self.fds.max(other.fds),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Soak {
    pub seconds: u64,
    pub interval_s: u64,
    /// (seconds since the soak began, resident KiB), all of them.
    pub samples: Vec<(u64, u64)>,
    /// Samples before this second are left out of the figures below.
    pub ramp_s: u64,
    pub first_kib: Option<u64>,
    pub last_kib: Option<u64>,
    pub max_kib: Option<u64>,
    pub max_fds: Option<u64>,
    /// Least-squares slope of the samples, KiB per minute.
    pub slope_kib_per_min: Option<i64>,
    pub ok: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Soak {
    /// Flat: the fitted line grows by at most 5% of the first sample over the soak (its ramp
    /// left out).
    pub fn flat(&self) -> Option<bool> {
        let slope = self.slope_kib_per_min?;
        let first = i64::try_from(self.first_kib?).ok()?;
        let seconds = i64::try_from(self.seconds.saturating_sub(self.ramp_s)).ok()?;
        let growth = slope.saturating_mul(seconds) / 60;
        Some(growth <= first / 20)
    }
}

#[derive(Debug, Serialize)]
pub struct InFlight {
    pub conns: usize,
    pub upstream_delay_ms: u64,
    pub hold_s: u64,
    pub before: Footprint,
    pub peak: Footprint,
    /// `after_wait_s` after the last answer.
    pub after: Footprint,
    pub after_wait_s: u64,
    pub ok: u64,
    pub errors: u64,
    pub unfinished: u64,
    pub first_error: Option<String>,
    /// From each send, of the requests answered within the hold.
    pub latency_us: Option<Percentiles>,
    pub soak: Option<Soak>,
}

impl InFlight {
    /// Every connection held its request and every answer was a 200.
    pub fn clean(&self) -> bool {
        self.errors == 0 && self.unfinished == 0 && self.ok > 0
    }
}

pub async fn run(runner: &Runner<'_>, hold: Duration, soak_seconds: u64) -> Result<InFlight> {
    let gateway = runner
        .stack
        .start_gateway("inflight", "the in-flight gateway")
        .await?;
    let pid = gateway.process.pid();
    let target = runner.route_target(gateway.addr, &gateway.key, SLOW_ROUTE)?;
    let before = Footprint::of(pid);
    println!(
        "in flight: {IN_FLIGHT} connections to a {SLOW_MS} ms upstream for {} s, fresh gateway (pid {pid})",
        hold.as_secs()
    );
    let (mut outcome, peak, _) = held(&target, hold, pid, PEAK_EVERY).await;
    tokio::time::sleep(AFTER_WAIT).await;
    let after = Footprint::of(pid);
    let soak = if soak_seconds > 0 {
        // A short soak needs denser samples to fit a line at all.
        let interval = if soak_seconds >= 60 { 5 } else { 1 };
        println!("soak: {IN_FLIGHT} in flight for {soak_seconds} s, memory every {interval} s");
        let (soaked, soak_peak, samples) = held(
            &target,
            Duration::from_secs(soak_seconds),
            pid,
            Duration::from_secs(interval),
        )
        .await;
        // A soak shorter than its ramp is judged on all its samples rather than none.
        let ramp_s = if soak_seconds > 2 * SOAK_RAMP_S {
            SOAK_RAMP_S
        } else {
            0
        };
        let steady: Vec<(u64, u64)> = samples
            .iter()
            .copied()
            .filter(|(second, _)| *second >= ramp_s)
            .collect();
        let rss: Vec<u64> = steady.iter().map(|(_, kib)| *kib).collect();
        Some(Soak {
            seconds: soak_seconds,
            interval_s: interval,
            ramp_s,
            first_kib: rss.first().copied(),
            last_kib: rss.last().copied(),
            max_kib: rss.iter().max().copied(),
            max_fds: soak_peak.fds,
            slope_kib_per_min: slope_per_minute(&steady),
            samples,
            ok: soaked.ok,
            errors: soaked.errors,
            first_error: soaked.first_error,
        })
    } else {
        None
    };
    drop(gateway);
    Ok(InFlight {
        conns: IN_FLIGHT,
        upstream_delay_ms: SLOW_MS,
        hold_s: hold.as_secs(),
        before,
        peak,
        after,
        after_wait_s: AFTER_WAIT.as_secs(),
        ok: outcome.ok,
        errors: outcome.errors,
        unfinished: outcome.unfinished,
        first_error: outcome.first_error.take(),
        latency_us: stats::percentiles(&mut outcome.latencies_us),
        soak,
    })
}

/// `IN_FLIGHT` connections sending back to back for `length` while the gateway is sampled
/// every `every`: the load's outcome, the largest footprint seen, and the (second, RSS) samples.
async fn held(
    target: &Target,
    length: Duration,
    pid: u32,
    every: Duration,
) -> (Outcome, Footprint, Vec<(u64, u64)>) {
    let load = ClosedLoop {
        conns: IN_FLIGHT,
        warmup: Duration::ZERO,
        measure: length,
        grace: Duration::from_millis(SLOW_MS) + Duration::from_secs(10),
    };
    let done = Cell::new(false);
    let started = now();
    let drive = async {
        let outcome = generator::closed_loop(target, load).await;
        done.set(true);
        outcome
    };
    let sample = async {
        let mut peak = Footprint::default();
        let mut samples = Vec::new();
        while !done.get() {
            let footprint = Footprint::of(pid);
            peak = peak.max(footprint);
            if let Some(kib) = footprint.rss_kib {
                samples.push((micros_between(started, now()) / 1_000_000, kib));
            }
            tokio::time::sleep(every).await;
        }
        (peak, samples)
    };
    let (outcome, (peak, samples)) = tokio::join!(drive, sample);
    (outcome, peak, samples)
}

/// Least-squares slope of (second, KiB) samples in KiB per minute, in integer arithmetic.
pub fn slope_per_minute(samples: &[(u64, u64)]) -> Option<i64> {
    let n = i128::try_from(samples.len()).ok()?;
    if n < 2 {
        return None;
    }
    let (mut sx, mut sy, mut sxx, mut sxy) = (0_i128, 0_i128, 0_i128, 0_i128);
    for (x, y) in samples {
        let (x, y) = (i128::from(*x), i128::from(*y));
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    let denominator = n * sxx - sx * sx;
    if denominator == 0 {
        return None;
    }
    i64::try_from((n * sxy - sx * sy) * 60 / denominator).ok()
}
