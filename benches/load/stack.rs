//! The system under test, started in a temporary directory: two fake upstreams (0 ms and
//! 50 ms), the gateway (release build, every governance feature on) with a tenant and key made
//! by its own CLI, the reference nginx, the bare Rust proxy, crabllm, and a `redis-server` with a second gateway that keeps
//! its limits, quotas and budgets there. Further gateways (the in-flight scenario's fresh one)
//! are started on demand with the same configuration in a directory of their own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::config::{self, BUDGET, ModelRoute, TENANT, TIER, UPSTREAM_MODEL, Upstream};
use crate::crabllm::Crabllm;
use crate::plan::Mode;
use crate::procs::{Child, free_port};

/// The gateway binary of this build (the bench profile, i.e. release).
pub const TOLLGATE: &str = env!("CARGO_BIN_EXE_tollgate");
const PEPPER: &str = "load-harness-pepper-not-a-secret";
const READY_LIMIT: Duration = Duration::from_secs(30);
/// The delays the fake upstreams add to every answer.
pub const DELAYS_MS: [u64; 2] = [0, 50];
/// The `ledger.fsync` of the gateway beside the default one (`interval`): what a
/// wait for a group fsync on each attempt's reserve costs shows between the two.
pub const BATCH_FSYNC: &str = "batch";

pub struct Fake {
    pub delay_ms: u64,
    pub addr: SocketAddr,
    /// The gateway route that reaches this fake.
    pub route: String,
    pub process: Child,
}

/// A running gateway with its tenant's key.
pub struct Gateway {
    pub process: Child,
    pub addr: SocketAddr,
    pub key: String,
    /// (tenant, key) of the further tenants its `Spec` named.
    pub tenant_keys: Vec<(String, String)>,
}

impl Gateway {
    /// The key of one of the `Spec`'s further tenants.
    pub fn key_of(&self, tenant: &str) -> Result<&str> {
        self.tenant_keys
            .iter()
            .find(|(id, _)| id == tenant)
            .map(|(_, key)| key.as_str())
            .with_context(|| format!("the gateway has no tenant {tenant}"))
    }
}

/// What a gateway adds to the configuration every gateway shares.
#[derive(Debug, Default, Clone)]
pub struct Spec {
    pub redis_url: Option<String>,
    pub fsync: Option<&'static str>,
    /// The ledger's database instead of the directory's SQLite file (`TOLLGATE_DATABASE_URL`).
    pub database_url: Option<String>,
    /// Routes beside the usual ones (every tier's list names them).
    pub routes: Vec<ModelRoute>,
    /// Tables appended as they are: further providers, prices and tiers.
    pub toml: String,
    /// (tenant, tier) of further tenants, each given a key.
    pub tenants: Vec<(String, String)>,
}

/// The ledger on a PostgreSQL the harness started, and a gateway on it, or why not.
pub enum Postgres {
    Running {
        // Field order is drop order: the gateway stops before its database.
        gateway: Box<Gateway>,
        server: crate::postgres::Server,
        version: String,
    },
    Skipped(String),
}

/// The Redis mode's server and gateway, or why they are missing.
pub enum Redis {
    Running {
        // Field order is drop order: the gateway stops before its Redis.
        gateway: Box<Gateway>,
        server: Child,
        addr: SocketAddr,
        version: String,
    },
    Skipped(String),
}

/// The Redis Cluster mode's six nodes (three primaries, a replica each) and
/// the gateway whose quotas live on them, or why they are missing.
pub enum Cluster {
    Running {
        gateway: Box<Gateway>,
        nodes: Vec<Child>,
    },
    Skipped(String),
}

/// The route of the in-flight scenario: every answer takes this long.
pub const SLOW_ROUTE: &str = "slow2s";
pub const SLOW_MS: u64 = 2_000;

/// The embeddings route the semantic cells' cache embeds questions through.
const SEMANTIC_EMBED_ROUTE: &str = "semantic-embed";

/// The route (and the fake's model string) of a streaming shape, on the 0 ms fake.
pub fn stream_route(chunks: u32, chunk_delay_ms: u64) -> (String, String) {
    (
        format!("stream{chunks}x{chunk_delay_ms}ms"),
        format!("{UPSTREAM_MODEL}+chunks-{chunks}+chunk-delay-{chunk_delay_ms}ms"),
    )
}

/// The routes to scripted models of the 0 ms fake: one per streaming shape, and the slow one.
fn model_routes() -> Vec<ModelRoute> {
    let provider = "fake0".to_owned();
    let mut routes: Vec<ModelRoute> = crate::plan::STREAM_MODES
        .iter()
        .filter_map(|mode| match mode {
            // One route per shape: every door streams from it.
            Mode::Stream {
                chunks,
                chunk_delay_ms,
                door: crate::plan::Door::Chat,
            } => Some(stream_route(*chunks, *chunk_delay_ms)),
            _ => None,
        })
        .flat_map(|(route, model)| {
            // Beside each shape, the same stream from a model that hides no
            // output (the fake ignores the `grows` segment): its hold grows.
            let grows = ModelRoute {
                route: format!("{route}-grows"),
                provider: provider.clone(),
                model: format!("{model}+grows"),
                settings: None,
                price_lines: Some("hidden_output = \"none\"".to_owned()),
                fallback: None,
            };
            let plain = ModelRoute {
                route,
                provider: provider.clone(),
                model,
                settings: None,
                price_lines: None,
                fallback: None,
            };
            [plain, grows]
        })
        .collect();
    routes.push(ModelRoute {
        route: SLOW_ROUTE.to_owned(),
        provider: provider.clone(),
        model: format!("{UPSTREAM_MODEL}+delay-{SLOW_MS}ms"),
        settings: None,
        price_lines: None,
        fallback: None,
    });
    // A semantic cache as its README section shows it, over embeddings of
    // text-embedding-3-small's size.
    routes.push(ModelRoute {
        route: SEMANTIC_EMBED_ROUTE.to_owned(),
        provider: provider.clone(),
        model: format!("{UPSTREAM_MODEL}+dims-1536"),
        settings: None,
        price_lines: None,
        fallback: None,
    });
    routes.push(ModelRoute {
        route: crate::plan::SEMANTIC_ROUTE.to_owned(),
        provider,
        model: UPSTREAM_MODEL.to_owned(),
        settings: Some(format!(
            "semantic_cache = {{ threshold = 0.92, ttl_ms = 600000, embedding_route = \"{SEMANTIC_EMBED_ROUTE}\" }}"
        )),
        price_lines: None,
        fallback: None,
    });
    routes
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

/// Why the bare proxy's row is missing, or the running proxy (`bare.rs`).
pub enum Bare {
    Running { addr: SocketAddr, process: Child },
    Skipped(String),
}

/// What the bare proxy is, for the report.
pub const BARE_DESCRIPTION: &str =
    "bare Rust proxy: actix-web and awc as in the gateway, no governance, 2 workers";

/// The systems beside the gateways that a run starts, or leaves out.
#[derive(Debug, Clone, Copy)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "each is one system a run starts or leaves out, independently of the others"
)]
pub struct Systems {
    /// nginx's worker processes; `None` leaves nginx out.
    pub nginx: Option<u32>,
    pub bare: bool,
    /// crabllm, the Rust gateway issue 15's throughput target names (`crabllm.rs`).
    pub crabllm: bool,
    /// The Redis mode: its server and gateway.
    pub redis: bool,
    /// The PostgreSQL cells: a server the harness starts and a gateway on it.
    pub postgres: bool,
}

pub struct Stack {
    // Field order is drop order: the processes stop before their directory is removed.
    pub postgres: Postgres,
    pub nginx: Nginx,
    pub bare: Bare,
    pub crabllm: Crabllm,
    pub redis: Redis,
    pub cluster: Cluster,
    pub gateway: Child,
    /// Configured like `gateway` but with `ledger.fsync = "batch"`.
    pub batch: Gateway,
    pub fakes: Vec<Fake>,
    pub gateway_addr: SocketAddr,
    pub key: String,
    pub dir: tempfile::TempDir,
}

impl Stack {
    pub async fn start(systems: Systems) -> Result<Self> {
        // Under the target directory, on the project's own disk: the journals' fsyncs are
        // part of what is measured, and a tmpfs `/tmp` would hide them.
        let dir = tempfile::Builder::new()
            .prefix("tollgate-load-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .context("creating a temporary directory")?;
        let path = dir.path().to_owned();

        let mut fakes = Vec::new();
        for delay_ms in DELAYS_MS {
            fakes.push(start_fake(&path, delay_ms).await?);
        }
        let Gateway {
            process: gateway,
            addr: gateway_addr,
            key,
            ..
        } = start_gateway(&path, "the gateway", &fakes, &Spec::default()).await?;
        let batch_dir = path.join("batch");
        std::fs::create_dir_all(&batch_dir)
            .with_context(|| format!("creating {}", batch_dir.display()))?;
        let batch = start_gateway(
            &batch_dir,
            "the fsync-batch gateway",
            &fakes,
            &Spec {
                fsync: Some(BATCH_FSYNC),
                ..Spec::default()
            },
        )
        .await?;

        let nginx = match systems.nginx {
            Some(workers) => start_nginx(&path, fakes_addr(&fakes, 0)?, workers).await?,
            None => Nginx::Skipped("--skip-nginx was given".to_owned()),
        };
        let bare = if systems.bare {
            start_bare(&path, fakes_addr(&fakes, 0)?).await?
        } else {
            Bare::Skipped("--skip-bare was given".to_owned())
        };
        let crabllm = if systems.crabllm {
            crate::crabllm::start(&path, fakes_addr(&fakes, 0)?).await
        } else {
            Crabllm::Skipped("--skip-crabllm was given".to_owned())
        };
        let redis = if systems.redis {
            // A broken Redis mode is reported beside the other results rather than losing them.
            start_redis(&path, &fakes).await.unwrap_or_else(|error| {
                let reason = format!("the Redis mode did not start: {error:#}");
                println!("{reason}");
                Redis::Skipped(reason)
            })
        } else {
            Redis::Skipped("--skip-redis was given".to_owned())
        };
        let cluster = if systems.redis {
            start_cluster(&path, &fakes).await.unwrap_or_else(|error| {
                let reason = format!("the Redis Cluster mode did not start: {error:#}");
                println!("{reason}");
                Cluster::Skipped(reason)
            })
        } else {
            Cluster::Skipped("--skip-redis was given".to_owned())
        };
        let postgres = if systems.postgres {
            start_postgres(&path, &fakes).await.unwrap_or_else(|error| {
                let reason = format!("the PostgreSQL cells did not start: {error:#}");
                println!("{reason}");
                Postgres::Skipped(reason)
            })
        } else {
            Postgres::Skipped("--skip-postgres was given".to_owned())
        };
        Ok(Self {
            postgres,
            nginx,
            bare,
            crabllm,
            redis,
            cluster,
            gateway,
            batch,
            fakes,
            gateway_addr,
            key,
            dir,
        })
    }

    /// A further gateway like the first, with a database of its own in `subdir`.
    pub async fn start_gateway(&self, subdir: &str, name: &str) -> Result<Gateway> {
        self.start_gateway_with(subdir, name, &Spec::default())
            .await
    }

    /// A further gateway with what `spec` adds, with a database of its own in `subdir`.
    pub async fn start_gateway_with(
        &self,
        subdir: &str,
        name: &str,
        spec: &Spec,
    ) -> Result<Gateway> {
        let path = self.dir.path().join(subdir);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        start_gateway(&path, name, &self.fakes, spec).await
    }

    /// The gateway a mode's cells go through: (address, key, pid).
    pub fn gateway_for(&self, mode: Mode) -> Result<(SocketAddr, &str, u32)> {
        match mode {
            Mode::Redis | Mode::EndUsers { .. } => match &self.redis {
                Redis::Running { gateway, .. } => {
                    Ok((gateway.addr, gateway.key.as_str(), gateway.process.pid()))
                }
                Redis::Skipped(reason) => bail!("the Redis mode is not running: {reason}"),
            },
            Mode::Cluster => match &self.cluster {
                Cluster::Running { gateway, .. } => {
                    Ok((gateway.addr, gateway.key.as_str(), gateway.process.pid()))
                }
                Cluster::Skipped(reason) => {
                    bail!("the Redis Cluster mode is not running: {reason}")
                }
            },
            Mode::Postgres => match &self.postgres {
                Postgres::Running { gateway, .. } => {
                    Ok((gateway.addr, gateway.key.as_str(), gateway.process.pid()))
                }
                Postgres::Skipped(reason) => {
                    bail!("the PostgreSQL cells are not running: {reason}")
                }
            },
            Mode::Batch => Ok((
                self.batch.addr,
                self.batch.key.as_str(),
                self.batch.process.pid(),
            )),
            Mode::Plain | Mode::Stream { .. } | Mode::Semantic => {
                Ok((self.gateway_addr, self.key.as_str(), self.gateway.pid()))
            }
        }
    }

    /// The harness and every process it started.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![
            std::process::id(),
            self.gateway.pid(),
            self.batch.process.pid(),
        ];
        pids.extend(self.fakes.iter().map(|fake| fake.process.pid()));
        if let Nginx::Running { process, .. } = &self.nginx {
            pids.push(process.pid());
            pids.extend(crate::procs::children_of(process.pid()));
        }
        if let Bare::Running { process, .. } = &self.bare {
            pids.push(process.pid());
        }
        pids.extend(self.crabllm.process().map(Child::pid));
        if let Redis::Running {
            gateway, server, ..
        } = &self.redis
        {
            pids.push(gateway.process.pid());
            pids.push(server.pid());
        }
        if let Cluster::Running { gateway, nodes } = &self.cluster {
            pids.push(gateway.process.pid());
            pids.extend(nodes.iter().map(Child::pid));
        }
        if let Postgres::Running {
            gateway, server, ..
        } = &self.postgres
        {
            pids.push(gateway.process.pid());
            pids.extend(server.pids());
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
        if let Bare::Running { process, .. } = &mut self.bare {
            process.check_running()?;
        }
        if let Crabllm::Running { process, .. } = &mut self.crabllm {
            process.check_running()?;
        }
        if let Redis::Running {
            gateway, server, ..
        } = &mut self.redis
        {
            gateway.process.check_running()?;
            server.check_running()?;
        }
        if let Cluster::Running { gateway, nodes } = &mut self.cluster {
            gateway.process.check_running()?;
            for node in nodes {
                node.check_running()?;
            }
        }
        if let Postgres::Running {
            gateway, server, ..
        } = &mut self.postgres
        {
            gateway.process.check_running()?;
            server.check_running()?;
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
        if let Bare::Running { process, .. } = &self.bare {
            children.push(process);
        }
        children.extend(self.crabllm.process());
        if let Redis::Running {
            gateway, server, ..
        } = &self.redis
        {
            children.push(&gateway.process);
            children.push(server);
        }
        if let Cluster::Running { gateway, nodes } = &self.cluster {
            children.push(&gateway.process);
            children.extend(nodes.iter());
        }
        if let Postgres::Running {
            gateway, server, ..
        } = &self.postgres
        {
            children.push(&gateway.process);
            children.push(server.child());
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

fn cli(config: &Path, database_url: Option<&str>, args: &[&str]) -> Result<String> {
    let mut command = tollgate();
    if let Some(url) = database_url {
        command.env(DATABASE_URL_ENV, url);
    }
    let output = command
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

/// Writes a configuration into `dir`, creates the tenant and its key with the CLI and starts
/// `tollgate serve`.
async fn start_gateway(dir: &Path, name: &str, fakes: &[Fake], spec: &Spec) -> Result<Gateway> {
    let port = free_port()?;
    let upstreams: Vec<Upstream> = fakes
        .iter()
        .map(|fake| Upstream {
            provider: format!("fake{}", fake.delay_ms),
            route: fake.route.clone(),
            port: fake.addr.port(),
        })
        .collect();
    let config_path = dir.join("tollgate.toml");
    let mut routes = model_routes();
    routes.extend(spec.routes.iter().cloned());
    let mut toml = config::gateway_toml(
        port,
        dir,
        &upstreams,
        &routes,
        spec.redis_url.as_deref(),
        spec.fsync,
    );
    toml.push_str(&spec.toml);
    std::fs::write(&config_path, toml).context("writing the gateway configuration")?;
    let database = spec.database_url.as_deref();
    let key = tenant_with_key(&config_path, database, TENANT, TIER)?;
    let mut tenant_keys = Vec::new();
    for (tenant, tier) in &spec.tenants {
        let key = tenant_with_key(&config_path, database, tenant, tier)?;
        tenant_keys.push((tenant.clone(), key));
    }

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut command = tollgate();
    if let Some(url) = database {
        command.env(DATABASE_URL_ENV, url);
    }
    command.arg("--config").arg(&config_path).arg("serve");
    let mut process = Child::spawn(name, command, &dir.join("gateway.log"))?;
    process.wait_ready(addr, "/readyz", READY_LIMIT).await?;
    Ok(Gateway {
        process,
        addr,
        key,
        tenant_keys,
    })
}

const DATABASE_URL_ENV: &str = "TOLLGATE_DATABASE_URL";

/// Creates `tenant` on `tier` with the CLI and issues it a key.
fn tenant_with_key(
    config: &Path,
    database: Option<&str>,
    tenant: &str,
    tier: &str,
) -> Result<String> {
    cli(
        config,
        database,
        &[
            "tenant", "create", "--id", tenant, "--tier", tier, "--budget", BUDGET,
        ],
    )?;
    let issued: Value = serde_json::from_str(&cli(config, database, &["key", "issue", tenant])?)
        .context("`key issue` did not print JSON")?;
    Ok(issued
        .get("key")
        .and_then(Value::as_str)
        .context("`key issue` printed no \"key\"")?
        .to_owned())
}

/// A PostgreSQL of the harness's own (`postgres.rs`) and a gateway whose ledger is on it.
async fn start_postgres(dir: &Path, fakes: &[Fake]) -> Result<Postgres> {
    let server = match crate::postgres::Server::start().await {
        Ok(server) => server,
        Err(error) => return Ok(Postgres::Skipped(format!("{error:#}"))),
    };
    let path = dir.join("postgres");
    std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    let spec = Spec {
        database_url: Some(server.url()),
        ..Spec::default()
    };
    let gateway = start_gateway(&path, "the PostgreSQL gateway", fakes, &spec).await?;
    Ok(Postgres::Running {
        gateway: Box::new(gateway),
        version: server.version.clone(),
        server,
    })
}

/// `redis-server` on a free loopback port, persistence off, and a gateway that keeps its
/// quotas there; skipped (with the reason) when the server cannot be had.
async fn start_redis(dir: &Path, fakes: &[Fake]) -> Result<Redis> {
    let binary = match find_or_install("redis-server", "redis-server") {
        Ok(binary) => binary,
        Err(reason) => return Ok(Redis::Skipped(reason)),
    };
    let version = Command::new(&binary)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default();
    let path = dir.join("redis");
    std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let mut command = Command::new(&binary);
    command
        .args(["--port", &addr.port().to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&path);
    let mut server = Child::spawn("redis-server", command, &path.join("redis.log"))?;
    wait_for_pong(&mut server, addr).await?;
    let spec = Spec {
        redis_url: Some(format!("redis://{addr}/0")),
        ..Spec::default()
    };
    let gateway = start_gateway(&path, "the Redis-mode gateway", fakes, &spec).await?;
    require_redis_quotas(&gateway, "the Redis-mode gateway").await?;
    Ok(Redis::Running {
        gateway: Box::new(gateway),
        server,
        addr,
        version: version
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    })
}

/// The gateway starts on memory quotas when Redis is unreachable; a Redis mode must not.
async fn require_redis_quotas(gateway: &Gateway, name: &str) -> Result<()> {
    let template = crate::http::Template::get(gateway.addr, "/readyz");
    let mut conn = crate::http::Conn::new(gateway.addr, &template);
    let response = conn.exchange(0).await.context("GET /readyz")?;
    let body = String::from_utf8_lossy(&conn.body(&response)).into_owned();
    if !body.contains("\"quota_store\":\"redis\"") {
        bail!("{name} does not use Redis: /readyz says {body}");
    }
    Ok(())
}

/// Six `redis-server`s with `cluster-enabled yes` joined by `redis-cli --cluster create`
/// (three primaries, a replica each), and a gateway on `redis+cluster://` naming them all.
async fn start_cluster(dir: &Path, fakes: &[Fake]) -> Result<Cluster> {
    let binary = match find_or_install("redis-server", "redis-server") {
        Ok(binary) => binary,
        Err(reason) => return Ok(Cluster::Skipped(reason)),
    };
    let path = dir.join("cluster");
    let mut nodes = Vec::new();
    let mut addrs = Vec::new();
    for n in 0..6 {
        let node_dir = path.join(format!("node{n}"));
        std::fs::create_dir_all(&node_dir)
            .with_context(|| format!("creating {}", node_dir.display()))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        // The bus port found free too: Redis's default (the port + 10,000) is
        // a port nobody checked, and a node that cannot bind it exits.
        let bus = free_port()?;
        let mut command = Command::new(&binary);
        command
            .args(["--port", &addr.port().to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
            .args(["--cluster-port", &bus.to_string()])
            .arg("--dir")
            .arg(&node_dir);
        let mut node = Child::spawn(
            "redis-server (cluster)",
            command,
            &node_dir.join("redis.log"),
        )?;
        wait_for_pong(&mut node, addr).await?;
        nodes.push(node);
        addrs.push(addr.to_string());
    }
    let created = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addrs)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .context("redis-cli --cluster create")?;
    if !created.status.success() {
        bail!(
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
    }
    wait_for_cluster(&addrs).await?;
    let spec = Spec {
        redis_url: Some(format!("redis+cluster://{}", addrs.join(","))),
        ..Spec::default()
    };
    let gateway = start_gateway(&path, "the Redis Cluster gateway", fakes, &spec).await?;
    require_redis_quotas(&gateway, "the Redis Cluster gateway").await?;
    Ok(Cluster::Running {
        gateway: Box::new(gateway),
        nodes,
    })
}

/// Every node says `cluster_state:ok`.
async fn wait_for_cluster(addrs: &[String]) -> Result<()> {
    let deadline = crate::clock::now() + READY_LIMIT;
    while crate::clock::now() < deadline {
        let ok = addrs.iter().all(|addr| {
            let port = addr.rsplit(':').next().unwrap_or_default();
            Command::new("redis-cli")
                .args(["-h", "127.0.0.1", "-p", port, "cluster", "info"])
                .output()
                .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok"))
        });
        if ok {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the Redis Cluster did not reach cluster_state:ok within {READY_LIMIT:?}")
}

/// Redis speaks RESP, not HTTP: ready once `PING` is answered with `+PONG`.
async fn wait_for_pong(server: &mut Child, addr: SocketAddr) -> Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let deadline = crate::clock::now() + READY_LIMIT;
    let mut last = String::from("no answer yet");
    while crate::clock::now() < deadline {
        server.check_running()?;
        match tokio::net::TcpStream::connect(addr).await {
            Ok(mut stream) => {
                let mut answer = [0_u8; 7];
                let pong = async {
                    stream.write_all(b"PING\r\n").await?;
                    stream.read_exact(&mut answer).await
                };
                match tokio::time::timeout(Duration::from_secs(1), pong).await {
                    Ok(Ok(_)) if &answer == b"+PONG\r\n" => return Ok(()),
                    Ok(Ok(_)) => last = String::from_utf8_lossy(&answer).into_owned(),
                    Ok(Err(error)) => last = error.to_string(),
                    Err(_) => "no answer within 1 s".clone_into(&mut last),
                }
            }
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!(
        "redis-server did not answer PING on {addr} within {READY_LIMIT:?} (last: {last}):\n{}",
        server.log_tail(30)
    )
}

/// A fake that also serves HTTPS (HTTP/2 by ALPN) as providers do: its plain address, its HTTPS
/// address and the file holding the authority to trust.
pub async fn start_tls_fake(dir: &Path, file: &str, name: &str) -> Result<TlsFake> {
    let https = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let ca_file = dir.join(format!("{file}-ca.pem"));
    let https_arg = https.to_string();
    let ca_arg = ca_file.display().to_string();
    let (addr, process) = start_fake_with(
        dir,
        file,
        name,
        &["--tls-listen", &https_arg, "--tls-ca", &ca_arg],
    )
    .await?;
    Ok(TlsFake {
        addr,
        https,
        ca_file,
        _process: process,
    })
}

pub struct TlsFake {
    pub addr: SocketAddr,
    pub https: SocketAddr,
    pub ca_file: PathBuf,
    /// Runs as long as this lives.
    _process: Child,
}

async fn start_fake(dir: &Path, delay_ms: u64) -> Result<Fake> {
    let delay = delay_ms.to_string();
    let (addr, process) = start_fake_with(
        dir,
        &format!("fake-{delay_ms}ms"),
        &format!("the {delay_ms} ms fake upstream"),
        &["--latency-ms", &delay],
    )
    .await?;
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

/// `tollgate fake-upstream` with `args` (its latency, sigma, error rate) on a free loopback
/// port, logging to `{file}.log` in `dir`.
pub async fn start_fake_with(
    dir: &Path,
    file: &str,
    name: &str,
    args: &[&str],
) -> Result<(SocketAddr, Child)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let mut command = tollgate();
    command
        .args(["fake-upstream", "--listen", &addr.to_string()])
        .args(args);
    let mut process = Child::spawn(name, command, &dir.join(format!("{file}.log")))?;
    process.wait_ready(addr, "/fake/stats", READY_LIMIT).await?;
    Ok((addr, process))
}

async fn start_nginx(dir: &Path, upstream: SocketAddr, workers: u32) -> Result<Nginx> {
    let binary = match find_or_install("nginx", "nginx") {
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

/// This binary again, serving as the bare proxy in front of `upstream`; skipped (with the
/// reason) when it does not start, like nginx.
async fn start_bare(dir: &Path, upstream: SocketAddr) -> Result<Bare> {
    start_bare_with(dir, "bare-proxy", upstream, None).await
}

/// `start_bare`, logging to `{file}.log`; with `ca_file`, calling `upstream` over HTTPS.
pub async fn start_bare_with(
    dir: &Path,
    file: &str,
    upstream: SocketAddr,
    ca_file: Option<&Path>,
) -> Result<Bare> {
    let binary = std::env::current_exe().context("locating the harness's own binary")?;
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let mut command = Command::new(binary);
    command.args([
        crate::bare::SERVE_ARG,
        &addr.port().to_string(),
        &upstream.port().to_string(),
    ]);
    if let Some(ca_file) = ca_file {
        command.arg(ca_file);
    }
    let started = match Child::spawn("the bare proxy", command, &dir.join(format!("{file}.log"))) {
        Ok(mut process) => process
            .wait_ready(addr, "/fake/stats", READY_LIMIT)
            .await
            .map(|()| process),
        Err(error) => Err(error),
    };
    match started {
        Ok(process) => Ok(Bare::Running { addr, process }),
        Err(error) => {
            let reason = format!("the bare proxy did not start: {error:#}");
            println!("{reason}");
            Ok(Bare::Skipped(reason))
        }
    }
}

/// `binary` from PATH or /usr/sbin, else Debian's `package` installed with apt-get; the
/// reason (with the command to run by hand) when neither works.
fn find_or_install(binary: &str, package: &str) -> Result<PathBuf, String> {
    if let Some(found) = find_binary(binary) {
        return Ok(found);
    }
    println!(
        "{binary} is not installed; installing Debian's package (apt-get install -y {package})"
    );
    let install = || {
        Command::new("apt-get")
            // Wait for another apt/dpkg run to finish rather than fail on its lock.
            .args(["-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", package])
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
            "`apt-get install -y {package}` failed ({}): {last}",
            output.status
        ));
    }
    find_binary(binary)
        .ok_or_else(|| format!("{package} was installed but `{binary}` was not found"))
}

fn find_binary(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
}
