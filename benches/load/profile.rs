//! Where the gateway's CPU time goes: `perf record` (cpu-clock sampling, with DWARF call
//! stacks) attached to the gateway process for a few seconds of closed-loop short-prompt load,
//! run after the measurements so its overhead touches none of them. Reported as self time by
//! thread, binary and function, and as inclusive time by component: each sample's whole stack
//! is matched against the components in `COMPONENTS` order, so a `malloc` or a `write(2)` counts
//! for the part of the gateway that called it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::generator::{self, ClosedLoop, Target};
use crate::procs::Child;
use crate::stack::Stack;

const SECONDS: u64 = 3;
const FREQUENCY: &str = "997";
const TOP_SYMBOLS: usize = 25;
const TOP_THREADS: usize = 8;
/// Bytes of stack copied per sample for unwinding: deep enough for actix's handler stacks.
const STACK_BYTES: &str = "dwarf,16384";

/// The gateway's parts, most specific first: a sample belongs to the first whose pattern
/// (substrings of a function name) appears anywhere in its stack.
const COMPONENTS: &[(&str, &[&str])] = &[
    ("journal: group fsync", &["tollgate::journal::sync"]),
    (
        "journal: records (encode, write(2))",
        &["tollgate::journal::"],
    ),
    (
        "ledger: batch INSERTs (actor, SQLite)",
        &[
            "tollgate::ledger::",
            "sqlite3",
            "sqlx_sqlite",
            "sea_orm",
            "sea_query",
        ],
    ),
    (
        "logs: JSON lines (format, write)",
        &[
            "tracing_subscriber::fmt",
            "tracing_core::event",
            "tracing_serde",
            "tollgate::telemetry::log_writer",
        ],
    ),
    (
        "metrics",
        &[
            "tollgate::telemetry::metrics",
            "metrics_util",
            "metrics_exporter",
        ],
    ),
    ("tokenizer", &["tiktoken", "tollgate::tokenize"]),
    (
        "authentication",
        &["tollgate::auth", "tollgate::directory", "TenantAuth"],
    ),
    (
        "tenant actor: limits, reservation, settlement (and its messages)",
        &["tollgate::tenant::"],
    ),
    (
        "request and response JSON",
        &[
            "tollgate::openai::",
            "tollgate::provider::adapters",
            "serde_json::de",
        ],
    ),
    (
        "upstream HTTP client (awc, its socket I/O)",
        &["awc::", "actix_http::h1::client"],
    ),
    (
        "wake-ups of other threads",
        &["Waker::wake", "unpark", "wake_by_", "futex_wake"],
    ),
    (
        "tracing spans",
        &[
            "tracing::span::",
            "tracing_subscriber::registry",
            "sharded_slab",
        ],
    ),
    ("gateway pipeline, other", &["tollgate::"]),
    (
        "HTTP server (actix-web, its socket I/O)",
        &["actix_http::", "actix_web::", "actix_server::"],
    ),
    (
        "runtime (tokio, actix)",
        &["tokio::", "actix::", "actix_rt::", "mio::"],
    ),
];
/// Threads whose samples lack a matching frame (a stack cut short) still say what they do.
const THREADS: &[(&str, &str)] = &[
    ("tollgate-journa", "journal: group fsync"),
    ("sqlx-sqlite-wor", "ledger: batch INSERTs (actor, SQLite)"),
    ("tollgate-log", "logs: JSON lines (format, write)"),
];
const UNMATCHED: &str = "other (kernel, libc, allocator: no frame above matched)";

#[derive(Debug, Serialize)]
pub struct Profile {
    pub seconds: u64,
    pub requests_per_second: u64,
    /// (share of samples, thread name).
    pub threads: Vec<(String, String)>,
    /// (share of samples, binary or library).
    pub objects: Vec<(String, String)>,
    /// (share of samples, `[.]` user or `[k]` kernel, function).
    pub symbols: Vec<(String, String)>,
    /// Inclusive time by component, largest first.
    pub components: Vec<Component>,
}

#[derive(Debug, Serialize)]
pub struct Component {
    pub name: String,
    /// Share of all samples, in hundredths of a percent.
    pub basis_points: u64,
    /// Share of all samples whose innermost frame is in the kernel, in hundredths of a percent.
    pub kernel_basis_points: u64,
}

pub async fn gateway(stack: &mut Stack, target: &Target) -> Result<Profile> {
    let perf = find_perf().context("perf is not installed")?;
    let dir = stack.dir.path().to_owned();
    let data = dir.join("perf.data");
    let mut record = Command::new(&perf);
    record
        .args(["record", "-F", FREQUENCY, "--call-graph", STACK_BYTES, "-o"])
        .arg(&data)
        .args(["-p", &stack.gateway.pid().to_string(), "--", "sleep"])
        .arg(SECONDS.to_string());
    let mut recorder = Child::spawn("perf record", record, &dir.join("perf.log"))?;
    // perf needs a moment to attach; the load outlasts the recording on both ends.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let load = ClosedLoop {
        conns: crate::plan::CLOSED_CONNS,
        warmup: Duration::ZERO,
        measure: Duration::from_secs(SECONDS) + Duration::from_millis(200),
        grace: Duration::from_secs(5),
    };
    let outcome = generator::closed_loop(target, load).await;
    let status = recorder.wait_exit(Duration::from_secs(30)).await?;
    if !status.success() {
        bail!(
            "perf record failed ({status}): {}",
            recorder.log_tail(5).trim()
        );
    }
    Ok(Profile {
        seconds: SECONDS,
        requests_per_second: outcome.rps(),
        threads: report(&perf, &data, "comm", TOP_THREADS)?,
        objects: report(&perf, &data, "dso", TOP_THREADS)?,
        symbols: report(&perf, &data, "symbol", TOP_SYMBOLS)?,
        components: components(&perf, &data)?,
    })
}

/// `perf <command> -i <data> <args>`'s standard output.
fn perf_output(perf: &Path, command: &str, data: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new(perf)
        .arg(command)
        .arg("-i")
        .arg(data)
        .args(args)
        .output()
        .with_context(|| format!("running perf {command}"))?;
    if !output.status.success() {
        bail!(
            "perf {command} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn components(perf: &Path, data: &Path) -> Result<Vec<Component>> {
    // Inlined frames would be resolved one by one, which takes minutes.
    let script = perf_output(perf, "script", data, &["--no-inline", "-F", "comm,ip,sym"])?;
    Ok(classify(&script))
}

/// `perf script` output: per sample a `comm` line, then one `address symbol` line per frame,
/// innermost first, then a blank line.
pub fn classify(script: &str) -> Vec<Component> {
    let mut counts: Vec<(&str, u64, u64)> = Vec::new();
    let mut total = 0_u64;
    for sample in script.split("\n\n") {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        let Some(comm) = lines.next() else { continue };
        let frames: Vec<(&str, &str)> = lines
            .map(|line| {
                let line = line.trim();
                line.split_once(char::is_whitespace).unwrap_or((line, ""))
            })
            .collect();
        let name = COMPONENTS
            .iter()
            .find(|(_, patterns)| {
                frames
                    .iter()
                    .any(|(_, symbol)| patterns.iter().any(|p| symbol.contains(p)))
            })
            .map(|(name, _)| *name)
            .or_else(|| {
                THREADS
                    .iter()
                    .find(|(thread, _)| comm.trim_start().starts_with(thread))
                    .map(|(_, name)| *name)
            })
            .unwrap_or(UNMATCHED);
        // Kernel text lives at the top of the address space.
        let kernel = frames.first().is_some_and(|(address, symbol)| {
            address.starts_with("ffffffff") && *symbol != "[unknown]"
        });
        total += 1;
        match counts.iter_mut().find(|(n, _, _)| *n == name) {
            Some(entry) => {
                entry.1 += 1;
                entry.2 += u64::from(kernel);
            }
            None => counts.push((name, 1, u64::from(kernel))),
        }
    }
    counts.sort_by_key(|&(_, n, _)| std::cmp::Reverse(n));
    let share = |n: u64| n * 10_000 / total.max(1);
    counts
        .into_iter()
        .map(|(name, n, kernel)| Component {
            name: name.to_owned(),
            basis_points: share(n),
            kernel_basis_points: share(kernel),
        })
        .collect()
}

fn report(perf: &Path, data: &Path, sort: &str, top: usize) -> Result<Vec<(String, String)>> {
    let args = ["--stdio", "--no-children", "-g", "none", "--sort", sort];
    Ok(perf_output(perf, "report", data, &args)?
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let (share, rest) = line.split_once(char::is_whitespace)?;
            share.ends_with('%').then(|| {
                // perf pads each column and may add empty ones (`-`): keep the first.
                let first = rest.trim().split("  ").next().unwrap_or_default();
                let name: String = first.trim().chars().take(140).collect();
                (share.to_owned(), name)
            })
        })
        .take(top)
        .collect())
}

fn find_perf() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("perf"))
        .find(|candidate| candidate.is_file())
}
