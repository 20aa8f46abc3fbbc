//! The scale of one replica: many concurrent streaming calls (10,000 by default) on a slow
//! fake, through a freshly started gateway. Each connection sends its next call as soon as its
//! stream has ended, so the count in flight stays level; the gateway's resident memory and
//! descriptors are sampled throughout. Reported: memory per in-flight call beyond the idle
//! gateway's, descriptors, whether every stream completed (a 200 ending in `[DONE]`), and
//! whether memory stayed flat. The direct baseline sends the same calls to the fake itself.
//!
//! The fake serves HTTPS with HTTP/2, as providers do, so the gateway's calls ride as streams of
//! a few upstream connections. Memory has a baseline of its own: the bare proxy (actix-web and
//! awc, no governance) holding the same calls to the same fake, since a call's client connection
//! costs what it costs in the framework whatever the gateway does; the gateway's figure beyond
//! the bare proxy's is what governance adds per call.
//!
//! Every call holds a client socket in the gateway: the harness raises its open-file limit
//! (which its children inherit) to the hard limit first, and says when even that is too low.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::task::{LocalSet, spawn_local};

use crate::clock::{micros_between, now};
use crate::generator::{Outcome, Target, next_id};
use crate::http::Conn;
use crate::procs::{open_fds, rss_kib};
use crate::stats::{self, Percentiles};

pub const CALLS: usize = 10_000;
/// A full run's length; the target is flat memory over ten minutes.
pub const FULL_SECONDS: u64 = 600;
pub const QUICK_SECONDS: u64 = 20;
/// The longest direct baseline: it shows what the client and fake manage, not a trend.
const DIRECT_MAX_SECONDS: u64 = 60;
/// The slow stream: 2 s to the first event, then 4 more 2 s apart (10 s a call).
pub const MODEL: &str = "bench-model+delay-2000ms+chunks-5+chunk-delay-2000ms";
pub const CALL_MS: u64 = 10_000;
pub const ROUTE: &str = "scale";
/// The gateway's provider for the route, with room for every call (`max_concurrency`).
pub const PROVIDER: &str = "bulk";
/// Connections open spread over this long, so the listen queues are not flooded.
const RAMP: Duration = Duration::from_secs(5);
/// After the window: the last calls' streams.
const GRACE: Duration = Duration::from_secs(30);
/// Target: at most this much memory per in-flight call beyond the baseline (the bare proxy's
/// own per call, each beyond its idle memory).
pub const TARGET_KIB_PER_CALL: u64 = 20;
/// The shortest steady stretch whose memory trend is judged.
const MIN_TREND_S: u64 = 60;
/// Descriptors a gateway needs besides its calls' (logs, database, listeners, pools).
const FD_MARGIN: u64 = 512;

/// One moment of the gateway under load.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    pub second: u64,
    pub rss_kib: u64,
    pub fds: u64,
    pub in_flight: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct ScaleRun {
    pub calls: usize,
    pub seconds: u64,
    pub ok: u64,
    pub errors: u64,
    /// 200s whose stream did not end with `[DONE]`.
    pub incomplete: u64,
    /// Calls still open when the grace ended.
    pub unfinished: u64,
    pub first_error: Option<String>,
    pub latency_us: Option<Percentiles>,
    pub first_token_us: Option<Percentiles>,
    pub peak_in_flight: u64,
    pub samples: Vec<Sample>,
}

impl ScaleRun {
    /// Every call answered 200 with its whole stream.
    pub fn complete(&self) -> bool {
        self.ok > 0 && self.errors == 0 && self.incomplete == 0 && self.unfinished == 0
    }
}

#[derive(Debug, Serialize)]
pub struct Scale {
    pub calls: usize,
    pub call_ms: u64,
    /// The open-file limit the run had (soft, hard), and what it lacked, if anything.
    pub open_files: OpenFiles,
    pub direct: ScaleRun,
    /// The same calls through the bare proxy (at most a minute), and its memory per call.
    pub bare: Option<BareScale>,
    pub gateway: ScaleRun,
    pub idle_rss_kib: Option<u64>,
    pub idle_fds: Option<u64>,
    pub peak_rss_kib: Option<u64>,
    pub peak_fds: Option<u64>,
    /// (peak resident memory − idle) ÷ calls in flight at that sample.
    pub kib_per_call: Option<u64>,
    /// `kib_per_call` less the bare proxy's: what governance adds per call.
    pub kib_per_call_beyond_bare: Option<u64>,
    /// Samples before this second (the ramp, the first calls' streams) are left out of the trend.
    pub ramp_s: u64,
    pub slope_kib_per_min: Option<i64>,
    /// The fitted line grows by at most 5% of the first steady sample over the run.
    pub flat: Option<bool>,
    /// The same fit over the second half of the steady window alone: resident memory catches
    /// up with the live heap in the first minutes (allocator pages first written as buffers
    /// are reused), so whether memory still grows shows here.
    pub late_slope_kib_per_min: Option<i64>,
    pub late_flat: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OpenFiles {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
    /// Why the limit is too low for the calls asked for.
    pub too_low: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct BareScale {
    pub run: ScaleRun,
    pub idle_rss_kib: Option<u64>,
    pub peak_rss_kib: Option<u64>,
    pub kib_per_call: Option<u64>,
}

/// Where the calls go: straight to the fake, through the bare proxy (its process), through the
/// gateway (its process).
pub struct Sides<'a> {
    pub direct: &'a Target,
    pub bare: Option<(&'a Target, u32)>,
    pub gateway: (&'a Target, u32),
}

/// The direct side and the bare proxy's (each at most a minute), then a fresh gateway's, each
/// `seconds` long.
pub async fn run(calls: usize, seconds: u64, sides: &Sides<'_>, open_files: OpenFiles) -> Scale {
    let baseline_seconds = seconds.min(DIRECT_MAX_SECONDS);
    let baseline = Duration::from_secs(baseline_seconds);
    println!("scale: {calls} streaming calls straight to the fake for {baseline_seconds} s");
    let direct = drive(sides.direct, calls, baseline, None).await;
    progress("direct", &direct);
    let bare = match sides.bare {
        Some((target, pid)) => {
            println!(
                "scale: {calls} streaming calls through the bare proxy for {baseline_seconds} s"
            );
            let idle_rss_kib = rss_kib(pid);
            let run = drive(target, calls, baseline, Some(pid)).await;
            progress("bare", &run);
            let peak = peak_sample(&run);
            Some(BareScale {
                idle_rss_kib,
                peak_rss_kib: peak.map(|s| s.rss_kib),
                kib_per_call: per_call(peak, idle_rss_kib),
                run,
            })
        }
        None => None,
    };
    let (gateway, pid) = sides.gateway;
    let idle_rss_kib = rss_kib(pid);
    let idle_fds = open_fds(pid);
    println!("scale: {calls} streaming calls through a fresh gateway (pid {pid}) for {seconds} s");
    let gateway = drive(gateway, calls, Duration::from_secs(seconds), Some(pid)).await;
    progress("gateway", &gateway);
    let ramp_s = (RAMP.as_secs() + CALL_MS / 1000).min(seconds / 2);
    let steady: Vec<(u64, u64)> = gateway
        .samples
        .iter()
        // Up to the end of the window: after it the calls drain, and memory with them.
        .filter(|s| s.second >= ramp_s && s.second <= seconds)
        .map(|s| (s.second, s.rss_kib))
        .collect();
    let slope = crate::inflight::slope_per_minute(&steady);
    let peak = peak_sample(&gateway);
    let kib_per_call = per_call(peak, idle_rss_kib);
    let kib_per_call_beyond_bare = kib_per_call
        .zip(bare.as_ref().and_then(|bare| bare.kib_per_call))
        .map(|(gateway, bare)| gateway.saturating_sub(bare));
    let span = seconds.saturating_sub(ramp_s);
    let flat = flat_over(&steady, span, slope);
    let late_from = ramp_s + span / 2;
    let late: Vec<(u64, u64)> = steady
        .iter()
        .copied()
        .filter(|(second, _)| *second >= late_from)
        .collect();
    let late_slope = crate::inflight::slope_per_minute(&late);
    let late_flat = flat_over(&late, seconds.saturating_sub(late_from), late_slope);
    Scale {
        calls,
        call_ms: CALL_MS,
        open_files,
        direct,
        bare,
        peak_rss_kib: peak.map(|s| s.rss_kib),
        peak_fds: gateway.samples.iter().map(|s| s.fds).max(),
        gateway,
        idle_rss_kib,
        idle_fds,
        kib_per_call,
        kib_per_call_beyond_bare,
        ramp_s,
        slope_kib_per_min: slope,
        flat,
        late_slope_kib_per_min: late_slope,
        late_flat,
    }
}

/// The fitted line over `span` seconds grows by at most 5% of the first sample; under a minute
/// of steady load says nothing about a trend.
fn flat_over(samples: &[(u64, u64)], span: u64, slope: Option<i64>) -> Option<bool> {
    slope
        .zip(samples.first())
        .filter(|_| span >= MIN_TREND_S)
        .map(|(slope, (_, first))| {
            let span = i64::try_from(span).unwrap_or(0);
            slope.saturating_mul(span) / 60 <= i64::try_from(*first / 20).unwrap_or(i64::MAX)
        })
}

fn peak_sample(run: &ScaleRun) -> Option<Sample> {
    run.samples.iter().max_by_key(|s| s.rss_kib).copied()
}

/// (peak resident memory − idle) ÷ the calls in flight at the peak.
fn per_call(peak: Option<Sample>, idle_rss_kib: Option<u64>) -> Option<u64> {
    peak.zip(idle_rss_kib).and_then(|(peak, idle)| {
        peak.rss_kib
            .saturating_sub(idle)
            .checked_div(peak.in_flight)
    })
}

fn progress(side: &str, run: &ScaleRun) {
    println!(
        "scale {side:<7}: ok {} errors {} incomplete {} unfinished {}; peak in flight {}; latency p50 {} p99 {} ms{}",
        run.ok,
        run.errors,
        run.incomplete,
        run.unfinished,
        run.peak_in_flight,
        run.latency_us
            .map_or_else(|| "—".to_owned(), |p| stats::ms(p.p50)),
        run.latency_us
            .map_or_else(|| "—".to_owned(), |p| stats::ms(p.p99)),
        run.first_error
            .as_deref()
            .map_or_else(String::new, |e| format!("; first error: {e}"))
    );
}

/// Raises this process's open-file limit to its hard limit (children inherit it) with
/// `prlimit`, and says whether `calls` fit: the gateway needs a descriptor a call for its
/// caller's socket (its HTTP/2 upstream connections each carry many calls).
pub fn raise_open_files(calls: usize) -> OpenFiles {
    let (soft, hard) = open_file_limits();
    if let (Some(soft), Some(hard)) = (soft, hard)
        && soft < hard
    {
        let raised = std::process::Command::new("prlimit")
            .arg("--pid")
            .arg(std::process::id().to_string())
            .arg(format!("--nofile={hard}:{hard}"))
            .status();
        if !raised.is_ok_and(|status| status.success()) {
            println!(
                "warning: could not raise the open-file limit from {soft} to {hard} (prlimit)"
            );
        }
    }
    let (soft, hard) = open_file_limits();
    let needed = u64::try_from(calls).unwrap_or(u64::MAX) + FD_MARGIN;
    let too_low = match soft {
        Some(soft) if soft < needed => Some(format!(
            "the open-file limit is {soft} (hard {}), below the {needed} a gateway may need for {calls} calls \
             (a client socket each, plus {FD_MARGIN}); raise the hard limit (`ulimit -Hn`, \
             a container's `nofile`, systemd's `LimitNOFILE`) and run again",
            hard.map_or_else(|| "unknown".to_owned(), |h| h.to_string())
        )),
        Some(_) => None,
        None => Some("the open-file limit could not be read from /proc/self/limits".to_owned()),
    };
    if let Some(reason) = &too_low {
        println!("warning: {reason}");
    }
    OpenFiles {
        soft,
        hard,
        too_low,
    }
}

/// (soft, hard) of `Max open files` in /proc/self/limits.
fn open_file_limits() -> (Option<u64>, Option<u64>) {
    let text = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let Some(line) = text.lines().find(|line| line.starts_with("Max open files")) else {
        return (None, None);
    };
    let mut numbers = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .map(|field| field.parse::<u64>().ok());
    (numbers.next().flatten(), numbers.next().flatten())
}

struct Shared {
    outcome: Outcome,
    incomplete: u64,
    in_flight: Cell<u64>,
}

/// `calls` connections, each sending its next call as soon as its stream ends, for `length`
/// (then the open calls finish); with `pid`, the process is sampled every second.
async fn drive(target: &Target, calls: usize, length: Duration, pid: Option<u32>) -> ScaleRun {
    let shared = Rc::new(RefCell::new(Shared {
        outcome: Outcome::default(),
        incomplete: 0,
        in_flight: Cell::new(0),
    }));
    let start = now();
    let until = start + length;
    let done = Cell::new(false);
    let peak_in_flight = Cell::new(0_u64);
    let local = LocalSet::new();
    let load = local.run_until(async {
        let step = RAMP / u32::try_from(calls.max(1)).unwrap_or(u32::MAX);
        let handles: Vec<_> = (0..calls)
            .map(|index| {
                let delay = step * u32::try_from(index).unwrap_or(u32::MAX);
                spawn_local(caller(
                    Rc::clone(&shared),
                    target.clone(),
                    start + delay,
                    until,
                ))
            })
            .collect();
        let total = handles.len();
        let finished = tokio::time::timeout(length + GRACE, async {
            let mut finished = 0;
            for handle in handles {
                if handle.await.is_ok() {
                    finished += 1;
                }
            }
            finished
        })
        .await;
        done.set(true);
        total - finished.unwrap_or(0)
    });
    let sample = async {
        let mut samples = Vec::new();
        while !done.get() {
            let in_flight = shared.borrow().in_flight.get();
            peak_in_flight.set(peak_in_flight.get().max(in_flight));
            if let Some(pid) = pid
                && let (Some(rss_kib), Some(fds)) = (rss_kib(pid), open_fds(pid))
            {
                samples.push(Sample {
                    second: micros_between(start, now()) / 1_000_000,
                    rss_kib,
                    fds,
                    in_flight,
                });
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        samples
    };
    let (unfinished, samples) = tokio::join!(load, sample);
    drop(local);
    let mut shared = shared.borrow_mut();
    let incomplete = shared.incomplete;
    let outcome = &mut shared.outcome;
    ScaleRun {
        calls,
        seconds: length.as_secs(),
        ok: outcome.ok,
        errors: outcome.errors,
        incomplete,
        unfinished: u64::try_from(unfinished).unwrap_or(0),
        first_error: outcome.first_error.take(),
        latency_us: stats::percentiles(&mut outcome.latencies_us),
        first_token_us: stats::percentiles(&mut outcome.first_data_us),
        peak_in_flight: peak_in_flight.get(),
        samples,
    }
}

/// One connection: from `start`, calls back to back until `until`.
async fn caller(shared: Rc<RefCell<Shared>>, target: Target, start: Instant, until: Instant) {
    tokio::time::sleep(start.saturating_duration_since(now())).await;
    let mut conn = Conn::new(target.addr, &target.template);
    loop {
        let began = now();
        if began >= until {
            return;
        }
        {
            let shared = shared.borrow();
            shared.in_flight.set(shared.in_flight.get() + 1);
        }
        let result = conn.exchange(next_id()).await;
        let done = now();
        {
            let mut shared = shared.borrow_mut();
            shared
                .in_flight
                .set(shared.in_flight.get().saturating_sub(1));
            if let Ok(response) = &result
                && response.status == 200
                && !conn.body_ends_with(response, b"[DONE]")
            {
                shared.incomplete += 1;
            }
            shared
                .outcome
                .record(&conn, &result, true, (began, done), None);
        }
        let failed = result.is_err();
        if failed {
            // A refusing server must not turn this loop into a busy spin.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
