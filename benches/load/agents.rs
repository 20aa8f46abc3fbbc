//! Agents on a slow upstream: each agent sends a streamed request, reads the whole answer,
//! thinks 1–3 s (uniform, from a seeded generator, so the gateway and the direct baseline see
//! the same think times) and sends the next. The fake answers after a lognormal delay (median
//! 1.5 s, σ 0.5) and then streams; each side has a fake of its own with the same seed, so the
//! n-th call to arrive waits as long on both and the difference is the gateway's. Beside latency and time to first token, a fresh gateway's
//! CPU and memory are read per agent: what an agent platform sizes a replica by.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Result;
use rand::{Rng as _, SeedableRng as _};
use serde::Serialize;
use tokio::task::{LocalSet, spawn_local};

use crate::clock::{micros_between, now};
use crate::generator::{Outcome, Target, next_id};
use crate::http::Conn;
use crate::procs::{clock_ticks_per_second, cpu_ticks, rss_kib};
use crate::stats::{self, Percentiles};

/// Concurrent agents of the cells.
pub const AGENTS: [usize; 3] = [20, 80, 200];
/// The fake's lognormal delay: its median and σ (the fake's `--latency-sigma`).
pub const MEDIAN_MS: u64 = 1_500;
pub const SIGMA: &str = "0.5";
/// Think time between an answer and the next request, uniform.
pub const THINK_MS: (u64, u64) = (1_000, 3_000);
/// Each answer streams 20 content events 25 ms apart after the delay.
pub const STREAM: (u32, u64) = (20, 25);
/// Agents start spread over this long; the measurement begins once all have.
const STAGGER_MS: u64 = 3_000;
/// After the window: the last answers (a lognormal delay's far tail included).
const GRACE: Duration = Duration::from_secs(30);
/// The seed of the think times and start offsets, and of the fakes' delays.
pub const SEED: u64 = 36;
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// What one side of a cell measured.
#[derive(Debug, Default, Serialize)]
pub struct AgentRun {
    /// Successful answers whose request began in the window.
    pub ok: u64,
    pub errors: u64,
    /// 200s whose stream did not end with `[DONE]`.
    pub incomplete: u64,
    /// Agents whose last request was unanswered when the grace ended.
    pub unfinished: u64,
    pub first_error: Option<String>,
    pub latency_us: Option<Percentiles>,
    pub first_token_us: Option<Percentiles>,
}

/// The gateway's use of the machine during its side of a cell.
#[derive(Debug, Default, Serialize)]
pub struct Footprint {
    pub cpu_us_per_request: Option<u64>,
    /// CPU time per wall-clock second per agent, in µs (1,000 is a thousandth of a core).
    pub cpu_us_per_s_per_agent: Option<u64>,
    /// The fresh gateway's resident memory before the load, and its peak under it.
    pub rss_before_kib: Option<u64>,
    pub rss_peak_kib: Option<u64>,
    pub kib_per_agent: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct AgentCell {
    pub agents: usize,
    pub seconds: u64,
    pub direct: AgentRun,
    pub gateway: AgentRun,
    pub footprint: Footprint,
}

/// The direct side, then the gateway's (a fresh one, `gateway_pid`), each for `seconds`.
pub async fn cell(
    agents: usize,
    seconds: u64,
    direct: &Target,
    gateway: &Target,
    gateway_pid: u32,
) -> Result<AgentCell> {
    let length = Duration::from_secs(seconds);
    println!("agents: {agents} agents, {seconds} s each side");
    let (direct_run, _) = drive(direct, agents, length, None).await;
    progress(agents, "direct", &direct_run);
    let ticks = cpu_ticks(gateway_pid);
    let started = now();
    let (gateway_run, peak) = drive(gateway, agents, length, Some(gateway_pid)).await;
    progress(agents, "gateway", &gateway_run);
    let wall_us = micros_between(started, now());
    let cpu_us = ticks
        .zip(cpu_ticks(gateway_pid))
        .map(|(before, after)| after.saturating_sub(before) * 1_000_000 / clock_ticks_per_second());
    let agents_u64 = u64::try_from(agents).unwrap_or(u64::MAX);
    let footprint = Footprint {
        cpu_us_per_request: cpu_us.and_then(|cpu| cpu.checked_div(gateway_run.ok)),
        cpu_us_per_s_per_agent: cpu_us
            .and_then(|cpu| (cpu * 1_000_000).checked_div(wall_us))
            .and_then(|per_s| per_s.checked_div(agents_u64)),
        rss_before_kib: peak.0,
        rss_peak_kib: peak.1,
        kib_per_agent: peak
            .0
            .zip(peak.1)
            .and_then(|(before, peak)| peak.saturating_sub(before).checked_div(agents_u64)),
    };
    Ok(AgentCell {
        agents,
        seconds,
        direct: direct_run,
        gateway: gateway_run,
        footprint,
    })
}

fn progress(agents: usize, side: &str, run: &AgentRun) {
    let show = |p: Option<&Percentiles>| {
        p.map_or_else(
            || "—".to_owned(),
            |p| {
                format!(
                    "p50 {} p95 {} p99 {}",
                    stats::ms(p.p50),
                    stats::ms(p.p95),
                    stats::ms(p.p99)
                )
            },
        )
    };
    println!(
        "agents {agents:>3} {side:<7}: ok {} errors {} incomplete {} unfinished {}; latency {} ms; first token {} ms{}",
        run.ok,
        run.errors,
        run.incomplete,
        run.unfinished,
        show(run.latency_us.as_ref()),
        show(run.first_token_us.as_ref()),
        run.first_error
            .as_deref()
            .map_or_else(String::new, |e| format!("; first error: {e}"))
    );
}

/// Shared by the agents of one side.
struct Shared {
    outcome: Outcome,
    incomplete: u64,
}

/// Runs the agents against `target`; with `pid`, also the process's resident memory before
/// and at its peak.
async fn drive(
    target: &Target,
    agents: usize,
    length: Duration,
    pid: Option<u32>,
) -> (AgentRun, (Option<u64>, Option<u64>)) {
    let before = pid.and_then(rss_kib);
    let shared = Rc::new(RefCell::new(Shared {
        outcome: Outcome::default(),
        incomplete: 0,
    }));
    let start = now();
    let from = start + Duration::from_millis(STAGGER_MS);
    let until = from + length;
    let done = std::cell::Cell::new(false);
    let local = LocalSet::new();
    let run = local.run_until(async {
        let handles: Vec<_> = (0..agents)
            .map(|index| {
                let seed = SEED.wrapping_add(u64::try_from(index).unwrap_or(0));
                spawn_local(agent(
                    Rc::clone(&shared),
                    target.clone(),
                    seed,
                    (from, until),
                ))
            })
            .collect();
        let total = handles.len();
        let finished =
            tokio::time::timeout(until.saturating_duration_since(now()) + GRACE, async {
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
        let mut peak = None;
        while !done.get() {
            peak = peak.max(pid.and_then(rss_kib));
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        peak
    };
    let (unfinished, peak) = tokio::join!(run, sample);
    drop(local);
    let mut shared = shared.borrow_mut();
    let outcome = &mut shared.outcome;
    let mut record = AgentRun {
        ok: outcome.ok,
        errors: outcome.errors,
        incomplete: 0,
        unfinished: u64::try_from(unfinished).unwrap_or(0),
        first_error: outcome.first_error.take(),
        latency_us: stats::percentiles(&mut outcome.latencies_us),
        first_token_us: stats::percentiles(&mut outcome.first_data_us),
    };
    record.incomplete = shared.incomplete;
    (record, (before, peak))
}

/// One agent: a start offset, then request, whole answer, think, until the window closes.
async fn agent(shared: Rc<RefCell<Shared>>, target: Target, seed: u64, window: (Instant, Instant)) {
    let (from, until) = window;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let offset = rng.random_range(0..STAGGER_MS);
    tokio::time::sleep(Duration::from_millis(offset)).await;
    let mut conn = Conn::new(target.addr, &target.template);
    loop {
        let began = now();
        if began >= until {
            return;
        }
        let result = conn.exchange(next_id()).await;
        let done = now();
        let measured = began >= from;
        {
            let mut shared = shared.borrow_mut();
            if let Ok(response) = &result
                && response.status == 200
                && measured
                && !conn.body_ends_with(response, b"[DONE]")
            {
                shared.incomplete += 1;
            }
            shared
                .outcome
                .record(&conn, &result, measured, (began, done), None);
        }
        let think = rng.random_range(THINK_MS.0..=THINK_MS.1);
        tokio::time::sleep(Duration::from_millis(think)).await;
    }
}
