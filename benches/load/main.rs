//! The load harness of issue 8: `cargo bench --bench load` (add `-- --quick` for a smoke run).
//!
//! It starts the fake upstreams, the gateway (this build's release binary, every governance
//! feature on), a reference nginx, a bare Rust proxy (this binary again, `bare.rs`), crabllm
//! (`crabllm.rs`) and a `redis-server` with a second gateway as child processes on loopback,
//! measures a direct-to-upstream baseline and the gateways under open-loop and closed-loop load
//! (plain, streaming, Redis mode, and Redis mode with every request naming one of many end
//! users, Redis's and the gateway's memory read around those cells), holds 1,000 requests open
//! in a fresh gateway to read its memory and file descriptors, prints the tables, writes
//! `target/load/results.json` and regenerates `BENCHMARKS.md`. Every child is stopped by PID
//! when the harness ends, fails or panics. Under `cargo test` (no `--bench` flag) only
//! self-checks run.
#![expect(clippy::print_stdout, reason = "a benchmark harness reports on stdout")]
#![expect(
    clippy::too_many_lines,
    reason = "the harness's option parser, plan and report writers are long tables; the 80-line bound is the product's"
)]

mod agents;
mod bare;
mod capacity;
mod clock;
mod config;
mod crabllm;
mod end_users;
mod faults;
mod generator;
mod http;
mod inflight;
mod isolation;
mod machine;
mod plan;
mod postgres;
mod priority;
mod procs;
mod profile;
mod report;
mod resp;
mod scale;
mod scenarios;
mod selfcheck;
mod shape;
mod shape_report;
mod stack;
mod stats;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};

use crate::crabllm::Crabllm;
use crate::end_users::EndUserRun;
use crate::http::{Conn, Template};
use crate::machine::Machine;
use crate::plan::{Cell, Mode, Runner, Timing};
use crate::procs::rss_kib;
use crate::report::{GatewayAfter, RedisCommands, Results, ScenarioInfo};
use crate::shape::{ShapeOptions, ShapeResults};
use crate::stack::{Bare, Cluster, Nginx, Postgres, Redis, Stack, Systems};

/// The bare proxy runs in this binary: with the gateway's allocator, the gap between them is
/// governance, not malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage: cargo bench --bench load [-- [--quick] [--runs N] [--seconds S] \
                     [--wait-quiet S] [--soak-seconds N] [--end-users N] [--nginx-workers N] \
                     [--skip-nginx] [--skip-bare] [--skip-crabllm] [--skip-redis] [--no-renice] [--no-profile] \
                     [--in-flight-only] [--shape-only] [--skip-shape] [--skip-postgres] [--skip-scale] [--scale-only] \
                     [--agent-seconds S] [--scale-calls N] [--scale-seconds S] [--write-capacity RESULTS.json]]";
const DEFAULT_NGINX_WORKERS: u32 = 2;
/// The soak of a full run; the 10-minute soak of the target is `--soak-seconds 600`.
const DEFAULT_SOAK_S: u64 = 60;
const MAX_SOAK_S: u64 = 3_600;
/// The end-user slot of a request has six digits.
const MAX_END_USERS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent switches of the command line"
)]
struct Options {
    timing: Timing,
    systems: Systems,
    renice: bool,
    profile: bool,
    soak_seconds: u64,
    /// How long the 1,000 requests are held for the peak reading.
    hold_seconds: u64,
    /// End users the end-user cells name.
    end_users: u64,
    /// Only the 1,000-in-flight scenario and its soak: no cells, no profile, no BENCHMARKS.md.
    in_flight_only: bool,
    /// Only the cells in production's shape (the PostgreSQL cells among them): no other
    /// cells, no profile, no in-flight scenario, no BENCHMARKS.md.
    shape_only: bool,
    /// The agent, isolation, fault and scale cells; `None`: skipped.
    shape: Option<ShapeOptions>,
}

fn parse_options(args: &[String]) -> Result<Options> {
    let mut quick = false;
    let mut runs = None;
    let mut seconds = None;
    let mut nginx = Some(DEFAULT_NGINX_WORKERS);
    let mut bare = true;
    let mut crabllm = true;
    let mut wait_quiet = None;
    let mut renice = true;
    let mut profile = true;
    let mut redis = true;
    let mut soak = None;
    let mut end_users = None;
    let mut in_flight_only = false;
    let mut shape = ShapeFlags::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // cargo adds `--bench`; libtest-style filters are not used here.
            "--bench" => {}
            "--quick" => quick = true,
            "--skip-nginx" => nginx = None,
            "--skip-bare" => bare = false,
            "--skip-crabllm" => crabllm = false,
            "--no-renice" => renice = false,
            "--no-profile" => profile = false,
            "--skip-redis" => redis = false,
            "--in-flight-only" => in_flight_only = true,
            "--shape-only" => shape.only = true,
            "--skip-shape" => shape.skip = true,
            "--skip-scale" => shape.skip_scale = true,
            "--scale-only" => shape.scale_only = true,
            "--skip-postgres" => shape.skip_postgres = true,
            "--agent-seconds" | "--scale-calls" | "--scale-seconds" => {
                let value: u64 = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|v| (1..=MAX_SHAPE_VALUE).contains(v))
                    .with_context(|| format!("{arg} needs 1 to {MAX_SHAPE_VALUE}\n{USAGE}"))?;
                match arg.as_str() {
                    "--agent-seconds" => shape.agent_seconds = Some(value),
                    "--scale-calls" => shape.scale_calls = Some(usize::try_from(value)?),
                    _ => shape.scale_seconds = Some(value),
                }
            }
            "--soak-seconds" => {
                soak = Some(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .filter(|v| *v <= MAX_SOAK_S)
                        .with_context(|| {
                            format!("--soak-seconds needs 0 to {MAX_SOAK_S}\n{USAGE}")
                        })?,
                );
            }
            "--end-users" => {
                end_users = Some(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .filter(|v| (1..=MAX_END_USERS).contains(v))
                        .with_context(|| {
                            format!("--end-users needs 1 to {MAX_END_USERS}\n{USAGE}")
                        })?,
                );
            }
            "--nginx-workers" => {
                nginx = Some(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .filter(|v| (1..=64).contains(v))
                        .with_context(|| format!("--nginx-workers needs 1 to 64\n{USAGE}"))?,
                );
            }
            "--runs" | "--seconds" | "--wait-quiet" => {
                let value: u64 = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|v| (0..=600).contains(v))
                    .with_context(|| {
                        format!("{arg} needs a whole number from 0 to 600\n{USAGE}")
                    })?;
                match arg.as_str() {
                    "--runs" => runs = Some(u32::try_from(value.max(1))?),
                    "--seconds" => seconds = Some(value.max(1)),
                    _ => wait_quiet = Some(value),
                }
            }
            "--help" | "-h" => bail!("{USAGE}"),
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let timing = timing(quick, runs, seconds, wait_quiet);
    Ok(Options {
        timing,
        systems: Systems {
            nginx,
            bare,
            crabllm,
            redis,
            postgres: !shape.skip_postgres && !shape.scale_only,
        },
        renice,
        profile,
        // --quick skips the soak unless one is asked for.
        soak_seconds: soak.unwrap_or(if quick { 0 } else { DEFAULT_SOAK_S }),
        hold_seconds: if quick { 4 } else { 8 },
        end_users: end_users.unwrap_or(if quick {
            end_users::QUICK_END_USERS
        } else {
            end_users::END_USERS
        }),
        in_flight_only,
        // Only the scale cell is only a part of the shape run.
        shape_only: shape.only || shape.scale_only,
        shape: shape.options(timing),
    })
}

/// The largest value `--agent-seconds`, `--scale-calls` and `--scale-seconds` take.
const MAX_SHAPE_VALUE: u64 = 100_000;

/// The shape cells' flags as given.
#[derive(Debug, Default)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent switches of the command line"
)]
struct ShapeFlags {
    only: bool,
    skip: bool,
    skip_scale: bool,
    skip_postgres: bool,
    /// Only the scale cell: the other shape cells and the PostgreSQL ones are skipped.
    scale_only: bool,
    agent_seconds: Option<u64>,
    scale_calls: Option<usize>,
    scale_seconds: Option<u64>,
}

impl ShapeFlags {
    fn options(&self, timing: Timing) -> Option<ShapeOptions> {
        if self.skip {
            return None;
        }
        let quick = timing.quick;
        Some(ShapeOptions {
            quick,
            agent_seconds: self.agent_seconds.unwrap_or(if quick { 10 } else { 60 }),
            isolation_runs: if quick { 2 } else { timing.runs.max(3) },
            scale: !self.skip_scale,
            scale_only: self.scale_only,
            scale_calls: self.scale_calls.unwrap_or(scale::CALLS),
            scale_seconds: self.scale_seconds.unwrap_or(if quick {
                scale::QUICK_SECONDS
            } else {
                scale::FULL_SECONDS
            }),
        })
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The harness starting itself as the bare proxy: none of the harness's setup applies.
    if let Some(code) = bare::serve_if_asked(&args) {
        return code;
    }
    if let Some(code) = write_capacity(&args) {
        return code;
    }
    if !args.iter().any(|arg| arg == "--bench") {
        // `cargo test --all-targets` runs bench binaries without `--bench`.
        return match selfcheck::run() {
            Ok(()) => {
                println!(
                    "load harness self-checks passed (run it with `{}`)",
                    report::COMMAND
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("load harness self-check failed: {error:#}");
                ExitCode::FAILURE
            }
        };
    }
    let options = match parse_options(&args) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("{error:#}");
            return ExitCode::FAILURE;
        }
    };
    // Before any thread or child exists: they all inherit it.
    let priority = if options.renice {
        priority::Priority::raise()
    } else {
        priority::Priority::unchanged()
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(options, priority.description.clone())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("load harness failed: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--write-capacity RESULTS.json`: only deploy/README's capacity figures, from that file.
fn write_capacity(args: &[String]) -> Option<ExitCode> {
    let at = args.iter().position(|arg| arg == "--write-capacity")?;
    Some(
        match args.get(at + 1).map(Path::new).map(capacity::write_from) {
            Some(Ok(path)) => {
                println!("wrote the capacity figures into {}", path.display());
                ExitCode::SUCCESS
            }
            Some(Err(error)) => {
                eprintln!("{error:#}");
                ExitCode::FAILURE
            }
            None => {
                eprintln!("--write-capacity needs the path of a results file\n{USAGE}");
                ExitCode::FAILURE
            }
        },
    )
}

/// `target/` of this build: the gateway binary lives in `target/release/`.
fn target_dir() -> PathBuf {
    Path::new(stack::TOLLGATE)
        .parent()
        .and_then(Path::parent)
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
            Path::to_owned,
        )
}

async fn run(options: Options, priority: String) -> Result<()> {
    let started = clock::now();
    let machine = Machine::probe();
    println!(
        "Tollgate load harness: {} CPUs ({}), load average {}; gateway {}",
        machine.cpus,
        machine.cpu_model,
        machine.load_at_start,
        stack::TOLLGATE
    );
    let neighbours = procs::busy_neighbours();
    if !neighbours.is_empty() {
        println!(
            "warning: compilers are running ({}); the numbers will be noisy",
            neighbours.join(", ")
        );
    }
    // Before any child starts: they inherit it.
    let open_files = scale::raise_open_files(
        options
            .shape
            .filter(|shape| shape.scale)
            .map_or(inflight::IN_FLIGHT, |shape| shape.scale_calls),
    );
    let scenarios = scenarios::all()?;
    let mut stack = Stack::start(options.systems).await?;
    let outcome = measure(
        &mut stack,
        &scenarios,
        options,
        (machine, started, priority),
        open_files,
    )
    .await;
    if outcome.is_err() {
        eprintln!("logs of the children:\n{}", stack.log_tails());
    }
    let results = outcome?;
    drop(stack);

    let name = if options.in_flight_only {
        "results-in-flight.json"
    } else if options.shape_only {
        "results-shape.json"
    } else if options.timing.quick {
        "results-quick.json"
    } else {
        "results.json"
    };
    let json_path = target_dir().join("load").join(name);
    report::write_json(&json_path, &results)?;
    println!("\nwrote {}", json_path.display());
    if options.in_flight_only {
        println!("(--in-flight-only: BENCHMARKS.md left as it is)");
    } else if options.shape_only {
        let preview = target_dir().join("load").join("BENCHMARKS-shape.md");
        std::fs::write(&preview, shape_report::section(&results))
            .with_context(|| format!("writing {}", preview.display()))?;
        println!(
            "(--shape-only: BENCHMARKS.md left as it is; its sections in {})",
            preview.display()
        );
    } else if options.timing.quick {
        // A smoke run's figures are too thin to publish; its document is only a preview.
        let preview = target_dir().join("load").join("BENCHMARKS-quick.md");
        std::fs::write(&preview, report::markdown(&results))
            .with_context(|| format!("writing {}", preview.display()))?;
        println!(
            "(--quick: BENCHMARKS.md left as it is; preview in {})",
            preview.display()
        );
    } else {
        let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md");
        // The micro-benchmarks' section is measured by another bench: carried over as it is.
        let kept = std::fs::read_to_string(&doc_path)
            .ok()
            .and_then(|text| {
                let start = text.find(report::MICRO_HEADING)?;
                Some(text[start..].to_owned())
            })
            .unwrap_or_default();
        let text = format!(
            "{}{}{kept}",
            report::markdown(&results),
            if kept.is_empty() { "" } else { "\n" }
        );
        std::fs::write(&doc_path, text)
            .with_context(|| format!("writing {}", doc_path.display()))?;
        println!("wrote {}", doc_path.display());
        // deploy/README's capacity figures come from this run, so they cannot go stale.
        let readme = capacity::write_from(&json_path)?;
        println!("wrote the capacity figures into {}", readme.display());
    }
    println!(
        "done in {} s",
        clock::now().saturating_duration_since(started).as_secs()
    );
    Ok(())
}

/// A smoke run's timing, or a full run's; what was given replaces the default.
fn timing(quick: bool, runs: Option<u32>, seconds: Option<u64>, wait_quiet: Option<u64>) -> Timing {
    if quick {
        Timing {
            quick,
            runs: runs.unwrap_or(1),
            warmup_ms: 250,
            measure_ms: seconds.unwrap_or(1) * 1000,
            wait_quiet_s: wait_quiet.unwrap_or(0),
        }
    } else {
        Timing {
            quick,
            runs: runs.unwrap_or(3),
            warmup_ms: 300,
            measure_ms: seconds.map_or(2_500, |s| s * 1000),
            wait_quiet_s: wait_quiet.unwrap_or(60),
        }
    }
}

async fn measure(
    stack: &mut Stack,
    scenarios: &[scenarios::Scenario],
    options: Options,
    (machine, started, priority): (Machine, std::time::Instant, String),
    open_files: scale::OpenFiles,
) -> Result<Results> {
    let References {
        nginx,
        bare,
        crabllm,
        redis,
        redis_running,
        postgres,
    } = describe(stack, scenarios, &priority);
    let mut runner = Runner::new(stack, scenarios, options.timing);
    let first_gateway_answer = runner.sanity_check().await?;
    println!("gateway answers with {first_gateway_answer}\n");

    let Measured {
        cells,
        redis_commands,
        end_users,
        end_users_failed,
    } = if options.in_flight_only {
        Measured::none()
    } else {
        run_cells(&mut runner, options, redis_running).await?
    };
    let waited_for_quiet_s = runner.waited.as_secs();
    let gateway_after = gateway_after(runner.stack).await;
    let profile = profile_gateway(&mut runner, options).await?;
    let (in_flight, in_flight_failed) = if options.shape_only {
        (None, Some("--shape-only was given".to_owned()))
    } else {
        in_flight(&runner, options).await
    };
    let shape = match options.shape {
        Some(shape) if !options.in_flight_only => shape::run(&runner, shape, open_files).await,
        _ => ShapeResults {
            skipped: Some("--skip-shape or --in-flight-only was given".to_owned()),
            ..ShapeResults::default()
        },
    };
    let targets = report::checks(&cells, &crabllm, &bare, in_flight.as_ref());
    let noisy_runs = cells
        .iter()
        .flat_map(|c| &c.runs)
        .filter(|r| r.noisy())
        .count();

    println!();
    println!("{}", report::open_tables(&cells));
    println!("{}", report::closed_table(&cells));
    println!("{}", report::stream_table(&cells));
    println!("{}", report::batch_table(&cells));
    println!(
        "{}",
        report::redis_table(&cells, &redis, redis_commands.as_ref())
    );
    println!(
        "{}",
        report::end_users_section(&cells, end_users.as_ref(), end_users_failed.as_deref())
    );
    print_in_flight_and_targets(in_flight.as_ref(), in_flight_failed.as_deref(), &targets);
    println!("{}", shape_report::tables(&cells, &shape, &postgres));
    let (profile, profile_skipped) = match profile {
        Ok(profile) => (Some(profile), None),
        Err(reason) => (None, Some(reason)),
    };
    println!(
        "{}",
        report::profile_section(profile.as_ref(), profile_skipped.as_deref(), &cells)
    );
    if noisy_runs > 0 {
        println!("warning: {noisy_runs} runs shared the machine with other busy processes");
    }
    Ok(Results {
        command: report::COMMAND.to_owned(),
        machine,
        timing: options.timing,
        generator: report::GENERATOR,
        scenarios: scenarios
            .iter()
            .map(|s| ScenarioInfo {
                name: s.name,
                description: s.description.clone(),
                body_bytes: s.body_bytes(),
                prompt_tokens: s.prompt_tokens,
            })
            .collect(),
        not_measured: report::not_measured(
            &cells,
            in_flight.as_ref(),
            &redis,
            end_users_failed.as_deref(),
        ),
        nginx,
        bare,
        crabllm,
        redis,
        postgres,
        shape,
        redis_commands,
        end_users,
        end_users_failed,
        first_gateway_answer,
        cells,
        in_flight,
        in_flight_failed,
        targets,
        gateway_after,
        profile,
        profile_skipped,
        noisy_runs,
        waited_for_quiet_s,
        priority,
        elapsed_s: clock::now().saturating_duration_since(started).as_secs(),
    })
}

/// The cells, and what the Redis-backed ones leave besides.
struct Measured {
    cells: Vec<Cell>,
    /// The tenant-only Redis cells' commands (taken before the end-user cells).
    redis_commands: Option<report::RedisCommands>,
    end_users: Option<EndUserRun>,
    /// Why the end-user cells were skipped.
    end_users_failed: Option<String>,
}

impl Measured {
    fn none() -> Self {
        Self {
            cells: Vec::new(),
            redis_commands: None,
            end_users: None,
            end_users_failed: None,
        }
    }
}

/// Where the end-user cells stand.
enum EndUserPhase {
    NotYet,
    Ready(Box<end_users::Ready>),
    Failed(String),
}

/// Runs every cell in order; before the first end-user cell (the tenant-only Redis cells are
/// done by then) it reads Redis and gives every end user its first request. A failure there
/// skips the end-user cells and leaves the rest standing.
async fn run_cells(runner: &mut Runner<'_>, options: Options, redis: bool) -> Result<Measured> {
    let mut cells = Vec::new();
    let mut tenant_commands = None;
    let mut phase = EndUserPhase::NotYet;
    let postgres = matches!(runner.stack.postgres, Postgres::Running { .. });
    for plan in plan::cells(options.timing.quick, redis, options.end_users, postgres) {
        if options.shape_only && plan.mode != Mode::Postgres {
            continue;
        }
        // A cluster that did not start is reported as not measured; the rest stands.
        if plan.mode == Mode::Cluster && !matches!(runner.stack.cluster, Cluster::Running { .. }) {
            continue;
        }
        if let Mode::EndUsers { users } = plan.mode {
            if matches!(phase, EndUserPhase::NotYet) {
                let before = end_users::before(runner.stack).await;
                tenant_commands = Some(before.commands_since(None));
                phase = match end_users::seed(runner, users, before).await {
                    Ok(ready) => EndUserPhase::Ready(Box::new(ready)),
                    Err(error) => {
                        let reason = format!("{error:#}");
                        println!("the end-user cells are skipped: {reason}");
                        EndUserPhase::Failed(reason)
                    }
                };
            }
            if matches!(phase, EndUserPhase::Failed(_)) {
                continue;
            }
        }
        cells.push(runner.run_cell(&plan).await?);
    }
    let redis_commands = match tenant_commands {
        Some(commands) => commands,
        None => redis_commands(runner.stack).await,
    };
    let (end_users, end_users_failed) = match phase {
        EndUserPhase::Ready(ready) => (Some(ready.finish(runner.stack).await), None),
        EndUserPhase::Failed(reason) => (None, Some(reason)),
        EndUserPhase::NotYet => (None, None),
    };
    Ok(Measured {
        cells,
        redis_commands,
        end_users,
        end_users_failed,
    })
}

/// The gateway's CPU profile, or why there is none.
async fn profile_gateway(
    runner: &mut Runner<'_>,
    options: Options,
) -> Result<Result<profile::Profile, String>> {
    if !options.profile {
        return Ok(Err("--no-profile was given".to_owned()));
    }
    if options.in_flight_only || options.shape_only {
        return Ok(Err("--in-flight-only or --shape-only was given".to_owned()));
    }
    let target = runner.gateway_target("short")?;
    println!("profiling the gateway (perf record, closed loop, short prompt)");
    Ok(profile::gateway(runner.stack, &target)
        .await
        .map_err(|error| format!("{error:#}")))
}

fn print_in_flight_and_targets(
    in_flight: Option<&inflight::InFlight>,
    failed: Option<&str>,
    targets: &[report::Check],
) {
    println!("{}", report::in_flight_section(in_flight, failed));
    println!("{}", report::targets_table(targets));
}

/// What each reference and the Redis mode are, or why they were skipped.
struct References {
    nginx: String,
    bare: String,
    crabllm: String,
    redis: String,
    redis_running: bool,
    /// The PostgreSQL cells' server, or why they were skipped.
    postgres: String,
}

/// Prints what is measured: the references, the Redis mode and the scenarios.
fn describe(stack: &Stack, scenarios: &[scenarios::Scenario], priority: &str) -> References {
    let nginx = match &stack.nginx {
        Nginx::Running { version, .. } => version.clone(),
        Nginx::Skipped(reason) => format!("nginx row skipped: {reason}"),
    };
    let bare = match &stack.bare {
        Bare::Running { .. } => stack::BARE_DESCRIPTION.to_owned(),
        Bare::Skipped(reason) => format!("bare proxy row skipped: {reason}"),
    };
    let crabllm = match &stack.crabllm {
        Crabllm::Running { version, .. } => version.clone(),
        Crabllm::Skipped(reason) => format!("crabllm row skipped: {reason}"),
    };
    let (redis, redis_running) = match &stack.redis {
        Redis::Running { version, .. } => (version.clone(), true),
        Redis::Skipped(reason) => (format!("Redis mode skipped: {reason}"), false),
    };
    let postgres = match &stack.postgres {
        Postgres::Running { version, .. } => version.clone(),
        Postgres::Skipped(reason) => format!("PostgreSQL cells skipped: {reason}"),
    };
    println!(
        "references: {nginx}; {bare}; {crabllm}; Redis mode: {redis}; PostgreSQL: {postgres}; the harness runs with {priority}"
    );
    for s in scenarios {
        println!(
            "scenario {:<8} {} ({} body bytes, {} prompt tokens)",
            s.name,
            s.description,
            s.body_bytes(),
            s.prompt_tokens
        );
    }
    References {
        nginx,
        bare,
        crabllm,
        redis,
        redis_running,
        postgres,
    }
}

/// The in-flight scenario, or why it failed: a failure there leaves the other results standing.
async fn in_flight(
    runner: &Runner<'_>,
    options: Options,
) -> (Option<inflight::InFlight>, Option<String>) {
    let hold = std::time::Duration::from_secs(options.hold_seconds);
    match inflight::run(runner, hold, options.soak_seconds).await {
        Ok(measured) => (Some(measured), None),
        Err(error) => {
            let reason = format!("{error:#}");
            println!("the in-flight scenario failed: {reason}");
            (None, Some(reason))
        }
    }
}

/// What the Redis-mode gateway asked of Redis, per request it answered (warm-ups included).
async fn redis_commands(stack: &Stack) -> Option<RedisCommands> {
    let Redis::Running { gateway, addr, .. } = &stack.redis else {
        return None;
    };
    let info = match resp::info(*addr, "commandstats").await {
        Ok(info) => info,
        Err(error) => {
            println!("no Redis command statistics: {error:#}");
            return None;
        }
    };
    let requests = metric_sum(gateway.addr, "tollgate_requests_total").await?;
    Some(RedisCommands::parse(requests, &info))
}

/// The sum of a metric's series on a gateway's `/metrics`: 0 when it has none yet, `None`
/// when `/metrics` did not answer.
async fn metric_sum(addr: std::net::SocketAddr, name: &str) -> Option<u64> {
    let lines = metric_lines(addr, &[name]).await;
    if lines.iter().any(|line| line.starts_with(METRICS_FAILED)) {
        return None;
    }
    Some(
        lines
            .iter()
            // The name itself, not a longer one it begins (`…_total` vs `…_total_bytes`).
            .filter(|line| {
                line.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(['{', ' ']))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum(),
    )
}

const METRICS_FAILED: &str = "# /metrics failed:";

/// The lines of the gateway's `/metrics` that start with one of `names`.
async fn metric_lines(addr: std::net::SocketAddr, names: &[&str]) -> Vec<String> {
    let template = Template::get(addr, "/metrics");
    let mut conn = Conn::new(addr, &template);
    match conn.exchange(0).await {
        Ok(response) => String::from_utf8_lossy(&conn.body(&response))
            .lines()
            .filter(|line| names.iter().any(|name| line.starts_with(name)))
            .map(str::to_owned)
            .collect(),
        Err(error) => vec![format!("{METRICS_FAILED} {error}")],
    }
}

/// Memory, ledger size and the governance counters once the load is over.
async fn gateway_after(stack: &Stack) -> GatewayAfter {
    const WANTED: [&str; 6] = [
        "tollgate_requests_total",
        "tollgate_rejections_total",
        "tollgate_ledger_events_flushed_total",
        "tollgate_ledger_write_errors_total",
        "tollgate_ledger_backlog_events",
        "tollgate_cost_nanos_total",
    ];
    // Let the ledger's last batch land first.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let metrics = metric_lines(stack.gateway_addr, &WANTED).await;
    GatewayAfter {
        rss_kib: rss_kib(stack.gateway.pid()),
        database_bytes: stack.database_bytes(),
        metrics,
    }
}
