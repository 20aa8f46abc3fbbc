//! `tollgate spend-distribution` and `tollgate spend-monthly`.

use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;

use super::{json_out, out};
use crate::admin::costs::{self, Distribution, DistributionQuery, Monthly, MonthlyQuery};
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::storage;

#[derive(Debug, Args)]
pub(super) struct DistributionArgs {
    #[arg(long)]
    tenant: Option<String>,
    /// First day, YYYY-MM-DD.
    #[arg(long)]
    from: Option<String>,
    /// Last day, YYYY-MM-DD (inclusive).
    #[arg(long)]
    to: Option<String>,
    /// Feature and model groups listed at most, the most charged first.
    #[arg(long)]
    limit: Option<u64>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct MonthlyArgs {
    #[arg(long)]
    tenant: Option<String>,
    /// tenant or feature.
    #[arg(long, default_value = "tenant")]
    group_by: String,
    /// Months shown (the one before the first gives it its change).
    #[arg(long)]
    months: Option<u32>,
    /// The last month, YYYY-MM of billing.timezone; the current one by default.
    #[arg(long)]
    to: Option<String>,
    #[arg(long)]
    limit: Option<usize>,
    #[arg(long)]
    json: bool,
}

pub(super) async fn distribution(config: Arc<Config>, args: DistributionArgs) -> Result<()> {
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    let query = DistributionQuery {
        tenant: args.tenant,
        from: args.from,
        to: args.to,
        limit: args.limit,
    };
    let report = costs::distribution(&db, &config.billing.currency, query).await?;
    if args.json {
        return json_out(&report);
    }
    out(&distribution_table(&report));
    Ok(())
}

pub(super) async fn monthly(config: Arc<Config>, args: MonthlyArgs) -> Result<()> {
    let db = storage::connect_and_migrate(&config.storage.database_url, 1).await?;
    let query = MonthlyQuery {
        tenant: args.tenant,
        group_by: Some(args.group_by),
        months: args.months,
        to: args.to,
        limit: args.limit,
    };
    let report = costs::monthly(
        &db,
        &config.calendar,
        &config.billing.currency,
        SystemClock.now_ms(),
        query,
    )
    .await?;
    if args.json {
        return json_out(&report);
    }
    out(&monthly_table(&report));
    Ok(())
}

fn distribution_table(report: &Distribution) -> String {
    let mut lines = vec![format!(
        "{:<20} {:<28} {:>9} {:>14} {:>14} {:>14} {:>14}",
        "feature",
        "model",
        "calls",
        format!("p50 ({})", report.currency),
        "p95",
        "p99",
        "total"
    )];
    for row in &report.rows {
        lines.push(format!(
            "{:<20} {:<28} {:>9} {:>14} {:>14} {:>14} {:>14}",
            row.feature,
            row.model,
            row.calls,
            row.p50.to_string(),
            row.p95.to_string(),
            row.p99.to_string(),
            row.total.to_string()
        ));
    }
    lines.join("\n")
}

fn monthly_table(report: &Monthly) -> String {
    let mut header = format!("{:<28}", report.group_by);
    for month in &report.months {
        let _ = write!(header, " {month:>22}");
    }
    let mut lines = vec![
        format!(
            "{} ({}), {}",
            report.group_by, report.currency, report.timezone
        ),
        header,
    ];
    for row in &report.rows {
        let mut line = format!("{:<28}", row.key);
        for month in &row.months {
            let change = month.change_share.map_or_else(String::new, |s| {
                format!(" ({}%)", crate::admin::report::percent(s, true))
            });
            let _ = write!(line, " {:>22}", format!("{}{change}", month.cost));
        }
        lines.push(line);
    }
    lines.join("\n")
}
