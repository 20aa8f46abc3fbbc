//! The daily report: a day's spend (a day of the billing time zone) against
//! the day before, the top tenants, features and models, and every tenant's
//! monthly budget progress with the date it runs out at the month's pace so far.

use sea_orm::DatabaseConnection;
use serde::Serialize;

use super::AdminError;
use crate::calendar::{Calendar, Period};
use crate::directory::repo as directory;
use crate::ledger::repo::{self, GroupBy, SpendFilter, SpendRow};
use crate::money::Nanos;
use crate::period::Date;
use crate::telemetry::metrics::ratio;

const TOP: usize = 5;
const MS_PER_DAY: u64 = 86_400_000;

#[derive(Debug, Serialize)]
pub struct DailyReport {
    pub date: String,
    pub currency: String,
    pub total: Nanos,
    pub previous_day_total: Nanos,
    /// `total / previous_day_total - 1`; absent when the day before cost nothing.
    pub change_ratio: Option<f64>,
    pub requests: u64,
    pub top_tenants: Vec<SpendRow>,
    pub top_features: Vec<SpendRow>,
    pub top_models: Vec<SpendRow>,
    /// Keyed `tenant:end user`; requests that named no end user are left out.
    pub top_end_users: Vec<SpendRow>,
    pub budgets: Vec<BudgetProgress>,
}

#[derive(Debug, Serialize)]
pub struct BudgetProgress {
    pub tenant: String,
    pub budget: Nanos,
    /// Committed this month up to the end of the report's day.
    pub month_to_date: Nanos,
    pub utilization: f64,
    /// At the month's average daily spend; absent when nothing was spent.
    pub projected_exhaustion: Option<String>,
}

fn span(from_ms: u64, to_ms: u64) -> SpendFilter {
    SpendFilter {
        tenant: None,
        from_ms: Some(from_ms),
        to_ms: Some(to_ms),
    }
}

fn top(mut rows: Vec<SpendRow>) -> Vec<SpendRow> {
    rows.sort_by(|a, b| b.cost.cmp(&a.cost).then_with(|| a.key.cmp(&b.key)));
    rows.truncate(TOP);
    rows
}

fn total(rows: &[SpendRow]) -> Nanos {
    rows.iter()
        .fold(Nanos::ZERO, |sum, row| sum.saturating_add(row.cost))
}

pub async fn daily(
    db: &DatabaseConnection,
    currency: &str,
    calendar: &Calendar,
    date: Date,
) -> Result<DailyReport, AdminError> {
    let day = calendar
        .day(&date.day_key())
        .ok_or_else(|| super::invalid("date", "not a day"))?;
    let before = calendar.window(Period::Day, day.start_ms.saturating_sub(1));
    let today = span(day.start_ms, day.end_ms);
    let previous = span(before.start_ms, before.end_ms);
    let tenants = repo::spend(db, &today, GroupBy::Tenant).await?;
    let day_total = total(&tenants);
    let previous_day_total = total(&repo::spend(db, &previous, GroupBy::Tenant).await?);
    let change_ratio = change(day_total, previous_day_total);
    let requests = tenants.iter().map(|r| r.requests).sum();
    let month_start = calendar.window(Period::Month, day.start_ms).start_ms;
    let budgets = budget_progress(db, date, span(month_start, day.end_ms)).await?;
    Ok(DailyReport {
        date: date.day_key(),
        currency: currency.to_owned(),
        total: day_total,
        previous_day_total,
        change_ratio,
        requests,
        top_tenants: top(tenants),
        top_features: top(repo::spend(db, &today, GroupBy::Feature).await?),
        top_models: top(repo::spend(db, &today, GroupBy::Model).await?),
        top_end_users: top(named_end_users(
            repo::spend(db, &today, GroupBy::TenantEndUser).await?,
        )),
        budgets,
    })
}

/// Rows of requests that named an end user (their key does not end at the tenant).
fn named_end_users(rows: Vec<SpendRow>) -> Vec<SpendRow> {
    rows.into_iter()
        .filter(|row| !row.key.ends_with(':'))
        .collect()
}

/// Tenants with a monthly budget, from the month's start to the end of `date` (`month_to_date`).
async fn budget_progress(
    db: &DatabaseConnection,
    date: Date,
    month_to_date: SpendFilter,
) -> Result<Vec<BudgetProgress>, AdminError> {
    let spent = repo::spend(db, &month_to_date, GroupBy::Tenant).await?;
    let mut progress = Vec::new();
    for tenant in directory::all_tenants(db).await? {
        let Some(budget) = tenant.monthly_budget else {
            continue;
        };
        if tenant.budget_period != Period::Month {
            continue;
        }
        let month_to_date = spent
            .iter()
            .find(|row| row.key == tenant.id.as_str())
            .map_or(Nanos::ZERO, |row| row.cost);
        progress.push(BudgetProgress {
            tenant: tenant.id.to_string(),
            budget,
            month_to_date,
            utilization: ratio(month_to_date.get(), budget.get()),
            projected_exhaustion: exhaustion_date(date, budget, month_to_date),
        });
    }
    Ok(progress)
}

/// `now / before - 1`, for display; `None` when `before` is zero.
#[expect(
    clippy::float_arithmetic,
    reason = "a display ratio; the amounts stay integer"
)]
fn change(now: Nanos, before: Nanos) -> Option<f64> {
    (before.get() > 0).then(|| ratio(now.get(), before.get()) - 1.0)
}

/// The day the budget runs out if the rest of the month spends like its first `date.day` days.
pub fn exhaustion_date(date: Date, budget: Nanos, month_to_date: Nanos) -> Option<String> {
    if month_to_date.get() == 0 {
        return None;
    }
    if month_to_date >= budget {
        return Some(date.day_key());
    }
    let days = u64::from(date.day);
    let remaining = budget.get() - month_to_date.get();
    // remaining / (spent / days), rounded up, in integers.
    let days_left = u64::try_from(
        (u128::from(remaining) * u128::from(days)).div_ceil(u128::from(month_to_date.get())),
    )
    .unwrap_or(u64::MAX / MS_PER_DAY);
    let at = date
        .start_unix_ms()
        .saturating_add(days_left.saturating_mul(MS_PER_DAY));
    Some(Date::from_unix_ms(at).day_key())
}

/// The report as text fit for a terminal or a chat channel.
pub fn text(report: &DailyReport) -> String {
    let change = report
        .change_ratio
        .map_or_else(|| "n/a".to_owned(), |c| format!("{}%", percent(c, true)));
    let mut lines = vec![
        format!("Daily report {} ({})", report.date, report.currency),
        format!(
            "total {}  (day before {}, change {change}), {} requests",
            report.total, report.previous_day_total, report.requests
        ),
    ];
    for (title, rows) in [
        ("top tenants", &report.top_tenants),
        ("top features", &report.top_features),
        ("top models", &report.top_models),
        ("top end users", &report.top_end_users),
    ] {
        lines.push(format!("{title}:"));
        lines.extend(rows.iter().map(|r| {
            format!(
                "  {:<32} {:>16}  {} requests",
                r.key,
                r.cost.to_string(),
                r.requests
            )
        }));
    }
    lines.push("budgets:".to_owned());
    for b in &report.budgets {
        lines.push(format!(
            "  {:<32} {:>12} of {:<12} {:>6}%  runs out {}",
            b.tenant,
            b.month_to_date.to_string(),
            b.budget.to_string(),
            percent(b.utilization, false),
            b.projected_exhaustion.as_deref().unwrap_or("-")
        ));
    }
    lines.join("\n")
}

/// A ratio as a percentage with one decimal, for display only.
#[expect(
    clippy::float_arithmetic,
    reason = "display of a ratio; no money is computed here"
)]
pub fn percent(ratio: f64, signed: bool) -> String {
    if signed {
        format!("{:+.1}", ratio * 100.0)
    } else {
        format!("{:.1}", ratio * 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projects_exhaustion_at_the_months_pace() {
        let date = Date::parse("2026-11-10").unwrap();
        let budget = Nanos::parse_decimal("100").unwrap();
        // 40 in 10 days: 4 a day, 60 left, 15 more days.
        let spent = Nanos::parse_decimal("40").unwrap();
        assert_eq!(
            exhaustion_date(date, budget, spent).as_deref(),
            Some("2026-11-25")
        );
        assert_eq!(exhaustion_date(date, budget, Nanos::ZERO), None);
        assert_eq!(
            exhaustion_date(date, budget, budget).as_deref(),
            Some("2026-11-10")
        );
    }
}
