//! What is measured, in which order, and the records each run leaves. Every (scenario, delay,
//! load shape) cell runs each target several times, alternating direct and gateway runs so a
//! slow drift of the machine cannot favour one side; the table quotes per-run medians.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::config::UPSTREAM_MODEL;
use crate::crabllm::Crabllm;
use crate::generator::{self, ClosedLoop, OpenLoop, Outcome, Target};
use crate::http::{Conn, SLOT_MARK, Template};
use crate::procs::{
    CpuSample, busy_neighbours, clock_ticks_per_second, cpu_ticks, cpu_ticks_with_children,
};
use crate::scenarios::Scenario;
use crate::stack::{Bare, Cluster, Nginx, Postgres, Redis, Stack, stream_route};
use crate::stats::{self, Percentiles};

pub const OPEN_RATES: [u64; 3] = [200, 1_000, 2_000];
pub const CLOSED_CONNS: usize = 64;
const OPEN_MAX_CONNS: usize = 1_000;
const GRACE: Duration = Duration::from_secs(5);
/// Between runs, the machine is watched this long for other processes' CPU use.
const QUIET_SAMPLE: Duration = Duration::from_millis(200);
/// How long the harness's own processes may take to go idle between runs.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);
/// Other processes using this share of the machine (or more) make a run noisy.
pub const NOISY_PERCENT: u64 = 10;
const CHAT_PATH: &str = "/v1/chat/completions";
pub const END_USER_HEADER: &str = "X-Tollgate-End-User";

/// How long and how often.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Timing {
    pub quick: bool,
    pub runs: u32,
    pub warmup_ms: u64,
    pub measure_ms: u64,
    /// Seconds the whole run may spend waiting for other busy processes (compilers, tests) to finish
    /// before starting a measurement.
    pub wait_quiet_s: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Direct,
    Gateway,
    Nginx,
    /// The bare Rust proxy (`bare.rs`).
    Bare,
    /// crabllm (`crabllm.rs`).
    Crabllm,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Gateway => "gateway",
            Kind::Nginx => "nginx",
            Kind::Bare => "bare",
            Kind::Crabllm => "crabllm",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Shape {
    /// Constant arrival rate, requests per second.
    Open { rate: u64 },
    /// This many connections, each sending back to back.
    Closed { conns: usize },
}

/// Which gateway, and how it is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Mode {
    /// The gateway with quotas in memory, plain JSON answers.
    Plain,
    /// `"stream": true` to the plain gateway through `door`; the 0 ms fake sends `chunks`
    /// content events `chunk_delay_ms` apart (the fake's `chunks-N+chunk-delay-Nms` model
    /// string). Every door's upstream call is the same chat stream.
    Stream {
        chunks: u32,
        chunk_delay_ms: u64,
        door: Door,
    },
    /// The second gateway, whose limits, quotas and budgets live in Redis.
    Redis,
    /// A gateway configured like the plain one but with `ledger.fsync = "batch"`: each
    /// attempt's reserve waits for a group fsync before the call is sent.
    Batch,
    /// The plain gateway on a route with the semantic cache on, every question distinct (a
    /// miss): the question's embedding (a call to the fake's 1,536-dimension embeddings) and
    /// the lookup among the tenant's cached answers come before the chat call.
    Semantic,
    /// The Redis-mode gateway again, each request naming one of `users` end users in
    /// `X-Tollgate-End-User` (the next one each request), so the tier's end-user template is
    /// decided beside the tenant's on every call.
    EndUsers { users: u64 },
    /// A gateway whose limits, quotas and budgets live on a six-node Redis Cluster
    /// (`redis+cluster://`): each decision goes to the primary of the tenant's slot.
    Cluster,
    /// A gateway configured like the plain one with its ledger on a PostgreSQL the harness
    /// started (`postgres.rs`), as production runs it.
    Postgres,
}

/// The API a streaming cell calls: the translation a door adds is in its figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Door {
    /// `POST /v1/chat/completions`, relayed as the upstream sends it.
    Chat,
    /// `POST /v1/responses`: chat chunks mapped to Responses events.
    Responses,
    /// `POST /v1/messages`: chat chunks mapped to Anthropic's events.
    Messages,
    /// Chat again, on a route whose model hides no output: the hold is one
    /// step at admission and grows as the relay passes output on.
    Grows,
}

impl Door {
    pub fn path(self) -> &'static str {
        match self {
            Door::Chat | Door::Grows => CHAT_PATH,
            Door::Responses => "/v1/responses",
            Door::Messages => "/v1/messages",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Door::Chat => "chat",
            Door::Responses => "responses",
            Door::Messages => "messages",
            Door::Grows => "chat, growing hold",
        }
    }
}

/// The streaming shapes measured (each shape gets a route in every gateway's configuration).
pub const STREAM_MODES: [Mode; 4] = [
    Mode::Stream {
        chunks: 20,
        chunk_delay_ms: 2,
        door: Door::Chat,
    },
    Mode::Stream {
        chunks: 20,
        chunk_delay_ms: 2,
        door: Door::Responses,
    },
    Mode::Stream {
        chunks: 20,
        chunk_delay_ms: 2,
        door: Door::Messages,
    },
    Mode::Stream {
        chunks: 20,
        chunk_delay_ms: 2,
        door: Door::Grows,
    },
];
/// The route of the semantic cells: the 0 ms fake's model behind a semantic cache.
pub const SEMANTIC_ROUTE: &str = "semantic";

/// The open-loop rates of the streaming cells, and of the fsync-batch, Redis and end-user
/// cells in a full run (a smoke run keeps 1,000 for those).
pub const MODE_RATES: [u64; 2] = [200, 1_000];

#[derive(Debug, Clone)]
pub struct CellPlan {
    pub mode: Mode,
    pub shape: Shape,
    pub scenario: &'static str,
    pub delay_ms: u64,
    pub kinds: Vec<Kind>,
}

/// The cells of a run. `--quick` keeps one of each kind of cell, so every path is exercised.
/// `redis`: the Redis mode is running; `end_users`: how many end users its end-user cells name.
/// `postgres`: the PostgreSQL cells' server and gateway are running.
pub fn cells(quick: bool, redis: bool, end_users: u64, postgres: bool) -> Vec<CellPlan> {
    let mut cells = plain_cells(quick);
    let both = [Kind::Direct, Kind::Gateway];
    let rates: &[u64] = if quick { &[1_000] } else { &MODE_RATES };
    // Both rates even in a smoke run: whether the first event waits on load shows only beside
    // the lower one.
    for mode in STREAM_MODES {
        for rate in MODE_RATES {
            cells.push(CellPlan {
                mode,
                shape: Shape::Open { rate },
                scenario: "short",
                delay_ms: 0,
                kinds: both.to_vec(),
            });
        }
    }
    for rate in rates {
        cells.push(CellPlan {
            mode: Mode::Semantic,
            shape: Shape::Open { rate: *rate },
            scenario: "short",
            delay_ms: 0,
            kinds: both.to_vec(),
        });
    }
    let mut modes = vec![Mode::Batch];
    if postgres {
        // The short-prompt cells of the default gateway, with the ledger on PostgreSQL.
        modes.push(Mode::Postgres);
    }
    if redis {
        // The end-user cells come right after the tenant-only ones they are compared with.
        modes.push(Mode::Redis);
        modes.push(Mode::EndUsers { users: end_users });
        modes.push(Mode::Cluster);
    }
    for mode in modes {
        // Short prompts, 0 ms upstream: open loop at each rate, then the closed loop.
        let shapes = rates
            .iter()
            .map(|rate| Shape::Open { rate: *rate })
            .chain([Shape::Closed {
                conns: CLOSED_CONNS,
            }]);
        for shape in shapes {
            cells.push(CellPlan {
                mode,
                shape,
                scenario: "short",
                delay_ms: 0,
                kinds: both.to_vec(),
            });
        }
    }
    cells
}

fn plain_cells(quick: bool) -> Vec<CellPlan> {
    let cell = |shape, scenario, delay_ms, kinds: &[Kind]| CellPlan {
        mode: Mode::Plain,
        shape,
        scenario,
        delay_ms,
        kinds: kinds.to_vec(),
    };
    let both = [Kind::Direct, Kind::Gateway];
    let all = [
        Kind::Direct,
        Kind::Gateway,
        Kind::Crabllm,
        Kind::Bare,
        Kind::Nginx,
    ];
    let closed = Shape::Closed {
        conns: CLOSED_CONNS,
    };
    let mut cells = Vec::new();
    if quick {
        for scenario in ["short", "8kb", "system3k"] {
            cells.push(cell(Shape::Open { rate: 1_000 }, scenario, 0, &both));
        }
        cells.push(cell(Shape::Open { rate: 1_000 }, "short", 50, &both));
        cells.push(cell(closed, "short", 0, &all));
        cells.push(cell(closed, "8kb", 0, &all));
        return cells;
    }
    for delay_ms in [0, 50] {
        for scenario in ["short", "8kb", "system3k"] {
            for rate in OPEN_RATES {
                cells.push(cell(Shape::Open { rate }, scenario, delay_ms, &both));
            }
        }
    }
    for scenario in ["short", "8kb", "system3k"] {
        cells.push(cell(closed, scenario, 0, &all));
    }
    cells.push(cell(closed, "short", 50, &both));
    cells
}

/// CPU time per successful request, in microseconds, of each process involved.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Cpu {
    pub generator: Option<u64>,
    pub upstream: Option<u64>,
    pub gateway: Option<u64>,
    pub nginx: Option<u64>,
    pub bare: Option<u64>,
    pub crabllm: Option<u64>,
    /// Redis-mode gateway runs: the Redis server.
    pub redis: Option<u64>,
    /// PostgreSQL gateway runs: the PostgreSQL server (its postmaster and backends).
    pub postgres: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct Run {
    pub target: Kind,
    /// 1-based.
    pub number: u32,
    pub ok: u64,
    pub errors: u64,
    pub unfinished: u64,
    pub statuses: BTreeMap<u16, u64>,
    pub first_error: Option<String>,
    /// Open-loop: from each request's intended start; closed-loop: from its send.
    pub latency_us: Option<Percentiles>,
    /// Streaming cells: time to the first SSE event, counted like `latency_us`.
    pub first_event_us: Option<Percentiles>,
    /// Open-loop: how late the generator started requests (its own scheduling error).
    pub lag_us: Option<Percentiles>,
    pub rps: u64,
    pub cpu_us_per_request: Cpu,
    /// Compilers seen running before or after the run (noise from outside the harness).
    pub neighbours: Vec<String>,
    /// Share of the machine's CPU capacity other processes used during the run.
    pub foreign_cpu_percent: Option<u64>,
}

impl Run {
    pub fn noisy(&self) -> bool {
        !self.neighbours.is_empty()
            || self
                .foreign_cpu_percent
                .is_some_and(|percent| percent >= NOISY_PERCENT)
    }
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub target: Kind,
    pub runs: usize,
    /// Per-percentile medians over the runs.
    pub latency_us: Option<Percentiles>,
    /// Streaming cells: per-percentile medians of the time to the first SSE event.
    pub first_event_us: Option<Percentiles>,
    pub rps: Option<u64>,
    pub errors: u64,
    pub unfinished: u64,
    pub cpu_us_per_request: Cpu,
}

#[derive(Debug, Serialize)]
pub struct Cell {
    pub mode: Mode,
    pub shape: Shape,
    pub scenario: &'static str,
    pub delay_ms: u64,
    pub summary: Vec<Summary>,
    pub runs: Vec<Run>,
}

impl Cell {
    pub fn summary(&self, kind: Kind) -> Option<&Summary> {
        self.summary.iter().find(|summary| summary.target == kind)
    }
}

pub struct Runner<'a> {
    pub stack: &'a mut Stack,
    pub scenarios: &'a [Scenario],
    pub timing: Timing,
    ticks_per_second: u64,
    quiet_left: Duration,
    /// Time spent waiting for other busy processes to finish.
    pub waited: Duration,
}

impl<'a> Runner<'a> {
    pub fn new(stack: &'a mut Stack, scenarios: &'a [Scenario], timing: Timing) -> Self {
        Self {
            stack,
            scenarios,
            timing,
            ticks_per_second: clock_ticks_per_second(),
            quiet_left: Duration::from_secs(timing.wait_quiet_s),
            waited: Duration::ZERO,
        }
    }

    /// One request through the gateway, checked for the governance headers.
    pub async fn sanity_check(&self) -> Result<String> {
        let scenario = self.scenarios.first().context("no scenarios")?;
        let target = self.target(scenario, Mode::Plain, 0, Kind::Gateway)?;
        let mut conn = Conn::new(target.addr, &target.template);
        let response = conn
            .exchange(0)
            .await
            .context("the first gateway request")?;
        let head = conn.head(&response);
        if response.status != 200 {
            bail!(
                "the gateway answered the first request with HTTP {}: {}",
                response.status,
                String::from_utf8_lossy(&conn.body(&response))
            );
        }
        let wanted = [
            "x-tollgate-cost",
            "x-tollgate-budget-remaining",
            "x-ratelimit-remaining-requests",
        ];
        let found: Vec<&str> = head
            .lines()
            .filter(|line| {
                let lower = line.to_ascii_lowercase();
                wanted.iter().any(|name| lower.starts_with(name))
            })
            .collect();
        if found.len() < wanted.len() {
            bail!("the gateway's answer lacks governance headers ({wanted:?}):\n{head}");
        }
        Ok(found.join("; "))
    }

    pub async fn run_cell(&mut self, plan: &CellPlan) -> Result<Cell> {
        let scenario = self
            .scenarios
            .iter()
            .find(|scenario| scenario.name == plan.scenario)
            .with_context(|| format!("no scenario {}", plan.scenario))?
            .clone();
        let mut runs = Vec::new();
        for run in 1..=self.timing.runs {
            // Alternate which side goes first.
            let mut kinds = plan.kinds.clone();
            if run % 2 == 0 {
                kinds.reverse();
            }
            for kind in kinds {
                if self.reference_skipped(kind) {
                    continue;
                }
                let target = self.target(&scenario, plan.mode, plan.delay_ms, kind)?;
                let record = self.run_one(plan, kind, run, &target).await?;
                crate::report::progress(plan, &record);
                runs.push(record);
            }
        }
        let summary = plan
            .kinds
            .iter()
            .filter_map(|kind| summarize(*kind, &runs))
            .collect();
        Ok(Cell {
            mode: plan.mode,
            shape: plan.shape,
            scenario: plan.scenario,
            delay_ms: plan.delay_ms,
            summary,
            runs,
        })
    }

    /// The gateway with the named scenario on the 0 ms upstream.
    pub fn gateway_target(&self, scenario: &str) -> Result<Target> {
        self.mode_target(scenario, Mode::Plain)
    }

    /// The gateway of `mode` with the named scenario on the 0 ms upstream.
    pub fn mode_target(&self, scenario: &str, mode: Mode) -> Result<Target> {
        let scenario = self
            .scenarios
            .iter()
            .find(|s| s.name == scenario)
            .with_context(|| format!("no scenario {scenario}"))?;
        self.target(scenario, mode, 0, Kind::Gateway)
    }

    /// A gateway request on `route` (the in-flight scenario's slow route, say).
    pub fn route_target(&self, addr: SocketAddr, key: &str, route: &str) -> Result<Target> {
        let scenario = self.scenarios.first().context("no scenarios")?;
        Ok(gateway_target(
            addr,
            key,
            Door::Chat,
            &scenario.gateway_body(route)?,
            None,
        ))
    }

    fn target(&self, scenario: &Scenario, mode: Mode, delay_ms: u64, kind: Kind) -> Result<Target> {
        let fake = self.stack.fake(delay_ms)?;
        let (route, model) = match mode {
            Mode::Stream {
                chunks,
                chunk_delay_ms,
                door,
            } => {
                if delay_ms != 0 {
                    bail!("streaming cells use the 0 ms fake upstream");
                }
                let (route, model) = stream_route(chunks, chunk_delay_ms);
                if door == Door::Grows {
                    // The same stream, from a model whose price says it hides nothing.
                    (format!("{route}-grows"), model)
                } else {
                    (route, model)
                }
            }
            Mode::Semantic => (SEMANTIC_ROUTE.to_owned(), UPSTREAM_MODEL.to_owned()),
            Mode::Plain
            | Mode::Redis
            | Mode::Batch
            | Mode::EndUsers { .. }
            | Mode::Cluster
            | Mode::Postgres => (fake.route.clone(), UPSTREAM_MODEL.to_owned()),
        };
        let streaming = matches!(mode, Mode::Stream { .. });
        let door = match mode {
            Mode::Stream { door, .. } => door,
            Mode::Plain
            | Mode::Redis
            | Mode::Batch
            | Mode::EndUsers { .. }
            | Mode::Semantic
            | Mode::Cluster
            | Mode::Postgres => Door::Chat,
        };
        // The semantic cache looks up greedy answers only.
        let greedy = mode == Mode::Semantic;
        let target = match kind {
            Kind::Direct => Target {
                addr: fake.addr,
                template: Template::post(
                    fake.addr,
                    CHAT_PATH,
                    &[],
                    &scenario.upstream_body_with(&model, streaming, greedy)?,
                ),
            },
            Kind::Gateway => {
                let (addr, key, _) = self.stack.gateway_for(mode)?;
                let body = scenario.gateway_body_with(&route, streaming, door, greedy)?;
                match mode {
                    Mode::EndUsers { users } => end_user_target(addr, key, &body, users)?,
                    _ => gateway_target(addr, key, door, &body, None),
                }
            }
            Kind::Nginx | Kind::Bare | Kind::Crabllm => {
                let addr = self.reference_addr(kind)?;
                if delay_ms != 0 {
                    bail!("{} proxies the 0 ms fake upstream only", kind.name());
                }
                if mode != Mode::Plain {
                    bail!("{} proxies plain requests only", kind.name());
                }
                let auth = format!("Bearer {}", crate::crabllm::KEY);
                let headers: &[(&str, &str)] = if kind == Kind::Crabllm {
                    &[("Authorization", &auth)]
                } else {
                    &[]
                };
                Target {
                    addr,
                    template: Template::post(
                        addr,
                        CHAT_PATH,
                        headers,
                        &scenario.upstream_body(UPSTREAM_MODEL)?,
                    ),
                }
            }
        };
        Ok(if streaming {
            Target {
                template: target.template.streaming(),
                ..target
            }
        } else {
            target
        })
    }

    /// A reference proxy that is not running: its runs are left out.
    fn reference_skipped(&self, kind: Kind) -> bool {
        match kind {
            Kind::Nginx => matches!(self.stack.nginx, Nginx::Skipped(_)),
            Kind::Bare => matches!(self.stack.bare, Bare::Skipped(_)),
            Kind::Crabllm => matches!(self.stack.crabllm, Crabllm::Skipped(_)),
            Kind::Direct | Kind::Gateway => false,
        }
    }

    fn reference_addr(&self, kind: Kind) -> Result<SocketAddr> {
        match (
            kind,
            &self.stack.nginx,
            &self.stack.bare,
            &self.stack.crabllm,
        ) {
            (Kind::Nginx, Nginx::Running { addr, .. }, _, _)
            | (Kind::Bare, _, Bare::Running { addr, .. }, _)
            | (Kind::Crabllm, _, _, Crabllm::Running { addr, .. }) => Ok(*addr),
            _ => bail!("{} is not running", kind.name()),
        }
    }

    async fn run_one(
        &mut self,
        plan: &CellPlan,
        kind: Kind,
        run: u32,
        target: &Target,
    ) -> Result<Run> {
        self.stack.check_running()?;
        self.wait_for_quiet().await;
        let mut neighbours = busy_neighbours();
        let pids = self.stack.pids();
        let machine_before = CpuSample::take(&pids);
        let before = self.cpu_snapshot(plan, kind)?;
        let warmup = Duration::from_millis(self.timing.warmup_ms);
        let measure = Duration::from_millis(self.timing.measure_ms);
        let mut outcome = match plan.shape {
            Shape::Open { rate } => {
                let open = OpenLoop {
                    rate,
                    warmup,
                    measure,
                    max_conns: OPEN_MAX_CONNS,
                    grace: GRACE,
                };
                generator::open_loop(target, open)
                    .await
                    .context("running the open-loop generator")?
            }
            Shape::Closed { conns } => {
                let closed = ClosedLoop {
                    conns,
                    warmup,
                    measure,
                    grace: GRACE,
                };
                generator::closed_loop(target, closed).await
            }
        };
        let after = self.cpu_snapshot(plan, kind)?;
        let foreign = machine_before
            .zip(CpuSample::take(&pids))
            .and_then(|(before, after)| after.foreign_percent_since(&before));
        for name in busy_neighbours() {
            if !neighbours.contains(&name) {
                neighbours.push(name);
            }
        }
        let cpu = self.per_request(&before, &after, outcome.ok_total);
        let mut record = record(kind, run, &mut outcome, cpu, neighbours);
        record.foreign_cpu_percent = foreign;
        Ok(record)
    }

    /// Watches the machine for a moment between runs and, while other processes (a compiler,
    /// a test run) take CPU, waits within the run's budget for them to finish.
    /// The gateway may still be working off a backlog left by an overloaded run: that settles
    /// first (within `SETTLE_LIMIT`, not counted against the budget).
    async fn wait_for_quiet(&mut self) {
        let mut announced = false;
        let settle_until = crate::clock::now() + SETTLE_LIMIT;
        loop {
            let pids = self.stack.pids();
            let before = CpuSample::take(&pids);
            tokio::time::sleep(QUIET_SAMPLE).await;
            let after = CpuSample::take(&pids);
            let (foreign, ours) = before
                .zip(after)
                .map(|(before, after)| {
                    (
                        after.foreign_percent_since(&before).unwrap_or(0),
                        after.our_percent_since(&before).unwrap_or(0),
                    )
                })
                .unwrap_or_default();
            if ours >= NOISY_PERCENT && crate::clock::now() < settle_until {
                continue;
            }
            let compilers = busy_neighbours();
            if (foreign < NOISY_PERCENT && compilers.is_empty()) || self.quiet_left.is_zero() {
                return;
            }
            if !announced {
                println!(
                    "waiting: other processes use {foreign}% of the CPUs{} ({} s of waiting left)",
                    if compilers.is_empty() {
                        String::new()
                    } else {
                        format!(", {}", compilers.join(", "))
                    },
                    self.quiet_left.as_secs()
                );
                announced = true;
            }
            let step = Duration::from_secs(1).min(self.quiet_left);
            tokio::time::sleep(step).await;
            self.quiet_left -= step;
            self.waited += step;
        }
    }

    fn cpu_snapshot(&self, plan: &CellPlan, kind: Kind) -> Result<[Option<u64>; 8]> {
        let upstream = self.stack.fake(plan.delay_ms)?.process.pid();
        let nginx = match (&self.stack.nginx, kind) {
            (Nginx::Running { process, .. }, Kind::Nginx) => cpu_ticks_with_children(process.pid()),
            _ => None,
        };
        let bare = match (&self.stack.bare, kind) {
            (Bare::Running { process, .. }, Kind::Bare) => cpu_ticks(process.pid()),
            _ => None,
        };
        let crabllm = match (&self.stack.crabllm, kind) {
            (Crabllm::Running { process, .. }, Kind::Crabllm) => cpu_ticks(process.pid()),
            _ => None,
        };
        let gateway = if kind == Kind::Gateway {
            cpu_ticks(self.stack.gateway_for(plan.mode)?.2)
        } else {
            None
        };
        let redis = match (&self.stack.redis, plan.mode, kind) {
            (Redis::Running { server, .. }, Mode::Redis | Mode::EndUsers { .. }, Kind::Gateway) => {
                cpu_ticks(server.pid())
            }
            // The six nodes together: what the cluster spent on the cell.
            (_, Mode::Cluster, Kind::Gateway) => match &self.stack.cluster {
                Cluster::Running { nodes, .. } => nodes
                    .iter()
                    .map(|n| cpu_ticks(n.pid()))
                    .sum::<Option<u64>>(),
                Cluster::Skipped(_) => None,
            },
            _ => None,
        };
        let postgres = match (&self.stack.postgres, plan.mode, kind) {
            (Postgres::Running { server, .. }, Mode::Postgres, Kind::Gateway) => {
                cpu_ticks_with_children(server.pid())
            }
            _ => None,
        };
        Ok([
            cpu_ticks(std::process::id()),
            cpu_ticks(upstream),
            gateway,
            nginx,
            redis,
            bare,
            crabllm,
            postgres,
        ])
    }

    fn per_request(
        &self,
        before: &[Option<u64>; 8],
        after: &[Option<u64>; 8],
        requests: u64,
    ) -> Cpu {
        let each = |i: usize| -> Option<u64> {
            let ticks = after
                .get(i)
                .copied()??
                .checked_sub(before.get(i).copied()??)?;
            (ticks * 1_000_000 / self.ticks_per_second).checked_div(requests)
        };
        Cpu {
            generator: each(0),
            upstream: each(1),
            gateway: each(2),
            nginx: each(3),
            redis: each(4),
            bare: each(5),
            crabllm: each(6),
            postgres: each(7),
        }
    }
}

fn record(kind: Kind, run: u32, outcome: &mut Outcome, cpu: Cpu, neighbours: Vec<String>) -> Run {
    Run {
        target: kind,
        number: run,
        ok: outcome.ok,
        errors: outcome.errors,
        unfinished: outcome.unfinished,
        statuses: std::mem::take(&mut outcome.statuses),
        first_error: outcome.first_error.take(),
        latency_us: stats::percentiles(&mut outcome.latencies_us),
        first_event_us: stats::percentiles(&mut outcome.first_data_us),
        lag_us: stats::percentiles(&mut outcome.lags_us),
        rps: outcome.rps(),
        cpu_us_per_request: cpu,
        neighbours,
        foreign_cpu_percent: None,
    }
}

fn summarize(kind: Kind, runs: &[Run]) -> Option<Summary> {
    let mine: Vec<&Run> = runs.iter().filter(|run| run.target == kind).collect();
    if mine.is_empty() {
        return None;
    }
    let latencies: Vec<Percentiles> = mine.iter().filter_map(|run| run.latency_us).collect();
    let first_events: Vec<Percentiles> = mine.iter().filter_map(|run| run.first_event_us).collect();
    let rps: Vec<u64> = mine
        .iter()
        .filter(|run| run.ok > 0)
        .map(|run| run.rps)
        .collect();
    let cpu = |field: fn(&Cpu) -> Option<u64>| {
        stats::median(
            &mine
                .iter()
                .filter_map(|run| field(&run.cpu_us_per_request))
                .collect::<Vec<_>>(),
        )
    };
    Some(Summary {
        target: kind,
        runs: mine.len(),
        latency_us: stats::median_percentiles(&latencies),
        first_event_us: stats::median_percentiles(&first_events),
        rps: stats::median(&rps),
        errors: mine.iter().map(|run| run.errors).sum(),
        unfinished: mine.iter().map(|run| run.unfinished).sum(),
        cpu_us_per_request: Cpu {
            generator: cpu(|c| c.generator),
            upstream: cpu(|c| c.upstream),
            gateway: cpu(|c| c.gateway),
            nginx: cpu(|c| c.nginx),
            bare: cpu(|c| c.bare),
            crabllm: cpu(|c| c.crabllm),
            redis: cpu(|c| c.redis),
            postgres: cpu(|c| c.postgres),
        },
    })
}

/// `end_user`: the value of `X-Tollgate-End-User`, if the request names one.
pub fn gateway_target(
    addr: SocketAddr,
    key: &str,
    door: Door,
    body: &[u8],
    end_user: Option<&str>,
) -> Target {
    let auth = format!("Bearer {key}");
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("X-Tollgate-Feature", "load"),
    ];
    if door == Door::Messages {
        headers.push(("anthropic-version", "2023-06-01"));
    }
    if let Some(end_user) = end_user {
        headers.push((END_USER_HEADER, end_user));
    }
    Target {
        addr,
        template: Template::post(addr, door.path(), &headers, body),
    }
}

/// A chat request naming one of `users` end users, the next one each request (by request
/// number, so any `users` consecutive requests name every one of them once).
fn end_user_target(addr: SocketAddr, key: &str, body: &[u8], users: u64) -> Result<Target> {
    let target = gateway_target(addr, key, Door::Chat, body, Some(SLOT_MARK));
    let template = target
        .template
        .cycling(users)
        .with_context(|| format!("{users} end users do not fit the template's slot"))?;
    Ok(Target { template, ..target })
}
