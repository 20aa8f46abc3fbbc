//! crabllm, a Rust LLM gateway with no governance on (no budgets, limits or ledger), as the
//! reference issue 15's throughput target names: installed from the Rust package registry into
//! `target/bench-tools/` when missing (like nginx from Debian's), configured with one
//! OpenAI-compatible provider (the 0 ms fake) and one key, and started beside the gateway.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use crate::config::UPSTREAM_MODEL;
use crate::procs::{Child, free_port};

/// The version the issue measured; pinned so runs compare.
pub const VERSION: &str = "0.0.25";
/// The key the harness's requests carry (crabllm refuses a request without one of its keys).
pub const KEY: &str = "bench-crabllm-key";
const READY_LIMIT: Duration = Duration::from_secs(30);

/// Why the crabllm row is missing, or the running crabllm.
pub enum Crabllm {
    Running {
        addr: SocketAddr,
        process: Child,
        version: String,
    },
    Skipped(String),
}

impl Crabllm {
    pub fn process(&self) -> Option<&Child> {
        match self {
            Crabllm::Running { process, .. } => Some(process),
            Crabllm::Skipped(_) => None,
        }
    }
}

/// crabllm in front of `upstream`, or why it is not running (it never fails the run).
pub async fn start(dir: &Path, upstream: SocketAddr) -> Crabllm {
    let binary = match find_or_install() {
        Ok(binary) => binary,
        Err(reason) => {
            println!("crabllm row skipped: {reason}");
            return Crabllm::Skipped(reason);
        }
    };
    match spawn(&binary, dir, upstream).await {
        Ok((addr, process)) => Crabllm::Running {
            addr,
            process,
            version: format!("crabllm {VERSION} (default features), 2 runtime threads"),
        },
        Err(error) => {
            let reason = format!("crabllm did not start: {error:#}");
            println!("{reason}");
            Crabllm::Skipped(reason)
        }
    }
}

async fn spawn(binary: &Path, dir: &Path, upstream: SocketAddr) -> Result<(SocketAddr, Child)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let conf = dir.join("crabllm.toml");
    std::fs::write(&conf, config(addr, upstream))?;
    let mut command = Command::new(binary);
    command
        .arg("serve")
        .arg("--config")
        .arg(&conf)
        // Its own default filter, spelled out: warnings only, no line per request.
        .env("RUST_LOG", "warn")
        // As many runtime threads as the gateway has workers.
        .env("TOKIO_WORKER_THREADS", "2");
    let mut process = Child::spawn("crabllm", command, &dir.join("crabllm.log"))?;
    // Its Prometheus page is its one route that needs no key.
    process.wait_ready(addr, "/metrics", READY_LIMIT).await?;
    Ok((addr, process))
}

/// One OpenAI-compatible provider (the fake, whose chat path is `/v1/chat/completions`), one
/// key for every model, no extension (crabllm's budgets, limits, usage and cache are opt-in),
/// in-memory storage (its default).
pub fn config(listen: SocketAddr, upstream: SocketAddr) -> String {
    format!(
        r#"# Written by benches/load (cargo bench --bench load).
listen = "{listen}"
openapi = false

[[keys]]
name = "bench"
key = "{KEY}"
models = ["*"]

[providers.fake]
kind = "openai"
api_key = "unused"
base_url = "http://{upstream}/v1"
models = ["{UPSTREAM_MODEL}"]
max_retries = 0
"#
    )
}

/// The pinned crabllm in `target/bench-tools/bin`, else `cargo install` of it there (a few
/// minutes of compiling, once per machine); the reason when neither works.
fn find_or_install() -> Result<PathBuf, String> {
    let root = tools_root();
    let installed = root.join("bin").join("crabllm");
    if installed.is_file() && pinned_version_installed(&root) {
        return Ok(installed);
    }
    println!(
        "crabllm {VERSION} is not installed; installing it (cargo install crabllm --version {VERSION} --locked --root {})",
        root.display()
    );
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "install",
            "crabllm",
            "--version",
            VERSION,
            "--locked",
            "--root",
        ])
        .arg(&root)
        .output()
        .map_err(|e| format!("cannot run cargo install: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("no message").trim();
        return Err(format!(
            "`cargo install crabllm --version {VERSION}` failed ({}): {last}",
            output.status
        ));
    }
    installed
        .is_file()
        .then_some(installed)
        .ok_or_else(|| "crabllm was installed but its binary was not found".to_owned())
}

/// crabllm has no `--version`; cargo's own record of what it installed under `root` says.
fn pinned_version_installed(root: &Path) -> bool {
    std::fs::read_to_string(root.join(".crates.toml"))
        .is_ok_and(|record| record.contains(&format!("\"crabllm {VERSION} ")))
}

/// `target/bench-tools`: beside the build, so `cargo clean` removes it too.
fn tools_root() -> PathBuf {
    crate::target_dir().join("bench-tools")
}
