//! Faults under load: a fake that answers 5% of its calls with a 503 (its `--error-rate`),
//! behind a route whose second target is the healthy 0 ms fake. Its provider makes one attempt
//! (`max_attempts = 1`), so each 503 moves to the failover target at once and the answer's
//! `X-Tollgate-Provider` names the target that served it: the harness counts those calls
//! (retried) and their latency apart. The direct baseline is the faulty fake itself, 503s and all.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::generator::{self, OpenLoop, Outcome, Target};
use crate::plan::Timing;
use crate::stats::{self, Percentiles};

/// The faulty fake's share of 503s (its `--error-rate`).
pub const ERROR_RATE: &str = "0.05";
/// The faulty provider and the route that fails over from it to the 0 ms fake.
pub const PROVIDER: &str = "faulty";
pub const ROUTE: &str = "faults";
pub const FAILOVER_PROVIDER: &str = "fake0";
const MAX_CONNS: usize = 1_000;
const GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize)]
pub struct FaultRun {
    pub gateway: bool,
    pub number: u32,
    /// Successes in the measured window.
    pub ok: u64,
    /// Requests sent, warm-up included, and those that failed (503s, other errors, unanswered).
    pub sent: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Successes the failover target served.
    pub retried: u64,
    pub latency_us: Option<Percentiles>,
    pub retried_latency_us: Option<Percentiles>,
    /// The gateway's `tollgate_upstream_attempts_total{provider="faulty",outcome="retryable"}`
    /// grew by this much over the run (warm-up included).
    pub retryable_attempts: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct FaultCell {
    pub rate: u64,
    pub runs: Vec<FaultRun>,
}

impl FaultCell {
    /// Medians over the runs of one side: (latency, retried latency).
    pub fn medians(&self, gateway: bool) -> (Option<Percentiles>, Option<Percentiles>) {
        let pick = |field: fn(&FaultRun) -> Option<Percentiles>| {
            let all: Vec<Percentiles> = self
                .runs
                .iter()
                .filter(|r| r.gateway == gateway)
                .filter_map(field)
                .collect();
            stats::median_percentiles(&all)
        };
        (pick(|r| r.latency_us), pick(|r| r.retried_latency_us))
    }

    /// (ok, sent, errors, retried) summed over one side's runs.
    pub fn counts(&self, gateway: bool) -> (u64, u64, u64, u64) {
        self.runs.iter().filter(|r| r.gateway == gateway).fold(
            (0, 0, 0, 0),
            |(ok, sent, errors, retried), r| {
                (
                    ok + r.ok,
                    sent + r.sent,
                    errors + r.errors,
                    retried + r.retried,
                )
            },
        )
    }
}

pub async fn cell(
    rate: u64,
    timing: Timing,
    direct: &Target,
    gateway: &Target,
    metrics: SocketAddr,
) -> Result<FaultCell> {
    let plan = OpenLoop {
        rate,
        warmup: Duration::from_millis(timing.warmup_ms),
        measure: Duration::from_millis(timing.measure_ms),
        max_conns: MAX_CONNS,
        grace: GRACE,
    };
    let mut runs = Vec::new();
    for number in 1..=timing.runs {
        let mut sides = [false, true];
        if number % 2 == 0 {
            sides.reverse();
        }
        for on_gateway in sides {
            let before = retryable(metrics).await;
            let target = if on_gateway { gateway } else { direct };
            let outcome = generator::open_loop(target, plan)
                .await
                .context("running the faults cell's open loop")?;
            let after = retryable(metrics).await;
            let attempts = on_gateway
                .then(|| after.zip(before).map(|(a, b)| a.saturating_sub(b)))
                .flatten();
            let run = record(on_gateway, number, outcome, attempts);
            progress(rate, &run);
            runs.push(run);
        }
    }
    Ok(FaultCell { rate, runs })
}

fn record(gateway: bool, number: u32, mut outcome: Outcome, attempts: Option<u64>) -> FaultRun {
    FaultRun {
        gateway,
        number,
        ok: outcome.ok,
        sent: outcome.ok_total + outcome.errors + outcome.unfinished,
        errors: outcome.errors + outcome.unfinished,
        first_error: outcome.first_error.take(),
        retried: outcome.marked,
        latency_us: stats::percentiles(&mut outcome.latencies_us),
        retried_latency_us: stats::percentiles(&mut outcome.marked_latencies_us),
        retryable_attempts: attempts,
    }
}

fn progress(rate: u64, run: &FaultRun) {
    println!(
        "faults open {rate}/s {} run {}: ok {} errors {} retried {} (retryable attempts {}); p50 {} p99 {} ms; retried p50 {} p99 {} ms",
        if run.gateway { "gateway" } else { "direct " },
        run.number,
        run.ok,
        run.errors,
        run.retried,
        run.retryable_attempts
            .map_or_else(|| "—".to_owned(), |a| a.to_string()),
        run.latency_us
            .map_or_else(|| "—".to_owned(), |p| stats::ms(p.p50)),
        run.latency_us
            .map_or_else(|| "—".to_owned(), |p| stats::ms(p.p99)),
        run.retried_latency_us
            .map_or_else(|| "—".to_owned(), |p| stats::ms(p.p50)),
        run.retried_latency_us
            .map_or_else(|| "—".to_owned(), |p| stats::ms(p.p99)),
    );
}

/// The faulty provider's retryable attempts so far, from the gateway's `/metrics`.
async fn retryable(addr: SocketAddr) -> Option<u64> {
    let lines = crate::metric_lines(addr, &["tollgate_upstream_attempts_total"]).await;
    let wanted_provider = format!("provider=\"{PROVIDER}\"");
    Some(
        lines
            .iter()
            .filter(|line| {
                line.contains(&wanted_provider) && line.contains("outcome=\"retryable\"")
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum(),
    )
}
