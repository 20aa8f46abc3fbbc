//! Which targets a request tries, in which order: targets go by rank, and
//! targets of equal rank are shuffled by weight (the first one tried is
//! picked in proportion to its weight; the others stay as its fallbacks).
//! A complexity route maps a request's complexity (the caller's
//! `X-Tollgate-Complexity`, else a heuristic) onto one of three other routes.
//! Pure functions; randomness comes in as a parameter.

use serde_json::{Map, Value};

use crate::config::{Price, Route, Target};
use crate::money::PricePerMTok;

/// The highest input (cache-write where higher) and output rates the tenant
/// is charged over every target of `route`, at the price tier a prompt of
/// `input_tokens` reaches: what a hold is made at.
pub fn worst_prices(route: &Route, input_tokens: u64) -> (PricePerMTok, PricePerMTok) {
    worst_of(route.targets.iter().map(|t| &t.charge), input_tokens)
}

/// The same rates at the providers' prices: what a hold would be at cost.
pub fn worst_cost_prices(route: &Route, input_tokens: u64) -> (PricePerMTok, PricePerMTok) {
    worst_of(route.targets.iter().map(|t| &t.price), input_tokens)
}

fn worst_of<'a>(
    prices: impl Iterator<Item = &'a Price>,
    input_tokens: u64,
) -> (PricePerMTok, PricePerMTok) {
    let mut input = PricePerMTok::default();
    let mut output = PricePerMTok::default();
    for price in prices {
        let price = crate::pricing::for_prompt(price, input_tokens);
        input = input.max(price.input).max(price.cache_write);
        output = output.max(price.output);
    }
    (input, output)
}

/// Above this many bytes of message text a request is at least `moderate`.
pub const MODERATE_TEXT_BYTES: usize = 2_000;
/// Above this many bytes of message text a request is `complex`.
pub const COMPLEX_TEXT_BYTES: usize = 16_000;
/// With this many tools or more a request is `complex` (with any, at least `moderate`).
pub const COMPLEX_TOOLS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Complexity {
    Simple,
    Moderate,
    Complex,
}

impl Complexity {
    pub fn parse(text: &str) -> Option<Complexity> {
        match text.trim().to_ascii_lowercase().as_str() {
            "simple" => Some(Complexity::Simple),
            "moderate" => Some(Complexity::Moderate),
            "complex" => Some(Complexity::Complex),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Complexity::Simple => "simple",
            Complexity::Moderate => "moderate",
            Complexity::Complex => "complex",
        }
    }

    /// The heuristic for requests that do not say: the bytes of message text
    /// (string contents and text parts) and the number of tools.
    pub fn estimate(body: &Map<String, Value>) -> Complexity {
        let text_bytes: usize = body
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|message| match message.get("content") {
                Some(Value::String(text)) => text.len(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .map(str::len)
                    .sum(),
                _ => 0,
            })
            .fold(0, usize::saturating_add);
        let tools = body
            .get("tools")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if text_bytes > COMPLEX_TEXT_BYTES || tools >= COMPLEX_TOOLS {
            Complexity::Complex
        } else if text_bytes > MODERATE_TEXT_BYTES || tools > 0 {
            Complexity::Moderate
        } else {
            Complexity::Simple
        }
    }
}

/// The order to try `targets` in (they come sorted by rank). `roll(n)` returns
/// a uniform integer in `0..n`.
pub fn order(targets: &[Target], mut roll: impl FnMut(u32) -> u32) -> Vec<&Target> {
    let mut ordered = Vec::with_capacity(targets.len());
    for group in targets.chunk_by(|a, b| a.rank == b.rank) {
        let mut left: Vec<&Target> = group.iter().collect();
        while !left.is_empty() {
            let total: u32 = left.iter().map(|t| t.weight).fold(0, u32::saturating_add);
            let mut point = roll(total.max(1));
            let mut pick = left.len() - 1;
            for (i, target) in left.iter().enumerate() {
                if point < target.weight {
                    pick = i;
                    break;
                }
                point -= target.weight;
            }
            ordered.push(left.remove(pick));
        }
    }
    ordered
}

/// A uniform integer in `0..n`, for `order`.
pub fn random_roll(n: u32) -> u32 {
    use rand::Rng;
    rand::rng().random_range(0..n.max(1))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::Price;
    use crate::ids::ProviderName;
    use crate::money::PricePerMTok;

    fn target(provider: &str, rank: u32, weight: u32) -> Target {
        let price = Price {
            input: PricePerMTok::default(),
            cached_input: PricePerMTok::default(),
            cache_write: PricePerMTok::default(),
            output: PricePerMTok::default(),
            long_context: None,
            web_search: None,
            hidden_output: crate::config::HiddenOutput::default(),
        };
        Target {
            provider: ProviderName::new(provider),
            model: "m".to_owned(),
            price,
            charge: price,
            changes: Vec::new(),
            counting: crate::tokenize::Counting {
                encoding: crate::tokenize::Encoding::O200kBase,
                safety_percent: 100,
                image_tokens: crate::tokenize::WORST_IMAGE_TOKENS,
            },
            rank,
            weight,
        }
    }

    fn names(ordered: &[&Target]) -> Vec<String> {
        ordered.iter().map(|t| t.provider.to_string()).collect()
    }

    #[test]
    fn ranks_keep_their_order_and_equal_ranks_split_by_weight() {
        let targets = [target("a", 0, 3), target("b", 0, 1), target("c", 1, 1)];
        // Points 0..=2 fall in a's weight, 3 in b's.
        for point in 0..3 {
            let ordered = order(&targets, |n| if n == 4 { point } else { 0 });
            assert_eq!(names(&ordered), ["a", "b", "c"], "point {point}");
        }
        let ordered = order(&targets, |n| if n == 4 { 3 } else { 0 });
        assert_eq!(names(&ordered), ["b", "a", "c"]);
    }

    #[test]
    fn every_weighted_pick_is_in_proportion() {
        let targets = [target("a", 0, 1), target("b", 0, 2), target("c", 0, 1)];
        let mut firsts = std::collections::HashMap::new();
        for point in 0..4 {
            let mut rolls = [point, 0, 0].into_iter();
            let ordered = order(&targets, |_| rolls.next().unwrap());
            assert_eq!(ordered.len(), 3);
            *firsts.entry(names(&ordered)[0].clone()).or_insert(0) += 1;
        }
        assert_eq!(firsts["a"], 1);
        assert_eq!(firsts["b"], 2);
        assert_eq!(firsts["c"], 1);
    }

    #[test]
    fn the_heuristic_looks_at_text_and_tools() {
        let body = |text: &str, tools: usize| {
            let tools: Vec<Value> = (0..tools)
                .map(|i| json!({"type": "function", "function": {"name": format!("f{i}")}}))
                .collect();
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": text}]}], "tools": tools})
                .as_object()
                .unwrap()
                .clone()
        };
        assert_eq!(Complexity::estimate(&body("hi", 0)), Complexity::Simple);
        assert_eq!(Complexity::estimate(&body("hi", 1)), Complexity::Moderate);
        assert_eq!(
            Complexity::estimate(&body(&"x".repeat(2001), 0)),
            Complexity::Moderate
        );
        assert_eq!(Complexity::estimate(&body("hi", 5)), Complexity::Complex);
        assert_eq!(
            Complexity::estimate(&body(&"x".repeat(16_001), 0)),
            Complexity::Complex
        );
        assert_eq!(Complexity::parse(" Complex "), Some(Complexity::Complex));
        assert_eq!(Complexity::parse("hard"), None);
    }
}
