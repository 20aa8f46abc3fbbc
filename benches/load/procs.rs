//! Child processes the harness starts, each owned by a guard that stops it by PID when
//! dropped (normal end, early error or panic): SIGTERM first, so the gateway flushes its
//! ledger and nginx's master stops its workers, then SIGKILL if it lingers.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::clock::now;
use crate::http::{Conn, Template};

const STOP_WAIT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(50);

pub struct Child {
    pub name: String,
    process: std::process::Child,
    pub log: PathBuf,
}

impl Child {
    /// Starts `command` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> Result<Self> {
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().context("duplicating a log file handle")?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}: {command:?}"))?;
        Ok(Self {
            name: name.to_owned(),
            process: child,
            log: log.to_owned(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// Fails with the end of the child's log if it has already exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Ok(Some(status)) = self.process.try_wait() {
            bail!(
                "{} exited ({status}); the end of its log {}:\n{}",
                self.name,
                self.log.display(),
                self.log_tail(30)
            );
        }
        Ok(())
    }

    /// Whether it has not exited yet.
    pub fn running(&mut self) -> bool {
        matches!(self.process.try_wait(), Ok(None))
    }

    /// Waits (polling, so the runtime keeps serving other tasks) for the child to exit.
    pub async fn wait_exit(&mut self, limit: Duration) -> Result<std::process::ExitStatus> {
        let deadline = now() + limit;
        while now() < deadline {
            if let Some(status) = self.process.try_wait()? {
                return Ok(status);
            }
            tokio::time::sleep(POLL).await;
        }
        bail!("{} did not exit within {limit:?}", self.name)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Polls `GET path` until it answers 200, failing early if the child exits.
    pub async fn wait_ready(
        &mut self,
        addr: SocketAddr,
        path: &str,
        limit: Duration,
    ) -> Result<()> {
        let deadline = now() + limit;
        let template = Template::get(addr, path);
        let mut last = String::from("no answer yet");
        while now() < deadline {
            self.check_running()?;
            let mut conn = Conn::new(addr, &template);
            match conn.exchange(0).await {
                Ok(response) if response.status == 200 => return Ok(()),
                Ok(response) => last = format!("HTTP {}", response.status),
                Err(error) => last = error.to_string(),
            }
            tokio::time::sleep(POLL).await;
        }
        bail!(
            "{} was not ready at http://{addr}{path} within {limit:?} (last: {last}); the end of its log {}:\n{}",
            self.name,
            self.log.display(),
            self.log_tail(30)
        )
    }

    fn stop(&mut self) {
        if !matches!(self.process.try_wait(), Ok(None)) {
            return;
        }
        let pid = self.pid().to_string();
        let _ = Command::new("kill")
            .args(["-TERM", &pid])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = now() + STOP_WAIT;
        while now() < deadline {
            if !matches!(self.process.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(POLL);
        }
        eprintln!(
            "{} (pid {pid}) ignored SIGTERM for {STOP_WAIT:?}; killing it",
            self.name
        );
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// User + system CPU time of a process (its threads included), in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesized command name: state is field 3, utime 14, stime 15.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU ticks of a process and its direct children (nginx's master and workers).
pub fn cpu_ticks_with_children(pid: u32) -> Option<u64> {
    let own = cpu_ticks(pid)?;
    let children: u64 = children_of(pid).into_iter().filter_map(cpu_ticks).sum();
    Some(own + children)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 on Linux in practice).
pub fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .filter(|ticks| *ticks > 0)
        .unwrap_or(100)
}

/// Other CPU-heavy programs running now (compilers), which make the numbers noisy.
pub fn busy_neighbours() -> Vec<String> {
    let mut names: Vec<String> = processes()
        .filter(|(_, _, name)| {
            matches!(
                name.as_str(),
                "rustc" | "clippy-driver" | "rustdoc" | "cc1" | "cc1plus" | "ld" | "rust-lld"
            )
        })
        .map(|(pid, _, name)| format!("{name} ({pid})"))
        .collect();
    names.sort();
    names
}

/// The direct children of a process.
pub fn children_of(parent: u32) -> Vec<u32> {
    processes()
        .filter(|(_, ppid, _)| *ppid == parent)
        .map(|(pid, _, _)| pid)
        .collect()
}

/// (pid, parent pid, command name) of every process.
fn processes() -> impl Iterator<Item = (u32, u32, String)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let name = stat.get(stat.find('(')? + 1..stat.rfind(')')?)?.to_owned();
            let rest = stat.get(stat.rfind(')')? + 1..)?;
            let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid, name))
        })
}

/// Resident memory of a process in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Machine-wide CPU counters and the share of them used by the harness's own processes.
#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    /// Busy ticks of all CPUs (everything but idle and iowait).
    busy: u64,
    /// All ticks of all CPUs.
    total: u64,
    /// Ticks of the harness and its children.
    ours: u64,
}

impl CpuSample {
    /// `our_pids`: every process of the harness, grandchildren (nginx's workers) included.
    pub fn take(our_pids: &[u32]) -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let fields: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|field| field.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is inside user).
        let total: u64 = fields.iter().take(8).sum();
        let idle = fields.get(3)? + fields.get(4)?;
        // Each process on its own: the harness's children are in the list too.
        let ours = our_pids.iter().filter_map(|pid| cpu_ticks(*pid)).sum();
        Some(Self {
            busy: total.saturating_sub(idle),
            total,
            ours,
        })
    }

    /// Percent of the machine's CPU capacity used by the harness's processes since `earlier`.
    pub fn our_percent_since(&self, earlier: &Self) -> Option<u64> {
        let total = self.total.checked_sub(earlier.total)?;
        (self.ours.saturating_sub(earlier.ours) * 100).checked_div(total)
    }

    /// Percent of the machine's CPU capacity used by other processes since `earlier`.
    pub fn foreign_percent_since(&self, earlier: &Self) -> Option<u64> {
        let total = self.total.checked_sub(earlier.total)?;
        let busy = self.busy.checked_sub(earlier.busy)?;
        let ours = self.ours.saturating_sub(earlier.ours);
        (busy.saturating_sub(ours) * 100).checked_div(total)
    }
}

/// Open file descriptors of a process (sockets included).
pub fn open_fds(pid: u32) -> Option<u64> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    u64::try_from(entries.count()).ok()
}
