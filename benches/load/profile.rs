//! Where the gateway's CPU time goes: `perf record` (cpu-clock sampling, self time) attached to
//! the gateway process for a few seconds of closed-loop short-prompt load, run after the
//! measurements so its overhead touches none of them.

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
}

pub async fn gateway(stack: &mut Stack, target: &Target) -> Result<Profile> {
    let perf = find_perf().context("perf is not installed")?;
    let dir = stack.dir.path().to_owned();
    let data = dir.join("perf.data");
    let mut record = Command::new(&perf);
    record
        .args(["record", "-F", FREQUENCY, "-o"])
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
    })
}

fn report(perf: &Path, data: &Path, sort: &str, top: usize) -> Result<Vec<(String, String)>> {
    let output = Command::new(perf)
        .arg("report")
        .arg("-i")
        .arg(data)
        .args(["--stdio", "--no-children", "--sort", sort])
        .output()
        .context("running perf report")?;
    if !output.status.success() {
        bail!(
            "perf report failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout)
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
