//! The system under test, started in a temporary directory: two fake upstreams (0 ms and
//! 50 ms), the gateway (release build, every governance feature on) with a tenant and key made
//! by its own CLI, and the reference nginx.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::config::{self, BUDGET, TENANT, TIER, Upstream};
use crate::procs::{Child, free_port};

/// The gateway binary of this build (the bench profile, i.e. release).
pub const TOLLGATE: &str = env!("CARGO_BIN_EXE_tollgate");
const PEPPER: &str = "load-harness-pepper-not-a-secret";
const READY_LIMIT: Duration = Duration::from_secs(30);
/// The delays the fake upstreams add to every answer.
pub const DELAYS_MS: [u64; 2] = [0, 50];

pub struct Fake {
    pub delay_ms: u64,
    pub addr: SocketAddr,
    /// The gateway route that reaches this fake.
    pub route: String,
    pub process: Child,
}

/// Why the nginx row is missing, or the running nginx.
pub enum Nginx {
    Running {
        addr: SocketAddr,
        process: Child,
        version: String,
    },
    Skipped(String),
}

pub struct Stack {
    // Field order is drop order: the processes stop before their directory is removed.
    pub nginx: Nginx,
    pub gateway: Child,
    pub fakes: Vec<Fake>,
    pub gateway_addr: SocketAddr,
    pub key: String,
    pub dir: tempfile::TempDir,
}

impl Stack {
    /// `nginx_workers`: `None` leaves nginx out.
    pub async fn start(nginx_workers: Option<u32>) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-load-")
            .tempdir()
            .context("creating a temporary directory")?;
        let path = dir.path().to_owned();

        let mut fakes = Vec::new();
        for delay_ms in DELAYS_MS {
            fakes.push(start_fake(&path, delay_ms).await?);
        }

        let gateway_port = free_port()?;
        let upstreams: Vec<Upstream> = fakes
            .iter()
            .map(|fake| Upstream {
                provider: format!("fake{}", fake.delay_ms),
                route: fake.route.clone(),
                port: fake.addr.port(),
            })
            .collect();
        let config_path = path.join("tollgate.toml");
        std::fs::write(
            &config_path,
            config::gateway_toml(gateway_port, &path, &upstreams),
        )
        .context("writing the gateway configuration")?;
        cli(
            &config_path,
            &[
                "tenant", "create", "--id", TENANT, "--tier", TIER, "--budget", BUDGET,
            ],
        )?;
        let issued: Value = serde_json::from_str(&cli(&config_path, &["key", "issue", TENANT])?)
            .context("`key issue` did not print JSON")?;
        let key = issued
            .get("key")
            .and_then(Value::as_str)
            .context("`key issue` printed no \"key\"")?
            .to_owned();

        let gateway_addr = SocketAddr::from(([127, 0, 0, 1], gateway_port));
        let mut command = tollgate();
        command.arg("--config").arg(&config_path).arg("serve");
        let mut gateway = Child::spawn("the gateway", command, &path.join("gateway.log"))?;
        gateway
            .wait_ready(gateway_addr, "/readyz", READY_LIMIT)
            .await?;

        let nginx = match nginx_workers {
            Some(workers) => start_nginx(&path, fakes_addr(&fakes, 0)?, workers).await?,
            None => Nginx::Skipped("--skip-nginx was given".to_owned()),
        };
        Ok(Self {
            nginx,
            gateway,
            fakes,
            gateway_addr,
            key,
            dir,
        })
    }

    /// The harness and every process it started.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![std::process::id(), self.gateway.pid()];
        pids.extend(self.fakes.iter().map(|fake| fake.process.pid()));
        if let Nginx::Running { process, .. } = &self.nginx {
            pids.push(process.pid());
            pids.extend(crate::procs::children_of(process.pid()));
        }
        pids
    }

    pub fn fake(&self, delay_ms: u64) -> Result<&Fake> {
        self.fakes
            .iter()
            .find(|fake| fake.delay_ms == delay_ms)
            .with_context(|| format!("no fake upstream with a {delay_ms} ms delay"))
    }

    pub fn check_running(&mut self) -> Result<()> {
        self.gateway.check_running()?;
        for fake in &mut self.fakes {
            fake.process.check_running()?;
        }
        if let Nginx::Running { process, .. } = &mut self.nginx {
            process.check_running()?;
        }
        Ok(())
    }

    /// The end of every log, for a failed run.
    pub fn log_tails(&self) -> String {
        let mut children: Vec<&Child> = vec![&self.gateway];
        children.extend(self.fakes.iter().map(|fake| &fake.process));
        if let Nginx::Running { process, .. } = &self.nginx {
            children.push(process);
        }
        children
            .iter()
            .map(|child| {
                format!(
                    "--- {} ({})\n{}",
                    child.name,
                    child.log.display(),
                    child.log_tail(15)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn database_bytes(&self) -> u64 {
        ["tollgate.db", "tollgate.db-wal"]
            .iter()
            .filter_map(|name| std::fs::metadata(self.dir.path().join(name)).ok())
            .map(|meta| meta.len())
            .sum()
    }
}

fn fakes_addr(fakes: &[Fake], delay_ms: u64) -> Result<SocketAddr> {
    fakes
        .iter()
        .find(|fake| fake.delay_ms == delay_ms)
        .map(|fake| fake.addr)
        .context("no fake upstream without delay")
}

/// A `tollgate` command with a clean environment: only the pepper the harness chose.
fn tollgate() -> Command {
    let mut command = Command::new(TOLLGATE);
    for var in [
        "TOLLGATE_CONFIG",
        "TOLLGATE_DATABASE_URL",
        "TOLLGATE_LOG",
        "TOLLGATE_ADMIN_TOKEN",
    ] {
        command.env_remove(var);
    }
    command.env("TOLLGATE_KEY_PEPPER", PEPPER);
    command
}

fn cli(config: &Path, args: &[&str]) -> Result<String> {
    let output = tollgate()
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .with_context(|| format!("running {TOLLGATE}"))?;
    if !output.status.success() {
        bail!(
            "`tollgate {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    String::from_utf8(output.stdout).context("the CLI printed invalid UTF-8")
}

async fn start_fake(dir: &Path, delay_ms: u64) -> Result<Fake> {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let mut command = tollgate();
    command.args([
        "fake-upstream",
        "--listen",
        &addr.to_string(),
        "--latency-ms",
        &delay_ms.to_string(),
    ]);
    let log = dir.join(format!("fake-{delay_ms}ms.log"));
    let mut process = Child::spawn(&format!("the {delay_ms} ms fake upstream"), command, &log)?;
    process.wait_ready(addr, "/fake/stats", READY_LIMIT).await?;
    Ok(Fake {
        delay_ms,
        addr,
        route: if delay_ms == 0 {
            "fast".to_owned()
        } else {
            format!("fast{delay_ms}")
        },
        process,
    })
}

async fn start_nginx(dir: &Path, upstream: SocketAddr, workers: u32) -> Result<Nginx> {
    let binary = match find_or_install_nginx() {
        Ok(binary) => binary,
        Err(reason) => return Ok(Nginx::Skipped(reason)),
    };
    let version = Command::new(&binary)
        .arg("-v")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stderr).trim().to_owned())
        .unwrap_or_default();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        config::nginx_conf(addr.port(), upstream.port(), workers, dir),
    )
    .context("writing the nginx configuration")?;
    let mut command = Command::new(&binary);
    command
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(dir.join("nginx-error.log"));
    let started = match Child::spawn("nginx", command, &dir.join("nginx.log")) {
        Ok(mut process) => process
            .wait_ready(addr, "/fake/stats", READY_LIMIT)
            .await
            .map(|()| process),
        Err(error) => Err(error),
    };
    let process = match started {
        Ok(process) => process,
        Err(error) => {
            let reason = format!("nginx did not start: {error:#}");
            println!("{reason}");
            return Ok(Nginx::Skipped(reason));
        }
    };
    Ok(Nginx::Running {
        addr,
        process,
        version: format!("{version}, {workers} worker process(es)"),
    })
}

/// nginx from PATH or /usr/sbin, else Debian's package installed with apt-get; the reason
/// when neither works.
fn find_or_install_nginx() -> Result<PathBuf, String> {
    if let Some(found) = find_nginx() {
        return Ok(found);
    }
    println!("nginx is not installed; installing Debian's package (apt-get install -y nginx)");
    let install = || {
        Command::new("apt-get")
            // Wait for another apt/dpkg run to finish rather than fail on its lock.
            .args(["-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", "nginx"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
    };
    let mut output = install().map_err(|e| format!("cannot run apt-get: {e}"))?;
    if !output.status.success() {
        // Fresh containers often have no package lists yet.
        let _ = Command::new("apt-get")
            .args(["-o", "DPkg::Lock::Timeout=300", "update", "-q"])
            .output();
        output = install().map_err(|e| format!("cannot run apt-get: {e}"))?;
    }
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .last()
            .unwrap_or("no message")
            .trim()
            .to_owned();
        return Err(format!(
            "`apt-get install -y nginx` failed ({}): {last}",
            output.status
        ));
    }
    find_nginx().ok_or_else(|| "nginx was installed but its binary was not found".to_owned())
}

fn find_nginx() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file())
}
