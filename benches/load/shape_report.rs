//! The tables of the cells in production's shape, for stdout and BENCHMARKS.md.

use std::fmt::Write as _;

use crate::agents::{self, AgentCell};
use crate::faults::{self, FaultCell};
use crate::isolation::{self, Isolation, Phase};
use crate::plan::{Cell, Mode};
use crate::report::Results;
use crate::scale::{self, Scale, ScaleRun};
use crate::shape::ShapeResults;
use crate::stats::{self, Percentiles, difference, grouped, ms, signed_ms};

/// Every shape table, headed for BENCHMARKS.md.
pub fn tables(cells: &[Cell], shape: &ShapeResults, postgres: &str) -> String {
    let mut out = String::new();
    let skipped = shape.skipped.as_deref();
    out.push_str("\n### Agents on a slow upstream\n\n");
    out.push_str(&agents_table(
        &shape.agents,
        shape.agents_failed.as_deref().or(skipped),
    ));
    out.push_str("\n### Three tenants at 6:3:1: isolation under a flood\n\n");
    out.push_str(&isolation_table(
        shape.isolation.as_ref(),
        shape.isolation_failed.as_deref().or(skipped),
    ));
    out.push_str("\n### Faults under load: 5% of upstream answers are 503s\n\n");
    out.push_str(&faults_table(
        &shape.faults,
        shape.faults_failed.as_deref().or(skipped),
    ));
    out.push_str("\n### PostgreSQL beside SQLite\n\n");
    out.push_str(&postgres_table(cells, postgres));
    out.push_str("\n### Scale of one replica\n\n");
    out.push_str(&scale_section(
        shape.scale.as_ref(),
        shape.scale_failed.as_deref().or(skipped),
    ));
    out
}

/// The shape tables of a run on their own (a `--shape-only` run's preview).
pub fn section(results: &Results) -> String {
    format!(
        "# The load in production's shape\n\nA `--shape-only` run of `{}`; the full run puts these tables in BENCHMARKS.md.\n{}",
        crate::report::COMMAND,
        tables(&results.cells, &results.shape, &results.postgres)
    )
}

/// The method's bullets for these cells.
pub fn method_bullets() -> String {
    let (think_from, think_to) = agents::THINK_MS;
    let (chunks, chunk_ms) = agents::STREAM;
    format!(
        "- **Agents** ({counts} concurrent): each agent sends a streamed short-prompt request, reads the whole answer, thinks {think_from}–{think_to} ms (uniform, seeded: both sides see the same think times) and sends the next; \
         agents start spread over 3 s and the window opens once all have. A fake started with `--latency-ms {median} --latency-sigma {sigma}` answers after a lognormal delay and then streams {chunks} events {chunk_ms} ms apart. \
         Each count gets a freshly started gateway, whose CPU time and peak resident memory beyond its idle memory are read per agent.\n\
         - **Three tenants** ({large}, {medium} and {small} req/s, short prompt, 0 ms fake): each on a tier of {limit} req/s (`rpm` {rpm}, `burst` {limit}); in the flood phase the largest sends {flood} req/s. \
         Each run measures the direct baseline (the same three loads to the fake), the calm phase and the flood phase; the small tenants' added p99 moved if the flood's median differs from the calm one by more than the spread of either phase over the runs.\n\
         - **Faults**: a fake started with `--error-rate {error_rate}` behind a route whose second target is the 0 ms fake; its provider makes one attempt (`max_attempts = 1`), so each 503 fails over at once and the answer's `X-Tollgate-Provider` tells a retried call. \
         The direct baseline is the faulty fake itself (its 503s are its errors).\n\
         - **PostgreSQL**: the harness runs `initdb` and `postgres` (server defaults, loopback, a temporary directory, stopped at the end) and a gateway like the default one with `TOLLGATE_DATABASE_URL` on it; the short-prompt cells of the fsync-batch and Redis modes.\n\
         - **Scale**: {calls} connections, each sending its next streamed call as soon as the last ended, to a freshly started gateway on a route whose fake sends the first of 5 events after 2 s and the rest 2 s apart ({call_s} s a call), \
         opened over 5 s; the gateway's resident memory, descriptors and the calls in flight are sampled every second. The harness raises its open-file limit to the hard limit first (children inherit it). \
         The fake serves HTTPS (`--tls-listen`, a certificate from an authority it makes at start, which the gateway's provider trusts through `ca_file`), HTTP/2 by ALPN as providers do, so the gateway's calls are streams of a few upstream connections. \
         The direct baseline sends the same calls to the fake (at most a minute); the memory baseline is the bare proxy, started with the same authority, holding the same calls to the same fake (at most a minute), its resident memory sampled alike.\n",
        counts = agents::AGENTS.map(|n| n.to_string()).join(", "),
        median = agents::MEDIAN_MS,
        sigma = agents::SIGMA,
        large = isolation::TENANTS[0].1,
        medium = isolation::TENANTS[1].1,
        small = isolation::TENANTS[2].1,
        limit = isolation::LIMIT_RPS,
        rpm = grouped(isolation::LIMIT_RPS * 60),
        flood = grouped(isolation::FLOOD_RATE),
        error_rate = faults::ERROR_RATE,
        calls = grouped(u64::try_from(scale::CALLS).unwrap_or(0)),
        call_s = scale::CALL_MS / 1000,
    )
}

fn three(p: Option<&Percentiles>) -> String {
    p.map_or_else(
        || "—".to_owned(),
        |p| format!("{} / {} / {}", ms(p.p50), ms(p.p95), ms(p.p99)),
    )
}

/// Gateway minus direct at p50, p95 and p99.
fn added_three(gateway: Option<&Percentiles>, direct: Option<&Percentiles>) -> String {
    gateway.zip(direct).map_or_else(
        || "—".to_owned(),
        |(g, d)| {
            format!(
                "{} / {} / {}",
                signed_ms(difference(g.p50, d.p50)),
                signed_ms(difference(g.p95, d.p95)),
                signed_ms(difference(g.p99, d.p99))
            )
        },
    )
}

fn number(value: Option<u64>) -> String {
    value.map_or_else(|| "?".to_owned(), grouped)
}

pub fn agents_table(cells: &[AgentCell], failed: Option<&str>) -> String {
    let mut out = String::from(
        "Agents each send a streamed request, read the whole answer, think 1–3 s and send the next, against a fake whose delay is lognormal (median 1.5 s, σ 0.5): \
         what the gateway adds to each call and to its first token, and the CPU and memory one concurrent agent costs a replica \
         (each count on a freshly started gateway: its CPU time over the side's wall time, and its peak resident memory beyond its idle memory, divided by the agents; \
         what a gateway grows by on first use weighs most at the smallest count). Both sides meet fakes with the same seeded delays, so the n-th call waits alike on each. \
         Latency in ms (p50 / p95 / p99) from each request's send; *added* is gateway minus direct.\n\n\
         | agents | requests direct / gateway | direct | gateway | added | first token, gateway | first token added | gateway CPU µs/req | CPU µs/s per agent | memory KiB per agent (idle → peak MiB) | gateway errors |\n\
         |---:|---|---|---|---|---|---|---:|---:|---|---|\n",
    );
    for cell in cells {
        let f = &cell.footprint;
        let _ = writeln!(
            out,
            "| {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} ({} → {}) | {} |",
            cell.agents,
            grouped(cell.direct.ok),
            grouped(cell.gateway.ok),
            three(cell.direct.latency_us.as_ref()),
            three(cell.gateway.latency_us.as_ref()),
            added_three(
                cell.gateway.latency_us.as_ref(),
                cell.direct.latency_us.as_ref()
            ),
            three(cell.gateway.first_token_us.as_ref()),
            added_three(
                cell.gateway.first_token_us.as_ref(),
                cell.direct.first_token_us.as_ref()
            ),
            number(f.cpu_us_per_request),
            number(f.cpu_us_per_s_per_agent),
            number(f.kib_per_agent),
            mib(f.rss_before_kib),
            mib(f.rss_peak_kib),
            agent_problems(&cell.gateway),
        );
    }
    if cells.is_empty() {
        let _ = writeln!(
            out,
            "| not measured: {} | | | | | | | | | | |",
            failed.unwrap_or("not run")
        );
    }
    out
}

fn agent_problems(run: &agents::AgentRun) -> String {
    if run.errors == 0 && run.incomplete == 0 && run.unfinished == 0 {
        return "none".to_owned();
    }
    format!(
        "{} errors, {} incomplete streams, {} unfinished{}",
        run.errors,
        run.incomplete,
        run.unfinished,
        run.first_error
            .as_deref()
            .map_or_else(String::new, |e| format!(" (first: {})", cut(e)))
    )
}

fn cut(text: &str) -> String {
    text.chars()
        .take(120)
        .collect::<String>()
        .replace(['|', '\n'], " ")
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or_else(|| "?".to_owned(), |kib| (kib / 1024).to_string())
}

/// The median of one tenant's figure over the runs of a phase.
fn tenant_median(
    isolation: &Isolation,
    phase: Phase,
    tenant: &str,
    field: fn(&isolation::TenantRun) -> Option<u64>,
) -> Option<u64> {
    let values: Vec<u64> = isolation
        .runs
        .iter()
        .filter(|r| r.phase == phase)
        .filter_map(|r| r.tenants.iter().find(|t| t.tenant == tenant))
        .filter_map(field)
        .collect();
    stats::median(&values)
}

/// Summed over the runs of a phase: (429s, other errors).
fn tenant_refusals(isolation: &Isolation, phase: Phase, tenant: &str) -> (u64, u64) {
    isolation
        .runs
        .iter()
        .filter(|r| r.phase == phase)
        .filter_map(|r| r.tenants.iter().find(|t| t.tenant == tenant))
        .fold((0, 0), |(limited, errors), t| {
            (limited + t.rate_limited, errors + t.errors)
        })
}

pub fn isolation_table(isolation: Option<&Isolation>, failed: Option<&str>) -> String {
    let mut out = format!(
        "Three tenants on one gateway at 6:3:1, each limited to {limit} req/s; in the flood the largest sends {flood} req/s (429s past its limit) while the other two keep their rates. \
         p99 in ms (median over the runs) from each request's due time; *added* is gateway minus direct of the same run; 429s are counted apart from errors.\n\n",
        limit = isolation::LIMIT_RPS,
        flood = grouped(isolation::FLOOD_RATE),
    );
    let Some(isolation) = isolation else {
        let _ = writeln!(out, "Not measured: {}.", failed.unwrap_or("not run"));
        return out;
    };
    out.push_str(
        "| tenant | req/s calm / flood | direct p99 | calm p99 | flood p99 | 429s calm / flood | errors calm / flood |\n\
         |---|---|---:|---:|---:|---|---|\n",
    );
    for (tenant, rate) in isolation::TENANTS {
        let p99 = |phase| tenant_median(isolation, phase, tenant, |t| t.latency_us.map(|p| p.p99));
        let flood_rate = if tenant == isolation::TENANTS[0].0 {
            isolation::FLOOD_RATE
        } else {
            rate
        };
        let (calm_limited, calm_errors) = tenant_refusals(isolation, Phase::Calm, tenant);
        let (flood_limited, flood_errors) = tenant_refusals(isolation, Phase::Flood, tenant);
        let show = |v: Option<u64>| v.map_or_else(|| "—".to_owned(), ms);
        let _ = writeln!(
            out,
            "| {tenant} | {} / {} | {} | {} | {} | {} / {} | {} / {} |",
            grouped(rate),
            grouped(flood_rate),
            show(p99(Phase::Direct)),
            show(p99(Phase::Calm)),
            show(p99(Phase::Flood)),
            grouped(calm_limited),
            grouped(flood_limited),
            grouped(calm_errors),
            grouped(flood_errors),
        );
    }
    out.push('\n');
    for verdict in &isolation.verdicts {
        out.push_str(&verdict_line(verdict));
    }
    out
}

pub fn verdict_line(v: &isolation::Verdict) -> String {
    let show = |value: Option<i64>| value.map_or_else(|| "—".to_owned(), signed_ms);
    // Faster under the flood is no breach of isolation: a busier machine
    // wakes its threads sooner. Only a rise is one.
    let rose = v
        .calm_median_us
        .zip(v.flood_median_us)
        .is_some_and(|(calm, flood)| flood > calm);
    let judged = match v.moved {
        Some(true) if rose => "**rose beyond the run's noise**: the flood reached this tenant",
        Some(true) => {
            "**fell beyond the run's noise**: faster under the flood, which a busier machine gives; not slowed by it"
        }
        Some(false) => "**did not move beyond the run's noise**",
        None => "not judged (fewer than two runs, so no noise to judge against)",
    };
    format!(
        "- The {} tenant's added p99: {} ms calm, {} ms under the flood (noise: {} ms between runs): {judged}.\n",
        v.tenant,
        show(v.calm_median_us),
        show(v.flood_median_us),
        v.noise_us
            .map_or_else(|| "—".to_owned(), |n| ms(n.unsigned_abs())),
    )
}

pub fn faults_table(cells: &[FaultCell], failed: Option<&str>) -> String {
    let mut out = format!(
        "A fake that answers {}% of calls with a 503, behind a route that fails over to a healthy fake: how many calls were retried and what the retry added. \
         Latency in ms (p50 / p95 / p99, median over the runs) from each request's due time; *retried added* is retried calls' latency minus the direct baseline's.\n\n\
         | load | direct | direct errors | gateway | gateway added | retried calls | retried | retried added | faulty provider's retryable attempts | gateway errors |\n\
         |---|---|---|---|---|---|---|---|---:|---|\n",
        faults::ERROR_RATE
            .trim_start_matches("0.")
            .trim_start_matches('0')
    );
    for cell in cells {
        let (direct, _) = cell.medians(false);
        let (gateway, retried) = cell.medians(true);
        let (_, direct_sent, direct_errors, _) = cell.counts(false);
        let (ok, _, errors, retried_calls) = cell.counts(true);
        let attempts: u64 = cell.runs.iter().filter_map(|r| r.retryable_attempts).sum();
        let _ = writeln!(
            out,
            "| open {}/s | {} | {} | {} | {} | {} of {} ({}) | {} | {} | {} | {} |",
            grouped(cell.rate),
            three(direct.as_ref()),
            share(direct_errors, direct_sent),
            three(gateway.as_ref()),
            added_three(gateway.as_ref(), direct.as_ref()),
            grouped(retried_calls),
            grouped(ok),
            share(retried_calls, ok),
            three(retried.as_ref()),
            added_three(retried.as_ref(), direct.as_ref()),
            grouped(attempts),
            grouped(errors),
        );
    }
    if cells.is_empty() {
        let _ = writeln!(
            out,
            "| not measured: {} | | | | | | | | | |",
            failed.unwrap_or("not run")
        );
    }
    out
}

/// `part / whole` as a percentage with one decimal.
fn share(part: u64, whole: u64) -> String {
    (part * 1000).checked_div(whole).map_or_else(
        || "—".to_owned(),
        |permille| format!("{}.{}%", permille / 10, permille % 10),
    )
}

pub fn postgres_table(cells: &[Cell], postgres: &str) -> String {
    let mut out = format!(
        "The short-prompt cells with the ledger on PostgreSQL ({postgres}) instead of SQLite, as production runs it; \
         the default gateway's added latency for the same load (SQLite) is beside each row. \
         Open loop: latency in ms (p50 / p95 / p99 / p99.9); closed loop: req/s and p50 / p99.\n\n"
    );
    out.push_str(&crate::report::mode_rows(
        cells,
        Mode::Postgres,
        "gateway (PostgreSQL)",
        Some("PostgreSQL"),
    ));
    out
}

fn scale_row(side: &str, run: &ScaleRun) -> String {
    format!(
        "| {side} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        grouped(run.peak_in_flight),
        grouped(run.ok),
        grouped(run.errors),
        grouped(run.incomplete),
        grouped(run.unfinished),
        run.latency_us.map_or_else(
            || "—".to_owned(),
            |p| format!("{} / {}", ms(p.p50), ms(p.p99))
        ),
        run.first_token_us.map_or_else(
            || "—".to_owned(),
            |p| format!("{} / {}", ms(p.p50), ms(p.p99))
        ),
        if run.complete() { "yes" } else { "**no**" },
    )
}

fn flatness(flat: Option<bool>) -> &'static str {
    match flat {
        Some(true) => "flat (the fitted line grows by at most 5% of its first sample)",
        Some(false) => "**not flat** (the fitted line grows by more than 5% of its first sample)",
        None => "too short to judge (a trend needs a minute of steady load)",
    }
}

pub fn scale_section(scale: Option<&Scale>, failed: Option<&str>) -> String {
    let mut out = format!(
        "Many streaming calls held at once through one freshly started gateway, on a fake that takes {} s a call and serves HTTPS with HTTP/2 \
         as providers do: memory per call in flight beyond the idle gateway's, and beyond what the bare proxy (actix-web and awc, no governance) \
         needs for the same calls to the same fake (target ≤ {} KiB beyond that baseline), descriptors, whether every stream completed, \
         and whether memory stayed flat. Latency and first token in ms (p50 / p99).\n\n",
        scale::CALL_MS / 1000,
        scale::TARGET_KIB_PER_CALL
    );
    let Some(s) = scale else {
        let _ = writeln!(out, "Not measured: {}.", failed.unwrap_or("not run"));
        return out;
    };
    out.push_str(
        "| side | peak in flight | calls answered | errors | incomplete streams | unfinished | latency | first token | every stream complete |\n\
         |---|---:|---:|---:|---:|---:|---|---|---|\n",
    );
    out.push_str(&scale_row(
        &format!("direct ({} s)", s.direct.seconds),
        &s.direct,
    ));
    if let Some(bare) = &s.bare {
        out.push_str(&scale_row(
            &format!("bare proxy ({} s)", bare.run.seconds),
            &bare.run,
        ));
    }
    out.push_str(&scale_row(
        &format!("gateway ({} s)", s.gateway.seconds),
        &s.gateway,
    ));
    let per_call = match (s.kib_per_call, &s.bare) {
        (Some(kib), Some(bare)) => format!(
            "**{kib} KiB per call in flight**; the bare proxy {} MiB idle, {} MiB at its peak: {} KiB per call; \
             **{} KiB per call beyond the bare proxy** ({} the {} KiB target)",
            mib(bare.idle_rss_kib),
            mib(bare.peak_rss_kib),
            number(bare.kib_per_call),
            number(s.kib_per_call_beyond_bare),
            match s.kib_per_call_beyond_bare {
                Some(beyond) if beyond <= scale::TARGET_KIB_PER_CALL => "meets",
                Some(_) => "misses",
                None => "cannot judge",
            },
            scale::TARGET_KIB_PER_CALL
        ),
        (Some(kib), None) => format!(
            "**{kib} KiB per call in flight** (no bare proxy ran, so the target beyond it cannot be judged)"
        ),
        (None, _) => "unknown".to_owned(),
    };
    let _ = writeln!(
        out,
        "\nResident memory {} MiB idle, {} MiB at the peak: {per_call}. Descriptors {} idle, {} at the peak \
         ({} beyond the calls' client sockets: upstream connections, HTTP/2 ones each carrying many calls, and the rest). \
         Memory after the first {} s: {} KiB/min over {} s, {}; over the second half of that window alone: {} KiB/min, {}.",
        mib(s.idle_rss_kib),
        mib(s.peak_rss_kib),
        number(s.idle_fds),
        number(s.peak_fds),
        number(
            s.peak_fds
                .map(|fds| fds.saturating_sub(s.gateway.peak_in_flight))
        ),
        s.ramp_s,
        s.slope_kib_per_min
            .map_or_else(|| "?".to_owned(), |v| format!("{v:+}")),
        s.gateway.seconds,
        flatness(s.flat),
        s.late_slope_kib_per_min
            .map_or_else(|| "?".to_owned(), |v| format!("{v:+}")),
        flatness(s.late_flat),
    );
    let _ = writeln!(
        out,
        "Open-file limit {} (hard {}){}",
        number(s.open_files.soft),
        number(s.open_files.hard),
        s.open_files
            .too_low
            .as_deref()
            .map_or_else(|| ".".to_owned(), |why| format!(": **too low**: {why}.")),
    );
    out
}
