//! The cells in production's shape, each beside its direct baseline: agents on a slow
//! upstream (`agents.rs`), three tenants with isolation (`isolation.rs`), faults under load
//! (`faults.rs`) and the scale of one replica (`scale.rs`). The PostgreSQL cells are ordinary
//! cells of the plan (`Mode::Postgres`). This module starts what they need beside the stack:
//! a lognormal fake, a faulty fake, and gateways whose configuration adds their routes,
//! providers and the three tenants' tier.

use std::fmt::Write as _;
use std::net::SocketAddr;

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::agents::{self, AgentCell};
use crate::config::{ModelRoute, UPSTREAM_MODEL};
use crate::faults::{self, FaultCell};
use crate::generator::Target;
use crate::http::Template;
use crate::isolation::{self, Isolation};
use crate::plan::{Door, MODE_RATES, Runner, gateway_target};
use crate::procs::Child;
use crate::scale::{self, OpenFiles, Scale};
use crate::scenarios::{MAX_TOKENS, Scenario};
use crate::stack::{
    Bare, Gateway, Spec, TlsFake, start_bare_with, start_fake_with, start_tls_fake,
};

const CHAT_PATH: &str = "/v1/chat/completions";
/// The route of the agent cells, on the lognormal fake.
pub const AGENT_ROUTE: &str = "agents";
const AGENT_PROVIDER: &str = "lognormal";

/// What the shape cells do in this run.
#[derive(Debug, Clone, Copy)]
pub struct ShapeOptions {
    pub quick: bool,
    /// Seconds each side of an agent cell runs.
    pub agent_seconds: u64,
    /// Runs of the isolation cell (at least two: its noise is their spread).
    pub isolation_runs: u32,
    pub scale: bool,
    /// The agent, isolation and fault cells are skipped.
    pub scale_only: bool,
    pub scale_calls: usize,
    pub scale_seconds: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct ShapeResults {
    pub agents: Vec<AgentCell>,
    pub agents_failed: Option<String>,
    pub isolation: Option<Isolation>,
    pub isolation_failed: Option<String>,
    pub faults: Vec<FaultCell>,
    pub faults_failed: Option<String>,
    pub scale: Option<Scale>,
    /// Why there is no scale cell.
    pub scale_failed: Option<String>,
    /// Why none of these cells ran.
    pub skipped: Option<String>,
}

/// The fakes the shape cells share: their drop stops them.
struct Fakes {
    faulty: (SocketAddr, Child),
    fast: SocketAddr,
    /// The scale cell's upstream: HTTPS with HTTP/2, as providers serve.
    tls: TlsFake,
    dir: std::path::PathBuf,
}

pub async fn run(
    runner: &Runner<'_>,
    options: ShapeOptions,
    open_files: OpenFiles,
) -> ShapeResults {
    let mut results = ShapeResults::default();
    let fakes = match start_fakes(runner).await {
        Ok(fakes) => fakes,
        Err(error) => {
            let reason = format!("the shape cells' fakes did not start: {error:#}");
            println!("{reason}");
            results.skipped = Some(reason);
            return results;
        }
    };
    let Some(scenario) = runner.scenarios.iter().find(|s| s.name == "short") else {
        results.skipped = Some("no short scenario".to_owned());
        return results;
    };
    let shape = Shape {
        runner,
        fakes: &fakes,
        scenario,
        options,
    };
    if options.scale_only {
        let reason = "--scale-only was given".to_owned();
        results.agents_failed = Some(reason.clone());
        results.isolation_failed = Some(reason.clone());
        results.faults_failed = Some(reason);
    } else {
        shape.agents_isolation_and_faults(&mut results).await;
    }
    if options.scale {
        match shape.scale(open_files).await {
            Ok(scale) => results.scale = Some(scale),
            Err(error) => results.scale_failed = Some(failed("scale", &error)),
        }
    } else {
        results.scale_failed = Some("--skip-scale was given".to_owned());
    }
    results
}

fn failed(what: &str, error: &anyhow::Error) -> String {
    let reason = format!("{error:#}");
    println!("the {what} cells failed: {reason}");
    reason
}

async fn start_fakes(runner: &Runner<'_>) -> Result<Fakes> {
    let dir = runner.stack.dir.path().join("shape-fakes");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let faulty = start_fake_with(
        &dir,
        "fake-faulty",
        "the faulty fake upstream",
        &["--error-rate", faults::ERROR_RATE],
    )
    .await?;
    let tls = start_tls_fake(&dir, "fake-tls", "the HTTPS fake upstream").await?;
    Ok(Fakes {
        faulty,
        fast: runner.stack.fake(0)?.addr,
        tls,
        dir,
    })
}

/// A lognormal fake whose draws are seeded: two of them delay their n-th calls alike, so the
/// direct and gateway sides of an agent cell meet the same upstream.
async fn lognormal_fake(dir: &std::path::Path, name: &str) -> Result<(SocketAddr, Child)> {
    let median = agents::MEDIAN_MS.to_string();
    let seed = agents::SEED.to_string();
    start_fake_with(
        dir,
        &format!("fake-lognormal-{name}"),
        &format!("the lognormal fake upstream ({name})"),
        &[
            "--latency-ms",
            &median,
            "--latency-sigma",
            agents::SIGMA,
            "--seed",
            &seed,
        ],
    )
    .await
}

/// The agent cells' model: the fake's stream pacing.
fn agent_model() -> String {
    let (chunks, delay) = agents::STREAM;
    format!("{UPSTREAM_MODEL}+chunks-{chunks}+chunk-delay-{delay}ms")
}

/// What the shape gateways add to the usual configuration; `lognormal`: the agent route's fake.
fn spec(fakes: &Fakes, lognormal: SocketAddr, scale_calls: usize) -> Spec {
    let route = |route: &str, provider: &str, model: String, fallback: Option<String>| ModelRoute {
        route: route.to_owned(),
        provider: provider.to_owned(),
        model,
        settings: None,
        price_lines: None,
        fallback,
    };
    let routes = vec![
        route(AGENT_ROUTE, AGENT_PROVIDER, agent_model(), None),
        route(
            faults::ROUTE,
            faults::PROVIDER,
            UPSTREAM_MODEL.to_owned(),
            Some(format!("{}/{UPSTREAM_MODEL}", faults::FAILOVER_PROVIDER)),
        ),
        route(scale::ROUTE, scale::PROVIDER, scale::MODEL.to_owned(), None),
    ];
    let mut toml = String::new();
    let _ = write!(
        toml,
        r#"
[providers.{AGENT_PROVIDER}]
kind = "openai"
base_url = "http://{lognormal}"

[providers.{faulty_provider}]
kind = "openai"
base_url = "http://{faulty}"
# One attempt: each 503 moves to the route's failover target at once.
max_attempts = 1

[[prices]]
provider = "{faulty_provider}"
model = "{UPSTREAM_MODEL}"
input = "0.5"
cached_input = "0.05"
output = "1.5"

[providers.{bulk}]
kind = "openai"
base_url = "https://{tls}"
ca_file = "{ca_file}"
max_concurrency = {concurrency}

[tiers.{tier}]
routes = ["fast"]
rpm = {rpm}
burst = {burst}
default_max_tokens = {MAX_TOKENS}
"#,
        faulty_provider = faults::PROVIDER,
        faulty = fakes.faulty.0,
        bulk = scale::PROVIDER,
        tls = fakes.tls.https,
        ca_file = fakes.tls.ca_file.display(),
        concurrency = scale_calls.max(1) * 2,
        tier = isolation::TIER,
        rpm = isolation::LIMIT_RPS * 60,
        burst = isolation::LIMIT_RPS,
    );
    Spec {
        routes,
        toml,
        tenants: isolation::TENANTS
            .iter()
            .map(|(tenant, _)| ((*tenant).to_owned(), isolation::TIER.to_owned()))
            .collect(),
        ..Spec::default()
    }
}

struct Shape<'a> {
    runner: &'a Runner<'a>,
    fakes: &'a Fakes,
    scenario: &'a Scenario,
    options: ShapeOptions,
}

impl Shape<'_> {
    async fn agents_isolation_and_faults(&self, results: &mut ShapeResults) {
        match self.agents().await {
            Ok(cells) => results.agents = cells,
            Err(error) => results.agents_failed = Some(failed("agent", &error)),
        }
        match self.isolation_and_faults().await {
            Ok((isolation, cells)) => {
                results.isolation = Some(isolation);
                results.faults = cells;
            }
            Err(error) => {
                let reason = failed("isolation and fault", &error);
                results.isolation_failed = Some(reason.clone());
                results.faults_failed = Some(reason);
            }
        }
    }

    /// `lognormal`: the agent route's fake, if this gateway serves agents.
    async fn gateway(
        &self,
        subdir: &str,
        name: &str,
        lognormal: Option<SocketAddr>,
    ) -> Result<Gateway> {
        let lognormal = lognormal.unwrap_or(self.fakes.fast);
        let spec = spec(self.fakes, lognormal, self.options.scale_calls);
        self.runner
            .stack
            .start_gateway_with(subdir, name, &spec)
            .await
    }

    fn direct(&self, addr: SocketAddr, model: &str, stream: bool) -> Result<Target> {
        let body = self.scenario.upstream_body_for(model, stream)?;
        let template = Template::post(addr, CHAT_PATH, &[], &body);
        Ok(Target {
            addr,
            template: if stream {
                template.streaming()
            } else {
                template
            },
        })
    }

    fn through(&self, gateway: &Gateway, key: &str, route: &str, stream: bool) -> Result<Target> {
        let body = self.scenario.gateway_body_for(route, stream, Door::Chat)?;
        let target = gateway_target(gateway.addr, key, Door::Chat, &body, None);
        Ok(if stream {
            Target {
                template: target.template.streaming(),
                ..target
            }
        } else {
            target
        })
    }

    /// Each agent count against a lognormal fake of its own, through a fresh gateway in front
    /// of another fake with the same seed.
    async fn agents(&self) -> Result<Vec<AgentCell>> {
        let mut cells = Vec::new();
        for count in agents::AGENTS {
            let (direct_addr, _direct_fake) =
                lognormal_fake(&self.fakes.dir, &format!("{count}-direct")).await?;
            let (upstream, _upstream_fake) =
                lognormal_fake(&self.fakes.dir, &format!("{count}-gateway")).await?;
            let direct = self.direct(direct_addr, &agent_model(), true)?;
            let gateway = self
                .gateway(
                    &format!("agents-{count}"),
                    &format!("the {count}-agent gateway"),
                    Some(upstream),
                )
                .await?;
            let through = self.through(&gateway, &gateway.key, AGENT_ROUTE, true)?;
            let seconds = self.options.agent_seconds;
            cells.push(
                agents::cell(count, seconds, &direct, &through, gateway.process.pid()).await?,
            );
        }
        Ok(cells)
    }

    /// The three tenants, then the faults cells, on one gateway.
    async fn isolation_and_faults(&self) -> Result<(Isolation, Vec<FaultCell>)> {
        let gateway = self.gateway("shape", "the shape gateway", None).await?;
        let through = |tenant: &str| -> Result<Target> {
            self.through(&gateway, gateway.key_of(tenant)?, "fast", false)
        };
        let targets = isolation::Targets {
            gateway: [
                through(isolation::TENANTS[0].0)?,
                through(isolation::TENANTS[1].0)?,
                through(isolation::TENANTS[2].0)?,
            ],
            direct: self.direct(self.fakes.fast, UPSTREAM_MODEL, false)?,
        };
        let timing = self.runner.timing;
        let isolation = isolation::run(&targets, timing, self.options.isolation_runs).await?;
        let direct = self.direct(self.fakes.faulty.0, UPSTREAM_MODEL, false)?;
        let mut through = self.through(&gateway, &gateway.key, faults::ROUTE, false)?;
        through.template = through.template.marking(&format!(
            "x-tollgate-provider: {}",
            faults::FAILOVER_PROVIDER
        ));
        let rates: &[u64] = if self.options.quick {
            &[1_000]
        } else {
            &MODE_RATES
        };
        let mut cells = Vec::new();
        for rate in rates {
            cells.push(faults::cell(*rate, timing, &direct, &through, gateway.addr).await?);
        }
        Ok((isolation, cells))
    }

    async fn scale(&self, open_files: OpenFiles) -> Result<Scale> {
        let tls = &self.fakes.tls;
        let bare = start_bare_with(
            &self.fakes.dir,
            "bare-proxy-tls",
            tls.https,
            Some(&tls.ca_file),
        )
        .await?;
        let bare = match &bare {
            Bare::Running { addr, process } => {
                Some((self.direct(*addr, scale::MODEL, true)?, process.pid()))
            }
            Bare::Skipped(reason) => {
                println!("scale: no bare proxy beside the gateway: {reason}");
                None
            }
        };
        let gateway = self.gateway("scale", "the scale gateway", None).await?;
        let direct = self.direct(tls.addr, scale::MODEL, true)?;
        let through = self.through(&gateway, &gateway.key, scale::ROUTE, true)?;
        let sides = scale::Sides {
            direct: &direct,
            bare: bare.as_ref().map(|(target, pid)| (target, *pid)),
            gateway: (&through, gateway.process.pid()),
        };
        Ok(scale::run(
            self.options.scale_calls,
            self.options.scale_seconds,
            &sides,
            open_files,
        )
        .await)
    }
}
