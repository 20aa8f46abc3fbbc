//! A price file: the `[[prices]]`, `include` and `[[plans]]` of any TOML
//! file (a full configuration, a prices-only file, a catalog), read into
//! both layers of billing, and the version rows are charged under.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::catalog;
use super::errors::{ConfigError, ConfigErrors, Problems};
use super::plans::{self, Plan};
use super::prices::{PriceChanges, PriceEntry, PriceTable, RawPrice, validate_dated_prices};

/// Only the prices of a file (a full configuration, a prices-only file or a
/// catalog): its `[[prices]]` and those of the catalogs it includes.
#[derive(Debug, Deserialize)]
struct PricesFile {
    #[serde(default)]
    include: Vec<String>,
    /// A catalog read as the price file states its currency here.
    currency: Option<String>,
    #[serde(default)]
    prices: Vec<RawPrice>,
    #[serde(default)]
    plans: Vec<plans::RawPlan>,
}

/// A price table and its version, read from any TOML file with `[[prices]]`
/// (and `include`), to be billed in `currency`.
pub fn load_price_table(path: &Path, currency: &str) -> Result<(PriceTable, String), ConfigErrors> {
    load_billing(path, currency, &crate::calendar::Calendar::utc())
        .map(|billing| (billing.prices, billing.version))
}

/// A price file's prices, their dated changes and its plans: both layers of
/// billing, to be billed in `currency`, dates read in `calendar`.
pub struct Billing {
    pub prices: PriceTable,
    pub changes: PriceChanges,
    pub plans: BTreeMap<String, Plan>,
    pub version: String,
}

/// `load_price_table` with the file's dated prices and `[[plans]]`.
pub fn load_billing(
    path: &Path,
    currency: &str,
    calendar: &crate::calendar::Calendar,
) -> Result<Billing, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let file: PricesFile = toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.display().to_string(),
        source: Box::new(source),
    })?;
    catalog::check_currency(path, file.currency.as_deref(), currency)?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let merged = catalog::merge(file.prices, &file.include, dir, currency)?;
    let mut problems = Problems::default();
    let (prices, changes) = validate_dated_prices(&merged.entries, calendar, &mut problems);
    let plans = plans::validate(file.plans, &prices, calendar, &mut problems);
    let version = price_version(&merged.entries, &plans);
    problems.finish(Billing {
        prices,
        changes,
        plans,
        version,
    })
}

/// One hash of what rows are charged under: the providers' prices and, where
/// there are plans, theirs (appended only then, so versions without plans stay).
pub(super) fn price_version(prices: &[PriceEntry], plans: &BTreeMap<String, Plan>) -> String {
    let mut hasher = Sha256::new();
    for field in plans::version_fields(plans) {
        hasher.update(field.as_bytes());
        hasher.update([2]);
    }
    for PriceEntry { price: p, .. } in prices {
        for field in [
            p.provider.as_str(),
            p.model.as_str(),
            p.input.as_str(),
            p.cached_input.as_deref().unwrap_or(""),
            p.cache_write.as_deref().unwrap_or(""),
            p.output.as_deref().unwrap_or(""),
        ] {
            hasher.update(field.as_bytes());
            hasher.update([0]);
        }
        if let Some(from) = &p.effective_from {
            hasher.update(from.as_bytes());
            hasher.update([3]);
        }
        // Appended only when set, so tables without tiers keep their version.
        if let Some(long) = &p.long_context {
            for field in [
                long.above_tokens.to_string().as_str(),
                long.input.as_str(),
                long.cached_input.as_deref().unwrap_or(""),
                long.cache_write.as_deref().unwrap_or(""),
                long.output.as_str(),
            ] {
                hasher.update(field.as_bytes());
                hasher.update([1]);
            }
        }
        if let Some(fee) = &p.web_search {
            hasher.update(fee.as_bytes());
            hasher.update([4]);
        }
    }
    let digest = hasher.finalize();
    digest.iter().take(6).fold(String::new(), |mut out, b| {
        use std::fmt::Write;
        let _ = write!(out, "{b:02x}");
        out
    })
}
