//! Importing providers' usage and cost exports and reporting their drift
//! from the ledger, for the admin API and the CLI alike.

use std::collections::HashMap;

use sea_orm::DatabaseConnection;

use super::{AdminError, invalid};
use crate::bill::drift::{self, DriftReport};
use crate::bill::parse;
use crate::bill::store::{self, Imported};
use crate::calendar::Window;
use crate::config::Config;
use crate::ids::ProviderName;
use crate::telemetry::metrics::{Metric, gauge_set};

/// Days one drift report covers at most.
const MAX_DAYS: u64 = 366;

/// One exported page as a user saved it: its name (for errors) and text.
pub struct BillFile {
    pub name: String,
    pub text: String,
}

/// Imports every file for `provider`, all or none: a file that is not an
/// export, or in another currency, is named with what is wrong, and nothing
/// is written. Then the drift of the days imported is computed (and its
/// gauge set).
pub async fn import(
    db: &DatabaseConnection,
    config: &Config,
    provider: &str,
    files: Vec<BillFile>,
    now_ms: u64,
) -> Result<Imported, AdminError> {
    check_provider(config, provider)?;
    if files.is_empty() {
        return Err(invalid("file", "no file to import"));
    }
    let parsed = read_files(config, files)?;
    let imported = store::import(db, provider, parsed, now_ms).await?;
    let first = imported.reports.iter().map(|r| r.first_bucket_ms).min();
    let last = imported.reports.iter().map(|r| r.last_bucket_end_ms).max();
    if let (Some(first), Some(last)) = (first, last) {
        let calendar = &config.calendar;
        let from = calendar.window(crate::calendar::Period::Day, first);
        let to = calendar.window(crate::calendar::Period::Day, last.saturating_sub(1));
        drift_between(db, config, Some(provider), &from, &to).await?;
    }
    Ok(imported)
}

/// Each file read as an export, in `billing.currency`, with no bucket given
/// twice: an export's pages never share one, so a bucket in two files of an
/// import is a page given twice, whose lines would be summed.
fn read_files(config: &Config, files: Vec<BillFile>) -> Result<Vec<parse::BillFile>, AdminError> {
    let mut seen: HashMap<(Option<parse::Report>, u64), String> = HashMap::new();
    let mut parsed = Vec::with_capacity(files.len());
    for file in files {
        let bill =
            parse::parse(&file.text).map_err(|e| invalid("file", format!("{}: {e}", file.name)))?;
        // A file of empty buckets names no report, and adds no line.
        let report = bill.report;
        for (start, _) in bill.buckets.iter().filter(|_| report.is_some()) {
            if let Some(other) = seen.insert((report, *start), file.name.clone()) {
                return Err(invalid(
                    "file",
                    format!(
                        "{}: its bucket starting at {start} ms is in {other} too: give each page once",
                        file.name
                    ),
                ));
            }
        }
        if let Some(currency) = &bill.currency
            && !currency.eq_ignore_ascii_case(&config.billing.currency)
        {
            return Err(invalid(
                "file",
                format!(
                    "{}: its amounts are in {}, the ledger's in {} (billing.currency)",
                    file.name,
                    currency.to_ascii_uppercase(),
                    config.billing.currency
                ),
            ));
        }
        parsed.push(bill);
    }
    Ok(parsed)
}

fn check_provider(config: &Config, provider: &str) -> Result<(), AdminError> {
    if config.providers.contains_key(&ProviderName::new(provider)) {
        return Ok(());
    }
    let mut names: Vec<&str> = config.providers.keys().map(ProviderName::as_str).collect();
    names.sort_unstable();
    Err(invalid(
        "provider",
        format!(
            "`{provider}` is not a configured provider (configured: {})",
            names.join(", ")
        ),
    ))
}

#[derive(Debug, Default)]
pub struct DriftQuery {
    pub provider: Option<String>,
    /// `YYYY-MM-DD` of the billing time zone, inclusive.
    pub from: Option<String>,
    /// `YYYY-MM-DD` of the billing time zone, inclusive.
    pub to: Option<String>,
}

/// The drift between the imported bills and the ledger, per billing day,
/// provider, model and key; each provider's gauge is set to its share.
pub async fn drift(
    db: &DatabaseConnection,
    config: &Config,
    query: DriftQuery,
) -> Result<DriftReport, AdminError> {
    if let Some(provider) = &query.provider {
        check_provider(config, provider)?;
    }
    let day = |field: &str, text: Option<&String>| -> Result<Window, AdminError> {
        let text = text.ok_or_else(|| invalid(field, "required: a YYYY-MM-DD day"))?;
        config
            .calendar
            .day(text)
            .ok_or_else(|| invalid(field, format!("`{text}` is not a YYYY-MM-DD date")))
    };
    let from = day("from", query.from.as_ref())?;
    let to = day("to", query.to.as_ref())?;
    if to.start_ms < from.start_ms {
        return Err(invalid("to", "is before `from`"));
    }
    if (to.start_ms - from.start_ms) / 86_400_000 >= MAX_DAYS {
        return Err(invalid(
            "to",
            format!("a report covers {MAX_DAYS} days at most"),
        ));
    }
    drift_between(db, config, query.provider.as_deref(), &from, &to).await
}

async fn drift_between(
    db: &DatabaseConnection,
    config: &Config,
    provider: Option<&str>,
    from: &Window,
    to: &Window,
) -> Result<DriftReport, AdminError> {
    let calendar = &config.calendar;
    let rows = drift::report(db, calendar, &config.reconcile, provider, (from, to)).await?;
    let providers = drift::by_provider(&rows);
    for total in &providers {
        if let Some(share) = total.share {
            gauge_set(
                Metric::BillDriftRatio,
                &[("provider", total.provider.as_str())],
                share,
            );
        }
    }
    Ok(DriftReport {
        from: calendar.day_key(from.start_ms),
        to: calendar.day_key(to.start_ms),
        timezone: calendar.name().to_owned(),
        currency: config.billing.currency.clone(),
        day_rule: drift::DAY_RULE,
        rows,
        providers,
    })
}
