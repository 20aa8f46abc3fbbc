//! `[routes.<name>.server_tools]`: the provider-run tools a route lets
//! leave, and the bound the hold is made at. A provider runs such a tool on
//! its own account: each use may bill a fee and adds input (search
//! results, a fetched page) the gateway never sees before the call. So a
//! tool leaves only where the route says how many uses to allow (the
//! gateway sets the provider's own limit to it: Anthropic's `max_uses`,
//! the Responses API's `max_tool_calls`) and how much input each use may
//! add; the hold covers every use at that, plus its fee (`web_search` in
//! each target's `[[prices]]` entry). Any other tool is removed from the
//! offer before the request leaves.

use serde::Deserialize;

use super::{ConfigError, Target, invalid};

/// The most uses a route may allow per call: enough for an agent's research
/// step, small enough that a typo cannot hold a fortune.
const MAX_USES: u32 = 50;
/// The most input one use may add (a fetched document, at most).
const MAX_INPUT_TOKENS_PER_USE: u64 = 200_000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServerTools {
    web_search: Option<RawAllowance>,
    web_fetch: Option<RawAllowance>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAllowance {
    max_uses: u32,
    input_tokens_per_use: u64,
}

/// A provider-run tool a route can price.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerTool {
    /// Anthropic's `web_search_*`, OpenAI's `web_search*`: a fee per search.
    WebSearch,
    /// Anthropic's `web_fetch_*`: no fee, but the page is input.
    WebFetch,
}

impl ServerTool {
    pub fn name(self) -> &'static str {
        match self {
            ServerTool::WebSearch => "web_search",
            ServerTool::WebFetch => "web_fetch",
        }
    }
}

/// How many uses of a tool one call may make, and the input each may add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    pub max_uses: u32,
    pub input_tokens_per_use: u64,
}

/// The tools a route prices; none by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerTools {
    pub web_search: Option<Allowance>,
    pub web_fetch: Option<Allowance>,
}

impl ServerTools {
    pub fn allowance(&self, tool: ServerTool) -> Option<Allowance> {
        match tool {
            ServerTool::WebSearch => self.web_search,
            ServerTool::WebFetch => self.web_fetch,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.web_search.is_none() && self.web_fetch.is_none()
    }
}

impl RawServerTools {
    /// A search leaves only where every target's price entry has its fee:
    /// a failover must not reach a target whose fee the hold did not see.
    pub(super) fn validate(
        &self,
        route: &str,
        targets: &[Target],
    ) -> Result<ServerTools, ConfigError> {
        let entry = |tool: &str| format!("routes.{route}.server_tools.{tool}");
        let allowance = |tool: &str, raw: &Option<RawAllowance>| {
            raw.as_ref()
                .map(|raw| raw.validate(&entry(tool)))
                .transpose()
        };
        let tools = ServerTools {
            web_search: allowance("web_search", &self.web_search)?,
            web_fetch: allowance("web_fetch", &self.web_fetch)?,
        };
        if tools.web_search.is_some()
            && let Some(unpriced) = targets.iter().find(|t| t.price.web_search.is_none())
        {
            return Err(invalid(
                entry("web_search"),
                format!(
                    "target `{}/{}` has no `web_search` fee in its [[prices]] entry; give it one, or the route cannot hold what a search costs",
                    unpriced.provider, unpriced.model
                ),
            ));
        }
        Ok(tools)
    }
}

impl RawAllowance {
    fn validate(&self, entry: &str) -> Result<Allowance, ConfigError> {
        if !(1..=MAX_USES).contains(&self.max_uses) {
            return Err(invalid(
                format!("{entry}.max_uses"),
                format!("must be between 1 and {MAX_USES}"),
            ));
        }
        if !(1..=MAX_INPUT_TOKENS_PER_USE).contains(&self.input_tokens_per_use) {
            return Err(invalid(
                format!("{entry}.input_tokens_per_use"),
                format!("must be between 1 and {MAX_INPUT_TOKENS_PER_USE}"),
            ));
        }
        Ok(Allowance {
            max_uses: self.max_uses,
            input_tokens_per_use: self.input_tokens_per_use,
        })
    }
}
