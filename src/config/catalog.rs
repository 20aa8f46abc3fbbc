//! Price catalogs: files of `[[prices]]` that a configuration names in
//! `include`. Published list prices are kept once (the repository's
//! `prices/`) and an operator's own file holds only what it negotiated: its
//! own entry for a provider and model wins over a catalog's.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::errors::{ConfigError, invalid};
use super::prices::{PriceEntry, RawPrice};
use crate::period::Date;

/// An included catalog as loaded, so `check-config` can say how old it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    pub path: PathBuf,
    /// The day its prices were read from `sources` (`YYYY-MM-DD`).
    pub as_of: Option<String>,
    /// The provider's published pricing pages they were read from.
    pub sources: Vec<String>,
    /// Its entries in force.
    pub prices: usize,
    /// Its entries the configuration's own `[[prices]]` replace.
    pub overridden: usize,
}

/// Prices and where they come from, nothing else: a catalog can neither
/// include another nor carry settings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    sources: Vec<String>,
    as_of: Option<String>,
    currency: Option<String>,
    #[serde(default)]
    prices: Vec<RawPrice>,
}

/// Every price in force and the catalogs they came from.
#[derive(Debug)]
pub(super) struct Prices {
    /// The configuration's own entries first, then each catalog's in
    /// `include` order: the price version hashes them in this order, so a
    /// configuration without `include` keeps the version it had.
    pub(super) entries: Vec<PriceEntry>,
    pub(super) catalogs: Vec<Catalog>,
}

/// `own` (the file's `[[prices]]`) plus the entries of each catalog in
/// `include`, whose relative paths start at `dir`. An entry of `own` replaces
/// a catalog's for the same provider and model; two catalogs pricing the same
/// one are refused, as the operator could not tell which one bills.
pub(super) fn merge(
    own: Vec<RawPrice>,
    include: &[String],
    dir: &Path,
    currency: &str,
) -> Result<Prices, ConfigError> {
    let mut entries: Vec<PriceEntry> = own
        .into_iter()
        .enumerate()
        .map(|(i, price)| PriceEntry {
            entry: format!("prices[{i}]"),
            price,
        })
        .collect();
    let own_keys: HashSet<(String, String)> = entries.iter().map(|e| key(&e.price)).collect();
    // Where each catalog price (of a model, from a date) was first read, so a
    // second one names both files.
    let mut first_seen: HashMap<(String, String, Option<String>), String> = HashMap::new();
    let mut catalogs = Vec::with_capacity(include.len());
    for name in include {
        let path = dir.join(name);
        let file = read_catalog(&path)?;
        check_currency(&path, file.currency.as_deref(), currency)?;
        if file
            .as_of
            .as_deref()
            .is_some_and(|day| Date::parse(day).is_none())
        {
            return Err(invalid(
                format!("{}: as_of", path.display()),
                "must be a YYYY-MM-DD date",
            ));
        }
        let mut catalog = Catalog {
            path: path.clone(),
            as_of: file.as_of,
            sources: file.sources,
            prices: 0,
            overridden: 0,
        };
        for (j, price) in file.prices.into_iter().enumerate() {
            let entry = format!("{}: prices[{j}]", path.display());
            let (provider, model) = key(&price);
            let dated = (
                provider.clone(),
                model.clone(),
                price.effective_from.clone(),
            );
            if let Some(first) = first_seen.get(&dated) {
                return Err(invalid(
                    entry,
                    format!("a second price for {provider}/{model} (the first is {first})"),
                ));
            }
            first_seen.insert(dated, entry.clone());
            if own_keys.contains(&(provider, model)) {
                catalog.overridden += 1;
                continue;
            }
            catalog.prices += 1;
            entries.push(PriceEntry { entry, price });
        }
        catalogs.push(catalog);
    }
    Ok(Prices { entries, catalogs })
}

fn key(price: &RawPrice) -> (String, String) {
    (price.provider.clone(), price.model.clone())
}

fn read_catalog(path: &Path) -> Result<CatalogFile, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.display().to_string(),
        source: Box::new(source),
    })
}

/// Prices are bare numbers: a USD list billed as CNY would be off sevenfold,
/// so a file that states its currency must state the billing one.
pub(super) fn check_currency(
    path: &Path,
    stated: Option<&str>,
    billing: &str,
) -> Result<(), ConfigError> {
    match stated {
        Some(stated) if !stated.eq_ignore_ascii_case(billing) => Err(invalid(
            format!("{}: currency", path.display()),
            format!("is {stated}, but billing.currency is {billing}"),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, load_price_table};
    use super::*;
    use crate::money::PricePerMTok;

    const REPOSITORY_CATALOGS: [&str; 6] = [
        "anthropic",
        "deepseek",
        "google",
        "mistral",
        "openai",
        "qwen",
    ];

    fn repository_prices() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("prices")
    }

    fn no_env() -> HashMap<String, String> {
        HashMap::new()
    }

    /// A configuration routing `fast` to `target`: `head` holds top-level
    /// keys (`include`), `tail` more tables (`[[prices]]`, `[billing]`).
    fn config(head: &str, target: &str, tail: &str) -> String {
        format!(
            "{head}\n[providers.deepseek]\nkind = \"openai\"\nbase_url = \"https://api.deepseek.com\"\n\
             [routes.fast]\ntargets = [\"{target}\"]\n{tail}\n"
        )
    }

    fn price(provider: &str, model: &str, input: &str) -> String {
        format!(
            "[[prices]]\nprovider = \"{provider}\"\nmodel = \"{model}\"\ninput = \"{input}\"\noutput = \"1\"\n"
        )
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn per_mtok(text: &str) -> PricePerMTok {
        PricePerMTok::parse_decimal(text).unwrap()
    }

    fn input_of(config: &Config, model: &str) -> PricePerMTok {
        config.prices[&("deepseek".to_owned(), model.to_owned())].input
    }

    #[test]
    fn every_repository_catalog_loads_is_sourced_and_dated_and_prices_its_own_provider() {
        let mut files: Vec<String> = std::fs::read_dir(repository_prices())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(
            files,
            REPOSITORY_CATALOGS.map(|name| format!("{name}.toml"))
        );
        for name in REPOSITORY_CATALOGS {
            let path = repository_prices().join(format!("{name}.toml"));
            let (table, _) = load_price_table(&path, "USD").unwrap_or_else(|e| panic!("{e}"));
            assert!(!table.is_empty(), "{name}");
            for (provider, model) in table.keys() {
                assert_eq!(provider, name, "{name}: {model}");
            }
            let file = read_catalog(&path).unwrap();
            assert!(!file.sources.is_empty(), "{name}: no sources");
            for source in &file.sources {
                assert!(source.starts_with("https://"), "{name}: {source}");
            }
            assert!(
                file.as_of.as_deref().and_then(Date::parse).is_some(),
                "{name}: as_of"
            );
            assert_eq!(file.currency.as_deref(), Some("USD"), "{name}");
        }
        // All of them at once: no catalog prices another's models.
        let text = with_every_catalog("deepseek/deepseek-flash");
        let config = Config::from_toml_in(&text, &repository_prices(), &no_env()).unwrap();
        assert_eq!(config.catalogs.len(), REPOSITORY_CATALOGS.len());
        assert!(
            config
                .catalogs
                .iter()
                .all(|c| c.prices > 0 && c.overridden == 0)
        );
    }

    #[test]
    fn include_adds_the_catalog_entries_to_the_file_own() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = format!(
            "sources = [\"https://example.com/pricing\"]\nas_of = \"2026-12-01\"\ncurrency = \"USD\"\n{}{}",
            price("deepseek", "deepseek-pro", "5"),
            price("openai", "unconfigured-provider", "9")
        );
        write(dir.path(), "a.toml", &catalog);
        let own = price("deepseek", "deepseek-flash", "2");
        let text = config("include = [\"a.toml\"]", "deepseek/deepseek-pro", &own);
        let config = Config::from_toml_in(&text, dir.path(), &no_env()).unwrap();
        assert_eq!(
            config.route("fast").unwrap().targets[0].price.input,
            per_mtok("5")
        );
        assert_eq!(input_of(&config, "deepseek-flash"), per_mtok("2"));
        // A catalog entry whose provider is not configured is kept, and unused.
        assert_eq!(config.prices.len(), 3);
        assert_eq!(
            config.catalogs,
            [Catalog {
                path: dir.path().join("a.toml"),
                as_of: Some("2026-12-01".to_owned()),
                sources: vec!["https://example.com/pricing".to_owned()],
                prices: 2,
                overridden: 0,
            }]
        );
    }

    #[test]
    fn the_file_own_entry_replaces_the_included_one() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.toml",
            &price("deepseek", "deepseek-pro", "5"),
        );
        let own = price("deepseek", "deepseek-pro", "4");
        let text = config("include = [\"a.toml\"]", "deepseek/deepseek-pro", &own);
        let config = Config::from_toml_in(&text, dir.path(), &no_env()).unwrap();
        assert_eq!(
            config.route("fast").unwrap().targets[0].price.input,
            per_mtok("4")
        );
        assert_eq!(config.prices.len(), 1);
        assert_eq!(
            (config.catalogs[0].prices, config.catalogs[0].overridden),
            (0, 1)
        );
    }

    #[test]
    fn include_paths_start_at_the_including_file_and_may_be_absolute() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("prices")).unwrap();
        write(
            &dir.path().join("prices"),
            "a.toml",
            &price("deepseek", "deepseek-pro", "5"),
        );
        let absolute = write(
            dir.path(),
            "b.toml",
            &price("deepseek", "deepseek-flash", "1"),
        );
        let head = format!(
            "include = [\"prices/a.toml\", {:?}]",
            absolute.display().to_string()
        );
        let path = write(
            dir.path(),
            "tollgate.toml",
            &config(&head, "deepseek/deepseek-pro", ""),
        );
        let config = Config::load(&path, &no_env()).unwrap();
        assert_eq!(input_of(&config, "deepseek-pro"), per_mtok("5"));
        assert_eq!(input_of(&config, "deepseek-flash"), per_mtok("1"));
    }

    #[test]
    fn two_catalogs_pricing_one_model_are_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let first = write(
            dir.path(),
            "a.toml",
            &price("deepseek", "deepseek-pro", "5"),
        );
        let second = write(
            dir.path(),
            "b.toml",
            &format!(
                "{}{}",
                price("deepseek", "x", "1"),
                price("deepseek", "deepseek-pro", "6")
            ),
        );
        let head = "include = [\"a.toml\", \"b.toml\"]";
        // Even with the file's own price, which would have replaced both.
        for own in [String::new(), price("deepseek", "deepseek-pro", "4")] {
            let text = config(head, "deepseek/deepseek-pro", &own);
            let error = Config::from_toml_in(&text, dir.path(), &no_env())
                .unwrap_err()
                .to_string();
            assert_eq!(
                error,
                format!(
                    "{}: prices[1]: a second price for deepseek/deepseek-pro (the first is {}: prices[0])",
                    second.display(),
                    first.display()
                )
            );
        }
    }

    #[test]
    fn a_missing_or_unreadable_catalog_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let load = |name: &str| {
            let text = config(
                &format!("include = [\"{name}\"]"),
                "deepseek/deepseek-pro",
                "",
            );
            Config::from_toml_in(&text, dir.path(), &no_env())
                .unwrap_err()
                .to_string()
        };
        let missing = dir.path().join("nope.toml").display().to_string();
        let error = load("nope.toml");
        assert!(
            error.starts_with(&format!("cannot read {missing}: ")),
            "{error}"
        );

        let broken = write(dir.path(), "broken.toml", "[[prices]\n")
            .display()
            .to_string();
        let error = load("broken.toml");
        assert!(error.starts_with(&format!("{broken}: ")), "{error}");

        // A catalog holds prices only: it cannot include another one.
        let nested = write(dir.path(), "nested.toml", "include = [\"a.toml\"]\n");
        let error = load("nested.toml");
        assert!(
            error.starts_with(&format!("{}: ", nested.display())),
            "{error}"
        );
        assert!(error.contains("unknown field `include`"), "{error}");

        let bad = write(
            dir.path(),
            "bad.toml",
            &price("deepseek", "deepseek-pro", "5,0"),
        );
        let error = load("bad.toml");
        assert!(
            error.starts_with(&format!("{}: prices[0].input: ", bad.display())),
            "{error}"
        );

        write(dir.path(), "undated.toml", "as_of = \"December 2026\"\n");
        assert!(load("undated.toml").ends_with(": as_of: must be a YYYY-MM-DD date"));
    }

    #[test]
    fn a_catalog_in_another_currency_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "usd.toml",
            &format!(
                "currency = \"USD\"\n{}",
                price("deepseek", "deepseek-pro", "5")
            ),
        );
        let text = config(
            "include = [\"usd.toml\"]",
            "deepseek/deepseek-pro",
            "[billing]\ncurrency = \"CNY\"",
        );
        let error = Config::from_toml_in(&text, dir.path(), &no_env())
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            format!(
                "{}: currency: is USD, but billing.currency is CNY",
                path.display()
            )
        );
        assert!(load_price_table(&path, "CNY").is_err());
        assert!(load_price_table(&path, "usd").is_ok());
    }

    #[test]
    fn the_price_version_covers_the_included_entries() {
        let dir = tempfile::tempdir().unwrap();
        let text = config("include = [\"a.toml\"]", "deepseek/deepseek-pro", "");
        let version = |catalog: &str| {
            write(dir.path(), "a.toml", catalog);
            Config::from_toml_in(&text, dir.path(), &no_env())
                .unwrap()
                .price_version
                .clone()
        };
        let before = version(&price("deepseek", "deepseek-pro", "5"));
        assert_eq!(before, version(&price("deepseek", "deepseek-pro", "5")));
        assert_ne!(before, version(&price("deepseek", "deepseek-pro", "5.5")));
        let added = format!(
            "{}{}",
            price("deepseek", "deepseek-pro", "5"),
            price("x", "y", "1")
        );
        assert_ne!(before, version(&added));
    }

    /// A config whose one route targets `target`, with every catalog of the repository included.
    fn with_every_catalog(target: &str) -> String {
        let include = REPOSITORY_CATALOGS
            .map(|name| format!("\"{name}.toml\""))
            .join(", ");
        config(&format!("include = [{include}]"), target, "")
    }

    #[test]
    fn a_target_without_a_price_still_fails_with_every_catalog_included() {
        let text = with_every_catalog("deepseek/deepseek-v9");
        let error = Config::from_toml_in(&text, &repository_prices(), &no_env())
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "routes.fast.targets[0]: no price for deepseek/deepseek-v9"
        );
    }

    #[test]
    fn a_price_file_for_reprice_honours_include_and_its_own_entries() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.toml",
            &format!(
                "{}{}",
                price("deepseek", "deepseek-pro", "5"),
                price("deepseek", "x", "1")
            ),
        );
        let path = write(
            dir.path(),
            "new-prices.toml",
            &format!(
                "include = [\"a.toml\"]\n{}",
                price("deepseek", "deepseek-pro", "4")
            ),
        );
        let (table, version) = load_price_table(&path, "USD").unwrap();
        assert_eq!(table.len(), 2);
        assert_eq!(
            table[&("deepseek".to_owned(), "deepseek-pro".to_owned())].input,
            per_mtok("4")
        );
        // The same prices loaded as a configuration carry the same version.
        let text = config(
            "include = [\"a.toml\"]",
            "deepseek/deepseek-pro",
            &price("deepseek", "deepseek-pro", "4"),
        );
        let config = Config::from_toml_in(&text, dir.path(), &no_env()).unwrap();
        assert_eq!(config.price_version, version);
    }
}
