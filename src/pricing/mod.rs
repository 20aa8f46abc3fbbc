//! What a call may cost (the worst case reserved before it) and what it did
//! cost (charged after it), both in integer nano-units.

use crate::config::Price;
use crate::config::server_tools::ServerTool;
use crate::fields::Admitted;
use crate::money::{CostAccumulator, Nanos};

/// Token counts of one upstream call, as the upstream reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// All prompt tokens, cached and cache-write included.
    pub prompt_tokens: u64,
    /// Prompt tokens read from the provider's cache.
    pub cached_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write_tokens: u64,
    pub completion_tokens: u64,
    /// Web searches a provider-run search tool made, each billed a fee.
    pub web_searches: u64,
}

/// The rates a call with this many prompt tokens is charged at: a
/// long-context model's higher ones past its threshold.
#[must_use]
pub fn for_prompt(price: &Price, prompt_tokens: u64) -> Price {
    match price.long_context {
        Some(long) if prompt_tokens > long.above_tokens => Price {
            input: long.input,
            cached_input: long.cached_input,
            cache_write: long.cache_write,
            output: long.output,
            long_context: None,
            web_search: price.web_search,
            hidden_output: price.hidden_output,
        },
        _ => Price {
            long_context: None,
            ..*price
        },
    }
}

/// The real cost of a call at one target's prices (at the tier its prompt
/// length reaches, with its searches' fees), rounded up once.
pub fn charge(price: &Price, usage: &Usage) -> Nanos {
    let price = for_prompt(price, usage.prompt_tokens);
    let cached = usage.cached_tokens.min(usage.prompt_tokens);
    let cache_write = usage.cache_write_tokens.min(usage.prompt_tokens - cached);
    let uncached = usage.prompt_tokens - cached - cache_write;
    let mut cost = CostAccumulator::default();
    cost.add(uncached, price.input)
        .add(cached, price.cached_input)
        .add(cache_write, price.cache_write)
        .add(usage.completion_tokens, price.output);
    cost.total()
        .saturating_add(fees(price.web_search, usage.web_searches))
}

/// The most the admitted provider-run tools may bill in fees at `price`.
pub fn tool_fees(price: &Price, admitted: &[Admitted]) -> Nanos {
    admitted.iter().fold(Nanos::ZERO, |sum, tool| {
        let fee = match tool.tool {
            ServerTool::WebSearch => price.web_search,
            // A fetch bills only the page it reads, as input.
            ServerTool::WebFetch => None,
        };
        sum.saturating_add(fees(fee, u64::from(tool.uses)))
    })
}

/// `uses` of a tool at `fee` each (none where the price lists no fee).
pub fn fees(fee: Option<Nanos>, uses: u64) -> Nanos {
    fee.map_or(Nanos::ZERO, |fee| {
        Nanos::new(fee.get().saturating_mul(uses))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::PricePerMTok;

    fn price(input: &str, cached: &str, output: &str) -> Price {
        let p = |s| PricePerMTok::parse_decimal(s).unwrap();
        Price {
            input: p(input),
            cached_input: p(cached),
            cache_write: p(input),
            output: p(output),
            long_context: None,
            web_search: None,
            hidden_output: crate::config::HiddenOutput::default(),
        }
    }

    #[test]
    fn each_search_is_charged_its_fee_beside_the_tokens() {
        let searching = Price {
            web_search: Some(Nanos::new(10_000_000)),
            ..price("3", "0.3", "15")
        };
        let usage = Usage {
            prompt_tokens: 1_000,
            completion_tokens: 100,
            web_searches: 4,
            ..Usage::default()
        };
        assert_eq!(charge(&searching, &usage).to_string(), "0.0445");
        // A price without a fee charges none: only a route that prices search lets it leave.
        assert_eq!(
            charge(&price("3", "0.3", "15"), &usage).to_string(),
            "0.0045"
        );
    }

    #[test]
    fn a_long_prompt_is_charged_at_the_long_context_rates_on_every_token() {
        let p = |s| PricePerMTok::parse_decimal(s).unwrap();
        let tiered = Price {
            long_context: Some(crate::config::LongContext {
                above_tokens: 200_000,
                input: p("6"),
                cached_input: p("0.6"),
                cache_write: p("7.5"),
                output: p("22.5"),
            }),
            ..price("3", "0.3", "15")
        };
        let usage = |prompt_tokens| Usage {
            prompt_tokens,
            cached_tokens: 0,
            cache_write_tokens: 0,
            completion_tokens: 1000,
            web_searches: 0,
        };
        // 200000 × 3 + 1000 × 15 per 1M: at the threshold, the base rates.
        assert_eq!(charge(&tiered, &usage(200_000)).to_string(), "0.615");
        // 200001 × 6 + 1000 × 22.5 per 1M.
        assert_eq!(charge(&tiered, &usage(200_001)).to_string(), "1.222506");
    }

    #[test]
    fn charges_cached_input_at_its_own_price() {
        let usage = Usage {
            prompt_tokens: 3000,
            cached_tokens: 2000,
            cache_write_tokens: 0,
            completion_tokens: 400,
            web_searches: 0,
        };
        assert_eq!(
            charge(&price("2", "0.04", "8"), &usage).to_string(),
            "0.00528"
        );
    }

    #[test]
    fn inconsistent_usage_never_underflows() {
        let usage = Usage {
            prompt_tokens: 10,
            cached_tokens: 50,
            cache_write_tokens: 50,
            completion_tokens: 0,
            web_searches: 0,
        };
        assert_eq!(charge(&price("1", "1", "1"), &usage), Nanos::new(10_000));
    }
}
