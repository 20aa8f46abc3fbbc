//! `tollgate period close|list` (months that close), `tollgate export
//! focus` (a day of the ledger for a data warehouse), `tollgate export
//! status` (the export sinks' cursors and outboxes) and `tollgate invoice
//! --check --month` (a month's numbers against each other).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Subcommand;

use super::json_out;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::storage;

#[derive(Debug, Subcommand)]
pub(super) enum ExportCommand {
    /// A day of the billing time zone as a FOCUS-style CSV: one line per ledger row.
    Focus {
        /// YYYY-MM-DD.
        #[arg(long)]
        date: String,
        /// Where to write it; standard output by default.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Each export sink's lease holder, cursor, delivered totals and waiting rows.
    Status,
}

#[derive(Debug, Subcommand)]
pub(super) enum PeriodCommand {
    /// Close a month of the billing time zone (YYYY-MM) and every earlier one still open.
    Close {
        #[arg(long)]
        month: String,
        /// Who closed it, kept beside the close.
        #[arg(long)]
        by: Option<String>,
    },
    /// The closed months, oldest first.
    List,
}

pub(super) async fn export(config: Arc<Config>, action: ExportCommand) -> Result<()> {
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    let (date, out) = match action {
        ExportCommand::Focus { date, out } => (date, out),
        ExportCommand::Status => {
            let sinks = crate::export::status::sinks(&db, &config.export).await?;
            return json_out(&serde_json::json!({ "sinks": sinks }));
        }
    };
    let sink: Box<dyn Write> = match &out {
        Some(path) => Box::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ),
        None => Box::new(std::io::stdout()),
    };
    let mut sink = std::io::BufWriter::new(sink);
    let currency = &config.billing.currency;
    let written =
        crate::ledger::focus::write_day(&db, &config.calendar, currency, &date, &mut sink).await?;
    sink.flush().context("writing the CSV")?;
    let Some(day) = written else {
        anyhow::bail!("--date `{date}` is not a YYYY-MM-DD day");
    };
    if out.is_some() {
        json_out(&day)?;
    }
    Ok(())
}

pub(super) async fn period(config: Arc<Config>, action: PeriodCommand) -> Result<()> {
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    match action {
        PeriodCommand::Close { month, by } => {
            let now = SystemClock.now_ms();
            let closing =
                crate::admin::periods::close(&db, &config.calendar, &month, now, by.as_deref())
                    .await?;
            json_out(&closing)
        }
        PeriodCommand::List => json_out(&crate::admin::periods::list(&db).await?),
    }
}

/// Prints the month's check; an error listing each difference unless every
/// source agrees with the ledger.
pub(super) async fn check_month(
    db: &sea_orm::DatabaseConnection,
    config: &Config,
    month: &str,
) -> Result<()> {
    let currency = &config.billing.currency;
    let sinks = config.export.sink_names();
    let checked =
        crate::admin::month_check::check(db, &config.calendar, currency, month, &sinks).await?;
    json_out(&checked)?;
    if !checked.agrees {
        let listed: Vec<String> = checked
            .differences
            .iter()
            .map(ToString::to_string)
            .collect();
        anyhow::bail!(
            "{}: {} difference{}: {}",
            checked.month,
            listed.len(),
            if listed.len() == 1 { "" } else { "s" },
            listed.join("; ")
        );
    }
    Ok(())
}
