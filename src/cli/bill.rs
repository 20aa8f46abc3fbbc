//! `tollgate bill import` and `tollgate bill drift`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Subcommand;

use super::{json_out, out};
use crate::admin::bill::{self, BillFile, DriftQuery};
use crate::bill::drift::DriftReport;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::storage;

#[derive(Debug, Subcommand)]
pub(super) enum BillCommand {
    /// Import a provider's usage or cost export (pages of OpenAI's
    /// organization usage/costs API, or Anthropic's usage_report/messages or
    /// cost_report) as saved from its API; importing a bucket again replaces it.
    Import {
        /// The configured provider the export is of.
        #[arg(long)]
        provider: String,
        /// A saved page; repeat for every page of an export.
        #[arg(long = "file", required = true)]
        files: Vec<PathBuf>,
    },
    /// The imported bills against the ledger per billing day, model and
    /// provider key: each side's cost and tokens, the difference and its share.
    Drift {
        #[arg(long)]
        provider: Option<String>,
        /// First billing day, YYYY-MM-DD.
        #[arg(long)]
        from: String,
        /// Last billing day, YYYY-MM-DD (inclusive).
        #[arg(long)]
        to: String,
        #[arg(long)]
        json: bool,
    },
}

pub(super) async fn run(config: Arc<Config>, command: BillCommand) -> Result<()> {
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    match command {
        BillCommand::Import { provider, files } => {
            let mut read = Vec::with_capacity(files.len());
            for path in files {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                read.push(BillFile {
                    name: path.display().to_string(),
                    text,
                });
            }
            let imported =
                bill::import(&db, &config, &provider, read, SystemClock.now_ms()).await?;
            json_out(&imported)
        }
        BillCommand::Drift {
            provider,
            from,
            to,
            json,
        } => {
            let query = DriftQuery {
                provider,
                from: Some(from),
                to: Some(to),
            };
            let report = bill::drift(&db, &config, query).await?;
            if json {
                return json_out(&report);
            }
            out(&drift_table(&report));
            Ok(())
        }
    }
}

fn share(share: Option<f64>) -> String {
    share.map_or_else(
        || "-".to_owned(),
        |s| format!("{}%", crate::admin::report::percent(s, true)),
    )
}

/// A readable table of a drift report.
pub fn drift_table(report: &DriftReport) -> String {
    let mut lines = vec![
        format!(
            "billing days {} to {} ({}); {}",
            report.from, report.to, report.timezone, report.day_rule
        ),
        format!(
            "{:<10} {:<12} {:<26} {:<16} {:>14} {:>14} {:>14} {:>8} {:>12} {:>12}",
            "day",
            "provider",
            "model",
            "key",
            format!("ledger ({})", report.currency),
            "bill",
            "difference",
            "share",
            "ledger in",
            "bill in"
        ),
    ];
    let text = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    for row in &report.rows {
        lines.push(format!(
            "{:<10} {:<12} {:<26} {:<16} {:>14} {:>14} {:>14} {:>8} {:>12} {:>12}",
            row.day,
            row.provider,
            row.model,
            row.key_id,
            row.ledger_cost.to_string(),
            text(row.bill_cost.map(|c| c.to_string())),
            text(row.difference.map(|c| c.to_string())),
            share(row.share),
            row.ledger_tokens.input,
            text(row.bill_tokens.as_ref().map(|t| t.input.to_string())),
        ));
    }
    for total in &report.providers {
        lines.push(format!(
            "{}: ledger {} bill {} difference {} ({}) over {} day(s)",
            total.provider,
            total.ledger_cost,
            total.bill_cost,
            total.difference,
            share(total.share),
            total.days.len()
        ));
    }
    lines.join("\n")
}
