//! Cost analysis: what one call costs (p50/p95/p99 of its charge per feature
//! and model) and each month's spend beside the month before.

use sea_orm::DatabaseConnection;
use serde::Serialize;

use super::spend::day_filter_from;
use super::{AdminError, invalid};
use crate::bill::amount::Signed;
use crate::calendar::{Calendar, Period};
use crate::ledger::analysis::{self, MonthKey};
use crate::money::Nanos;

/// Groups a distribution lists by default and at most: three database
/// reads each.
const DEFAULT_GROUPS: u64 = 50;
const MAX_GROUPS: u64 = 500;
/// Percentiles, in thousandths.
const PERCENTILES: [(&str, u64); 3] = [("p50", 500), ("p95", 950), ("p99", 990)];

#[derive(Debug, Default)]
pub struct DistributionQuery {
    pub tenant: Option<String>,
    /// `YYYY-MM-DD` (UTC), inclusive.
    pub from: Option<String>,
    pub to: Option<String>,
    pub limit: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct Distribution {
    pub tenant: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub currency: String,
    /// Feature and model groups, the most charged first.
    pub rows: Vec<CallCosts>,
}

/// What one call of a feature on a model was charged: a call is a detail
/// row of the ledger (an upstream attempt) other than a cache hit; days
/// rolled up past `ledger.retention_days` keep no calls and are not counted.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct CallCosts {
    pub feature: String,
    pub model: String,
    pub calls: u64,
    pub total: Nanos,
    /// Nearest rank: the charge of the ⌈p·n⌉-th cheapest call.
    pub p50: Nanos,
    pub p95: Nanos,
    pub p99: Nanos,
    pub max: Nanos,
}

/// The rank (1-based) of the `per_mille` percentile among `n` values.
fn nearest_rank(n: u64, per_mille: u64) -> u64 {
    n.saturating_mul(per_mille).div_ceil(1000).max(1)
}

pub async fn distribution(
    db: &DatabaseConnection,
    currency: &str,
    query: DistributionQuery,
) -> Result<Distribution, AdminError> {
    let limit = query.limit.unwrap_or(DEFAULT_GROUPS);
    if !(1..=MAX_GROUPS).contains(&limit) {
        return Err(invalid("limit", format!("use 1 to {MAX_GROUPS}")));
    }
    let filter = day_filter_from(
        query.tenant.as_deref(),
        query.from.as_deref(),
        query.to.as_deref(),
    )?;
    let mut rows = Vec::new();
    for group in analysis::call_groups(db, &filter, limit).await? {
        let calls = u64::try_from(group.calls).unwrap_or(0);
        let mut at = [Nanos::ZERO; 3];
        for (slot, (_, per_mille)) in at.iter_mut().zip(PERCENTILES) {
            let rank = nearest_rank(calls, per_mille);
            let charge =
                analysis::charge_at_rank(db, &filter, &group.feature, &group.model, rank).await?;
            *slot = Nanos::from_db(charge);
        }
        rows.push(CallCosts {
            feature: group.feature,
            model: group.model,
            calls,
            total: Nanos::from_db(group.total_nanos.unwrap_or(0)),
            p50: at[0],
            p95: at[1],
            p99: at[2],
            max: Nanos::from_db(group.max_nanos.unwrap_or(0)),
        });
    }
    Ok(Distribution {
        tenant: query.tenant,
        from: query.from,
        to: query.to,
        currency: currency.to_owned(),
        rows,
    })
}

/// Months a month-over-month report covers by default and at most.
const DEFAULT_MONTHS: u32 = 6;
const MAX_MONTHS: u32 = 36;

#[derive(Debug, Default)]
pub struct MonthlyQuery {
    pub tenant: Option<String>,
    /// `tenant` (default) or `feature`.
    pub group_by: Option<String>,
    pub months: Option<u32>,
    /// The last month, `YYYY-MM` of `billing.timezone`; the current one by default.
    pub to: Option<String>,
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct Monthly {
    pub tenant: Option<String>,
    pub group_by: String,
    pub timezone: String,
    pub currency: String,
    pub months: Vec<String>,
    /// The last month's largest first.
    pub rows: Vec<MonthlyRow>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct MonthlyRow {
    pub key: String,
    pub months: Vec<MonthCost>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct MonthCost {
    pub month: String,
    pub cost: Nanos,
    /// This month less the one before (`None` for the first month shown).
    pub change: Option<Signed>,
    /// `change ÷` the month before (`None` where that month spent nothing).
    pub change_share: Option<f64>,
}

/// `count` month keys ending with `last` (`YYYY-MM`), oldest first.
fn month_keys(last: &str, count: u32) -> Option<Vec<String>> {
    let (year, month) = last.split_once('-')?;
    if year.len() != 4 || month.len() != 2 {
        return None;
    }
    let (year, month): (i32, i32) = (year.parse().ok()?, month.parse().ok()?);
    if !(1..=12).contains(&month) {
        return None;
    }
    let last_index = year * 12 + month - 1;
    let first = last_index - i32::try_from(count).ok()? + 1;
    Some(
        (first..=last_index)
            .map(|i| format!("{:04}-{:02}", i.div_euclid(12), i.rem_euclid(12) + 1))
            .collect(),
    )
}

pub async fn monthly(
    db: &DatabaseConnection,
    calendar: &Calendar,
    currency: &str,
    now_ms: u64,
    query: MonthlyQuery,
) -> Result<Monthly, AdminError> {
    let group_by = query.group_by.unwrap_or_else(|| "tenant".to_owned());
    let key = match group_by.as_str() {
        "tenant" => MonthKey::Tenant,
        "feature" => MonthKey::Feature,
        _ => return Err(invalid("group_by", "use tenant or feature")),
    };
    let count = query.months.unwrap_or(DEFAULT_MONTHS);
    if !(1..=MAX_MONTHS).contains(&count) {
        return Err(invalid("months", format!("use 1 to {MAX_MONTHS}")));
    }
    let last = query
        .to
        .unwrap_or_else(|| calendar.window(Period::Month, now_ms).key);
    // One month before the first shown gives the first its change.
    let months = month_keys(&last, count + 1)
        .ok_or_else(|| invalid("to", format!("`{last}` is not a YYYY-MM month")))?;
    let spend = analysis::month_spend(db, query.tenant.as_deref(), key, &months).await?;
    let mut rows = month_rows(&months, spend);
    rows.sort_by(|a, b| {
        let last_cost = |r: &MonthlyRow| r.months.last().map_or(Nanos::ZERO, |m| m.cost);
        last_cost(b)
            .cmp(&last_cost(a))
            .then_with(|| a.key.cmp(&b.key))
    });
    if let Some(limit) = query.limit {
        rows.truncate(limit);
    }
    Ok(Monthly {
        tenant: query.tenant,
        group_by,
        timezone: calendar.name().to_owned(),
        currency: currency.to_owned(),
        months: months.into_iter().skip(1).collect(),
        rows,
    })
}

/// Each key's months (the first of `months` only as the base of a change).
fn month_rows(months: &[String], spend: Vec<analysis::MonthSpend>) -> Vec<MonthlyRow> {
    use std::collections::BTreeMap;
    let mut by_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for row in spend {
        let Some(at) = months.iter().position(|m| *m == row.period) else {
            continue;
        };
        let costs = by_key
            .entry(row.key)
            .or_insert_with(|| vec![0; months.len()]);
        costs[at] = costs[at].saturating_add(row.charged_nanos.unwrap_or(0));
    }
    by_key
        .into_iter()
        .map(|(key, costs)| MonthlyRow {
            key,
            months: months
                .iter()
                .zip(&costs)
                .enumerate()
                .skip(1)
                .map(|(i, (month, &cost))| {
                    let before = costs[i - 1];
                    let change = cost.saturating_sub(before);
                    MonthCost {
                        month: month.clone(),
                        cost: Nanos::from_db(cost),
                        change: Some(Signed(change)),
                        change_share: share(change, before),
                    }
                })
                .collect(),
        })
        .collect()
}

#[expect(
    clippy::cast_precision_loss,
    clippy::float_arithmetic,
    reason = "a change's share is for reading, never summed as money"
)]
fn share(change: i64, before: i64) -> Option<f64> {
    (before != 0).then(|| change as f64 / before as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_rank_is_the_ceiling_of_p_times_n() {
        assert_eq!(nearest_rank(1, 500), 1);
        assert_eq!(nearest_rank(100, 500), 50);
        assert_eq!(nearest_rank(100, 950), 95);
        assert_eq!(nearest_rank(100, 990), 99);
        assert_eq!(nearest_rank(101, 990), 100);
        assert_eq!(nearest_rank(7, 950), 7);
    }

    #[test]
    fn months_run_back_across_a_year() {
        assert_eq!(
            month_keys("2027-02", 4).unwrap(),
            ["2026-11", "2026-12", "2027-01", "2027-02"]
        );
        assert!(month_keys("2027-13", 2).is_none());
        assert!(month_keys("27-1", 2).is_none());
    }
}
