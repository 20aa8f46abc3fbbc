//! The drift report: per billing day, provider, model and provider key id,
//! the ledger's cost beside the bill's, their difference (bill − ledger) and
//! its share of the bill, with the tokens of each.
//!
//! A provider's bucket (cut in UTC) lands on the billing day its middle falls
//! in: a UTC day's bucket on the same date in every zone within 12 hours of
//! UTC, an hour's bucket on the local day of that hour. With a billing zone
//! other than UTC, hourly exports compare exactly; daily ones compare a UTC
//! day with a local one.

use std::collections::{BTreeMap, BTreeSet};

use sea_orm::DatabaseConnection;
use serde::Serialize;

use entity::bill_line;

use super::amount::Signed;
use super::ledger_side::{self, LedgerSums};
use crate::calendar::{Calendar, Window};
use crate::storage::StorageError;

/// Which key a provider's calls are billed under, from `[reconcile]`.
pub trait KeyIds {
    /// The provider's id of the API key the gateway calls it with, if configured.
    fn key_id(&self, provider: &str) -> Option<&str>;
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub cached: u64,
    pub cache_write: u64,
    pub output: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DriftRow {
    /// The billing day (`billing.timezone`).
    pub day: String,
    pub provider: String,
    pub model: String,
    /// The provider's API key id (`""` where none is configured for the provider).
    pub key_id: String,
    /// What the gateway computed the calls cost at the providers' prices.
    pub ledger_cost: Signed,
    /// The bill's cost lines summed (`None`: no cost export covers it).
    pub bill_cost: Option<Signed>,
    /// `bill_cost − ledger_cost`: positive where the provider billed more.
    pub difference: Option<Signed>,
    /// `difference ÷ bill_cost` (`None` where the bill has no cost).
    pub share: Option<f64>,
    pub ledger_attempts: u64,
    pub ledger_tokens: Tokens,
    /// From the usage export (`None`: none covers it).
    pub bill_requests: Option<u64>,
    pub bill_tokens: Option<Tokens>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProviderDrift {
    pub provider: String,
    /// Days the bill's costs cover: only those are summed here.
    pub days: Vec<String>,
    pub ledger_cost: Signed,
    pub bill_cost: Signed,
    pub difference: Signed,
    pub share: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DriftReport {
    pub from: String,
    pub to: String,
    pub timezone: String,
    pub currency: String,
    /// How a provider's UTC bucket lands on a billing day.
    pub day_rule: &'static str,
    pub rows: Vec<DriftRow>,
    pub providers: Vec<ProviderDrift>,
}

pub const DAY_RULE: &str =
    "a provider's bucket (UTC) counts on the billing day its middle falls in";

/// (day, provider, model, key id).
type RowKey = (String, String, String, String);

#[derive(Default)]
struct Sides {
    ledger: LedgerSums,
    bill_cost: Option<i64>,
    bill_usage: Option<(u64, Tokens)>,
}

pub async fn report(
    db: &DatabaseConnection,
    calendar: &Calendar,
    keys: &dyn KeyIds,
    provider: Option<&str>,
    (first, last): (&Window, &Window),
) -> Result<Vec<DriftRow>, StorageError> {
    let ledger = ledger_side::sums(db, calendar, provider, first.start_ms, last.end_ms).await?;
    // A bucket lands on the day of its middle: a day's bucket may start up
    // to a day before the range and still land in it.
    let lines = super::store::lines(
        db,
        provider,
        first.start_ms.saturating_sub(86_400_000),
        last.end_ms,
    )
    .await?;
    let (from, to) = (
        calendar.day_key(first.start_ms),
        calendar.day_key(last.start_ms),
    );
    Ok(rows(calendar, keys, ledger, &lines, (&from, &to)))
}

fn rows(
    calendar: &Calendar,
    keys: &dyn KeyIds,
    ledger: BTreeMap<ledger_side::LedgerKey, LedgerSums>,
    lines: &[bill_line::Model],
    (from, to): (&str, &str),
) -> Vec<DriftRow> {
    let mut sides: BTreeMap<RowKey, Sides> = BTreeMap::new();
    for ((day, provider, model), sums) in ledger {
        let key = keys.key_id(&provider).unwrap_or("").to_owned();
        sides.entry((day, provider, model, key)).or_default().ledger = sums;
    }
    for line in lines {
        let (start, end) = (
            u64::try_from(line.start_ms).unwrap_or(0),
            u64::try_from(line.end_ms).unwrap_or(0),
        );
        let day = calendar.day_key(start + end.saturating_sub(start) / 2);
        if day.as_str() < from || day.as_str() > to {
            continue;
        }
        // Lines of a provider with no key id configured are compared whole;
        // with one, a line naming no key (a cost report that cannot group by
        // key) counts for it, and other keys' lines stand apart.
        let key = match keys.key_id(&line.provider) {
            None => String::new(),
            Some(own) if line.key_id.is_empty() => own.to_owned(),
            Some(_) => line.key_id.clone(),
        };
        let entry = sides
            .entry((day, line.provider.clone(), line.model.clone(), key))
            .or_default();
        add_line(entry, line);
    }
    sides
        .into_iter()
        .map(|(key, sides)| drift_row(&key, sides))
        .collect()
}

fn add_line(entry: &mut Sides, line: &bill_line::Model) {
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    if let Some(amount) = line.amount_nanos {
        entry.bill_cost = Some(entry.bill_cost.unwrap_or(0).saturating_add(amount));
        return;
    }
    let (requests, tokens) = entry.bill_usage.get_or_insert_default();
    *requests += count(line.requests);
    tokens.input += count(line.input_tokens);
    tokens.cached += count(line.cached_tokens);
    tokens.cache_write += count(line.cache_write_tokens);
    tokens.output += count(line.output_tokens);
}

fn drift_row((day, provider, model, key_id): &RowKey, sides: Sides) -> DriftRow {
    let ledger = sides.ledger;
    let difference = sides
        .bill_cost
        .map(|bill| bill.saturating_sub(ledger.cost_nanos));
    DriftRow {
        day: day.clone(),
        provider: provider.clone(),
        model: model.clone(),
        key_id: key_id.clone(),
        ledger_cost: Signed(ledger.cost_nanos),
        bill_cost: sides.bill_cost.map(Signed),
        difference: difference.map(Signed),
        share: share(difference.unwrap_or(0), sides.bill_cost),
        ledger_attempts: ledger.attempts,
        ledger_tokens: Tokens {
            input: ledger.input_tokens,
            cached: ledger.cached_tokens,
            cache_write: ledger.cache_write_tokens,
            output: ledger.output_tokens,
        },
        bill_requests: sides.bill_usage.as_ref().map(|(r, _)| *r),
        bill_tokens: sides.bill_usage.map(|(_, t)| t),
    }
}

/// `difference ÷ bill`: a ratio for reading and alerting, not money.
#[expect(
    clippy::cast_precision_loss,
    clippy::float_arithmetic,
    reason = "a share is shown and compared with a threshold, never summed as money"
)]
fn share(difference: i64, bill: Option<i64>) -> Option<f64> {
    bill.filter(|b| *b != 0)
        .map(|bill| difference as f64 / bill as f64)
}

/// Per provider, over the days its bill's costs cover: the whole drift.
pub fn by_provider(rows: &[DriftRow]) -> Vec<ProviderDrift> {
    let covered: BTreeSet<(&str, &str)> = rows
        .iter()
        .filter(|r| r.bill_cost.is_some())
        .map(|r| (r.provider.as_str(), r.day.as_str()))
        .collect();
    let mut totals: BTreeMap<&str, (BTreeSet<&str>, i64, i64)> = BTreeMap::new();
    for row in rows {
        if !covered.contains(&(row.provider.as_str(), row.day.as_str())) {
            continue;
        }
        let total = totals.entry(row.provider.as_str()).or_default();
        total.0.insert(row.day.as_str());
        total.1 = total.1.saturating_add(row.ledger_cost.0);
        total.2 = total.2.saturating_add(row.bill_cost.map_or(0, |c| c.0));
    }
    totals
        .into_iter()
        .map(|(provider, (days, ledger, bill))| ProviderDrift {
            provider: provider.to_owned(),
            days: days.into_iter().map(str::to_owned).collect(),
            ledger_cost: Signed(ledger),
            bill_cost: Signed(bill),
            difference: Signed(bill.saturating_sub(ledger)),
            share: share(bill.saturating_sub(ledger), Some(bill)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Own;

    impl KeyIds for Own {
        fn key_id(&self, _provider: &str) -> Option<&str> {
            Some("key_own")
        }
    }

    fn line(start: &str, end: &str, key: &str, amount: i64) -> bill_line::Model {
        let ms = |t: &str| i64::try_from(crate::period::parse_instant(t).unwrap()).unwrap();
        bill_line::Model {
            provider: "openai".to_owned(),
            report: "openai_costs".to_owned(),
            start_ms: ms(start),
            end_ms: ms(end),
            key_id: key.to_owned(),
            model: "m".to_owned(),
            item: String::new(),
            requests: 0,
            input_tokens: 0,
            cached_tokens: 0,
            cache_write_tokens: 0,
            output_tokens: 0,
            amount_nanos: Some(amount),
            imported_at_ms: 0,
        }
    }

    /// New York is 5 hours behind UTC in December: a UTC day's bucket lands
    /// on its own date (its middle is 07:00 there), an hour's bucket on the
    /// local day of that hour.
    #[test]
    fn a_utc_bucket_lands_on_the_billing_day_its_middle_falls_in() {
        let calendar = Calendar::named("America/New_York").unwrap();
        let lines = [
            line("2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", "", 5),
            line("2026-12-02T03:00:00Z", "2026-12-02T04:00:00Z", "key_own", 7),
            line(
                "2026-12-02T05:00:00Z",
                "2026-12-02T06:00:00Z",
                "key_else",
                11,
            ),
        ];
        let rows = rows(
            &calendar,
            &Own,
            BTreeMap::new(),
            &lines,
            ("2026-12-01", "2026-12-02"),
        );
        let found: Vec<(&str, &str, Option<i64>)> = rows
            .iter()
            .map(|r| (r.day.as_str(), r.key_id.as_str(), r.bill_cost.map(|c| c.0)))
            .collect();
        assert_eq!(
            found,
            [
                ("2026-12-01", "key_own", Some(12)),
                ("2026-12-02", "key_else", Some(11)),
            ]
        );
    }
}
