//! Percentiles, medians and ratios in integer arithmetic on microsecond samples, and their
//! formatting: nothing here needs a float.

use serde::Serialize;

/// Latency percentiles of one run (or the per-percentile medians of several), in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub count: u64,
}

const PARTS: u64 = 100_000;

/// Nearest-rank percentiles; sorts `samples` in place. `None` for no samples.
pub fn percentiles(samples: &mut [u64]) -> Option<Percentiles> {
    samples.sort_unstable();
    Some(Percentiles {
        p50: nearest_rank(samples, 50_000)?,
        p95: nearest_rank(samples, 95_000)?,
        p99: nearest_rank(samples, 99_000)?,
        p999: nearest_rank(samples, 99_900)?,
        max: *samples.last()?,
        count: u64::try_from(samples.len()).ok()?,
    })
}

/// The smallest sample with at least `parts / 100 000` of the samples at or below it.
fn nearest_rank(sorted: &[u64], parts: u64) -> Option<u64> {
    let n = u64::try_from(sorted.len()).ok()?;
    let rank = (n * parts).div_ceil(PARTS).max(1);
    sorted.get(usize::try_from(rank - 1).ok()?).copied()
}

/// The median (the mean of the two middle values for an even count).
pub fn median(values: &[u64]) -> Option<u64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        len if len % 2 == 1 => sorted.get(mid).copied(),
        _ => Some(sorted.get(mid - 1)?.midpoint(*sorted.get(mid)?)),
    }
}

/// Per-percentile medians over several runs.
pub fn median_percentiles(runs: &[Percentiles]) -> Option<Percentiles> {
    let pick = |field: fn(&Percentiles) -> u64| median(&runs.iter().map(field).collect::<Vec<_>>());
    Some(Percentiles {
        p50: pick(|p| p.p50)?,
        p95: pick(|p| p.p95)?,
        p99: pick(|p| p.p99)?,
        p999: pick(|p| p.p999)?,
        max: pick(|p| p.max)?,
        count: pick(|p| p.count)?,
    })
}

/// `later - earlier` as a signed number of microseconds.
pub fn difference(later: u64, earlier: u64) -> i64 {
    let later = i64::try_from(later).unwrap_or(i64::MAX);
    let earlier = i64::try_from(earlier).unwrap_or(i64::MAX);
    later.saturating_sub(earlier)
}

/// Microseconds as milliseconds with three decimals: `1234` → `1.234`.
pub fn ms(micros: u64) -> String {
    format!("{}.{:03}", micros / 1000, micros % 1000)
}

/// Signed microseconds as milliseconds: `-50` → `-0.050`, `1234` → `+1.234`.
pub fn signed_ms(micros: i64) -> String {
    let sign = if micros < 0 { '-' } else { '+' };
    format!("{sign}{}", ms(micros.unsigned_abs()))
}

/// `numerator / denominator` as a ratio with two decimals, e.g. `0.52`; rounded down.
pub fn ratio(numerator: u64, denominator: u64) -> Option<String> {
    let hundredths = numerator.checked_mul(100)?.checked_div(denominator)?;
    Some(format!("{}.{:02}", hundredths / 100, hundredths % 100))
}

/// Thousands separators for request rates: `48213` → `48,213`.
pub fn grouped(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}
