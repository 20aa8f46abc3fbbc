//! `[[plans]]`: what a tenant is billed, over what its calls cost. Metering
//! and billing are separate layers: every ledger row keeps the provider's
//! cost (`cost_nanos`, at `[[prices]]`) and the tenant's charge
//! (`charged_nanos`, at its plan's prices), so either can be recomputed.
//! A plan marks every provider price up by `markup_percent`, and may list
//! negotiated prices for some models, which replace the marked-up ones. A
//! tenant on no plan is charged the cost. Budgets, credits and the budget
//! headers count the charge, so a plan's prices are also what is held.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde::Deserialize;

use super::errors::{ConfigError, Problems, invalid};
use super::prices::{LongContext, Price, PriceChanges, RawPrice, price_at, validate_dated_prices};
use super::routes::Route;
use crate::calendar::Calendar;
use crate::money::{Nanos, PricePerMTok};

use super::prices::PriceEntry;

/// The name a tenant on no plan is billed under: the providers' own prices.
pub const COST: &str = "cost";
/// Markups are kept in millionths of the cost: 1,000,000 is +100 %.
const PPM: u128 = 1_000_000;
/// +1,000 %: a larger markup is a typo more likely than a price.
const MAX_MARKUP_PPM: u64 = 10_000_000;
/// 100 %: a cache hit never costs more than the call it saves.
const PPM_100: u64 = 1_000_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlan {
    name: String,
    /// A whole number, or a decimal in a string (`"12.5"`).
    #[serde(default)]
    markup_percent: Option<RawPercent>,
    /// A share of what the answer would be charged, for an answer served
    /// from the gateway's caches (exact or semantic); absent: free.
    #[serde(default)]
    cache_hit_percent: Option<RawPercent>,
    #[serde(default)]
    prices: Vec<RawPrice>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawPercent {
    Whole(u64),
    Text(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub name: String,
    /// The markup over cost, in millionths (200,000: +20 %).
    pub markup_ppm: u64,
    /// What a cache hit is charged, in millionths of the answer's charge on
    /// this plan (0: hits are free).
    pub cache_hit_ppm: u64,
    /// Negotiated prices by (provider, model) without a date: these replace the markup.
    pub prices: HashMap<(String, String), Price>,
    /// Negotiated prices from a date (`effective_from`), oldest first: from
    /// then on they replace the undated one, or the markup.
    pub changes: PriceChanges,
}

impl Plan {
    /// What the tenant pays per token, at `at_ms`, of a target the provider
    /// prices at `cost` then.
    pub fn price_for(&self, provider: &str, model: &str, cost: &Price, at_ms: u64) -> Price {
        let key = (provider.to_owned(), model.to_owned());
        let marked = marked_up(cost, self.markup_ppm);
        // A negotiated entry without a search fee charges the marked-up one.
        price_at(&self.prices, &self.changes, &key, at_ms).map_or(marked, |own| Price {
            web_search: own.web_search.or(marked.web_search),
            ..own
        })
    }

    /// The route as this plan charges it at `at_ms`: each target's `charge`
    /// at the plan's prices, its `price` (the cost) as it is.
    pub fn apply(&self, route: &Route, at_ms: u64) -> Route {
        let mut charged = route.clone();
        for target in &mut charged.targets {
            let (provider, model) = (target.provider.as_str(), &target.model);
            target.charge = self.price_for(provider, model, &target.price, at_ms);
        }
        charged
    }

    /// What a cache hit of an answer charged `full` on this plan costs,
    /// rounded up to the nano-unit.
    pub fn cache_hit_charge(&self, full: Nanos) -> Nanos {
        let share = (u128::from(full.get()) * u128::from(self.cache_hit_ppm)).div_ceil(PPM);
        Nanos::new(u64::try_from(share).unwrap_or(u64::MAX))
    }
}

/// Every rate of `price` raised by `ppm` millionths, rounded up to the nano-unit per 1M tokens.
fn marked_up(price: &Price, ppm: u64) -> Price {
    let up = |rate: PricePerMTok| {
        let nanos = u128::from(rate.nanos_per_mtok().get());
        let raised = (nanos * (PPM + u128::from(ppm))).div_ceil(PPM);
        PricePerMTok::from_nanos(Nanos::new(u64::try_from(raised).unwrap_or(u64::MAX)))
    };
    Price {
        input: up(price.input),
        cached_input: up(price.cached_input),
        cache_write: up(price.cache_write),
        output: up(price.output),
        long_context: price.long_context.map(|long| LongContext {
            above_tokens: long.above_tokens,
            input: up(long.input),
            cached_input: up(long.cached_input),
            cache_write: up(long.cache_write),
            output: up(long.output),
        }),
        web_search: price.web_search.map(|fee| {
            let raised = (u128::from(fee.get()) * (PPM + u128::from(ppm))).div_ceil(PPM);
            Nanos::new(u64::try_from(raised).unwrap_or(u64::MAX))
        }),
        hidden_output: price.hidden_output,
    }
}

/// `"12.5"` → 125,000 millionths; at most four decimals, never negative,
/// never above `max`.
fn parse_percent(entry: &str, name: &str, raw: &RawPercent, max: u64) -> Result<u64, ConfigError> {
    let field = format!("{entry}.{name}");
    let ppm = match raw {
        RawPercent::Whole(n) => n.checked_mul(10_000),
        RawPercent::Text(text) => {
            let (whole, fraction) = text.trim().split_once('.').unwrap_or((text.trim(), ""));
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            if !digits(whole) || !(fraction.is_empty() || digits(fraction)) || fraction.len() > 4 {
                return Err(invalid(
                    field,
                    format!("`{text}` is not a percentage such as 20 or \"12.5\""),
                ));
            }
            let scale = 10u64.pow(4 - u32::try_from(fraction.len()).unwrap_or(4));
            let fraction = if fraction.is_empty() {
                0
            } else {
                fraction.parse::<u64>().unwrap_or(0) * scale
            };
            whole
                .parse::<u64>()
                .ok()
                .and_then(|w| w.checked_mul(10_000))
                .and_then(|w| w.checked_add(fraction))
        }
    };
    ppm.filter(|ppm| *ppm <= max)
        .ok_or_else(|| invalid(field, format!("must be from 0 to {}", max / 10_000)))
}

/// The plans by name. A plan's negotiated price must be for a model the
/// gateway prices: one it does not is a typo that would bill nothing.
pub(super) fn validate(
    raw: Vec<RawPlan>,
    prices: &HashMap<(String, String), Price>,
    calendar: &Calendar,
    problems: &mut Problems,
) -> BTreeMap<String, Plan> {
    let mut plans = BTreeMap::new();
    for (i, plan) in raw.into_iter().enumerate() {
        let entry = format!("plans[{i}]");
        if !crate::ids::is_slug(&plan.name) {
            problems.add(
                format!("{entry}.name"),
                "use 1-64 lowercase letters, digits, `-` or `_`",
            );
        }
        if plan.name == COST {
            problems.add(
                format!("{entry}.name"),
                "`cost` is the name of no plan (the providers' own prices)",
            );
        }
        let markup_ppm = plan.markup_percent.as_ref().map_or(0, |p| {
            problems
                .ok(parse_percent(&entry, "markup_percent", p, MAX_MARKUP_PPM))
                .unwrap_or(0)
        });
        let cache_hit_ppm = plan.cache_hit_percent.as_ref().map_or(0, |p| {
            problems
                .ok(parse_percent(&entry, "cache_hit_percent", p, PPM_100))
                .unwrap_or(0)
        });
        let entries: Vec<PriceEntry> = plan
            .prices
            .into_iter()
            .enumerate()
            .map(|(j, price)| PriceEntry {
                entry: format!("{entry}.prices[{j}]"),
                price,
            })
            .collect();
        for PriceEntry { entry, price } in &entries {
            if !prices.contains_key(&(price.provider.clone(), price.model.clone())) {
                problems.add(
                    entry,
                    format!(
                        "{}/{} has no [[prices]] entry: a plan prices only models the gateway prices",
                        price.provider, price.model
                    ),
                );
            }
        }
        let (mut negotiated, changes) = validate_dated_prices(&entries, calendar, problems);
        // A model negotiated only from a date is at the markup before it.
        negotiated.retain(|key, _| {
            entries.iter().any(|e| {
                e.price.effective_from.is_none()
                    && (&e.price.provider, &e.price.model) == (&key.0, &key.1)
            })
        });
        let name = plan.name.clone();
        let plan = Plan {
            name: plan.name,
            markup_ppm,
            cache_hit_ppm,
            prices: negotiated,
            changes,
        };
        if plans.insert(name.clone(), plan).is_some() {
            problems.add(format!("{entry}.name"), format!("a second plan `{name}`"));
        }
    }
    plans
}

/// What the price version hashes of the plans: their names, markups and prices.
pub(super) fn version_fields(plans: &BTreeMap<String, Plan>) -> Vec<String> {
    let mut fields = Vec::new();
    for plan in plans.values() {
        fields.push(format!("plan:{}:{}", plan.name, plan.markup_ppm));
        if plan.cache_hit_ppm > 0 {
            fields.push(format!("plan:{}:hits:{}", plan.name, plan.cache_hit_ppm));
        }
        let mut negotiated: Vec<_> = plan.prices.iter().collect();
        negotiated.sort_by(|a, b| a.0.cmp(b.0));
        for ((provider, model), price) in negotiated {
            fields.push(format!("{provider}/{model}:{}", rates(price)));
        }
        let mut dated: Vec<_> = plan.changes.iter().collect();
        dated.sort_by(|a, b| a.0.cmp(b.0));
        for ((provider, model), list) in dated {
            for (from_ms, price) in list {
                fields.push(format!("{provider}/{model}@{from_ms}:{}", rates(price)));
            }
        }
    }
    fields
}

/// Every rate of a price, in nano-units per 1M tokens: a stable text to hash.
fn rates(price: &Price) -> String {
    let n = |rate: PricePerMTok| rate.nanos_per_mtok().get();
    let mut text = format!(
        "{}/{}/{}/{}",
        n(price.input),
        n(price.cached_input),
        n(price.cache_write),
        n(price.output)
    );
    if let Some(long) = price.long_context {
        let _ = write!(
            text,
            ">{}:{}/{}/{}/{}",
            long.above_tokens,
            n(long.input),
            n(long.cached_input),
            n(long.cache_write),
            n(long.output)
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(input: &str, output: &str) -> Price {
        let p = |s| PricePerMTok::parse_decimal(s).unwrap_or_default();
        Price {
            input: p(input),
            cached_input: p(input),
            cache_write: p(input),
            output: p(output),
            long_context: None,
            web_search: None,
            hidden_output: crate::config::HiddenOutput::default(),
        }
    }

    #[test]
    fn a_markup_raises_every_rate_rounded_up() {
        let plan = Plan {
            name: "resale".into(),
            markup_ppm: 125_000,
            cache_hit_ppm: 0,
            prices: HashMap::new(),
            changes: HashMap::new(),
        };
        // 2 per 1M + 12.5 % = 2.25; 0.000000001 per 1M (one nano) rounds up to two.
        let charged = plan.price_for("p", "m", &price("2", "0.000000001"), 0);
        assert_eq!(charged.input.nanos_per_mtok().to_string(), "2.25");
        assert_eq!(charged.output.nanos_per_mtok().get(), 2);
    }

    #[test]
    fn a_negotiated_price_replaces_the_markup_for_its_model() {
        let negotiated = price("1", "3");
        let plan = Plan {
            name: "bigco".into(),
            markup_ppm: 500_000,
            cache_hit_ppm: 0,
            prices: HashMap::from([(("p".to_owned(), "m".to_owned()), negotiated)]),
            changes: HashMap::new(),
        };
        assert_eq!(plan.price_for("p", "m", &price("2", "8"), 0), negotiated);
        assert_eq!(
            plan.price_for("p", "other", &price("2", "8"), 0)
                .input
                .nanos_per_mtok()
                .to_string(),
            "3"
        );
    }

    #[test]
    fn a_dated_negotiated_price_takes_over_at_its_date_and_the_markup_before() {
        let negotiated = price("1", "3");
        let plan = Plan {
            name: "bigco".into(),
            markup_ppm: 500_000,
            cache_hit_ppm: 0,
            prices: HashMap::new(),
            changes: HashMap::from([(("p".to_owned(), "m".to_owned()), vec![(1_000, negotiated)])]),
        };
        let before = plan.price_for("p", "m", &price("2", "8"), 999);
        assert_eq!(before.input.nanos_per_mtok().to_string(), "3");
        assert_eq!(
            plan.price_for("p", "m", &price("2", "8"), 1_000),
            negotiated
        );
    }

    #[test]
    fn percentages_parse_exactly_or_fail_loudly() {
        let parse = |raw| parse_percent("plans[0]", "markup_percent", &raw, MAX_MARKUP_PPM);
        assert_eq!(parse(RawPercent::Whole(20)).ok(), Some(200_000));
        assert_eq!(parse(RawPercent::Text("12.5".into())).ok(), Some(125_000));
        assert_eq!(parse(RawPercent::Text("0.0001".into())).ok(), Some(1));
        for bad in ["-5", "1.23456", "ten", "", "2000"] {
            assert!(parse(RawPercent::Text(bad.into())).is_err(), "{bad}");
        }
    }
}
