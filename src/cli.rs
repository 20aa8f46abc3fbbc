//! The `tollgate` command line: serve, demo, migrate, and the tenant, key and
//! spend operations (run against the database the configuration names; a
//! running gateway picks changes up within `storage.sync_interval_ms`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::{Args, Parser, Subcommand};

use crate::admin::spend::{SpendQuery, SpendReport};
use crate::admin::tenants::{NewTenant, TenantPatch, TenantView};
use crate::admin::{keys, report, spend, tenants};
use crate::app::{Application, BuildOptions};
use crate::clock::{Clock, SystemClock};
use crate::config::{ADMIN_TOKEN_ENV, Config, EnvSource, KEY_PEPPER_ENV, ProcessEnv, Secret};
use crate::period::Date;
use crate::probe;
use crate::state::ConfigSource;
use crate::storage;
use crate::telemetry;
use fakes::{FakeArgs, Mock};

mod bill;
mod closes;
mod costs;
mod fakes;

#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "A multi-tenant LLM gateway with strict budgets"
)]
pub struct Cli {
    /// Configuration file.
    #[arg(long, global = true, env = "TOLLGATE_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway.
    Serve,
    /// Run the gateway with a demo tenant and key; providers without a key are served by the built-in mock upstream.
    Demo {
        /// Overrides `server.listen`.
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Manage tenants.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Manage API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Spend report from the ledger.
    Spend(SpendArgs),
    /// What the ledger's calls would cost under a price table (the configured one by
    /// default); reads the ledger, never rewrites it. A span over a closed month is
    /// refused unless the differences are written as adjustments.
    Reprice {
        /// A TOML file with `[[prices]]` (a configuration file works too).
        #[arg(long)]
        prices: Option<PathBuf>,
        #[command(flatten)]
        range: LedgerRange,
        /// Write each row's difference as an adjustment of an open month's
        /// invoice (once per run: an identical run writes nothing).
        #[arg(long)]
        write_adjustments: bool,
    },
    /// Rows charged their hold without the provider's usage (orphaned, or an
    /// unknown outcome), by provider: what to compare with each provider's bill.
    Reconcile {
        #[command(flatten)]
        range: LedgerRange,
    },
    /// What one call costs: p50/p95/p99 of a call's charge per feature and model.
    SpendDistribution(costs::DistributionArgs),
    /// Each of the last months' spend per tenant or feature, with its change.
    SpendMonthly(costs::MonthlyArgs),
    /// Providers' usage and cost exports, and their drift from the ledger.
    #[command(subcommand)]
    Bill(bill::BillCommand),
    /// The daily report: a day against the day before, top spenders, budget progress.
    Report {
        /// YYYY-MM-DD; yesterday (UTC) by default.
        #[arg(long)]
        date: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// A tenant's invoice for a month of the billing time zone, from the ledger:
    /// lines by model and feature whose total is the ledger's sum.
    Invoice {
        /// The tenant whose invoice to write; with `--check`, only its invoice is checked.
        #[arg(long)]
        tenant: Option<String>,
        /// YYYY-MM.
        #[arg(long)]
        month: String,
        /// `csv` or `json`.
        #[arg(long, default_value = "csv")]
        format: String,
        /// Exit non-zero unless the sources agree: with `--tenant`, the invoice's
        /// total and the ledger's sum; without, every tenant's invoices, the
        /// ledger and the exports of the month, each difference listed.
        #[arg(long)]
        check: bool,
    },
    /// The ledger for a data warehouse.
    Export {
        #[command(subcommand)]
        action: closes::ExportCommand,
    },
    /// Months that close: after a close a month's invoices are final, and
    /// rows stamped in it later are booked in the first open month.
    Period {
        #[command(subcommand)]
        action: closes::PeriodCommand,
    },
    /// Run the OpenAI-compatible fake upstream (tests, demos, load).
    FakeUpstream(FakeArgs),
    /// Exit 0 iff the gateway's `/readyz` answers 200 (for container
    /// HEALTHCHECKs and probes where no curl exists).
    Healthcheck {
        /// Default: `/readyz` on the configuration's `admin_listen`, else `listen`.
        #[arg(long)]
        url: Option<String>,
        /// Not ready if no answer arrives within this many milliseconds.
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
    },
    /// Validate a configuration file (this argument, else `--config`); exit non-zero with the reason.
    CheckConfig { file: Option<PathBuf> },
}

/// Which ledger rows a report reads: one tenant's or all, over whole days.
#[derive(Debug, Args)]
struct LedgerRange {
    #[arg(long)]
    tenant: Option<String>,
    /// First day, YYYY-MM-DD.
    #[arg(long)]
    from: Option<String>,
    /// Last day, YYYY-MM-DD (inclusive).
    #[arg(long)]
    to: Option<String>,
}

#[derive(Debug, Args)]
struct UpdateTenant {
    id: String,
    #[arg(long)]
    tier: Option<String>,
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    rpm: Option<u32>,
    #[arg(long)]
    budget: Option<String>,
    #[arg(long)]
    mode: Option<String>,
    /// A `[[plans]]` name, or `cost`.
    #[arg(long)]
    plan: Option<String>,
    /// `true` or `false`: keep its calls' bodies for audit.
    #[arg(long)]
    audit_payloads: Option<bool>,
    /// An http(s) URL for the tenant's alerts; `none` removes it.
    #[arg(long)]
    alert_webhook_url: Option<String>,
    /// Percents of its budget that alert, e.g. `50,80,100`; `global` goes back to `[alerts]`'s.
    #[arg(long)]
    alert_thresholds_percent: Option<String>,
    /// enforce or alert; `tier` goes back to the tier's.
    #[arg(long)]
    rate_mode: Option<String>,
    /// Calls in flight at once, in place of the tier's cap.
    #[arg(long)]
    max_in_flight: Option<u32>,
}

#[derive(Debug, Subcommand)]
enum TenantCommand {
    Create {
        #[arg(long)]
        id: String,
        #[arg(long)]
        tier: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        rpm: Option<u32>,
        /// Budget per period, decimal in the billing currency.
        #[arg(long)]
        budget: Option<String>,
        /// What the budget runs over: day, week, month (the default) or lifetime.
        #[arg(long)]
        budget_period: Option<String>,
        /// strict, clamp or alert.
        #[arg(long)]
        mode: Option<String>,
        #[arg(long)]
        default_max_tokens: Option<u32>,
        /// A `[[plans]]` name it is billed under (default: at cost).
        #[arg(long)]
        plan: Option<String>,
        /// Keep its calls' request and response bodies (keys redacted) for audit.
        #[arg(long)]
        audit_payloads: bool,
        /// An http(s) URL that receives the tenant's alerts (beside `[alerts] webhook_url`).
        #[arg(long)]
        alert_webhook_url: Option<String>,
        /// Percents of its budget that alert, e.g. `50,80,100` (default: `[alerts] thresholds_percent`).
        #[arg(long, value_delimiter = ',')]
        alert_thresholds_percent: Option<Vec<u32>>,
        /// enforce or alert (default: the tier's).
        #[arg(long)]
        rate_mode: Option<String>,
        /// Calls in flight at once (default: the tier's `max_in_flight`).
        #[arg(long)]
        max_in_flight: Option<u32>,
    },
    List,
    Show {
        id: String,
    },
    Update(UpdateTenant),
}

#[derive(Debug, Subcommand)]
enum KeyCommand {
    /// Issue a key; its secret is printed once.
    Issue {
        tenant: String,
        #[arg(long)]
        name: Option<String>,
        /// The key's own budget inside its tenant's.
        #[arg(long)]
        budget: Option<String>,
        /// What the key's budget runs over: day, week, month (the default) or lifetime.
        #[arg(long)]
        budget_period: Option<String>,
        /// When the key stops working (RFC 3339, e.g. `2026-12-31T23:59:59Z`).
        #[arg(long)]
        expires_at: Option<String>,
        /// The key's own cap on calls in flight at once.
        #[arg(long)]
        max_in_flight: Option<u32>,
    },
    List {
        tenant: String,
    },
    Revoke {
        key_id: String,
    },
}

#[derive(Debug, Args)]
struct SpendArgs {
    #[arg(long)]
    tenant: Option<String>,
    /// tenant, feature, model, provider, route, day, status, key, api, end_user or session.
    #[arg(long, default_value = "model")]
    group_by: String,
    /// First day, YYYY-MM-DD.
    #[arg(long)]
    from: Option<String>,
    /// Last day, YYYY-MM-DD (inclusive).
    #[arg(long)]
    to: Option<String>,
    /// `key` (the groups in order) or `cost` (the most charged first).
    #[arg(long)]
    sort: Option<String>,
    /// List this many groups at most (the total still covers them all).
    #[arg(long)]
    limit: Option<usize>,
    #[arg(long)]
    json: bool,
}

pub fn run(cli: Cli) -> ExitCode {
    let log_guard = telemetry::logging::init(!matches!(cli.command, Command::Demo { .. }));
    let system = actix_rt::System::new();
    let result = system.block_on(dispatch(cli));
    // Every buffered log line is out before the process reports how it ended.
    drop(log_guard);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn out(text: &str) {
    let _ = writeln!(std::io::stdout(), "{text}");
}

fn json_out<T: serde::Serialize>(value: &T) -> Result<()> {
    out(&serde_json::to_string_pretty(value)?);
    Ok(())
}

async fn invoice(
    config: Arc<Config>,
    tenant: Option<&str>,
    month: &str,
    format: &str,
    check: bool,
) -> Result<()> {
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    let currency = &config.billing.currency;
    let Some(tenant) = tenant else {
        if !check {
            anyhow::bail!("--tenant names the invoice to write (or check a month with --check)");
        }
        return closes::check_month(&db, &config, month).await;
    };
    let invoice =
        crate::admin::invoice::build(&db, &config.calendar, currency, tenant, month).await?;
    if check {
        let checked = crate::admin::invoice::check(&db, &invoice).await?;
        json_out(&checked)?;
        if !checked.matches {
            anyhow::bail!(
                "the invoice's total {} ({} rows) is not the ledger's {} ({} rows)",
                checked.lines_total,
                checked.lines_rows,
                checked.ledger_total,
                checked.ledger_rows
            );
        }
        return Ok(());
    }
    match format {
        "csv" => {
            let _ = write!(
                std::io::stdout(),
                "{}",
                crate::admin::invoice::csv(&invoice)
            );
            Ok(())
        }
        "json" => json_out(&invoice),
        other => anyhow::bail!("--format `{other}`: use csv or json"),
    }
}

fn now_ms() -> i64 {
    i64::try_from(SystemClock.now_ms()).unwrap_or(i64::MAX)
}

fn load(path: Option<&Path>, env: &dyn EnvSource) -> Result<Arc<Config>> {
    let path = path.unwrap_or(Path::new("tollgate.toml"));
    Ok(Config::load(path, env)?)
}

async fn dispatch(cli: Cli) -> Result<()> {
    let config_path = cli.config.as_deref();
    match cli.command {
        Command::Serve => serve(config_path).await,
        Command::Demo { listen } => demo(config_path, listen).await,
        Command::Migrate => {
            let config = load(config_path, &ProcessEnv)?;
            storage::connect_and_migrate(&config.storage.database_url, 1).await?;
            out("migrations applied");
            Ok(())
        }
        Command::Tenant(command) => tenant(load(config_path, &ProcessEnv)?, command).await,
        Command::Key(command) => key(load(config_path, &ProcessEnv)?, command).await,
        Command::Spend(args) => spend_report(load(config_path, &ProcessEnv)?, args).await,
        Command::Reprice {
            prices,
            range,
            write_adjustments,
        } => {
            let config = load(config_path, &ProcessEnv)?;
            reprice(config, prices.as_deref(), range, write_adjustments).await
        }
        Command::Reconcile { range } => reconcile(load(config_path, &ProcessEnv)?, range).await,
        Command::Period { action } => closes::period(load(config_path, &ProcessEnv)?, action).await,
        Command::Export { action } => closes::export(load(config_path, &ProcessEnv)?, action).await,
        Command::SpendDistribution(args) => {
            costs::distribution(load(config_path, &ProcessEnv)?, args).await
        }
        Command::SpendMonthly(args) => costs::monthly(load(config_path, &ProcessEnv)?, args).await,
        Command::Bill(command) => bill::run(load(config_path, &ProcessEnv)?, command).await,
        Command::Report { date, json } => {
            daily_report(load(config_path, &ProcessEnv)?, date.as_deref(), json).await
        }
        Command::Invoice {
            tenant,
            month,
            format,
            check,
        } => {
            invoice(
                load(config_path, &ProcessEnv)?,
                tenant.as_deref(),
                &month,
                &format,
                check,
            )
            .await
        }
        Command::FakeUpstream(args) => fakes::serve(&args).await,
        Command::Healthcheck { url, timeout_ms } => {
            // With an explicit URL the probe needs no configuration at all.
            let url = match url {
                Some(url) => url,
                None => probe::readyz_url(&load(config_path, &ProcessEnv)?.server),
            };
            probe::check(&url, Duration::from_millis(timeout_ms)).await
        }
        Command::CheckConfig { file } => match file.as_deref().or(config_path) {
            Some(file) => check_config(file),
            None => anyhow::bail!("name the file: `tollgate check-config FILE` or `--config FILE`"),
        },
    }
}

/// Serves until a signal, reloading the configuration file on SIGHUP.
async fn serve(config_path: Option<&Path>) -> Result<()> {
    let config = load(config_path, &ProcessEnv)?;
    let options = BuildOptions {
        clock: Arc::new(SystemClock),
        handle_signals: true,
        reload_source: Some(ConfigSource {
            path: config_path.unwrap_or(Path::new("tollgate.toml")).to_owned(),
            env: Box::new(ProcessEnv),
        }),
    };
    Application::build(config, options)
        .await?
        .run_until_stopped()
        .await?;
    Ok(())
}

/// Prices the ledger's rows again (at `prices`, else the configured ones).
async fn reprice(
    config: Arc<Config>,
    prices: Option<&Path>,
    range: LedgerRange,
    write_adjustments: bool,
) -> Result<()> {
    let LedgerRange { tenant, from, to } = range;
    let billing = match prices {
        Some(path) => {
            crate::config::load_billing(path, &config.billing.currency, &config.calendar)?
        }
        None => config.billing(),
    };
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    let day = |text: Option<String>| {
        text.map(|t| Date::parse(&t).with_context(|| format!("`{t}` is not a YYYY-MM-DD date")))
            .transpose()
    };
    let run = crate::admin::reprice::RepriceRun {
        tenant: tenant.as_deref(),
        from: day(from)?,
        to: day(to)?,
        write_adjustments,
        now_ms: SystemClock.now_ms(),
    };
    let report = crate::admin::reprice::reprice(&db, &config.calendar, &billing, run).await?;
    json_out(&report)
}

/// What the ledger charged beside what the providers' usage says it cost.
async fn reconcile(config: Arc<Config>, range: LedgerRange) -> Result<()> {
    let LedgerRange { tenant, from, to } = range;
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    let query = crate::admin::reconcile::ReconcileQuery { tenant, from, to };
    let report = crate::admin::reconcile::report(&db, &config.billing.currency, query).await?;
    json_out(&report)
}

/// Loads `file` as `serve` would (secrets from the environment) and names
/// what a start would warn about, so a deployment's config can be checked
/// before it ships.
fn check_config(file: &Path) -> Result<()> {
    let config = match Config::load(file, &ProcessEnv) {
        Ok(config) => config,
        Err(errors) => {
            for error in errors.iter() {
                let _ = writeln!(std::io::stderr(), "{error}");
            }
            anyhow::bail!(
                "{} is not a valid configuration: {} problem{} above",
                file.display(),
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
        }
    };
    out(&format!(
        "{}: ok ({} providers, {} routes, {} tiers)",
        file.display(),
        config.providers.len(),
        config.routes.len(),
        config.tiers.len()
    ));
    for catalog in &config.catalogs {
        out(&catalog_line(catalog));
    }
    out(&format!(
        "shutdown grace: {} ms ({})",
        config.shutdown_grace_ms(),
        if config.server.shutdown_grace_ms.is_some() {
            "server.shutdown_grace_ms"
        } else {
            "the longest call and its settle"
        }
    ));
    let mut notes: Vec<String> = config
        .providers
        .values()
        .filter_map(|provider| {
            let env = provider.missing_key_env()?;
            Some(format!(
                "note: {env} is not set here; provider {} would start disabled",
                provider.name
            ))
        })
        .collect();
    if let Some((set, longest)) = config.grace_shorter_than_calls() {
        notes.push(format!(
            "note: server.shutdown_grace_ms ({set} ms) is shorter than the longest call ({longest} ms): a stop can cut calls the provider bills in full; leave it unset for {} ms",
            longest + crate::config::SETTLE_AFTER_CALL_MS
        ));
    }
    let shared = config.storage.redis_url.is_some();
    notes.extend(config.providers.values().filter_map(|provider| {
        let note = provider.per_replica_fleet_note(shared)?;
        Some(format!("note: {note}"))
    }));
    notes.sort();
    for note in &notes {
        out(note);
    }
    Ok(())
}

/// An included catalog's size and age, so a stale one is seen before it bills.
fn catalog_line(catalog: &crate::config::Catalog) -> String {
    let overridden = match catalog.overridden {
        0 => String::new(),
        n => format!(", {n} replaced by this file's own"),
    };
    format!(
        "included {}: {} prices{overridden}, as of {}",
        catalog.path.display(),
        catalog.prices,
        catalog.as_of.as_deref().unwrap_or("an unstated date")
    )
}

/// `tollgate tenant update`: the flags given become a PATCH.
async fn update_tenant(
    db: &sea_orm::DatabaseConnection,
    config: &Config,
    update: UpdateTenant,
) -> Result<()> {
    let UpdateTenant {
        id,
        tier,
        name,
        rpm,
        budget,
        mode,
        plan,
        audit_payloads,
        alert_webhook_url,
        alert_thresholds_percent,
        rate_mode,
        max_in_flight,
    } = update;
    let patch = TenantPatch {
        name,
        tier,
        rpm_limit: rpm.map(Some),
        monthly_budget: budget.map(Some),
        budget_mode: mode,
        plan: plan.map(Some),
        audit_payloads,
        alert_webhook_url: alert_webhook_url.map(|url| (url != "none").then_some(url)),
        alert_thresholds_percent: alert_thresholds_percent
            .as_deref()
            .map(cli_percents)
            .transpose()?,
        rate_mode: rate_mode.map(|mode| (mode != "tier").then_some(mode)),
        max_in_flight: max_in_flight.map(Some),
        ..TenantPatch::default()
    };
    json_out(&TenantView::from(
        &tenants::update(db, config, &id, patch, now_ms()).await?,
    ))
}

async fn tenant(config: Arc<Config>, command: TenantCommand) -> Result<()> {
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    match command {
        TenantCommand::Create {
            id,
            tier,
            name,
            rpm,
            budget,
            budget_period,
            mode,
            default_max_tokens,
            plan,
            audit_payloads,
            alert_webhook_url,
            alert_thresholds_percent,
            rate_mode,
            max_in_flight,
        } => {
            let new = NewTenant {
                id,
                name,
                tier,
                rpm_limit: rpm,
                monthly_budget: budget,
                budget_mode: mode,
                default_max_tokens,
                budget_period,
                plan,
                audit_payloads,
                alert_webhook_url,
                alert_thresholds_percent,
                rate_mode,
                max_in_flight,
                ..NewTenant::default()
            };
            let record = tenants::create(&db, &config, new, now_ms()).await?;
            json_out(&TenantView::from(&record))
        }
        TenantCommand::List => {
            let records = tenants::list(&db).await?;
            json_out(&records.iter().map(TenantView::from).collect::<Vec<_>>())
        }
        TenantCommand::Show { id } => json_out(&TenantView::from(&tenants::get(&db, &id).await?)),
        TenantCommand::Update(update) => update_tenant(&db, &config, update).await,
    }
}

/// `global`, or comma-separated percents.
fn cli_percents(text: &str) -> Result<Option<Vec<u32>>> {
    if text == "global" {
        return Ok(None);
    }
    crate::directory::tenant::parse_percents(text)
        .map(Some)
        .with_context(|| {
            format!("--alert-thresholds-percent: `{text}` is not comma-separated percents")
        })
}

async fn key(config: Arc<Config>, command: KeyCommand) -> Result<()> {
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    match command {
        KeyCommand::Issue {
            tenant,
            name,
            budget,
            budget_period,
            expires_at,
            max_in_flight,
        } => {
            let pepper = config.require_pepper()?;
            let new = keys::NewKey {
                name,
                monthly_budget: budget,
                expires_at: expires_at.map(serde_json::Value::String),
                credits: false,
                budget_period,
                max_in_flight,
            };
            let (_, view) = keys::issue(&db, pepper, &tenant, new, now_ms()).await?;
            json_out(&view)
        }
        KeyCommand::List { tenant } => json_out(&keys::list(&db, &tenant).await?),
        KeyCommand::Revoke { key_id } => {
            let id = keys::revoke(&db, &key_id, now_ms()).await?;
            out(&format!("revoked {id}"));
            Ok(())
        }
    }
}

async fn spend_report(config: Arc<Config>, args: SpendArgs) -> Result<()> {
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    let query = SpendQuery {
        tenant: args.tenant,
        group_by: Some(args.group_by),
        from: args.from,
        to: args.to,
        sort: args.sort,
        limit: args.limit,
    };
    let report = spend::report(&db, &config.billing.currency, query).await?;
    if args.json {
        json_out(&report)
    } else {
        out(&spend_table(&report));
        Ok(())
    }
}

async fn daily_report(config: Arc<Config>, date: Option<&str>, json: bool) -> Result<()> {
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    let date = match date {
        Some(text) => {
            Date::parse(text).with_context(|| format!("`{text}` is not a YYYY-MM-DD date"))?
        }
        None => config.calendar.yesterday(SystemClock.now_ms()),
    };
    let report = report::daily(&db, &config.billing.currency, &config.calendar, date).await?;
    if json {
        return json_out(&report);
    }
    out(&report::text(&report));
    Ok(())
}

/// A readable table of a spend report.
pub fn spend_table(report: &SpendReport) -> String {
    let mut lines = vec![format!(
        "{:<28} {:>9} {:>9} {:>12} {:>12} {:>12} {:>9} {:>7} {:>16}",
        report.group_by,
        "requests",
        "attempts",
        "prompt",
        "cached",
        "completion",
        "fallback",
        "errors",
        format!("cost ({})", report.currency)
    )];
    for row in &report.rows {
        lines.push(format!(
            "{:<28} {:>9} {:>9} {:>12} {:>12} {:>12} {:>8}% {:>6}% {:>16}",
            row.key,
            row.requests,
            row.attempts,
            row.prompt_tokens,
            row.cached_tokens,
            row.completion_tokens,
            report::percent(row.fallback_rate, false),
            report::percent(row.error_rate, false),
            row.cost.to_string()
        ));
    }
    let t = &report.total;
    lines.push(format!(
        "{:<28} {:>9} {:>9} {:>12} {:>12} {:>12} {:>9} {:>7} {:>16}",
        "total",
        t.requests,
        t.attempts,
        t.prompt_tokens,
        t.cached_tokens,
        t.completion_tokens,
        "",
        "",
        t.cost.to_string()
    ));
    lines.join("\n")
}

/// Secrets the demo supplies when the environment does not.
struct DemoEnv;

const DEMO_PEPPER: &str = "tollgate-demo-pepper-change-me";
const DEMO_ADMIN_TOKEN: &str = "tollgate-demo-admin";

impl EnvSource for DemoEnv {
    fn get(&self, name: &str) -> Option<String> {
        ProcessEnv.get(name).or_else(|| match name {
            KEY_PEPPER_ENV => Some(DEMO_PEPPER.to_owned()),
            ADMIN_TOKEN_ENV => Some(DEMO_ADMIN_TOKEN.to_owned()),
            _ => None,
        })
    }
}

/// The demo's configuration and its full path. The commands the banner
/// prints (spend, tenants, keys) read the same file: outside a checkout the
/// demo writes out the embedded example it runs.
fn demo_config(path: &Path) -> Result<(Arc<Config>, std::path::PathBuf)> {
    if !path.exists() {
        std::fs::write(path, include_str!("../tollgate.example.toml"))
            .with_context(|| format!("writing the demo's configuration to {}", path.display()))?;
        tracing::info!(path = %path.display(), "Wrote the demo's configuration.");
    }
    let config = Config::load(path, &DemoEnv)?;
    let full = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    Ok((config, full))
}

async fn demo(path: Option<&Path>, listen: Option<std::net::SocketAddr>) -> Result<()> {
    // First, so that a build without the fakes fails before writing anything.
    let mock = Mock::start()?;
    let (config, path) = demo_config(path.unwrap_or(Path::new("tollgate.example.toml")))?;
    let path = path.as_path();
    let mut config = (*config).clone();
    if let Some(listen) = listen {
        config.server.listen = listen;
    }
    let mocked = stand_in(&mut config, &mock.base_url());
    let config = Arc::new(config);
    let options = BuildOptions {
        clock: Arc::new(SystemClock),
        handle_signals: true,
        // A reload would drop the demo's stand-ins for providers without keys.
        reload_source: None,
    };
    let app = Application::build(config.clone(), options).await?;
    let gw = app.gateway.clone();
    let tier = ["standard", "enterprise", "free"]
        .into_iter()
        .find(|t| config.tiers.contains_key(*t))
        .context("the configuration has no tier for the demo tenant")?;
    let db = gw.directory.db();
    let tenant = if let Ok(tenant) = tenants::get(db, "demo").await {
        tenant
    } else {
        {
            let new = NewTenant {
                id: "demo".to_owned(),
                name: Some("Demo tenant".to_owned()),
                tier: tier.to_owned(),
                monthly_budget: Some("10".to_owned()),
                ..NewTenant::default()
            };
            tenants::create(db, &config, new, now_ms()).await?
        }
    };
    gw.directory.put_tenant(tenant.clone());
    let (record, issued) = keys::issue(
        db,
        gw.directory.pepper(),
        "demo",
        keys::NewKey {
            name: Some("demo".to_owned()),
            monthly_budget: None,
            expires_at: None,
            credits: false,
            budget_period: None,
            max_in_flight: None,
        },
        now_ms(),
    )
    .await?;
    gw.directory.put_key(record);
    out(&demo_banner(
        &app,
        &config,
        &tenant,
        &issued.key,
        &mock.base_url(),
        &mocked,
        path,
    ));
    app.run_until_stopped().await?;
    mock.stop().await;
    Ok(())
}

/// Points every provider without a key at the mock upstream; their names, sorted.
fn stand_in(config: &mut Config, mock_url: &str) -> Vec<String> {
    let mut mocked = Vec::new();
    for provider in config.providers.values_mut() {
        if let Some(env) = provider.missing_key_env() {
            tracing::info!(provider = %provider.name, env, "{env} is not set; the demo serves this provider from the built-in mock upstream.");
            mocked.push(provider.name.to_string());
            mock_url.clone_into(&mut provider.base_url);
            provider.chat_url = format!("{mock_url}/chat/completions");
            provider.embeddings_url = format!("{mock_url}/embeddings");
            provider.responses_url = format!("{mock_url}/responses");
            provider.api_key = Some(Secret::new("mock"));
        }
    }
    mocked.sort();
    mocked
}

fn demo_banner(
    app: &Application,
    config: &Config,
    tenant: &crate::directory::TenantRecord,
    key: &str,
    mock_url: &str,
    mocked: &[String],
    path: &Path,
) -> String {
    let base = format!("http://{}", app.addr);
    let admin_base = app
        .admin_addr
        .map_or_else(|| base.clone(), |addr| format!("http://{addr}"));
    let budget = tenant
        .monthly_budget
        .map_or_else(|| "none".to_owned(), |b| b.to_string());
    let admin = if ProcessEnv.get(ADMIN_TOKEN_ENV).is_some() {
        "$TOLLGATE_ADMIN_TOKEN"
    } else {
        DEMO_ADMIN_TOKEN
    };
    format!(
        r#"
Tollgate demo is running at {base}
  mock upstream  {mock_url} (serving: {mocked})
  tenant         {tenant_id} (tier {tier}, monthly budget {budget} {currency})
  API key        {key}

Call it with curl:
  curl -i {base}/v1/chat/completions \
    -H "Authorization: Bearer {key}" \
    -H "Content-Type: application/json" \
    -H "X-Tollgate-Feature: demo" \
    -d '{{"model": "fast", "messages": [{{"role": "user", "content": "Hello!"}}]}}'

Or with the OpenAI Python SDK (pip install openai):
  from openai import OpenAI
  client = OpenAI(base_url="{base}/v1", api_key="{key}")
  raw = client.chat.completions.with_raw_response.create(
      model="fast", messages=[{{"role": "user", "content": "Hello!"}}])
  print(raw.headers["x-tollgate-cost"], raw.parse().choices[0].message.content)

Budget:  curl -s {admin_base}/admin/v1/tenants/demo/budget -H "Authorization: Bearer {admin}"
Spend:   cargo run --release -- spend --config {config_path} --tenant demo --group-by model
"#,
        mocked = if mocked.is_empty() {
            "none".to_owned()
        } else {
            mocked.join(", ")
        },
        tenant_id = tenant.id,
        tier = tenant.tier,
        currency = config.billing.currency,
        config_path = path.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_line_names_the_file_its_size_and_its_date() {
        let mut catalog = crate::config::Catalog {
            path: "prices/openai.toml".into(),
            as_of: Some("2026-12-02".to_owned()),
            sources: Vec::new(),
            prices: 5,
            overridden: 1,
        };
        assert_eq!(
            catalog_line(&catalog),
            "included prices/openai.toml: 5 prices, 1 replaced by this file's own, as of 2026-12-02"
        );
        catalog.as_of = None;
        catalog.overridden = 0;
        assert_eq!(
            catalog_line(&catalog),
            "included prices/openai.toml: 5 prices, as of an unstated date"
        );
    }
}
