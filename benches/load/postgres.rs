//! A PostgreSQL of the harness's own for the ledger of the PostgreSQL cells: `initdb` and
//! `postgres` in a temporary directory on a free loopback port, with the server's default
//! durability (as production runs it). PostgreSQL refuses to run as root, so as root both run
//! as `nobody` through `setpriv`. Dropping the server stops it (a fast shutdown, by PID) and
//! removes its directory.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::clock::now;
use crate::procs::{Child, children_of, free_port};

/// The role `initdb` creates; loopback connections are trusted.
const SUPERUSER: &str = "tollgate";
const DATABASE: &str = "postgres";
/// initdb and a first start on two busy cores can be slow.
const READY_LIMIT: Duration = Duration::from_mins(1);
const STOP_LIMIT: Duration = Duration::from_secs(15);

pub struct Server {
    // Field order is drop order: the server stops before its directory is removed.
    child: Child,
    port: u16,
    pub version: String,
    _dir: tempfile::TempDir,
}

impl Server {
    pub async fn start() -> Result<Self> {
        let bin = bin_dir()?;
        let owner = unprivileged_owner()?;
        let dir = tempfile::Builder::new()
            .prefix("tollgate-load-pg-")
            .tempdir()
            .context("creating PostgreSQL's directory")?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .context("giving PostgreSQL's directory to nobody")?;
        }
        let data = dir.path().join("data");
        let output = as_owner(owner, &bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", SUPERUSER, "--auth=trust", "--encoding=UTF8"])
            .args(["--locale=C", "--no-instructions"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .context("running initdb")?;
        if !output.status.success() {
            bail!(
                "initdb failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let port = free_port()?;
        let mut command = as_owner(owner, &bin.join("postgres"));
        command
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(dir.path())
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .current_dir(dir.path());
        let log = dir.path().join("postgres.log");
        let mut child = Child::spawn("postgres", command, &log)?;
        wait_ready(&mut child, &log).await?;
        let version = Command::new(bin.join("postgres"))
            .arg("--version")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .unwrap_or_default();
        Ok(Self {
            child,
            port,
            version,
            _dir: dir,
        })
    }

    /// The database the gateway migrates and writes its ledger to.
    pub fn url(&self) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// The postmaster's.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The postmaster and its backends.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.child.pid()];
        pids.extend(children_of(self.child.pid()));
        pids
    }

    pub fn check_running(&mut self) -> Result<()> {
        self.child.check_running()
    }

    pub fn child(&self) -> &Child {
        &self.child
    }
}

impl Drop for Server {
    /// A fast shutdown (SIGINT) rather than the smart one SIGTERM asks for, which would wait
    /// for every client; the child's own guard kills it if it lingers.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.pid().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = now() + STOP_LIMIT;
        while now() < deadline && self.child.running() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Ready once its log says so; fails early when it exits.
async fn wait_ready(child: &mut Child, log: &Path) -> Result<()> {
    let deadline = now() + READY_LIMIT;
    while now() < deadline {
        child.check_running()?;
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("database system is ready to accept connections") {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!(
        "PostgreSQL was not ready within {READY_LIMIT:?}:\n{}",
        child.log_tail(20)
    )
}

/// Where `initdb` and `postgres` are: `pg_config --bindir`, then Debian's
/// `/usr/lib/postgresql/<version>/bin` (newest first).
fn bin_dir() -> Result<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        candidates.push(PathBuf::from(
            String::from_utf8_lossy(&output.stdout).trim(),
        ));
    }
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<(u32, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
            .collect();
        versions.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
        candidates.extend(versions.into_iter().map(|(_, bin)| bin));
    }
    candidates
        .into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
        .context(
            "the PostgreSQL server binaries (initdb, postgres) are not installed: \
             install Debian's package `postgresql`",
        )
}

/// `Some((uid, gid))` of `nobody` when this process is root, which PostgreSQL refuses.
fn unprivileged_owner() -> Result<Option<(u32, u32)>> {
    // /proc/self belongs to the process's effective user.
    if std::fs::metadata("/proc/self")?.uid() != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            match fields.as_slice() {
                ["nobody", _, uid, gid, ..] => Some((uid.parse().ok()?, gid.parse().ok()?)),
                _ => None,
            }
        })
        .map(Some)
        .context("running as root and PostgreSQL refuses root: no user `nobody` to run it as")
}

/// `program` as the unprivileged owner when we are root (`setpriv` execs it: same PID).
fn as_owner(owner: Option<(u32, u32)>, program: &Path) -> Command {
    match owner {
        Some((uid, gid)) => {
            let mut command = Command::new("setpriv");
            command
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .arg("--")
                .arg(program);
            command
        }
        None => Command::new(program),
    }
}
