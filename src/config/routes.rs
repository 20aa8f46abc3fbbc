//! `[routes.<name>]`: the targets a route tries, in order, and what else it
//! does for its requests.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::errors::Problems;
use super::prices::{ModelCounting, Price, PriceChanges, PriceTable, UNPRICED_OUTPUT};
use super::providers::Provider;
use super::semantic_cache::{RawSemanticRoute, SemanticRoute};
use super::server_tools;
use crate::ids::{ProviderName, RouteName};
use crate::tokenize::Counting;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    #[serde(default)]
    targets: Vec<RawTarget>,
    /// Identical non-streaming requests of one tenant are answered from the
    /// exact response cache for this long; 0 (default) turns caching off.
    #[serde(default)]
    cache_ttl_ms: u64,
    /// Answered (as the assistant's message) when every target failed, instead of 502.
    degraded_answer: Option<String>,
    /// Makes this a complexity route: each class names the route that serves it.
    complexity: Option<RawComplexity>,
    /// Answers a question close enough to one answered before from the cache.
    semantic_cache: Option<RawSemanticRoute>,
    /// Placed first in every request of the route, before the tenant's prompt.
    platform_prompt: Option<String>,
    /// Forward body fields and `anthropic-beta` values no door's table knows,
    /// uncounted, instead of refusing them: the operator takes the risk
    /// that one of them bills what the hold does not cover.
    #[serde(default)]
    forward_unknown_fields: bool,
    /// Provider-run tools the route lets leave, each bounded and priced.
    #[serde(default)]
    server_tools: server_tools::RawServerTools,
}

/// `"provider/model"`, or a table giving it a rank and a weight.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawTarget {
    Plain(String),
    Weighted(RawWeightedTarget),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWeightedTarget {
    target: String,
    /// Targets are tried by rank; the default is the entry's position.
    rank: Option<u32>,
    /// Among targets of equal rank, the share of requests tried here first.
    #[serde(default = "default_weight")]
    weight: u32,
}

fn default_weight() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawComplexity {
    simple: String,
    moderate: String,
    complex: String,
}
/// The longest platform or tenant prompt (a long system prompt is a few
/// thousand tokens; this leaves room for ten times that).
pub const MAX_PROMPT_BYTES: usize = 256 * 1024;

/// What a route says of fields no door's table names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownFields {
    /// Refused (the default).
    #[default]
    Refuse,
    /// Forwarded uncounted, at the operator's risk (`forward_unknown_fields`).
    Forward,
}

#[derive(Debug, Clone)]
pub struct Target {
    pub provider: ProviderName,
    /// The model name sent upstream.
    pub model: String,
    /// What the provider charges: the call's cost.
    pub price: Price,
    /// What the tenant is charged: `price`, or its plan's (`Plan::apply`).
    pub charge: Price,
    /// The prices that take over on a date, in order (`Route::as_of`).
    pub changes: Vec<(u64, Price)>,
    /// How prompts sent here are counted for the reservation.
    pub counting: Counting,
    /// Targets are tried by rank, lowest first.
    pub rank: u32,
    /// Among targets of equal rank, the share of requests tried here first.
    pub weight: u32,
}

#[derive(Debug, Clone)]
pub struct Route {
    pub name: RouteName,
    pub targets: Vec<Target>,
    /// Every distinct way the targets count prompts (usually one).
    pub countings: Vec<Counting>,
    pub cache_ttl_ms: u64,
    /// The most output any target accepts (its `max_tokens_ceiling`), when every target has one:
    /// a reservation never needs more.
    pub max_tokens_ceiling: Option<u32>,
    pub degraded_answer: Option<String>,
    /// Set on a complexity route, which has no targets of its own.
    pub complexity: Option<ComplexityRoutes>,
    pub semantic_cache: Option<SemanticRoute>,
    /// Placed first in every request of the route (`prompts`), as a stable prefix.
    pub platform_prompt: Option<String>,
    /// What the route does with fields no door's table knows.
    pub unknown_fields: UnknownFields,
    /// Provider-run tools the route lets leave (none by default).
    pub server_tools: server_tools::ServerTools,
}

impl Route {
    /// The route at the prices in force at `at_ms`, when one of its targets
    /// has dated prices (`None`: it is priced as loaded).
    pub fn as_of(&self, at_ms: u64) -> Option<Route> {
        if self.targets.iter().all(|t| t.changes.is_empty()) {
            return None;
        }
        let mut dated = self.clone();
        for target in &mut dated.targets {
            if let Some((_, price)) = target.changes.iter().rev().find(|(from, _)| *from <= at_ms) {
                // A dated entry without a search fee keeps the one before it.
                let web_search = price.web_search.or(target.price.web_search);
                target.price = Price {
                    web_search,
                    ..*price
                };
                target.charge = target.price;
            }
        }
        Some(dated)
    }

    /// A target whose model has no output price (an embeddings model): a
    /// request that generates cannot be served by this route.
    pub fn unpriced_output(&self) -> Option<&Target> {
        self.targets
            .iter()
            .find(|t| t.price.output == UNPRICED_OUTPUT)
    }
}

/// The routes a complexity route hands each class of request to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComplexityRoutes {
    pub simple: RouteName,
    pub moderate: RouteName,
    pub complex: RouteName,
}
/// What a route's targets are priced and counted by.
pub(super) struct Pricing<'a> {
    pub(super) prices: &'a PriceTable,
    pub(super) changes: &'a PriceChanges,
    pub(super) countings: &'a HashMap<(String, String), ModelCounting>,
    /// `[tokenizer]`'s counting, for what neither a model nor its provider sets.
    pub(super) default_counting: Counting,
}

/// `[routes]`: each route checked on its own; one with problems is still
/// built, so tiers naming it are not refused for its sake.
pub(super) fn validate_routes(
    raw: &BTreeMap<String, RawRoute>,
    providers: &HashMap<ProviderName, Provider>,
    pricing: &Pricing<'_>,
    problems: &mut Problems,
) -> HashMap<RouteName, Route> {
    raw.iter()
        .map(|(name, r)| {
            let route = r.validate(name, raw, providers, pricing, problems);
            (route.name.clone(), route)
        })
        .collect()
}

impl RawRoute {
    fn validate(
        &self,
        name: &str,
        raw: &BTreeMap<String, RawRoute>,
        providers: &HashMap<ProviderName, Provider>,
        pricing: &Pricing<'_>,
        problems: &mut Problems,
    ) -> Route {
        if self.complexity.is_some() && !self.targets.is_empty() {
            problems.add(
                format!("routes.{name}.targets"),
                "a complexity route has no targets of its own",
            );
        }
        if self.targets.is_empty() && self.complexity.is_none() {
            problems.add(
                format!("routes.{name}.targets"),
                "needs at least one target",
            );
        }
        let mut targets: Vec<Target> = self
            .targets
            .iter()
            .enumerate()
            .filter_map(|(i, raw_target)| {
                let entry = format!("routes.{name}.targets[{i}]");
                target(&entry, i, raw_target, providers, pricing, problems)
            })
            .collect();
        // Stable: entries of equal rank keep their written order.
        targets.sort_by_key(|t| t.rank);
        let server_tools = problems
            .ok(self.server_tools.validate(name, &targets))
            .unwrap_or_default();
        let semantic_cache = self.semantic_cache(name, raw, problems);
        Route {
            name: RouteName::new(name),
            countings: countings(&targets),
            max_tokens_ceiling: max_tokens_ceiling(&targets, providers),
            targets,
            cache_ttl_ms: self.cache_ttl_ms,
            degraded_answer: self.degraded_answer.clone(),
            complexity: self.complexity_routes(name, raw, problems),
            semantic_cache,
            platform_prompt: self.platform_prompt(name, problems),
            unknown_fields: if self.forward_unknown_fields {
                UnknownFields::Forward
            } else {
                UnknownFields::Refuse
            },
            server_tools,
        }
    }

    fn semantic_cache(
        &self,
        name: &str,
        raw: &BTreeMap<String, RawRoute>,
        problems: &mut Problems,
    ) -> Option<SemanticRoute> {
        let others = |other: &str| raw.get(other).map(|o| o.semantic_cache.is_some());
        match self.semantic_cache.as_ref()?.validate(name, others) {
            Ok(semantic) => Some(semantic),
            Err((entry, reason)) => {
                problems.add(entry, reason);
                None
            }
        }
    }

    /// A route's platform prompt: not empty, and not on a complexity route
    /// (the class it picks places its own).
    fn platform_prompt(&self, name: &str, problems: &mut Problems) -> Option<String> {
        let text = self.platform_prompt.as_ref()?;
        let refused = if text.trim().is_empty() {
            Some("must not be empty".to_owned())
        } else if self.complexity.is_some() {
            Some("a complexity route forwards to its classes: set it on them".to_owned())
        } else if text.len() > MAX_PROMPT_BYTES {
            Some(format!("must be at most {MAX_PROMPT_BYTES} bytes"))
        } else {
            None
        };
        if let Some(reason) = refused {
            problems.add(format!("routes.{name}.platform_prompt"), reason);
        }
        Some(text.clone())
    }

    /// A complexity route's classes, each a plain route that exists.
    fn complexity_routes(
        &self,
        name: &str,
        raw: &BTreeMap<String, RawRoute>,
        problems: &mut Problems,
    ) -> Option<ComplexityRoutes> {
        let c = self.complexity.as_ref()?;
        let mut pick = |class: &str, route: &str| {
            let entry = format!("routes.{name}.complexity.{class}");
            match raw.get(route) {
                None => problems.add(entry, format!("unknown route `{route}`")),
                Some(other) if other.complexity.is_some() => {
                    problems.add(entry, format!("`{route}` is a complexity route itself"));
                }
                Some(_) => {}
            }
            RouteName::new(route)
        };
        Some(ComplexityRoutes {
            simple: pick("simple", &c.simple),
            moderate: pick("moderate", &c.moderate),
            complex: pick("complex", &c.complex),
        })
    }
}

/// One of a route's targets, or `None` (its problem kept) when it names no
/// configured provider or priced model.
fn target(
    entry: &str,
    position: usize,
    raw: &RawTarget,
    providers: &HashMap<ProviderName, Provider>,
    pricing: &Pricing<'_>,
    problems: &mut Problems,
) -> Option<Target> {
    let position = u32::try_from(position).unwrap_or(u32::MAX);
    let (target, rank, weight) = match raw {
        RawTarget::Plain(target) => (target, position, 1),
        RawTarget::Weighted(w) => (&w.target, w.rank.unwrap_or(position), w.weight),
    };
    if weight == 0 {
        problems.add(format!("{entry}.weight"), "must be positive");
    }
    let Some((provider, model)) = target.split_once('/') else {
        problems.add(entry, format!("`{target}` is not `provider/model`"));
        return None;
    };
    let Some(configured) = providers.get(&ProviderName::new(provider)) else {
        problems.add(entry, format!("unknown provider `{provider}`"));
        return None;
    };
    let key = (provider.to_owned(), model.to_owned());
    let Some(price) = pricing.prices.get(&key) else {
        problems.add(entry, format!("no price for {provider}/{model}"));
        return None;
    };
    Some(Target {
        provider: ProviderName::new(provider),
        model: model.to_owned(),
        price: *price,
        charge: *price,
        changes: pricing.changes.get(&key).cloned().unwrap_or_default(),
        counting: target_counting(
            pricing.countings.get(&key),
            configured,
            pricing.default_counting,
        ),
        rank,
        weight,
    })
}

/// Every distinct way the targets count prompts, in target order.
fn countings(targets: &[Target]) -> Vec<Counting> {
    let mut countings: Vec<Counting> = Vec::new();
    for target in targets {
        if !countings.contains(&target.counting) {
            countings.push(target.counting);
        }
    }
    countings
}

/// The largest of the targets' providers' ceilings, when every one has one.
fn max_tokens_ceiling(
    targets: &[Target],
    providers: &HashMap<ProviderName, Provider>,
) -> Option<u32> {
    let ceilings: Vec<Option<u32>> = targets
        .iter()
        .map(|t| {
            providers
                .get(&t.provider)
                .and_then(|p| p.max_tokens_ceiling)
        })
        .collect();
    // `None` (no ceiling) sorts first, so any uncapped target leaves the route uncapped.
    if ceilings.contains(&None) {
        None
    } else {
        ceilings.into_iter().max().flatten()
    }
}

/// How a target counts prompts: its model's price entry, then its
/// provider's safety factor, then `[tokenizer]`.
fn target_counting(
    own: Option<&ModelCounting>,
    provider: &Provider,
    default: Counting,
) -> Counting {
    let own = own.copied().unwrap_or_default();
    Counting {
        encoding: own.encoding.unwrap_or(default.encoding),
        safety_percent: provider
            .tokenizer_safety_percent
            .unwrap_or(default.safety_percent),
        image_tokens: own.image_tokens.unwrap_or(default.image_tokens),
    }
}
