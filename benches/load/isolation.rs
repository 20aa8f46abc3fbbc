//! Three tenants at 6:3:1 on one gateway, each with the same rate limit: in the calm phase
//! every tenant keeps its rate, in the flood phase the largest sends several times its limit
//! and gets 429s while the other two keep theirs. What is asked is whether the small tenants'
//! added p99 moved beyond the run's own noise (the spread of that figure over the runs).
//! 429s are counted apart from errors.

use std::time::Duration;

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::generator::{self, OpenLoop, Outcome, Target};
use crate::plan::Timing;
use crate::stats::{self, Percentiles, difference};

/// The tenants, largest first, with their calm rates (req/s).
pub const TENANTS: [(&str, u64); 3] = [("large", 360), ("medium", 180), ("small", 60)];
/// The largest tenant's rate in the flood: three times its limit.
pub const FLOOD_RATE: u64 = 1_500;
/// Every tenant's limit: requests per second (the tier's rpm / 60), and its burst.
pub const LIMIT_RPS: u64 = 500;
/// The tier the three tenants are on.
pub const TIER: &str = "share";
/// Measured seconds at least per phase: the small tenant's p99 needs a few hundred samples.
const MIN_MEASURE_MS: u64 = 3_000;
const MAX_CONNS: usize = 1_000;
const GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The three tenants' load straight to the fake.
    Direct,
    Calm,
    Flood,
}

/// One tenant's side of a phase.
#[derive(Debug, Serialize)]
pub struct TenantRun {
    pub tenant: &'static str,
    pub rate: u64,
    pub ok: u64,
    pub rate_limited: u64,
    /// Failures other than 429.
    pub errors: u64,
    pub first_error: Option<String>,
    pub latency_us: Option<Percentiles>,
}

#[derive(Debug, Serialize)]
pub struct PhaseRun {
    pub number: u32,
    pub phase: Phase,
    pub tenants: Vec<TenantRun>,
}

/// Whether one small tenant moved: its added p99 (gateway − direct of the same run) per run
/// in each phase, their medians and the noise they are judged against.
#[derive(Debug, Serialize)]
pub struct Verdict {
    pub tenant: &'static str,
    pub calm_added_p99_us: Vec<i64>,
    pub flood_added_p99_us: Vec<i64>,
    pub calm_median_us: Option<i64>,
    pub flood_median_us: Option<i64>,
    /// The larger spread (max − min) of the two phases' figures over the runs.
    pub noise_us: Option<i64>,
    /// `None` with fewer than two runs: no noise to judge against.
    pub moved: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct Isolation {
    pub measure_ms: u64,
    pub runs: Vec<PhaseRun>,
    pub verdicts: Vec<Verdict>,
}

/// The gateway's targets, one per tenant (largest first), and the direct one.
pub struct Targets {
    pub gateway: [Target; 3],
    pub direct: Target,
}

pub async fn run(targets: &Targets, timing: Timing, runs: u32) -> Result<Isolation> {
    let measure_ms = timing.measure_ms.max(MIN_MEASURE_MS);
    let mut records = Vec::new();
    for number in 1..=runs {
        let mut phases = vec![Phase::Direct, Phase::Calm, Phase::Flood];
        if number % 2 == 0 {
            phases.reverse();
        }
        for phase in phases {
            let tenants = phase_run(targets, phase, timing.warmup_ms, measure_ms).await?;
            progress(number, phase, &tenants);
            records.push(PhaseRun {
                number,
                phase,
                tenants,
            });
        }
    }
    let verdicts = TENANTS[1..]
        .iter()
        .map(|(tenant, _)| verdict(tenant, &records))
        .collect();
    Ok(Isolation {
        measure_ms,
        runs: records,
        verdicts,
    })
}

/// The three tenants' open loops at once.
async fn phase_run(
    targets: &Targets,
    phase: Phase,
    warmup_ms: u64,
    measure_ms: u64,
) -> Result<Vec<TenantRun>> {
    let plan = |rate| OpenLoop {
        rate,
        warmup: Duration::from_millis(warmup_ms),
        measure: Duration::from_millis(measure_ms),
        max_conns: MAX_CONNS,
        grace: GRACE,
    };
    let rate = |index: usize| match (phase, index) {
        (Phase::Flood, 0) => FLOOD_RATE,
        _ => TENANTS[index].1,
    };
    let target = |index: usize| match phase {
        Phase::Direct => &targets.direct,
        Phase::Calm | Phase::Flood => &targets.gateway[index],
    };
    let (a, b, c) = tokio::join!(
        generator::open_loop(target(0), plan(rate(0))),
        generator::open_loop(target(1), plan(rate(1))),
        generator::open_loop(target(2), plan(rate(2))),
    );
    let outcomes = [a, b, c];
    let mut tenants = Vec::new();
    for (index, outcome) in outcomes.into_iter().enumerate() {
        let outcome = outcome.context("running a tenant's open loop")?;
        tenants.push(tenant_run(TENANTS[index].0, rate(index), outcome));
    }
    Ok(tenants)
}

fn tenant_run(tenant: &'static str, rate: u64, mut outcome: Outcome) -> TenantRun {
    let rate_limited = outcome.statuses.get(&429).copied().unwrap_or(0);
    TenantRun {
        tenant,
        rate,
        ok: outcome.ok,
        rate_limited,
        errors: outcome.errors.saturating_sub(rate_limited) + outcome.unfinished,
        first_error: outcome
            .first_error
            .take()
            .filter(|e| rate_limited == 0 || !e.starts_with("HTTP 429")),
        latency_us: stats::percentiles(&mut outcome.latencies_us),
    }
}

fn progress(number: u32, phase: Phase, tenants: &[TenantRun]) {
    let parts: Vec<String> = tenants
        .iter()
        .map(|t| {
            format!(
                "{} {}/s: ok {} 429 {} errors {} p99 {} ms",
                t.tenant,
                t.rate,
                t.ok,
                t.rate_limited,
                t.errors,
                t.latency_us
                    .map_or_else(|| "—".to_owned(), |p| stats::ms(p.p99))
            )
        })
        .collect();
    println!("tenants run {number} {phase:?}: {}", parts.join("; "));
}

/// The p99 of `tenant` in a phase of run `number`.
fn p99(records: &[PhaseRun], number: u32, phase: Phase, tenant: &str) -> Option<u64> {
    records
        .iter()
        .find(|r| r.number == number && r.phase == phase)?
        .tenants
        .iter()
        .find(|t| t.tenant == tenant)?
        .latency_us
        .map(|p| p.p99)
}

pub fn verdict(tenant: &'static str, records: &[PhaseRun]) -> Verdict {
    let numbers: Vec<u32> = {
        let mut numbers: Vec<u32> = records.iter().map(|r| r.number).collect();
        numbers.dedup();
        numbers
    };
    let added = |phase| -> Vec<i64> {
        numbers
            .iter()
            .filter_map(|n| {
                let gateway = p99(records, *n, phase, tenant)?;
                let direct = p99(records, *n, Phase::Direct, tenant)?;
                Some(difference(gateway, direct))
            })
            .collect()
    };
    let calm = added(Phase::Calm);
    let flood = added(Phase::Flood);
    let spread = |values: &[i64]| Some(values.iter().max()? - values.iter().min()?);
    let noise = spread(&calm).zip(spread(&flood)).map(|(a, b)| a.max(b));
    let calm_median = signed_median(&calm);
    let flood_median = signed_median(&flood);
    let moved = match (calm_median, flood_median, noise) {
        (Some(c), Some(f), Some(noise)) if calm.len() >= 2 && flood.len() >= 2 => {
            Some((f - c).abs() > noise)
        }
        _ => None,
    };
    Verdict {
        tenant,
        calm_added_p99_us: calm,
        flood_added_p99_us: flood,
        calm_median_us: calm_median,
        flood_median_us: flood_median,
        noise_us: noise,
        moved,
    }
}

/// The median of signed values (the lower middle one for an even count).
fn signed_median(values: &[i64]) -> Option<i64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get((sorted.len().checked_sub(1)?) / 2).copied()
}
