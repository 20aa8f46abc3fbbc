//! deploy/README.md's capacity figures, written from a run's results file between its
//! `<!-- capacity:begin -->` and `<!-- capacity:end -->` markers, so they cannot go stale: a
//! full run does it itself, and `--write-capacity RESULTS.json` does it from a file. The
//! results are read as plain JSON, so any run's file serves; a figure the run lacks is said
//! to be missing rather than kept from an older run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::stats::grouped;

pub const BEGIN: &str = "<!-- capacity:begin -->";
pub const END: &str = "<!-- capacity:end -->";
/// A figure the run lacks.
const MISSING: &str = "n/a";
/// Where the block's lines break, as the rest of the file is written.
const WIDTH: usize = 76;

/// Rewrites deploy/README.md's capacity block from the results file at `results`.
pub fn write_from(results: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(results)
        .with_context(|| format!("reading {}", results.display()))?;
    let value: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a results file", results.display()))?;
    let readme = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join("README.md");
    let current = std::fs::read_to_string(&readme)
        .with_context(|| format!("reading {}", readme.display()))?;
    let updated = replace_block(&current, &render(&value))
        .with_context(|| format!("in {}", readme.display()))?;
    std::fs::write(&readme, updated).with_context(|| format!("writing {}", readme.display()))?;
    Ok(readme)
}

/// `text` with what lies between the markers replaced by `block`.
pub fn replace_block(text: &str, block: &str) -> Result<String> {
    let (Some(begin), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        bail!("no {BEGIN} … {END} markers");
    };
    if end < begin {
        bail!("{END} comes before {BEGIN}");
    }
    let start = begin + BEGIN.len();
    Ok(format!(
        "{}\n{}\n{}",
        &text[..start],
        block.trim(),
        &text[end..]
    ))
}

/// The gateway's summary for a cell of `mode` (its serialized kind), shape and scenario.
fn gateway_summary<'a>(
    v: &'a Value,
    mode: &str,
    shape: (&str, u64),
    delay_ms: u64,
) -> Option<&'a Value> {
    let (kind, size) = shape;
    v["cells"].as_array()?.iter().find(|cell| {
        cell["mode"]["kind"] == mode
            && cell["shape"]["kind"] == kind
            && (cell["shape"]["rate"] == size || cell["shape"]["conns"] == size)
            && cell["scenario"] == "short"
            && cell["delay_ms"] == delay_ms
    })?["summary"]
        .as_array()?
        .iter()
        .find(|summary| summary["target"] == "gateway")
}

fn cpu(v: &Value, mode: &str, shape: (&str, u64), delay_ms: u64, process: &str) -> Option<u64> {
    gateway_summary(v, mode, shape, delay_ms)?["cpu_us_per_request"][process].as_u64()
}

fn or_missing(value: Option<String>) -> String {
    value.unwrap_or_else(|| MISSING.to_owned())
}

/// The whole block.
pub fn render(v: &Value) -> String {
    let mut out = format!(
        "Figures from the load harness's run of {date} ({cpus} cores, release build, every governance \
         feature on), written here by `cargo bench --bench load` from its results; BENCHMARKS.md has \
         the tables. Plan with these and measure your own.\n\n",
        date = v["machine"]["date"].as_str().unwrap_or("an unknown date"),
        cpus = v["machine"]["cpus"]
            .as_u64()
            .map_or_else(|| "?".to_owned(), grouped),
    );
    out.push_str(&cpu_paragraph(v));
    out.push_str(&in_flight_paragraph(v));
    out.push_str(&agents_paragraph(v));
    out.push_str(&postgres_paragraph(v));
    out.push_str(&redis_paragraph(v));
    if out.contains(MISSING) {
        let _ = writeln!(out, "\n({MISSING}: not measured in that run.)");
    }
    wrap(&out)
}

/// Each paragraph's words in lines of at most `WIDTH` characters (a longer word alone).
fn wrap(text: &str) -> String {
    let paragraphs: Vec<String> = text
        .split("\n\n")
        .map(|paragraph| {
            let mut lines: Vec<String> = Vec::new();
            for word in paragraph.split_whitespace() {
                match lines.last_mut() {
                    Some(line) if line.chars().count() + 1 + word.chars().count() <= WIDTH => {
                        line.push(' ');
                        line.push_str(word);
                    }
                    _ => lines.push(word.to_owned()),
                }
            }
            lines.join("\n")
        })
        .filter(|paragraph| !paragraph.is_empty())
        .collect();
    paragraphs.join("\n\n")
}

fn cpu_paragraph(v: &Value) -> String {
    let closed = cpu(v, "plain", ("closed", 64), 0, "gateway");
    let open = cpu(v, "plain", ("open", 1_000), 0, "gateway");
    let slow = cpu(v, "plain", ("open", 1_000), 50, "gateway");
    let redis = cpu(v, "redis", ("closed", 64), 0, "gateway");
    let per_core = closed.and_then(|us| 1_000_000_u64.checked_div(us));
    format!(
        "**CPU.** The gateway spends **{closed} µs of CPU per call** flat out (closed loop, instant upstream); \
         {open} µs at 1,000 calls/s, {slow} µs with a 50 ms upstream, {redis} µs with quotas on Redis. \
         One core therefore carries about **{per_core} calls/s flat out, {hpa} calls/s at the HPA's 70% target**. \
         Calls that wait on the upstream cost memory and sockets, not CPU.\n\n",
        closed = or_missing(closed.map(grouped)),
        open = or_missing(open.map(grouped)),
        slow = or_missing(slow.map(grouped)),
        redis = or_missing(redis.map(grouped)),
        per_core = or_missing(per_core.map(grouped)),
        hpa = or_missing(per_core.map(|n| grouped(n * 7 / 10))),
    )
}

fn in_flight_paragraph(v: &Value) -> String {
    let held = &v["in_flight"];
    let conns = held["conns"].as_u64();
    let before = held["before"]["rss_kib"].as_u64();
    let peak = held["peak"]["rss_kib"].as_u64();
    let per_call = before
        .zip(peak)
        .zip(conns)
        .and_then(|((b, p), n)| p.saturating_sub(b).checked_div(n));
    let fds = held["before"]["fds"]
        .as_u64()
        .zip(held["peak"]["fds"].as_u64())
        .zip(conns)
        // Rounded: a client and an upstream socket are 1.99 a call, not 1.
        .and_then(|((b, p), n)| (p.saturating_sub(b) + n / 2).checked_div(n));
    let mut out = format!(
        "**In flight (Little's law).** Calls in flight per replica = arrival rate per replica × upstream latency: \
         600 calls/s on 3 replicas with LLM calls averaging 4 s is 200/s × 4 s = **800 in flight per replica**. \
         Measured with {conns} non-streaming calls held: resident memory from {before} to {peak} MiB \
         (**{per_call} KiB per call**) and {fds} descriptors each (client and upstream), so 800 in flight take about {example} MiB. {soak}\n\n",
        conns = or_missing(conns.map(grouped)),
        before = or_missing(before.map(|k| grouped(k / 1024))),
        peak = or_missing(peak.map(|k| grouped(k / 1024))),
        per_call = or_missing(per_call.map(grouped)),
        fds = or_missing(fds.map(grouped)),
        example = or_missing(
            before
                .zip(per_call)
                .map(|(b, per)| grouped((b + 800 * per) / 1024))
        ),
        soak = soak_sentence(&held["soak"]),
    );
    out.push_str(&scale_sentence(&v["shape"]["scale"]));
    out
}

fn soak_sentence(soak: &Value) -> String {
    let (Some(seconds), Some(slope), Some(first)) = (
        soak["seconds"].as_u64(),
        soak["slope_kib_per_min"].as_i64(),
        soak["first_kib"].as_u64(),
    ) else {
        return "The soak (the same load held) was not run.".to_owned();
    };
    let ramp = soak["ramp_s"].as_u64().unwrap_or(0);
    let span = i64::try_from(seconds.saturating_sub(ramp)).unwrap_or(0);
    let flat = slope.saturating_mul(span) / 60 <= i64::try_from(first / 20).unwrap_or(i64::MAX);
    format!(
        "Held for {seconds} s, memory moved {slope:+} KiB/min: {}.",
        if flat {
            "flat"
        } else {
            "**not flat**: leave more headroom and watch it"
        }
    )
}

fn scale_sentence(scale: &Value) -> String {
    let Some(calls) = scale["calls"].as_u64() else {
        return format!("**Streaming at scale:** {MISSING}.\n\n");
    };
    let gateway = &scale["gateway"];
    let complete = gateway["errors"] == 0
        && gateway["incomplete"] == 0
        && gateway["unfinished"] == 0
        && gateway["ok"].as_u64().is_some_and(|ok| ok > 0);
    let flat = match (scale["flat"].as_bool(), scale["late_flat"].as_bool()) {
        (Some(true), _) => "flat",
        (Some(false), Some(true)) => "rising in the first minutes, then flat",
        (Some(false), _) => "**not flat**",
        (None, _) => "too short to judge",
    };
    let beyond_bare =
        scale["kib_per_call_beyond_bare"]
            .as_u64()
            .map_or_else(String::new, |beyond| {
                format!(
                    ", {} KiB of it beyond what the bare actix-web proxy needs for the same calls",
                    grouped(beyond)
                )
            });
    format!(
        "**Streaming at scale.** {calls} streaming calls held through one replica for {seconds} s, the provider on HTTPS with HTTP/2: \
         **{per_call} KiB per call in flight** beyond the idle gateway{beyond_bare}, {fds} descriptors at the peak, \
         {complete}; memory {flat}. Size memory as idle + calls in flight × that figure.{limit}\n\n",
        calls = grouped(calls),
        seconds = gateway["seconds"]
            .as_u64()
            .map_or_else(|| "?".to_owned(), grouped),
        per_call = or_missing(scale["kib_per_call"].as_u64().map(grouped)),
        fds = or_missing(scale["peak_fds"].as_u64().map(grouped)),
        complete = if complete {
            "every stream completed"
        } else {
            "**not every stream completed** (see BENCHMARKS.md)"
        },
        limit = scale["open_files"]["too_low"]
            .as_str()
            .map_or_else(String::new, |why| format!(" In that run {why}.")),
    )
}

fn agents_paragraph(v: &Value) -> String {
    let Some(cells) = v["shape"]["agents"].as_array().filter(|c| !c.is_empty()) else {
        return format!("**Agents.** {MISSING}.\n\n");
    };
    let mut out =
        String::from("**Agents** (think 1–3 s, lognormal upstream around 1.5 s, streamed):");
    for cell in cells {
        let f = &cell["footprint"];
        let _ = write!(
            out,
            " {} agents cost {} µs of CPU per second each and {} KiB of memory each;",
            cell["agents"]
                .as_u64()
                .map_or_else(|| "?".to_owned(), grouped),
            or_missing(f["cpu_us_per_s_per_agent"].as_u64().map(grouped)),
            or_missing(f["kib_per_agent"].as_u64().map(grouped)),
        );
    }
    out.pop();
    let busiest = cells
        .iter()
        .max_by_key(|cell| cell["agents"].as_u64())
        .and_then(|cell| cell["footprint"]["cpu_us_per_s_per_agent"].as_u64())
        .and_then(|us| 1_000_000_u64.checked_div(us));
    let _ = write!(
        out,
        ". At the largest count's rate one core serves about **{} agents**.\n\n",
        or_missing(busiest.map(grouped))
    );
    out
}

fn postgres_paragraph(v: &Value) -> String {
    let rps = |mode: &str| gateway_summary(v, mode, ("closed", 64), 0)?["rps"].as_u64();
    let cpu_pg = cpu(v, "postgres", ("closed", 64), 0, "gateway");
    let server = cpu(v, "postgres", ("closed", 64), 0, "postgres");
    format!(
        "**Ledger on PostgreSQL.** Flat out the gateway answered {pg} calls/s with its ledger on PostgreSQL \
         against {sqlite} on SQLite, at {cpu} µs of its own CPU per call; PostgreSQL spent {server} µs per call, \
         so one PostgreSQL core takes the ledger of about {per_core} calls/s across all replicas.\n\n",
        pg = or_missing(rps("postgres").map(grouped)),
        sqlite = or_missing(rps("plain").map(grouped)),
        cpu = or_missing(cpu_pg.map(grouped)),
        server = or_missing(server.map(grouped)),
        per_core = or_missing(
            server
                .and_then(|us| 1_000_000_u64.checked_div(us))
                .map(grouped)
        ),
    )
}

fn redis_paragraph(v: &Value) -> String {
    let commands = &v["redis_commands"];
    let requests = commands["requests"].as_u64();
    let list: Vec<(String, u64)> = commands["commands"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|c| Some((c[0].as_str()?.to_uppercase(), c[1].as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    let total: u64 = list.iter().map(|(_, calls)| calls).sum();
    let per_call = requests.and_then(|r| total.checked_div(r));
    let named: Vec<String> = list
        .iter()
        .take(6)
        .filter_map(|(name, calls)| {
            let per = calls.checked_div(requests?)?;
            (per > 0).then(|| format!("{per} `{name}`"))
        })
        .collect();
    let redis_cpu = cpu(v, "redis", ("closed", 64), 0, "redis");
    format!(
        "**Redis.** About **{per_call} commands per call** ({named}), most of them inside the gateway's Lua scripts; \
         Redis spent **{redis_cpu} µs of CPU per call**, so one Redis core serves about {per_core} calls/s across all replicas.\n",
        per_call = or_missing(per_call.map(grouped)),
        named = if named.is_empty() {
            MISSING.to_owned()
        } else {
            format!("the most: {}", named.join(", "))
        },
        redis_cpu = or_missing(redis_cpu.map(grouped)),
        per_core = or_missing(
            redis_cpu
                .and_then(|us| 1_000_000_u64.checked_div(us))
                .map(grouped)
        ),
    )
}
