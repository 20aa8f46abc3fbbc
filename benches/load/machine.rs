//! What the numbers were measured on.

use std::process::Command;

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory: String,
    pub os: String,
    pub kernel: String,
    pub rustc: String,
    /// The commit the gateway was built from, `+ uncommitted changes` when the tree was dirty.
    pub source: String,
    pub date: String,
    /// /proc/loadavg when the harness started.
    pub load_at_start: String,
}

impl Machine {
    pub fn probe() -> Self {
        let cpuinfo = read("/proc/cpuinfo");
        let meminfo = read("/proc/meminfo");
        let os_release = read("/etc/os-release");
        Self {
            cpus: std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
            cpu_model: field(&cpuinfo, "model name", ':').unwrap_or_else(|| "unknown".to_owned()),
            memory: field(&meminfo, "MemTotal", ':')
                .and_then(|kib| kib.trim_end_matches("kB").trim().parse::<u64>().ok())
                .map_or_else(|| "unknown".to_owned(), |kib| format!("{} MiB", kib / 1024)),
            os: field(&os_release, "PRETTY_NAME", '=').map_or_else(
                || "unknown".to_owned(),
                |name| name.trim_matches('"').to_owned(),
            ),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            rustc: run("rustc", &["--version"]).unwrap_or_else(|| "unknown".to_owned()),
            source: source(),
            date: run("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
                .unwrap_or_else(|| "unknown".to_owned()),
            load_at_start: read("/proc/loadavg").trim().to_owned(),
        }
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn field(text: &str, name: &str, separator: char) -> Option<String> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(separator)?;
        (key.trim() == name).then(|| value.trim().to_owned())
    })
}

fn run(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn source() -> String {
    let Some(commit) = run("git", &["rev-parse", "--short", "HEAD"]) else {
        return "unknown (not a git checkout)".to_owned();
    };
    let dirty = run(
        "git",
        &[
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "src",
            "entity",
            "migration",
            "Cargo.toml",
            "Cargo.lock",
        ],
    )
    .is_some_and(|status| !status.is_empty());
    if dirty {
        format!("{commit} + uncommitted changes")
    } else {
        commit
    }
}
