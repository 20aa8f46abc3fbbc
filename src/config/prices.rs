//! `[[prices]]`: what each model costs at its provider, dated changes
//! included, and the price files that carry only prices.

use std::collections::HashMap;

use serde::Deserialize;

use super::errors::Problems;
use crate::money::{MoneyError, Nanos, PricePerMTok};
use crate::tokenize::Encoding;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrice {
    pub(super) provider: String,
    pub(super) model: String,
    pub(super) input: String,
    pub(super) cached_input: Option<String>,
    pub(super) cache_write: Option<String>,
    /// Absent for an embeddings model, which generates nothing: a request
    /// that would generate through it is refused (its output has no price).
    pub(super) output: Option<String>,
    /// The model's tiktoken encoding; default `tokenizer.encoding`.
    pub(super) encoding: Option<String>,
    /// The most input tokens the model bills for one image (its largest,
    /// highest-detail one); default the worst known figure
    /// (`tokenize::WORST_IMAGE_TOKENS`), since a smaller guess lets images outspend their hold.
    pub(super) image_tokens: Option<u64>,
    /// Higher rates for calls whose prompt passes a length.
    pub(super) long_context: Option<RawLongContext>,
    /// The fee per search of the provider's web search tool, in the
    /// currency (`"0.01"`); a route lets the tool leave only where every
    /// target has one (`routes.<name>.server_tools`).
    pub(super) web_search: Option<String>,
    /// What output the model may bill without streaming it: `none`, only
    /// `reasoning` a request asks for, or `always` (the default: it may
    /// reason unasked). Streams grow their hold only where none is hidden.
    pub(super) hidden_output: Option<HiddenOutput>,
    /// `YYYY-MM-DD`: the entry applies from the start of that day in
    /// `billing.timezone`; the model's entry without a date applies before.
    pub(super) effective_from: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLongContext {
    pub(super) above_tokens: u64,
    pub(super) input: String,
    pub(super) cached_input: Option<String>,
    pub(super) cache_write: Option<String>,
    pub(super) output: String,
}

/// A `[[prices]]` entry and the name its errors carry: `prices[3]` in the
/// configuration itself, `prices/openai.toml: prices[3]` in a catalog.
#[derive(Debug)]
pub(super) struct PriceEntry {
    pub(super) entry: String,
    pub(super) price: RawPrice,
}

/// Prices of one model at one provider, per 1M tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input: PricePerMTok,
    pub cached_input: PricePerMTok,
    pub cache_write: PricePerMTok,
    pub output: PricePerMTok,
    /// Rates for every token of a call whose prompt has more than
    /// `above_tokens` tokens (how long-context models are priced).
    pub long_context: Option<LongContext>,
    /// The fee per search of the provider's web search tool, where it is priced.
    pub web_search: Option<Nanos>,
    pub hidden_output: HiddenOutput,
}

/// Output a model may bill that its stream never shows. A stream's hold can
/// grow with what the relay sees only when nothing is hidden: unseen tokens
/// would pass the hold before any step was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HiddenOutput {
    /// Every billed output token is streamed (reasoning too, in full).
    None,
    /// Reasoning, when the request asks for it (a summarized or hidden
    /// thinking); nothing otherwise.
    Reasoning,
    /// The model may reason unasked.
    #[default]
    Always,
}

impl HiddenOutput {
    /// Whether a request that does (or does not) ask for reasoning may be
    /// billed output its stream does not show; `counted`: the stream reports
    /// its hidden reasoning's tokens as it goes.
    pub fn hides(self, asks_reasoning: bool, counted: bool) -> bool {
        match self {
            HiddenOutput::None => false,
            HiddenOutput::Reasoning => asks_reasoning && !counted,
            HiddenOutput::Always => true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongContext {
    pub above_tokens: u64,
    pub input: PricePerMTok,
    pub cached_input: PricePerMTok,
    pub cache_write: PricePerMTok,
    pub output: PricePerMTok,
}

/// Prices by (provider, model): each model's undated price (or, for one
/// priced only from a date, its first).
pub type PriceTable = HashMap<(String, String), Price>;

/// Each model's dated prices (`effective_from`), in order: (from Unix ms, price).
pub type PriceChanges = HashMap<(String, String), Vec<(u64, Price)>>;

/// The price of a model at `at_ms`: its latest change by then, else its undated price.
pub fn price_at(
    prices: &PriceTable,
    changes: &PriceChanges,
    key: &(String, String),
    at_ms: u64,
) -> Option<Price> {
    let dated = changes
        .get(key)
        .and_then(|list| list.iter().rev().find(|(from, _)| *from <= at_ms));
    dated
        .map(|(_, price)| *price)
        .or_else(|| prices.get(key).copied())
}

/// A rate per 1M tokens; one that does not parse is named and read as zero,
/// so the checks after it go on.
fn parse_price(entry: &str, field: &str, text: &str, problems: &mut Problems) -> PricePerMTok {
    PricePerMTok::parse_decimal(text).unwrap_or_else(|e: MoneyError| {
        problems.add(format!("{entry}.{field}"), e.to_string());
        PricePerMTok::default()
    })
}

/// The output rate of a model priced for input only (an embeddings model):
/// no hold could afford it, and a generating request is refused before that
/// (`Route::unpriced_output`).
pub const UNPRICED_OUTPUT: PricePerMTok = PricePerMTok::from_nanos(Nanos::MAX);

/// A fee per use, in the currency.
fn parse_fee(entry: &str, field: &str, text: &str, problems: &mut Problems) -> Nanos {
    Nanos::parse_decimal(text).unwrap_or_else(|e: MoneyError| {
        problems.add(format!("{entry}.{field}"), e.to_string());
        Nanos::ZERO
    })
}

/// The undated price of each model, and its dated changes; `calendar` says
/// where a date begins. An entry with a problem is still priced (at what
/// could be read), so routes naming its model are not refused for its sake.
pub(super) fn validate_dated_prices(
    raw: &[PriceEntry],
    calendar: &crate::calendar::Calendar,
    problems: &mut Problems,
) -> (PriceTable, PriceChanges) {
    let (undated, dated): (Vec<&PriceEntry>, Vec<&PriceEntry>) =
        raw.iter().partition(|e| e.price.effective_from.is_none());
    let mut prices = HashMap::new();
    for entry in undated {
        let (key, price) = validate_price(entry, problems);
        if prices.insert(key.clone(), price).is_some() {
            problems.add(
                &entry.entry,
                format!("a second price for {}/{}", key.0, key.1),
            );
        }
    }
    let mut changes: PriceChanges = HashMap::new();
    for entry in dated {
        let field = format!("{}.effective_from", entry.entry);
        let text = entry.price.effective_from.as_deref().unwrap_or("");
        let (key, price) = validate_price(entry, problems);
        let Some(day) = calendar.day(text) else {
            problems.add(&field, format!("`{text}` is not a YYYY-MM-DD date"));
            continue;
        };
        let list = changes.entry(key.clone()).or_default();
        if list.iter().any(|(at, _)| *at == day.start_ms) {
            problems.add(
                field,
                format!("a second price for {}/{} from {text}", key.0, key.1),
            );
        }
        list.push((day.start_ms, price));
    }
    for (key, list) in &mut changes {
        list.sort_by_key(|(at, _)| *at);
        // A model priced only from a date is priced at its first entry before it too.
        if !prices.contains_key(key)
            && let Some((_, first)) = list.first()
        {
            prices.insert(key.clone(), *first);
        }
    }
    (prices, changes)
}

fn validate_price(price_entry: &PriceEntry, problems: &mut Problems) -> ((String, String), Price) {
    let PriceEntry { entry, price: p } = price_entry;
    let input = parse_price(entry, "input", &p.input, problems);
    // Without a listed cached or cache-write price, those tokens are billed as plain input.
    let mut or_input = |field: &str, text: &Option<String>, input| match text {
        Some(text) => parse_price(entry, field, text, problems),
        None => input,
    };
    let cached_input = or_input("cached_input", &p.cached_input, input);
    let cache_write = or_input("cache_write", &p.cache_write, input);
    let price = Price {
        input,
        cached_input,
        cache_write,
        output: match &p.output {
            Some(text) => parse_price(entry, "output", text, problems),
            None => UNPRICED_OUTPUT,
        },
        long_context: p
            .long_context
            .as_ref()
            .map(|long| long_context(&format!("{entry}.long_context"), long, problems)),
        web_search: p
            .web_search
            .as_deref()
            .map(|text| parse_fee(entry, "web_search", text, problems)),
        hidden_output: p.hidden_output.unwrap_or_default(),
    };
    ((p.provider.clone(), p.model.clone()), price)
}

fn long_context(entry: &str, long: &RawLongContext, problems: &mut Problems) -> LongContext {
    let input = parse_price(entry, "input", &long.input, problems);
    let mut or_input = |field: &str, text: &Option<String>| match text {
        Some(text) => parse_price(entry, field, text, problems),
        None => input,
    };
    LongContext {
        above_tokens: long.above_tokens,
        input,
        cached_input: or_input("cached_input", &long.cached_input),
        cache_write: or_input("cache_write", &long.cache_write),
        output: parse_price(entry, "output", &long.output, problems),
    }
}

/// How a model's `[[prices]]` entry says its prompts count, where it does.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ModelCounting {
    pub(super) encoding: Option<Encoding>,
    pub(super) image_tokens: Option<u64>,
}

pub(super) fn model_encodings(
    raw: &[PriceEntry],
    problems: &mut Problems,
) -> HashMap<(String, String), ModelCounting> {
    let mut countings = HashMap::new();
    for PriceEntry { entry, price: p } in raw {
        let encoding = p.encoding.as_deref().and_then(|name| {
            let parsed = Encoding::parse(name);
            if parsed.is_none() {
                problems.add(
                    format!("{entry}.encoding"),
                    format!("must be {}", Encoding::NAMES),
                );
            }
            parsed
        });
        if p.image_tokens == Some(0) {
            problems.add(format!("{entry}.image_tokens"), "must be positive");
        }
        if encoding.is_some() || p.image_tokens.is_some() {
            let counting = ModelCounting {
                encoding,
                image_tokens: p.image_tokens,
            };
            countings.insert((p.provider.clone(), p.model.clone()), counting);
        }
    }
    countings
}
